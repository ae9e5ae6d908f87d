//! The dispatcher: one scheduler task owns every (hook, sink) job; attempts run in tasks of
//! their own and report back.

use crate::breaker::Breaker;
use crate::dead_letter::DeadLetter;
use crate::metrics as m;
use ankusa_claimcheck::ClaimStore;
use ankusa_sink_core::{Capabilities, Sink, safe_capabilities};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, oneshot};
// tokio's clock, not std's: the same in production, and it follows `tokio::time::pause`
// (a std deadline under a paused clock made the scheduler spin).
use tokio::time::Instant;

/// `at + d`, or a far future (30 years on) when that is past what the clock can hold: a
/// wait built from an extreme setting (a retry policy's delay, a breaker's `open_for`) is
/// a wait without end, never a panic in the scheduler task.
pub(crate) fn later(at: Instant, d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);
    at.checked_add(d)
        .or_else(|| at.checked_add(FAR))
        .unwrap_or(at)
}

/// A map keyed by a number the dispatcher assigns itself (hook, attempt, task ids), never
/// by input: a fast hash instead of SipHash, which was 4 % of a delivery's CPU.
type IdMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

mod adaptive;
mod desk;
mod endings;
mod fair;
mod jobs;
mod rate;
mod scheduler;
mod sink;
mod tasks;
mod types;
mod waiting;

use desk::Desk;
use scheduler::{Clock, DEFAULT_INTAKE_BYTES, In, MAX_INTAKE_BYTES, Permit, READ_AHEAD, Scheduler};

use sink::{Limit, SinkState};
use tasks::Tasks;
pub use types::{
    BuildError, Concurrency, Deliveries, Delivery, DispatchConfig, Hook, MAX_BREAKER_OPEN,
    MAX_CONCURRENCY, Outcome, Park, RATE_PER_SECOND, SinkDispatch, SubmitError, Unfinished,
};
use waiting::RetryQueue;

/// Builds a [`Dispatcher`].
#[derive(Debug, Default)]
pub struct DispatcherBuilder {
    sinks: Vec<(String, Arc<dyn Sink>)>,
    /// Sinks with settings of their own.
    settings: HashMap<String, SinkDispatch>,
    routes: Vec<(String, Vec<String>)>,
    config: DispatchConfig,
    claim_store: Option<ClaimStore>,
    dead_letter: Option<DeadLetter>,
}

impl DispatcherBuilder {
    /// Add a sink under `name` (the `sink` label of metrics and outcomes).
    pub fn sink(mut self, name: impl Into<String>, sink: Arc<dyn Sink>) -> Self {
        self.sinks.push((name.into(), sink));
        self
    }

    /// Give sink `name` a concurrency of its own: a fixed number of attempts in flight, or
    /// an adaptive limit ([`Concurrency::Adaptive`]). The sink then runs on it, outside
    /// the shared `concurrency`, instead of its window's delivery count (its window's bytes
    /// still bound it) and of `sink_concurrency`.
    pub fn sink_concurrency(mut self, name: impl Into<String>, c: Concurrency) -> Self {
        self.settings.entry(name.into()).or_default().concurrency = Some(c);
        self
    }

    /// How sink `name` runs, over the dispatcher-wide config: its concurrency, rate,
    /// tenant cap and breaker ([`SinkDispatch`]; a sink file's `[dispatch]` table).
    pub fn sink_settings(mut self, name: impl Into<String>, settings: SinkDispatch) -> Self {
        self.settings.insert(name.into(), settings);
        self
    }

    /// Add a route: hooks submitted with it go to these sinks. Without a route, a hook
    /// goes to every sink.
    pub fn route<I, S>(mut self, name: impl Into<String>, sinks: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.routes
            .push((name.into(), sinks.into_iter().map(Into::into).collect()));
        self
    }

    /// The knobs.
    pub fn config(mut self, config: DispatchConfig) -> Self {
        self.config = config;
        self
    }

    /// Where bodies over a sink's inline threshold are checked in (once per hook).
    pub fn claim_store(mut self, store: ClaimStore) -> Self {
        self.claim_store = Some(store);
        self
    }

    /// Where dead letters go.
    pub fn dead_letter(mut self, dl: DeadLetter) -> Self {
        self.dead_letter = Some(dl);
        self
    }

