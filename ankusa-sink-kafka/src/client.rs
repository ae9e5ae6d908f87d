//! The librdkafka side of the sink: the context that routes librdkafka's logs and errors to
//! `tracing` (scrubbed of secrets, repeats lowered to debug), what the sink learns from them
//! (a refused login, every broker down, a fatal error), and the producers it creates.

use crate::config::KafkaConfig;
use crate::error::{KafkaError, is_config_code};
use crate::property_rules::scrub;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::Level;

/// The sink's librdkafka producer type.
pub(crate) type Producer_ = ThreadedProducer<SinkContext>;

/// What librdkafka's delivery report says of one record: on failure the error and whether
/// the record may have been written (librdkafka's persistence status).
pub(crate) type Report = Result<(), (RdKafkaError, Option<bool>)>;

/// Where a delivery waits for its record's report.
pub(crate) type ReportTx = tokio::sync::oneshot::Sender<Report>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The last config-class client error librdkafka reported (a refused login, an unsupported
/// mechanism), so a record that could only time out can say why. librdkafka follows such an
/// error with transport ones (`AllBrokersDown`), so it is kept apart from them.
#[derive(Debug, Default)]
pub(crate) struct LastError(Mutex<Option<(RDKafkaErrorCode, Instant)>>);

impl LastError {
    fn record(&self, code: RDKafkaErrorCode) {
        if is_config_code(code) {
            *lock(&self.0) = Some((code, Instant::now()));
        }
    }

    /// The config-class client error seen at or after `since`.
    pub(crate) fn config_cause_since(&self, since: Instant) -> Option<RDKafkaErrorCode> {
        let last = *lock(&self.0);
        last.filter(|(_, at)| *at >= since).map(|(code, _)| code)
    }
}

/// Whether any broker can be reached, as far as the sink knows.
///
/// librdkafka reports `AllBrokersDown` both for a cluster that refuses connections and for
/// a single broker closing an idle connection, so the report only makes the sink suspect an
/// outage: a metadata probe in the background confirms it. Once a probe gets no answer the
/// sink fails deliveries at once (transient) instead of letting each wait the whole produce
/// timeout; the probe keeps asking, and the first answer (or any delivered record) ends it.
#[derive(Debug, Default)]
pub(crate) struct Reach {
    /// Set while an outage is suspected or confirmed, so the delivery path can skip the lock.
    troubled: AtomicBool,
    state: Mutex<ReachState>,
}

#[derive(Debug, Default)]
struct ReachState {
    /// librdkafka reported every broker down since a broker last answered.
    suspect: bool,
    /// Since when a probe has been getting no answer.
    down_since: Option<Instant>,
    /// A probe thread is running.
    probing: bool,
}

impl Reach {
    /// librdkafka reported every broker down. Returns whether a probe must be started.
    fn all_down(&self) -> bool {
        let mut s = lock(&self.state);
        s.suspect = true;
        self.troubled.store(true, Ordering::Relaxed);
        !std::mem::replace(&mut s.probing, true)
    }

    /// A broker answered (a probe or a delivered record).
    pub(crate) fn reachable(&self) {
        if !self.troubled.load(Ordering::Relaxed) {
            return;
        }
        let mut s = lock(&self.state);
        s.suspect = false;
        s.down_since = None;
        self.troubled.store(false, Ordering::Relaxed);
    }

    /// A probe got no answer at `now`. Returns whether to keep probing (not when a broker
    /// answered meanwhile).
    fn probe_failed(&self, now: Instant) -> bool {
        let mut s = lock(&self.state);
        if !s.suspect && s.down_since.is_none() {
            s.probing = false;
            return false;
        }
        s.down_since.get_or_insert(now);
        true
    }

    fn probe_ended(&self) {
        lock(&self.state).probing = false;
    }

    /// How long no broker has answered, when a probe confirmed it.
    pub(crate) fn down_for(&self, now: Instant) -> Option<Duration> {
        if !self.troubled.load(Ordering::Relaxed) {
            return None;
        }
        lock(&self.state)
            .down_since
            .map(|t| now.saturating_duration_since(t))
    }
}

/// How long repeats of one kind of client log line stay at debug after the first.
const REPEAT_WINDOW: Duration = Duration::from_secs(60);
/// At most this many kinds of line are remembered; past it the table starts over.
const MAX_KINDS: usize = 64;

/// A kind of client log line: librdkafka's level and facility (its text varies per
/// broker, port and count), or the code of a client error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LineKind {
    /// A log line.
    Log(Level, String),
    /// An error callback.
    Error(Option<RDKafkaErrorCode>),
}