    /// Start the dispatcher (on the current tokio runtime) and the stream of its
    /// deliveries.
    pub fn build(self) -> Result<(Dispatcher, Deliveries), BuildError> {
        if self.sinks.is_empty() {
            return Err(BuildError::NoSinks);
        }
        if self.config.concurrency == 0 || self.config.sink_concurrency == Some(0) {
            return Err(BuildError::ZeroConcurrency);
        }
        check_ranges(&self.config)?;
        let (index, slots) = slots(self.sinks, &self.settings, &self.config)?;
        let routes = routes(self.routes, &index)?;
        let n = slots.len();
        // Each sink has an intake of its own: a sink that is slow or failing fills only its
        // own, and hooks for the other sinks keep coming in.
        let sizes: Vec<(usize, usize)> = slots
            .iter()
            .map(|slot| slot_intake(slot, &self.settings, &self.config))
            .collect();
        let shared = Arc::new(Shared {
            index,
            routes,
            all: (0..n).collect(),
            single: (0..n).map(|i| Arc::from([i])).collect(),
            intake: sizes
                .iter()
                .map(|&(jobs, _)| Arc::new(Semaphore::new(jobs)))
                .collect(),
            intake_bytes: sizes
                .iter()
                .map(|&(_, bytes)| Arc::new(Semaphore::new(bytes)))
                .collect(),
            intake_bytes_max: sizes
                .iter()
                .map(|&(_, bytes)| u32::try_from(bytes).unwrap_or(u32::MAX))
                .collect(),
            closed: AtomicBool::new(false),
            died: AtomicBool::new(false),
            waiting: Arc::new(AtomicUsize::new(0)),
            held: Arc::new(IntakeHold::default()),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        // Reports from the scheduler's own tasks come on a channel of their own, so the
        // intake channel closes when the last `Dispatcher` handle is dropped.
        let (report_tx, report_rx) = mpsc::unbounded_channel();
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        metrics::gauge!(m::DEAD_LETTER_BLOCKED).set(0.0);
        metrics::gauge!(m::WAITING).set(0.0);
        // A dead-letter sink without a claim store of its own uses the dispatcher's.
        let dead_letter = match (self.dead_letter, &self.claim_store) {
            (Some(dl), Some(store)) if !dl.has_claim_store() => {
                Some(dl.with_claim_store(store.clone()))
            }
            (dl, _) => dl,
        };
        let scheduler = Scheduler {
            sinks: slots,
            config: self.config,
            claim_store: self.claim_store,
            tx: report_tx,
            out: out_tx,
            clock: Clock::new(),
            hooks: IdMap::default(),
            next_hook: 0,
            tenant_keys: foldhash::fast::RandomState::default(),
            in_flight_shared: 0,
            running: IdMap::default(),
            tasks: Tasks::default(),
            waiting: RetryQueue::new(shared.waiting.clone()),
            next_sink: 0,
            desk: Desk::new(dead_letter, shared.held.clone()),
            stopping: None,
            intake_open: true,
        };
        tokio::spawn(watched(scheduler.run(rx, report_rx), shared.clone()));
        Ok((Dispatcher { shared, tx }, Deliveries(out_rx)))
    }
}

const CONCURRENCY_RANGE: &str = "from 1 to 1000000";
const BREAKER_OPEN_RANGE: &str = "at most a day (86400 s)";

/// Every dispatcher-wide number within its documented range (see [`DispatchConfig`]):
/// an extreme one would otherwise panic at start or in the scheduler task.
fn check_ranges(config: &DispatchConfig) -> Result<(), BuildError> {
    let out = |key| BuildError::OutOfRange {
        sink: None,
        key,
        range: CONCURRENCY_RANGE,
    };
    if config.concurrency > MAX_CONCURRENCY {
        return Err(out("concurrency"));
    }
    if config.sink_concurrency.is_some_and(|n| n > MAX_CONCURRENCY) {
        return Err(out("sink_concurrency"));
    }
    if config
        .tenant_concurrency
        .is_some_and(|n| n as usize > MAX_CONCURRENCY)
    {
        return Err(BuildError::OutOfRange {
            sink: None,
            key: "tenant_concurrency",
            range: "at most 1000000",
        });
    }
    if config.breaker.open_for > MAX_BREAKER_OPEN {
        return Err(BuildError::OutOfRange {
            sink: None,
            key: "breaker.open_for",
            range: BREAKER_OPEN_RANGE,
        });
    }
    Ok(())
}

/// A sink's own settings within their ranges (`name` is the sink).
fn check_sink_ranges(name: &str, own: &SinkDispatch) -> Result<(), BuildError> {
    let out = |key, range| BuildError::OutOfRange {
        sink: Some(name.to_owned()),
        key,
        range,
    };
    match own.concurrency {
        Some(Concurrency::Fixed(n)) if n > MAX_CONCURRENCY => {
            return Err(out("concurrency", CONCURRENCY_RANGE));
        }
        Some(Concurrency::Adaptive { max }) if max == 0 || max > MAX_CONCURRENCY => {
            return Err(out("concurrency.max", CONCURRENCY_RANGE));
        }
        _ => {}
    }
    if own
        .tenant_concurrency
        .is_some_and(|n| n as usize > MAX_CONCURRENCY)
    {
        return Err(out("tenant_concurrency", "at most 1000000"));
    }
    if own.breaker.is_some_and(|b| b.open_for > MAX_BREAKER_OPEN) {
        return Err(out("breaker.open_for", BREAKER_OPEN_RANGE));
    }
    Ok(())
}

/// The scheduler's loop, with a panic in it caught: the handles are told of the death
/// (and intake closed) while the loop's state, the [`Deliveries`] sender with it, is still
/// alive, so whoever sees the deliveries end early sees [`Dispatcher::has_died`] too.
/// Without it a dead scheduler left `forward` reading on (each hook refused) and never
/// ending: a hang.
async fn watched(run: impl std::future::Future<Output = ()>, shared: Arc<Shared>) {
    let mut run = std::pin::pin!(run);
    let died = std::future::poll_fn(|cx| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run.as_mut().poll(cx))) {
            Ok(poll) => poll.map(|()| None),
            Err(payload) => std::task::Poll::Ready(Some(payload)),
        }
    })
    .await;
    if let Some(payload) = died {
        let panic = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("non-text panic payload");
        tracing::error!(
            target: "ankusa_dispatch",
            %panic,
            "the dispatcher's scheduler task died (a bug): the pairs it held have no \
             outcome; hooks from a durable source are released to it"
        );
        shared.scheduler_died();
    }
    // Only now is the loop's state dropped: its deliveries sender, its intake permits.
}

/// One sink's intake: (hook, sink) jobs admitted before their first attempt settles, and
/// their body bytes. The jobs: `concurrency` plus the sink's own window or concurrency,
/// plus [`READ_AHEAD`] more (what round robin over tenants can reach), unless
/// `config.intake` says; the bytes: [`DEFAULT_INTAKE_BYTES`], or twice the sink's window
/// bytes when that is more, unless `config.intake_bytes` says.
fn slot_intake(
    slot: &SinkState,
    settings: &HashMap<String, SinkDispatch>,
    config: &DispatchConfig,
) -> (usize, usize) {
    let own = settings
        .get(&*slot.name)
        .and_then(|s| s.concurrency)
        .map_or(0, |c| match c {
            Concurrency::Fixed(n) => n,
            Concurrency::Adaptive { max } => max,
        });
    let window = slot.window.map_or(0, |w| w.deliveries.get());
    let in_flight = config
        .concurrency
        .saturating_add(window)
        .saturating_add(own);
    // A semaphore counts to MAX_INTAKE_BYTES at most (more panics): a window a sink
    // declares, however large, cannot stop the dispatcher from starting.
    let jobs = config
        .intake
        .unwrap_or(in_flight.saturating_add(READ_AHEAD))
        .clamp(1, MAX_INTAKE_BYTES);
    let window_bytes = slot.window.map_or(0, |w| w.bytes.get());
    let bytes = config
        .intake_bytes
        .unwrap_or(DEFAULT_INTAKE_BYTES.max(window_bytes.saturating_mul(2)))
        .clamp(1, MAX_INTAKE_BYTES);
    (jobs, bytes)
}