/// What to do with a client log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// The first of its kind in the window: log it at its level.
    First,
    /// A repeat within the window: log it at debug.
    Repeat,
    /// The first after the window: log it at its level, saying how many were lowered.
    Again {
        /// Repeats logged at debug since the last one shown.
        lowered: u64,
    },
}

/// Lowers repeated client log lines to debug: a closed port makes librdkafka report the
/// same refused connection, and `AllBrokersDown`, many times a second.
#[derive(Debug, Default)]
pub(crate) struct LogLimiter(Mutex<Vec<(LineKind, Instant, u64)>>);

impl LogLimiter {
    pub(crate) fn admit(&self, kind: LineKind, now: Instant) -> Admit {
        let mut seen = lock(&self.0);
        let Some(entry) = seen.iter_mut().find(|(k, ..)| *k == kind) else {
            if seen.len() >= MAX_KINDS {
                seen.clear();
            }
            seen.push((kind, now, 0));
            return Admit::First;
        };
        if now.saturating_duration_since(entry.1) < REPEAT_WINDOW {
            entry.2 += 1;
            return Admit::Repeat;
        }
        let lowered = std::mem::take(&mut entry.2);
        entry.1 = now;
        Admit::Again { lowered }
    }
}

/// The smallest pause between two reachability probes.
const PROBE_PAUSE: Duration = Duration::from_millis(250);

/// Metadata requests of [`Monitor::warm_up`]: the bootstrap address's answer, then a named
/// broker's; one more in case the bootstrap address answered twice.
const WARM_UP_REQUESTS: usize = 3;

/// What the sink learns from its producers' callbacks, shared by every producer it creates.
/// `Debug` leaves out the secrets.
pub(crate) struct Monitor {
    pub(crate) last_error: LastError,
    pub(crate) reach: Reach,
    limiter: LogLimiter,
    /// Secrets of the configuration, scrubbed from every librdkafka line.
    secrets: Vec<String>,
    client_id: String,
    topic: String,
    probe_timeout: Duration,
    /// The producer in use, for the probe.
    current: Mutex<Weak<Shared>>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor")
            .field("reach", &self.reach)
            .field("client_id", &self.client_id)
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl Monitor {
    pub(crate) fn new(config: &KafkaConfig) -> Self {
        Monitor {
            last_error: LastError::default(),
            reach: Reach::default(),
            limiter: LogLimiter::default(),
            secrets: config.secrets().into_iter().map(str::to_owned).collect(),
            client_id: config.client_id.clone(),
            topic: config.topic.clone(),
            probe_timeout: probe_timeout(config.produce_timeout()),
            current: Mutex::new(Weak::new()),
        }
    }

    /// How long a metadata request of the sink's own (a probe, a topic check) may take.
    pub(crate) fn probe_timeout(&self) -> Duration {
        self.probe_timeout
    }

    /// Make `producer` the one the probe asks, and have it ask for its producer id as soon
    /// as it has a broker to ask ([`Monitor::warm_up`]).
    pub(crate) fn set_current(self: &Arc<Self>, producer: &Arc<Shared>) {
        *lock(&self.current) = Arc::downgrade(producer);
        self.warm_up();
    }

    /// Have the current producer ask for its producer id as soon as it has a broker to ask.
    ///
    /// librdkafka's idempotent producer asks when a metadata answer arrives. Its first
    /// answer comes from the bootstrap address, which is then retired for the brokers that
    /// answer names, none connected yet; with no broker up it waits for its 500 ms retry
    /// timer, so every new producer's first records waited half a second. A second answer
    /// from a named broker (up by then) makes it ask at once: a couple of metadata
    /// requests for the topic, on a thread of their own, until a named broker answers.
    fn warm_up(self: &Arc<Self>) {
        let me = Arc::clone(self);
        // Without a thread the producer still gets its id, by its own timer.
        let _ = std::thread::Builder::new()
            .name("ankusa-kafka-warm".into())
            .spawn(move || {
                for _ in 0..WARM_UP_REQUESTS {
                    let Some(producer) = lock(&me.current).upgrade() else {
                        return;
                    };
                    let answer = producer
                        .get()
                        .client()
                        .fetch_metadata(Some(&me.topic), me.probe_timeout);
                    drop(producer);
                    match answer {
                        // The bootstrap address answers as broker -1.
                        Ok(md) if md.orig_broker_id() >= 0 => return,
                        Ok(_) => {}
                        // Unreachable: the producer's own timer and the probe take over.
                        Err(_) => return,
                    }
                }
            });
    }

    pub(crate) fn scrub(&self, text: &str) -> String {
        scrub(&self.secrets, text)
    }

    /// Log a client line at `level`, unless it repeats one shown within the window.
    fn emit(&self, level: Level, kind: LineKind, fac: &str, text: &str) {
        let client = self.client_id.as_str();
        let admit = if level == Level::DEBUG || level == Level::TRACE {
            Admit::First
        } else {
            self.limiter.admit(kind, Instant::now())
        };
        let lowered = match admit {
            Admit::First => 0,
            Admit::Again { lowered } => lowered,
            Admit::Repeat => {
                tracing::debug!(target: "librdkafka", fac, client, repeated = true, "{text}");
                return;
            }
        };
        macro_rules! at {
            ($mac:ident) => {
                if lowered > 0 {
                    tracing::$mac!(target: "librdkafka", fac, client, lowered, "{text}")
                } else {
                    tracing::$mac!(target: "librdkafka", fac, client, "{text}")
                }
            };
        }
        match level {
            Level::ERROR => at!(error),
            Level::WARN => at!(warn),
            Level::INFO => at!(info),
            Level::DEBUG => at!(debug),
            _ => at!(trace),
        }
    }

    /// A librdkafka log line: scrubbed, repeats lowered.
    pub(crate) fn client_log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        let level = level_of(level);
        let text = self.scrub(log_message);
        self.emit(level, LineKind::Log(level, fac.to_owned()), fac, &text);
    }