/// Each sink's slot, and its position by name; a name given twice is an error.
fn slots(
    sinks: Vec<(String, Arc<dyn Sink>)>,
    settings: &HashMap<String, SinkDispatch>,
    config: &DispatchConfig,
) -> Result<(HashMap<String, usize>, Vec<SinkState>), BuildError> {
    if let Some(name) = settings
        .keys()
        .find(|n| !sinks.iter().any(|(s, _)| s == *n))
    {
        return Err(BuildError::NoSuchSink(name.clone()));
    }
    let mut index = HashMap::new();
    let mut slots = Vec::new();
    for (i, (name, sink)) in sinks.into_iter().enumerate() {
        if index.insert(name.clone(), i).is_some() {
            return Err(BuildError::DuplicateSink(name));
        }
        // Read once, here: the one statement of the sink's facts.
        let caps = safe_capabilities(&sink).unwrap_or_else(|fault| {
            tracing::warn!(
                target: "ankusa_dispatch",
                sink = %name,
                error = %fault,
                "capabilities() failed; treating the sink as not durable, claiming every body"
            );
            Capabilities::unknown()
        });
        let threshold = caps.inline_max_bytes;
        let own = settings.get(&name).cloned().unwrap_or_default();
        check_sink_ranges(&name, &own)?;
        let limit = match own.concurrency {
            None => None,
            Some(Concurrency::Fixed(0)) => return Err(BuildError::ZeroConcurrency),
            Some(Concurrency::Fixed(n)) => Some(Limit::Fixed(n)),
            Some(Concurrency::Adaptive { max }) => Some(Limit::Adaptive(adaptive::Adaptive::new(
                max,
                Instant::now(),
            ))),
        };
        let bucket = match own.rate_per_second {
            None => None,
            Some(r) if RATE_PER_SECOND.contains(&r) => Some(rate::Bucket::new(r, Instant::now())),
            Some(_) => return Err(BuildError::BadRate(name)),
        };
        let tenant_concurrency = match own.tenant_concurrency {
            Some(n) => (n > 0).then_some(n),
            None => config.tenant_concurrency,
        };
        let window = config.sink_windows.then_some(caps.in_flight).flatten();
        let metrics = m::SinkMetrics::new(&name);
        // What limits the sink's attempts now (the shared limit is shared with others).
        let limit_now = match (&limit, window) {
            (Some(l), _) => l.current(),
            (None, Some(w)) => config.sink_concurrency.unwrap_or(w.deliveries.get()),
            (None, None) => config.sink_concurrency.unwrap_or(config.concurrency),
        };
        metrics.concurrency_limit.set(limit_now as f64);
        let breaker = Breaker::new(own.breaker.unwrap_or(config.breaker));
        let mut state = SinkState::new(
            Arc::from(name.as_str()),
            sink,
            caps.batched,
            window,
            threshold,
            metrics,
            limit,
            bucket,
            tenant_concurrency,
            own.park,
            breaker,
        );
        state.header_policy = own.header_policy.or_else(|| config.header_policy.clone());
        slots.push(state);
    }
    Ok((index, slots))
}

/// Each route's sinks as positions (each once); an empty route or an unknown sink is an
/// error.
fn routes(
    routes: Vec<(String, Vec<String>)>,
    index: &HashMap<String, usize>,
) -> Result<HashMap<String, Arc<[usize]>>, BuildError> {
    let mut out = HashMap::new();
    for (route, names) in routes {
        if names.is_empty() {
            return Err(BuildError::EmptyRoute(route));
        }
        let mut ids = Vec::new();
        for sink in names {
            let &i = index.get(&sink).ok_or_else(|| BuildError::UnknownSink {
                route: route.clone(),
                sink: sink.clone(),
            })?;
            if !ids.contains(&i) {
                ids.push(i);
            }
        }
        out.insert(route, ids.into());
    }
    Ok(out)
}

/// Takes hooks and delivers each to every sink of its route, by the failure classes:
/// retries in a timer queue (no slot held while waiting), retry-after honoured and capped,
/// dead letters at the horizon, a breaker per sink, the claim check once per hook.
///
/// Cheap to clone; every clone submits to the same scheduler. Dropping every clone without
/// a [`shutdown`](Self::shutdown) lets the dispatcher finish every hook it holds (retries
/// included, up to the horizon) and then end [`Deliveries`].
///
/// Retry times and the horizon run on tokio's clock (the wall clock is read once, at
/// [`build`](DispatcherBuilder::build), for the Unix ms reported): `tokio::time::pause`
/// drives them in tests, and a wall-clock step does not move a hook's horizon.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<In>,
}

#[derive(Debug)]
struct Shared {
    index: HashMap<String, usize>,
    // Shared slices: a submit takes its route's sinks without allocating.
    routes: HashMap<String, Arc<[usize]>>,
    all: Arc<[usize]>,
    /// `[i]` for each sink `i`: a hook for one named sink.
    single: Vec<Arc<[usize]>>,
    /// Each sink's intake: a job takes one permit of its sink's.
    intake: Vec<Arc<Semaphore>>,
    /// Each sink's body bytes: a job takes its hook's size (at most the sink's
    /// `intake_bytes_max`).
    intake_bytes: Vec<Arc<Semaphore>>,
    intake_bytes_max: Vec<u32>,
    closed: AtomicBool,
    /// The scheduler task panicked.
    died: AtomicBool,
    waiting: Arc<AtomicUsize>,
    /// Intake is paused: a dead letter of a hook from a durable source could not be
    /// stored and is being written again (`DeadLetterHold`).
    held: Arc<IntakeHold>,
}