    /// A librdkafka client error: logged scrubbed (repeats lowered) and recorded; its code.
    pub(crate) fn client_error(
        &self,
        error: &RdKafkaError,
        reason: &str,
    ) -> Option<RDKafkaErrorCode> {
        let code = error.rdkafka_error_code();
        if let Some(code) = code {
            self.last_error.record(code);
        }
        let level = if code == Some(RDKafkaErrorCode::Fatal) {
            Level::ERROR
        } else {
            Level::WARN
        };
        let text = format!("{}: {error}", self.scrub(reason));
        self.emit(level, LineKind::Error(code), "ERROR", &text);
        code
    }

    /// librdkafka reported every broker down: start a probe unless one runs.
    fn all_brokers_down(self: &Arc<Self>) {
        if !self.reach.all_down() {
            return;
        }
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("ankusa-kafka-probe".into())
            .spawn(move || me.probe());
        if spawned.is_err() {
            self.reach.probe_ended();
        }
    }

    /// Ask the current producer for the topic's metadata until a broker answers, the
    /// outage is over by other means, or the sink is gone.
    fn probe(&self) {
        loop {
            let started = Instant::now();
            let Some(producer) = lock(&self.current).upgrade() else {
                self.reach.probe_ended();
                return;
            };
            let answered = producer
                .get()
                .client()
                .fetch_metadata(Some(&self.topic), self.probe_timeout)
                .is_ok_and(|md| !md.brokers().is_empty());
            drop(producer);
            if answered {
                self.reach.reachable();
                self.reach.probe_ended();
                return;
            }
            if !self.reach.probe_failed(Instant::now()) {
                return;
            }
            if let Some(rest) = PROBE_PAUSE.checked_sub(started.elapsed()) {
                std::thread::sleep(rest);
            }
        }
    }
}

/// A quarter of the produce timeout, between 250 ms and 2 s.
pub(crate) fn probe_timeout(produce_timeout: Duration) -> Duration {
    (produce_timeout / 4).clamp(Duration::from_millis(250), Duration::from_secs(2))
}

fn level_of(level: RDKafkaLogLevel) -> Level {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => Level::ERROR,
        RDKafkaLogLevel::Warning => Level::WARN,
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => Level::INFO,
        RDKafkaLogLevel::Debug => Level::DEBUG,
    }
}

/// State of one producer that its callbacks set.
#[derive(Debug, Default)]
pub(crate) struct ProducerFlags {
    /// librdkafka reported a fatal error: the producer refuses every record from now on.
    fatal: AtomicBool,
}

impl ProducerFlags {
    pub(crate) fn fatal(&self) -> bool {
        self.fatal.load(Ordering::Relaxed)
    }
}