/// The pause on intake while dead letters cannot be stored: `submit` waits on it.
#[derive(Debug, Default)]
struct IntakeHold {
    paused: AtomicBool,
    resumed: tokio::sync::Notify,
}

impl IntakeHold {
    fn set(&self, paused: bool) {
        if self.paused.swap(paused, Ordering::AcqRel) && !paused {
            self.resumed.notify_waiters();
        }
    }

    /// Wait while intake is paused (or until `closed`).
    async fn wait(&self, closed: &AtomicBool) {
        while self.paused.load(Ordering::Acquire) && !closed.load(Ordering::Acquire) {
            let resumed = self.resumed.notified();
            tokio::pin!(resumed);
            // Registered before the flag is read again: a resume in between is not lost.
            resumed.as_mut().enable();
            if !self.paused.load(Ordering::Acquire) || closed.load(Ordering::Acquire) {
                return;
            }
            resumed.await;
        }
    }
}

impl Shared {
    /// The scheduler task died: intake closes (a waiting `submit` gets its hook back) and
    /// [`Dispatcher::has_died`] says so. Set before the task's channels drop, so whoever
    /// sees [`Deliveries`] end early sees this too.
    fn scheduler_died(&self) {
        self.died.store(true, Ordering::Release);
        self.closed.store(true, Ordering::Release);
        self.held.resumed.notify_waiters();
        for s in self.intake.iter().chain(&self.intake_bytes) {
            s.close();
        }
    }
}

impl Dispatcher {
    /// A builder.
    pub fn builder() -> DispatcherBuilder {
        DispatcherBuilder::default()
    }