/// Hands delivery reports from librdkafka's polling thread to the runtime whose deliveries
/// wait for them. A report completed on that thread wakes its task across threads: an
/// eventfd write and a wake-up of the runtime per record (100,000 of each for 100,000
/// records, a fifth of the polling thread's time and more of the runtime's). Queued to one
/// task on the runtime instead, a burst of reports wakes it once (the channel wakes a
/// receiver only while it waits) and each completion is a local wake-up.
#[derive(Debug)]
pub(crate) struct Router {
    tx: mpsc::UnboundedSender<(ReportTx, Report)>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<(ReportTx, Report)>>>,
    started: AtomicBool,
}

impl Router {
    fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            tx,
            rx: Mutex::new(Some(rx)),
            started: AtomicBool::new(false),
        }
    }

    /// Route reports to a task on the caller's runtime (once; until then, and where there
    /// is no runtime, each report is completed where it arrives). Were that runtime shut
    /// down while another still delivers on this producer, reports queued at that moment
    /// are lost with the task and those deliveries fail as `ReportDropped`, transient.
    pub(crate) fn start_here(&self) {
        if self.started.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if let Some(mut rx) = lock(&self.rx).take() {
            runtime.spawn(async move {
                let mut burst = Vec::with_capacity(REPORT_BURST);
                while rx.recv_many(&mut burst, REPORT_BURST).await > 0 {
                    for (tx, report) in burst.drain(..) {
                        let _ = tx.send(report);
                    }
                }
            });
            self.started.store(true, Ordering::Release);
        }
    }

    fn complete(&self, tx: ReportTx, report: Report) {
        if !self.started.load(Ordering::Acquire) {
            let _ = tx.send(report);
        } else if let Err(mpsc::error::SendError((tx, report))) = self.tx.send((tx, report)) {
            let _ = tx.send(report);
        }
    }
}

/// Reports one router task completes before it yields to the deliveries it woke.
const REPORT_BURST: usize = 256;

/// Routes librdkafka's logs and client errors to `tracing`, tells the sink, and hands each
/// record's delivery report to the delivery waiting for it.
#[derive(Clone)]
pub(crate) struct SinkContext {
    monitor: Arc<Monitor>,
    flags: Arc<ProducerFlags>,
    router: Arc<Router>,
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = Box<ReportTx>;

    fn delivery(&self, result: &DeliveryResult<'_>, tx: Box<ReportTx>) {
        let report = match result {
            Ok(_) => Ok(()),
            Err((e, message)) => Err((e.clone(), may_have_landed(message))),
        };
        self.router.complete(*tx, report);
    }
}

/// What librdkafka knows of a failed record: `Some(false)` when it was never written to a
/// broker (timed out or purged in the local queue, refused by the broker), `Some(true)`
/// when it may have been (a request in flight that timed out or lost its connection).
#[allow(unsafe_code)]
fn may_have_landed(message: &rdkafka::message::BorrowedMessage<'_>) -> Option<bool> {
    use rdkafka::bindings::{rd_kafka_message_status, rd_kafka_msg_status_t};
    // SAFETY: `ptr()` is the rd_kafka_message_t of this delivery report, alive for the
    // whole callback; rd_kafka_message_status only reads its status field. rust-rdkafka has
    // no safe wrapper for it.
    let status = unsafe { rd_kafka_message_status(message.ptr()) };
    Some(status != rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_NOT_PERSISTED)
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.monitor.client_log(level, fac, log_message);
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        let code = self.monitor.client_error(&error, reason);
        match code {
            Some(RDKafkaErrorCode::Fatal) => self.flags.fatal.store(true, Ordering::Relaxed),
            Some(RDKafkaErrorCode::AllBrokersDown) => self.monitor.all_brokers_down(),
            _ => {}
        }
    }
}

/// The one librdkafka producer of a generation, shared by its deliveries. Dropping a
/// producer purges its queue, waits up to 500 ms for the purge reports and joins its
/// threads, so the last holder hands that to a thread of its own instead of stalling an
/// async worker.
pub(crate) struct Shared {
    producer: Option<Producer_>,
    flags: Arc<ProducerFlags>,
    router: Arc<Router>,
}

impl Shared {
    pub(crate) fn get(&self) -> &Producer_ {
        self.producer.as_ref().expect("present until dropped")
    }

    pub(crate) fn flags(&self) -> &ProducerFlags {
        &self.flags
    }

    pub(crate) fn router(&self) -> &Router {
        &self.router
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(p) = self.producer.take() {
            // If no thread can be had, drop it here.
            let _ = std::thread::Builder::new()
                .name("ankusa-kafka-drop".into())
                .spawn(move || drop(p));
        }
    }
}