    /// Take a hook: waits while the intake is full (memory stays bounded by the intake and
    /// the retry queue, not by how fast hooks arrive), and while a durable source's dead
    /// letter cannot be stored. An unknown route or sink is an error for this hook only.
    pub async fn submit(&self, hook: Hook) -> Result<(), SubmitError> {
        let sinks = self.sinks_of(&hook)?;
        // Paused while a durable source's dead letter cannot be stored: reading on would
        // only pile up hooks that may end the same way.
        if self.shared.held.paused.load(Ordering::Relaxed) {
            self.shared.held.wait(&self.shared.closed).await;
        }
        // A place and the bytes in each of the hook's sinks' intakes, always in one order
        // (by sink, the place first), so two submits never wait on each other.
        let size = u32::try_from(hook.envelope.size()).unwrap_or(u32::MAX);
        let mut permits = Vec::with_capacity(sinks.len());
        for &i in sinks.iter() {
            let Ok(job) = self.shared.intake[i].clone().acquire_owned().await else {
                return Err(SubmitError::ShuttingDown(Box::new(hook)));
            };
            let weight = size.clamp(1, self.shared.intake_bytes_max[i]);
            let Ok(bytes) = self.shared.intake_bytes[i]
                .clone()
                .acquire_many_owned(weight)
                .await
            else {
                return Err(SubmitError::ShuttingDown(Box::new(hook)));
            };
            permits.push(Permit {
                _job: job,
                _bytes: bytes,
            });
        }
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(SubmitError::ShuttingDown(Box::new(hook)));
        }
        self.tx
            .send(In::Submit {
                hook: Box::new(hook),
                sinks,
                permits,
            })
            .map_err(|e| match e.0 {
                In::Submit { hook, .. } => SubmitError::ShuttingDown(hook),
                In::Shutdown { .. } => unreachable!("only submits are sent here"),
            })
    }

    fn sinks_of(&self, hook: &Hook) -> Result<Arc<[usize]>, SubmitError> {
        let route = match &hook.route {
            None => &self.shared.all,
            Some(r) => self
                .shared
                .routes
                .get(r)
                .ok_or_else(|| SubmitError::UnknownRoute(r.clone()))?,
        };
        match &hook.sink {
            None => Ok(route.clone()),
            Some(name) => {
                let &i = self
                    .shared
                    .index
                    .get(name)
                    .filter(|i| route.contains(i))
                    .ok_or_else(|| SubmitError::UnknownSink(name.clone()))?;
                Ok(self.shared.single[i].clone())
            }
        }
    }

    /// Whether the scheduler task died (a panic: a bug in this crate) instead of ending by a
    /// [`shutdown`](Self::shutdown) or after every handle was dropped. The pairs it held
    /// then have no outcome: [`Deliveries`] ends early, `submit` hands each hook back
    /// ([`SubmitError::ShuttingDown`]), `shutdown` returns nothing, and the hooks of a
    /// durable source are released to it, never acknowledged. A caller that sees the
    /// deliveries end before it asked for a shutdown checks this and ends with an error
    /// ([`forward::drive`](crate::forward::drive) does).
    pub fn has_died(&self) -> bool {
        self.shared.died.load(Ordering::Acquire)
    }

    /// (hook, sink) jobs waiting in the retry queue now.
    pub fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Relaxed)
    }

    /// Whether the dispatcher has a sink named `name`.
    pub fn has_sink(&self, name: &str) -> bool {
        self.shared.index.contains_key(name)
    }

    /// The (hook, sink) pairs a [`submit`](Self::submit) of `hook` makes: the deliveries
    /// that will come for it. An unknown route or sink is the error `submit` would return.
    pub fn pairs_of(&self, hook: &Hook) -> Result<usize, SubmitError> {
        self.sinks_of(hook).map(|sinks| sinks.len())
    }

    /// Stop intake, let attempts in flight finish within `grace`, and hand back every
    /// (hook, sink) pair not finished: waiting for a retry, held by an open breaker, not
    /// yet started, still in flight when the grace ran out, or dead-lettered with its dead
    /// letter still being stored when the grace ran out. Deliveries that finish within the
    /// grace still arrive on [`Deliveries`], which then ends. Nothing is dropped.
    ///
    /// A second call (from a clone, say) waits for the same shutdown and gets an empty
    /// list: the first caller gets every pair. The shorter grace wins.
    pub async fn shutdown(&self, grace: Duration) -> Vec<Unfinished> {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.held.resumed.notify_waiters();
        for s in self.shared.intake.iter().chain(&self.shared.intake_bytes) {
            s.close();
        }
        let (reply, rx) = oneshot::channel();
        if self.tx.send(In::Shutdown { grace, reply }).is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::{DispatcherDied, ForwardReport, drive};
    use ankusa_sink_core::{Ctx, Envelope, Failure, async_trait};
    use scheduler::PANIC_HOOK;

    #[derive(Debug)]
    struct Accept;

    #[async_trait]
    impl Sink for Accept {
        async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
            Ok(())
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::new(true, None)
        }
    }

    fn hook(id: &str) -> Hook {
        Hook::new(Envelope::builder(id, "src", "{}").build().unwrap())
    }

    fn dispatcher() -> (Dispatcher, Deliveries) {
        Dispatcher::builder()
            .sink("s", Arc::new(Accept))
            .build()
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_dead_scheduler_ends_the_deliveries_and_says_so() {
        let (d, mut out) = dispatcher();
        d.submit(hook("before")).await.unwrap();
        assert!(out.recv().await.is_some());
        assert!(!d.has_died());
        d.submit(hook(PANIC_HOOK)).await.unwrap();
        assert!(out.recv().await.is_none(), "the stream ends");
        assert!(d.has_died());
        assert!(matches!(
            d.submit(hook("after")).await,
            Err(SubmitError::ShuttingDown(_))
        ));
        assert!(d.shutdown(Duration::ZERO).await.is_empty());
    }

    /// An intake that never ends by itself (a durable source): before, a dead scheduler
    /// left `drive` waiting on it for ever.
    #[tokio::test(start_paused = true)]
    async fn drive_ends_with_an_error_when_the_scheduler_dies() {
        let (d, out) = dispatcher();
        let (tx, events) = mpsc::unbounded_channel();
        let submitter = d.clone();
        let intake = async move {
            let _tx = tx;
            let _ = submitter.submit(hook(PANIC_HOOK)).await;
            std::future::pending::<Option<Box<dyn ankusa_source::Source>>>().await
        };
        let mut report = ForwardReport::default();
        let ended = tokio::time::timeout(
            Duration::from_secs(3600),
            drive(
                d.clone(),
                out,
                intake,
                events,
                std::future::pending(),
                Duration::from_secs(1),
                &mut report,
            ),
        )
        .await
        .expect("drive ends when the scheduler dies");
        assert_eq!(ended, Err(DispatcherDied));
        assert!(d.has_died());
    }
}