/// A new producer for `config`, reporting to `monitor`.
pub(crate) fn create_producer(
    config: &KafkaConfig,
    monitor: &Arc<Monitor>,
) -> Result<Arc<Shared>, KafkaError> {
    let flags = Arc::new(ProducerFlags::default());
    let router = Arc::new(Router::new());
    let producer = config
        .client_config()
        .create_with_context(SinkContext {
            monitor: Arc::clone(monitor),
            flags: Arc::clone(&flags),
            router: Arc::clone(&router),
        })
        .map_err(|e| KafkaError::Create(monitor.scrub(&e.to_string())))?;
    Ok(Arc::new(Shared {
        producer: Some(producer),
        flags,
        router,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_port_logs_each_kind_of_line_once_per_window() {
        // What librdkafka reports for a closed port in two seconds: a refused connection
        // and "1/1 brokers are down" many times over.
        let limiter = LogLimiter::default();
        let t0 = Instant::now();
        let mut shown = 0;
        for i in 0..58u64 {
            let now = t0 + Duration::from_millis(50 * i);
            for kind in [
                LineKind::Log(Level::ERROR, "FAIL".into()),
                LineKind::Error(Some(RDKafkaErrorCode::BrokerTransportFailure)),
                LineKind::Error(Some(RDKafkaErrorCode::AllBrokersDown)),
            ] {
                if limiter.admit(kind, now) != Admit::Repeat {
                    shown += 1;
                }
            }
        }
        assert_eq!(shown, 3);
        // After the window the kind shows again, with the count of lowered repeats.
        let later = t0 + REPEAT_WINDOW + Duration::from_secs(5);
        assert_eq!(
            limiter.admit(LineKind::Log(Level::ERROR, "FAIL".into()), later),
            Admit::Again { lowered: 57 }
        );
        // Another facility or level is another kind.
        assert_eq!(
            limiter.admit(LineKind::Log(Level::WARN, "FAIL".into()), later),
            Admit::First
        );
    }

    #[test]
    fn the_limiter_forgets_past_its_capacity() {
        let limiter = LogLimiter::default();
        let now = Instant::now();
        for i in 0..(MAX_KINDS + 10) {
            assert_eq!(
                limiter.admit(LineKind::Log(Level::INFO, format!("F{i}")), now),
                Admit::First
            );
        }
        assert!(lock(&limiter.0).len() <= MAX_KINDS);
    }

    #[test]
    fn client_lines_are_scrubbed_of_every_secret() {
        let config = KafkaConfig::new("127.0.0.1:1", "t")
            .unwrap()
            .with_sasl(crate::SaslConfig::new(
                crate::SaslMechanism::Plain,
                "u",
                "planted-sasl-pw",
            ))
            .unwrap()
            .with_property("ssl.keystore.password", "planted-ks-pw")
            .unwrap();
        let monitor = Monitor::new(&config);
        let text = monitor.scrub("auth with planted-sasl-pw and planted-ks-pw failed");
        assert_eq!(text, "auth with REDACTED and REDACTED failed");
        let debug = format!("{monitor:?}");
        assert!(!debug.contains("planted"), "{debug}");
    }

    #[test]
    fn reach_needs_a_failed_probe_to_fail_fast_and_one_answer_to_resume() {
        let reach = Reach::default();
        let now = Instant::now();
        assert_eq!(reach.down_for(now), None);
        // librdkafka's report alone (an idle connection closed) fails nothing.
        assert!(reach.all_down(), "the first report starts a probe");
        assert!(!reach.all_down(), "one probe at a time");
        assert_eq!(reach.down_for(now), None);
        // A probe without an answer confirms it.
        assert!(reach.probe_failed(now));
        let later = now + Duration::from_millis(700);
        assert_eq!(reach.down_for(later), Some(Duration::from_millis(700)));
        // Any answer ends it, and the probe then stops.
        reach.reachable();
        assert_eq!(reach.down_for(later), None);
        assert!(!reach.probe_failed(later));
        assert!(
            reach.all_down(),
            "the probe ended, so a new report starts one"
        );
    }

    #[test]
    fn probe_timeout_is_a_quarter_of_the_produce_timeout_within_bounds() {
        assert_eq!(
            probe_timeout(Duration::from_secs(5)),
            Duration::from_millis(1250)
        );
        assert_eq!(
            probe_timeout(Duration::from_millis(100)),
            Duration::from_millis(250)
        );
        assert_eq!(
            probe_timeout(Duration::from_secs(60)),
            Duration::from_secs(2)
        );
    }
}
