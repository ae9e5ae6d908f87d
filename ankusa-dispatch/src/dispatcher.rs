//! The dispatcher: one scheduler task owns every (hook, sink) job; attempts run in tasks of
//! their own and report back.

use crate::attempt::attempt_in_trace;
use crate::breaker::{Breaker, BreakerConfig, State as BreakerState};
use crate::dead_letter::{DeadLetter, DeadLetterInfo, dead_letter_backoff};
use crate::metrics as m;
use crate::policy::{Action, DispatchPolicy, decide, record};
use ankusa_claimcheck::{ClaimStore, needs_claim};
use ankusa_sink_core::{
    Claim, Class, Ctx, Envelope, ErrorClass, Failure, InFlight, Reason, Sink, resolve_batched,
    resolve_in_flight, resolve_inline_max_bytes, safe_deliver,
};
use ankusa_source::{Ack, Settlement};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
// tokio's clock, not std's: the same in production, and it follows `tokio::time::pause`
// (a std deadline under a paused clock made the scheduler spin).
use tokio::time::Instant;

/// A map keyed by a number the dispatcher assigns itself (hook, attempt, task ids), never
/// by input: a fast hash instead of SipHash, which was 4 % of a delivery's CPU.
type IdMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The dispatcher's knobs.
#[derive(Debug)]
#[non_exhaustive]
pub struct DispatchConfig {
    /// Retry policy, the retry-after cap and the horizon.
    pub policy: DispatchPolicy,
    /// Attempts in flight at once over every sink without a window of its own (see
    /// `sink_windows`; batching sinks' attempts are not counted).
    pub concurrency: usize,
    /// Attempts in flight at once per sink (the attempts of a batching sink without a window
    /// not counted); for a sink with a window, this replaces the window's delivery count.
    pub sink_concurrency: Option<usize>,
    /// Whether a sink that declares a pipeline window ([`Sink::in_flight`]) runs on it,
    /// outside `concurrency` (default `true`). `false`: every sink shares `concurrency`.
    pub sink_windows: bool,
    /// An attempt that has not answered after this long is a transient failure.
    pub attempt_timeout: Duration,
    /// The per-sink circuit breaker.
    pub breaker: BreakerConfig,
    /// (hook, sink) jobs admitted before their first attempt has settled: what
    /// [`Dispatcher::submit`] waits on. Default: `concurrency` plus every sink window's
    /// delivery count, twice over, but at most 1,024 more than once over (the read-ahead
    /// that keeps free slots busy does not grow with the windows).
    pub intake: Option<usize>,
    /// Body bytes of the hooks admitted before every first attempt of theirs has settled,
    /// at most (a larger body is admitted alone). Default: 64 MiB, or twice the sum of
    /// the sink windows' bytes when that is more.
    pub intake_bytes: Option<usize>,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            policy: DispatchPolicy::default(),
            concurrency: 32,
            sink_concurrency: None,
            sink_windows: true,
            attempt_timeout: Duration::from_secs(30),
            breaker: BreakerConfig::default(),
            intake: None,
            intake_bytes: None,
        }
    }
}

impl DispatchConfig {
    /// The retry policy, retry-after cap and horizon.
    pub fn with_policy(mut self, policy: DispatchPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Attempts in flight at once over every sink.
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Attempts in flight at once per sink.
    pub fn with_sink_concurrency(mut self, n: usize) -> Self {
        self.sink_concurrency = Some(n);
        self
    }

    /// Whether sinks run on their own pipeline windows (`true`, the default) or all
    /// share `concurrency`.
    pub fn with_sink_windows(mut self, on: bool) -> Self {
        self.sink_windows = on;
        self
    }

    /// The attempt timeout.
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// The circuit breaker.
    pub fn with_breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = breaker;
        self
    }

    /// Jobs admitted before their first attempt settles.
    pub fn with_intake(mut self, n: usize) -> Self {
        self.intake = Some(n);
        self
    }

    /// Body bytes admitted before their hooks' first attempts settle.
    pub fn with_intake_bytes(mut self, n: usize) -> Self {
        self.intake_bytes = Some(n);
        self
    }
}

/// Why a dispatcher could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No sink was added.
    #[error("a dispatcher needs at least one sink")]
    NoSinks,
    /// Two sinks share a name.
    #[error("two sinks are named `{0}`")]
    DuplicateSink(String),
    /// A route names a sink that was not added.
    #[error("route `{route}` names no sink `{sink}`")]
    UnknownSink {
        /// The route.
        route: String,
        /// The missing sink.
        sink: String,
    },
    /// A route names no sink: its hooks would go nowhere.
    #[error("route `{0}` names no sink")]
    EmptyRoute(String),
    /// `concurrency` (or `sink_concurrency`) is zero.
    #[error("concurrency must be at least 1")]
    ZeroConcurrency,
}

/// Why a hook was not taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// The hook names a route the dispatcher does not have.
    #[error("no route `{0}`")]
    UnknownRoute(String),
    /// The hook names a sink the dispatcher does not have.
    #[error("no sink `{0}`")]
    UnknownSink(String),
    /// The dispatcher is shutting down; the hook is handed back.
    #[error("the dispatcher is shutting down")]
    ShuttingDown(Box<Hook>),
}

/// A hook to dispatch: its envelope and how to route it.
#[derive(Debug)]
pub struct Hook {
    // Shared from the start: a hook moves through several futures and a channel on its
    // way to the scheduler, which keeps it as an `Arc` anyway; moved inline, its envelope
    // was a 500-byte copy at each step.
    envelope: Arc<Envelope>,
    route: Option<String>,
    sink: Option<String>,
    replay_id: Option<String>,
    traceparent: Option<String>,
    claim: Option<Claim>,
    first_attempt: u32,
    ack: Option<Ack>,
}

impl Hook {
    /// A hook for the default route (every sink), from an envelope or an `Arc` of one.
    pub fn new(envelope: impl Into<Arc<Envelope>>) -> Self {
        Hook {
            envelope: envelope.into(),
            route: None,
            sink: None,
            replay_id: None,
            traceparent: None,
            claim: None,
            first_attempt: 1,
            ack: None,
        }
    }

    /// The hook's acknowledgement to its durable source: settled
    /// [`Ack`](Settlement::Ack) once every sink of its route has delivered it or
    /// dead-lettered it (the dead-letter record stored) and each of those
    /// [`Delivery`]s has been dropped (read and reported); settled
    /// [`Release`](Settlement::Release) when any pair ends unfinished (a shutdown) or its
    /// dead letter could not be stored, and when the hook is not taken.
    pub fn source_ack(mut self, ack: Ack) -> Self {
        self.ack = Some(ack);
        self
    }

    /// The attempt number (`ctx.attempt`) of the first attempt: for a hook that was tried
    /// before elsewhere. Default 1.
    pub fn first_attempt(mut self, n: u32) -> Self {
        self.first_attempt = n.max(1);
        self
    }

    /// Deliver to the sinks of this route.
    pub fn route(mut self, route: impl Into<String>) -> Self {
        self.route = Some(route.into());
        self
    }

    /// Deliver only to this sink (a dead-letter replay).
    pub fn only_sink(mut self, sink: impl Into<String>) -> Self {
        self.sink = Some(sink.into());
        self
    }

    /// Deliver as part of this replay job (`ctx.replay_id`).
    pub fn replay_id(mut self, id: impl Into<String>) -> Self {
        self.replay_id = Some(id.into());
        self
    }

    /// The hook's stored W3C trace context: attempts join that trace.
    pub fn traceparent(mut self, tp: impl Into<String>) -> Self {
        self.traceparent = Some(tp.into());
        self
    }

    /// A claim already stored for the body: no check-in.
    pub fn claim(mut self, claim: Claim) -> Self {
        self.claim = Some(claim);
        self
    }

    /// The one sink this hook is bound to ([`only_sink`](Self::only_sink)), if any.
    pub fn sink_name(&self) -> Option<&str> {
        self.sink.as_deref()
    }

    /// The envelope.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// Take the envelope back (a copy only when the hook's `Arc` is shared).
    pub fn into_envelope(self) -> Envelope {
        Arc::unwrap_or_clone(self.envelope)
    }
}

/// What became of one (hook, sink) pair.
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome {
    /// The sink took it.
    Delivered,
    /// Dispatch gave up: the failure decided it, or the horizon or the policy ended it.
    DeadLettered {
        /// The last failure.
        failure: Failure,
        /// How it is filed.
        error_class: ErrorClass,
        /// Why the dead letter could not be stored, if it could not (it was still given
        /// up on: persist this delivery yourself). A hook with a source acknowledgement
        /// never ends with one: its dead letter is stored again until it is, or until a
        /// shutdown hands the pair back.
        store_error: Option<String>,
    },
}

/// The final word on one (hook, sink) pair.
#[non_exhaustive]
pub struct Delivery {
    /// The hook.
    pub envelope: Arc<Envelope>,
    /// The sink's name.
    pub sink: Arc<str>,
    /// Delivered or dead-lettered.
    pub outcome: Outcome,
    /// Attempts made (a failed check-in counts as one).
    pub attempts: u32,
    /// Unix ms of the first attempt (of the submit, if none ran).
    pub first_attempt_ms: i64,
    /// Unix ms of the last attempt.
    pub last_attempt_ms: i64,
    /// The replay job, if any.
    pub replay_id: Option<String>,
    /// For a dead letter whose last failure was a throttle, the pause dispatch took for it
    /// in ms ([`Decision::pause`](crate::Decision::pause)): the destination's stated pause,
    /// or the one drawn for [`Class::Throttled`](ankusa_sink_core::Class::Throttled), capped
    /// at `max_retry_after` (and at `u32::MAX` ms, 49 days). `None` otherwise, and for a
    /// pause capped to zero.
    pub retry_after_ms: Option<u64>,
    // Held until the caller drops the delivery: a caller that stops reading outcomes stops
    // intake instead of piling them up.
    _permit: Option<Permit>,
    // The hook's source acknowledgement, settled when its last holder is dropped: after
    // the caller has seen every outcome of the hook.
    settle: Option<Arc<HookSettle>>,
}

/// A hook's source acknowledgement, shared by the hook and its deliveries; settled when
/// the last of them is dropped.
#[derive(Debug)]
struct HookSettle {
    // Behind a mutex only for `Sync` (a source's handle need not be): it is taken once,
    // in `drop`, with `&mut`.
    ack: std::sync::Mutex<Option<Ack>>,
    /// Every pair got its final outcome (set when the last one does): a hook dropped
    /// before that (a scheduler that died) is released, never acknowledged.
    done: AtomicBool,
    /// Some pair ended unfinished, or its dead letter was not stored.
    unfinished: AtomicBool,
}

impl HookSettle {
    fn new(ack: Option<Ack>) -> Option<Arc<Self>> {
        ack.map(|a| {
            Arc::new(HookSettle {
                ack: std::sync::Mutex::new(Some(a)),
                done: AtomicBool::new(false),
                unfinished: AtomicBool::new(false),
            })
        })
    }

    fn mark_done(this: &Option<Arc<Self>>) {
        if let Some(s) = this {
            s.done.store(true, Ordering::Relaxed);
        }
    }

    fn mark_unfinished(this: &Option<Arc<Self>>) {
        if let Some(s) = this {
            s.unfinished.store(true, Ordering::Relaxed);
        }
    }
}

impl Drop for HookSettle {
    fn drop(&mut self) {
        let ack = self.ack.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(a) = ack {
            let how =
                if self.done.load(Ordering::Relaxed) && !self.unfinished.load(Ordering::Relaxed) {
                    Settlement::Ack
                } else {
                    Settlement::Release
                };
            a.settle_as(how);
        }
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("hook_id", &self.envelope.id())
            .field("sink", &self.sink)
            .field("outcome", &self.outcome)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

/// A (hook, sink) pair a shutdown left unfinished: persist it or feed it again.
#[derive(Debug)]
#[non_exhaustive]
pub struct Unfinished {
    /// The hook.
    pub envelope: Arc<Envelope>,
    /// The sink's name.
    pub sink: Arc<str>,
    /// Attempts made.
    pub attempts: u32,
    /// The last failure, if an attempt failed. A pair dispatch had given up on whose
    /// dead letter was still being stored when the grace ran out comes back with it (its
    /// dead letter may or may not have been stored).
    pub last_failure: Option<Failure>,
    /// Whether an attempt was still in flight when the grace ran out: the sink may have
    /// taken the hook (redelivery is a duplicate, never a loss).
    pub was_in_flight: bool,
    /// The replay job, if any.
    pub replay_id: Option<String>,
    /// The pause dispatch took for the last failure when it was a throttle, in ms (see
    /// [`Delivery::retry_after_ms`]).
    pub retry_after_ms: Option<u64>,
}

/// The stream of [`Delivery`]s, one per (hook, sink) pair; ends after a shutdown.
///
/// On a multi-thread runtime, receive in a task of the runtime rather than in `block_on`
/// (what `#[tokio::main]` runs): there each delivery wakes a thread outside the workers,
/// which costs several times the dispatcher's own work per delivery.
#[derive(Debug)]
pub struct Deliveries(mpsc::UnboundedReceiver<Delivery>);

impl Deliveries {
    /// The next delivery; `None` once the dispatcher has shut down and all were taken.
    pub async fn recv(&mut self) -> Option<Delivery> {
        self.0.recv().await
    }

    /// A delivery if one is ready.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        self.0.try_recv().ok()
    }
}

/// Builds a [`Dispatcher`].
#[derive(Debug, Default)]
pub struct DispatcherBuilder {
    sinks: Vec<(String, Arc<dyn Sink>)>,
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
        let (index, slots) = slots(self.sinks, self.config.sink_windows)?;
        let routes = routes(self.routes, &index)?;
        let n = slots.len();
        let windows = slots.iter().filter_map(|s| s.window);
        let (window_deliveries, window_bytes) = windows.fold((0usize, 0usize), |(d, b), w| {
            (
                d.saturating_add(w.deliveries.get()),
                b.saturating_add(w.bytes.get()),
            )
        });
        let in_flight = self.config.concurrency.saturating_add(window_deliveries);
        let intake = self
            .config
            .intake
            .unwrap_or(in_flight.saturating_add(in_flight.min(MAX_READ_AHEAD)))
            .max(n);
        let intake_bytes = self
            .config
            .intake_bytes
            .unwrap_or(DEFAULT_INTAKE_BYTES.max(window_bytes.saturating_mul(2)))
            .clamp(1, MAX_INTAKE_BYTES);
        let shared = Arc::new(Shared {
            index,
            routes,
            all: (0..n).collect(),
            single: (0..n).map(|i| Arc::from([i])).collect(),
            intake: Arc::new(Semaphore::new(intake)),
            intake_bytes: Arc::new(Semaphore::new(intake_bytes)),
            intake_bytes_max: u32::try_from(intake_bytes).unwrap_or(u32::MAX),
            closed: AtomicBool::new(false),
            waiting: Arc::new(AtomicUsize::new(0)),
            held: Arc::new(IntakeHold::default()),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        // Reports from the scheduler's own tasks come on a channel of their own, so the
        // intake channel closes when the last `Dispatcher` handle is dropped.
        let (report_tx, report_rx) = mpsc::unbounded_channel();
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let breakers = (0..n).map(|_| Breaker::new(self.config.breaker)).collect();
        metrics::gauge!(m::DEAD_LETTER_BLOCKED).set(0.0);
        metrics::gauge!(m::WAITING).set(0.0);
        let scheduler = Scheduler {
            waiting_count: shared.waiting.clone(),
            intake_hold: shared.held.clone(),
            dead_letter_log: None,
            waiting_reported: 0,
            slots,
            config: self.config,
            claim_store: self.claim_store,
            dead_letter: self.dead_letter,
            tx: report_tx,
            out: out_tx,
            clock: Clock::new(),
            hooks: IdMap::default(),
            next_hook: 0,
            ready: (0..n).map(|_| VecDeque::new()).collect(),
            in_flight: vec![0; n],
            in_flight_bytes: vec![0; n],
            in_flight_total: 0,
            running: IdMap::default(),
            next_attempt: 0,
            tasks: JoinSet::new(),
            task_attempt: IdMap::default(),
            task_dead_letter: IdMap::default(),
            task_claim: IdMap::default(),
            breakers,
            waiting: BinaryHeap::new(),
            seq: 0,
            next_sink: 0,
            held_scan: vec![Instant::now(); n],
            pending_dead_letters: IdMap::default(),
            next_dead_letter: 0,
            stopping: None,
            intake_open: true,
        };
        tokio::spawn(scheduler.run(rx, report_rx));
        Ok((Dispatcher { shared, tx }, Deliveries(out_rx)))
    }
}

/// Each sink's slot, and its position by name; a name given twice is an error.
fn slots(
    sinks: Vec<(String, Arc<dyn Sink>)>,
    windows: bool,
) -> Result<(HashMap<String, usize>, Vec<Slot>), BuildError> {
    let mut index = HashMap::new();
    let mut slots = Vec::new();
    for (i, (name, sink)) in sinks.into_iter().enumerate() {
        if index.insert(name.clone(), i).is_some() {
            return Err(BuildError::DuplicateSink(name));
        }
        let threshold = resolve_inline_max_bytes(&sink).unwrap_or(Some(NonZeroUsize::MIN));
        slots.push(Slot {
            metrics: m::SinkMetrics::new(&name),
            name: Arc::from(name.as_str()),
            batched: resolve_batched(&sink),
            window: windows.then(|| resolve_in_flight(&sink)).flatten(),
            threshold,
            sink,
        });
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
    intake: Arc<Semaphore>,
    /// Body bytes: each hook takes its size (at most `intake_bytes_max`), shared by its jobs.
    intake_bytes: Arc<Semaphore>,
    intake_bytes_max: u32,
    closed: AtomicBool,
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
        // All of the hook's permits at once: taken one by one, two submits could each hold
        // part of what they need and wait on each other forever.
        let n = u32::try_from(sinks.len()).expect("a route has fewer than 2^32 sinks");
        let jobs = match self.shared.intake.clone().acquire_many_owned(n).await {
            Ok(p) => p,
            Err(_) => return Err(SubmitError::ShuttingDown(Box::new(hook))),
        };
        // Bytes after jobs, always in this order, so two submits never wait on each other.
        let weight = u32::try_from(hook.envelope.size())
            .unwrap_or(u32::MAX)
            .clamp(1, self.shared.intake_bytes_max);
        let bytes = match self
            .shared
            .intake_bytes
            .clone()
            .acquire_many_owned(weight)
            .await
        {
            Ok(p) => Arc::new(p),
            Err(_) => return Err(SubmitError::ShuttingDown(Box::new(hook))),
        };
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(SubmitError::ShuttingDown(Box::new(hook)));
        }
        self.tx
            .send(In::Submit {
                hook: Box::new(hook),
                sinks,
                jobs,
                bytes,
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

    /// (hook, sink) jobs waiting in the retry queue now.
    pub fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Relaxed)
    }

    /// Whether the dispatcher has a sink named `name`.
    pub fn has_sink(&self, name: &str) -> bool {
        self.shared.index.contains_key(name)
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
        self.shared.intake.close();
        self.shared.intake_bytes.close();
        let (reply, rx) = oneshot::channel();
        if self.tx.send(In::Shutdown { grace, reply }).is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }
}

/// A sink in the scheduler.
struct Slot {
    name: Arc<str>,
    sink: Arc<dyn Sink>,
    batched: bool,
    /// The sink's own pipeline window, when it has one and windows are on.
    window: Option<InFlight>,
    threshold: Option<NonZeroUsize>,
    metrics: m::SinkMetrics,
}

impl Slot {
    /// Whether this sink's attempts count against a limit: a batching sink without a
    /// window is bounded by its own batcher alone; with one, it runs on its window like any
    /// pipelining sink.
    fn counted(&self) -> bool {
        !self.batched || self.window.is_some()
    }
}

/// What the `Dispatcher` handles send.
enum In {
    Submit {
        hook: Box<Hook>,
        sinks: Arc<[usize]>,
        /// One intake permit per sink, split into the jobs' by the scheduler.
        jobs: OwnedSemaphorePermit,
        /// The hook's body bytes, shared by its jobs.
        bytes: Arc<OwnedSemaphorePermit>,
    },
    Shutdown {
        grace: Duration,
        reply: oneshot::Sender<Vec<Unfinished>>,
    },
}

/// What the scheduler's own tasks report.
enum Report {
    Done {
        attempt: u64,
        result: Result<(), Failure>,
        took: Duration,
    },
    Claimed {
        hook: u64,
        result: Result<Option<Claim>, Failure>,
    },
    /// The dead letter `id` was stored, or why it could not be.
    DeadLettered { id: u64, result: Result<(), String> },
}

/// Where a hook's claim stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClaimPhase {
    /// Every sink takes the body inline, or the claim is in the context.
    Ready,
    /// A check-in is needed before any sink runs.
    Needed,
    /// A check-in is running; the hook's jobs are parked.
    Pending,
}

struct HookState {
    env: Arc<Envelope>,
    ctx: Ctx,
    traceparent: Option<Arc<str>>,
    claim: ClaimPhase,
    /// The inline thresholds of every sink of the hook: a check-in retried for one job
    /// must still claim the body for the others. Empty without a claim store.
    thresholds: Vec<Option<NonZeroUsize>>,
    /// Jobs waiting for the check-in.
    parked: Vec<Job>,
    /// Jobs not yet finished.
    jobs_left: usize,
    /// Unix ms of the submit.
    submitted_ms: i64,
    /// `ctx.attempt` of the first attempt.
    first_attempt: u32,
    /// The source acknowledgement, if the hook came from a durable source.
    settle: Option<Arc<HookSettle>>,
}

struct Job {
    hook: u64,
    sink: usize,
    attempts: u32,
    first_ms: Option<i64>,
    last_ms: i64,
    last_failure: Option<Failure>,
    /// The pause decided for `last_failure` when it was a throttle, in ms (saturating; it
    /// sits in `attempts`' padding, so a waiting job is no larger for it).
    last_pause_ms: Option<NonZeroU32>,
    /// Body bytes an attempt charges to its sink's window: the body when it goes inline,
    /// nothing when a claim goes instead (saturating).
    weight: u32,
    permit: Option<Permit>,
}

/// A job's share of the intake: its own slot and its hook's bytes (the bytes go back when
/// the hook's last job gives its permit back).
struct Permit {
    _job: OwnedSemaphorePermit,
    _bytes: Arc<OwnedSemaphorePermit>,
}

/// A job waiting for its retry time.
struct Waiting {
    at: Instant,
    seq: u64,
    job: Job,
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Unix ms on the runtime's monotonic clock, anchored to the wall clock once, when the
/// dispatcher starts: the horizon and the retry times then agree with the timer queue (and
/// with `tokio::time::pause`), and a wall-clock step neither shortens nor stretches a
/// hook's horizon.
#[derive(Debug, Clone, Copy)]
struct Clock {
    start: Instant,
    start_ms: i64,
}

impl Clock {
    fn new() -> Self {
        let start_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Clock {
            start: Instant::now(),
            start_ms,
        }
    }

    fn now_ms(&self) -> i64 {
        let since = i64::try_from(Instant::now().duration_since(self.start).as_millis())
            .unwrap_or(i64::MAX);
        self.start_ms.saturating_add(since)
    }
}

/// How often an open breaker's held jobs are checked against the horizon.
const HELD_SCAN: Duration = Duration::from_secs(1);

/// The intake's default bound on body bytes.
const DEFAULT_INTAKE_BYTES: usize = 64 << 20;
/// The most a semaphore holds (tokio's `Semaphore::MAX_PERMITS`).
const MAX_INTAKE_BYTES: usize = usize::MAX >> 3;

/// The default intake admits every slot's job plus this many more at most, ready for the
/// next free slot: enough to cover the reader's bursts, which do not grow with the windows
/// (past it each admitted hook would cost memory and no throughput).
const MAX_READ_AHEAD: usize = 1024;

/// At most this many messages are taken between two pumps.
const BURST: usize = 256;

struct Scheduler {
    waiting_count: Arc<AtomicUsize>,
    /// Shared with `submit`: paused while a dead letter is held.
    intake_hold: Arc<IntakeHold>,
    /// When a dead letter's failure to be stored was last logged (at most once a minute).
    dead_letter_log: Option<Instant>,
    /// The value last set on the waiting gauge.
    waiting_reported: usize,
    slots: Vec<Slot>,
    config: DispatchConfig,
    claim_store: Option<ClaimStore>,
    dead_letter: Option<DeadLetter>,
    tx: mpsc::UnboundedSender<Report>,
    out: mpsc::UnboundedSender<Delivery>,
    clock: Clock,
    hooks: IdMap<u64, HookState>,
    next_hook: u64,
    ready: Vec<VecDeque<Job>>,
    in_flight: Vec<usize>,
    /// Body bytes in flight per sink (windowed sinks only).
    in_flight_bytes: Vec<usize>,
    /// Attempts in flight over the sinks that share `concurrency`.
    in_flight_total: usize,
    running: IdMap<u64, Job>,
    next_attempt: u64,
    tasks: JoinSet<()>,
    /// Which attempt each attempt task runs, to fail it if the task dies.
    task_attempt: IdMap<tokio::task::Id, u64>,
    /// Which dead letter each store task stores, to report it if the task dies.
    task_dead_letter: IdMap<tokio::task::Id, u64>,
    /// Which hook each check-in task checks in, to fail the check-in if the task dies.
    task_claim: IdMap<tokio::task::Id, u64>,
    breakers: Vec<Breaker>,
    waiting: BinaryHeap<Reverse<Waiting>>,
    seq: u64,
    /// When each sink's held jobs are next checked against the horizon.
    held_scan: Vec<Instant>,
    /// The sink `pump` serves first (round robin).
    next_sink: usize,
    /// Dead letters being stored, or held to be stored again, by id: their deliveries
    /// wait for the store's answer.
    pending_dead_letters: IdMap<u64, PendingDeadLetter>,
    next_dead_letter: u64,
    stopping: Option<Stopping>,
    /// Whether a `Dispatcher` handle may still send.
    intake_open: bool,
}

struct Stopping {
    deadline: Instant,
    reply: oneshot::Sender<Vec<Unfinished>>,
    /// Later `shutdown` calls: answered (empty) when the first one is.
    more_replies: Vec<oneshot::Sender<Vec<Unfinished>>>,
    unfinished: Vec<Unfinished>,
}

impl Scheduler {
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<In>,
        mut reports: mpsc::UnboundedReceiver<Report>,
    ) {
        loop {
            if self.stopping.is_none() {
                self.wake_due(Instant::now());
                self.wake_dead_letters(Instant::now());
                self.pump(Instant::now());
                self.report_waiting();
            }
            if let Some(s) = &self.stopping {
                if (self.running.is_empty() && self.pending_dead_letters.is_empty())
                    || Instant::now() >= s.deadline
                {
                    self.finish_shutdown(&mut rx, &mut reports);
                    return;
                }
            } else if !self.intake_open
                && self.hooks.is_empty()
                && self.pending_dead_letters.is_empty()
            {
                // Every handle was dropped and every hook is finished: end the stream.
                return;
            }
            let wake = self.next_wake();
            tokio::select! {
                msg = rx.recv(), if self.intake_open => match msg {
                    Some(msg) => self.take(msg),
                    // Every handle dropped without a shutdown: nobody could be handed back
                    // what is left, so finish every hook held (retries included), then end.
                    None => self.intake_open = false,
                },
                Some(report) = reports.recv() => self.handle(report),
                () = sleep_until(wake) => {}
                Some(joined) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                    self.joined(joined);
                }
            }
            // Take what else is already waiting before the next pump: one pass of the loop
            // per burst of messages, not per message.
            for _ in 0..BURST {
                let mut any = false;
                if let Ok(report) = reports.try_recv() {
                    self.handle(report);
                    any = true;
                }
                if self.intake_open
                    && let Ok(msg) = rx.try_recv()
                {
                    self.take(msg);
                    any = true;
                }
                if let Some(joined) = self.tasks.try_join_next_with_id() {
                    self.joined(joined);
                    any = true;
                }
                if !any {
                    break;
                }
            }
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let mut wake = self.waiting.peek().map(|Reverse(w)| w.at);
        let mut earliest = |t: Instant| wake = Some(wake.map_or(t, |w| w.min(t)));
        for (i, b) in self.breakers.iter().enumerate() {
            if b.is_open() && !self.ready[i].is_empty() {
                earliest(self.held_scan[i]);
                if let Some(at) = b.reopens_at() {
                    earliest(at);
                }
            }
        }
        for p in self.pending_dead_letters.values() {
            if let Some(at) = p.retry_at {
                earliest(at);
            }
        }
        if let Some(s) = &self.stopping {
            earliest(s.deadline);
        }
        wake
    }

    fn take(&mut self, msg: In) {
        match msg {
            In::Submit {
                hook,
                sinks,
                jobs,
                bytes,
            } => self.submit(*hook, &sinks, jobs, &bytes),
            In::Shutdown { grace, reply } => self.begin_shutdown(grace, reply),
        }
    }

    fn handle(&mut self, report: Report) {
        match report {
            Report::Done {
                attempt,
                result,
                took,
            } => self.done(attempt, result, took),
            Report::Claimed { hook, result } => self.claimed(hook, result),
            Report::DeadLettered { id, result } => self.dead_lettered(id, result),
        }
    }

    fn submit(
        &mut self,
        hook: Hook,
        sinks: &[usize],
        mut jobs: OwnedSemaphorePermit,
        bytes: &Arc<OwnedSemaphorePermit>,
    ) {
        if self.stopping.is_some() {
            // Raced with a shutdown: hand it back as unfinished rather than drop it.
            let env = hook.envelope;
            if let Some(s) = &mut self.stopping {
                for &i in sinks {
                    s.unfinished.push(Unfinished {
                        envelope: env.clone(),
                        sink: self.slots[i].name.clone(),
                        attempts: 0,
                        last_failure: None,
                        was_in_flight: false,
                        replay_id: hook.replay_id.clone(),
                        retry_after_ms: None,
                    });
                }
            }
            return;
        }
        let id = self.next_hook;
        self.next_hook += 1;
        let mut ctx = Ctx::for_envelope(&hook.envelope);
        if let Some(r) = hook.replay_id {
            ctx = ctx.with_replay_id(r);
        }
        let mut claim = ClaimPhase::Ready;
        let size = hook.envelope.size();
        // A check-in needs them, and only a claim store checks in.
        let thresholds: Vec<_> = if self.claim_store.is_some() {
            sinks.iter().map(|&i| self.slots[i].threshold).collect()
        } else {
            Vec::new()
        };
        if let Some(c) = hook.claim {
            ctx = ctx.with_claim(c);
        } else if self.claim_store.is_some() && needs_claim(size, thresholds.iter().copied()) {
            claim = ClaimPhase::Needed;
        }
        let now = self.clock.now_ms();
        // A claim travels instead of the body to every sink the body is too large for,
        // once a claim exists (given, or checked in before any job runs).
        let claims = ctx.claim.is_some() || claim == ClaimPhase::Needed;
        self.hooks.insert(
            id,
            HookState {
                env: hook.envelope,
                ctx,
                traceparent: hook.traceparent.map(Arc::from),
                claim,
                thresholds,
                parked: Vec::new(),
                jobs_left: sinks.len(),
                submitted_ms: now,
                first_attempt: hook.first_attempt,
                settle: HookSettle::new(hook.ack),
            },
        );
        // One intake permit per job, split off the hook's.
        for &sink in sinks {
            let job = jobs.split(1).expect("one permit per sink");
            let weight = match self.slots[sink].threshold {
                Some(t) if claims && size > t.get() as u64 => 0,
                _ => u32::try_from(size).unwrap_or(u32::MAX),
            };
            self.enqueue(Job {
                hook: id,
                sink,
                attempts: 0,
                first_ms: None,
                last_ms: now,
                last_failure: None,
                last_pause_ms: None,
                weight,
                permit: Some(Permit {
                    _job: job,
                    _bytes: bytes.clone(),
                }),
            });
        }
    }

    /// A job is ready to run: park it behind its hook's check-in, or queue it for its sink.
    fn enqueue(&mut self, job: Job) {
        let hook = job.hook;
        let Some(h) = self.hooks.get_mut(&hook) else {
            return;
        };
        match h.claim {
            ClaimPhase::Ready => self.push_ready(job),
            ClaimPhase::Pending => h.parked.push(job),
            ClaimPhase::Needed => {
                h.claim = ClaimPhase::Pending;
                h.parked.push(job);
                self.check_in(hook);
            }
        }
    }

    fn check_in(&mut self, hook: u64) {
        let (Some(store), Some(h)) = (self.claim_store.clone(), self.hooks.get(&hook)) else {
            return;
        };
        let env = h.env.clone();
        let thresholds = h.thresholds.clone();
        let tx = self.tx.clone();
        let handle = self.tasks.spawn(async move {
            let result = store
                .claim_for(&env, thresholds)
                .await
                .map_err(Failure::from);
            metrics::counter!(m::CLAIM_CHECKINS, "result" => if result.is_ok() { "ok" } else { "failed" })
                .increment(1);
            let _ = tx.send(Report::Claimed { hook, result });
        });
        self.task_claim.insert(handle.id(), hook);
    }

    fn claimed(&mut self, hook: u64, result: Result<Option<Claim>, Failure>) {
        let Some(h) = self.hooks.get_mut(&hook) else {
            return;
        };
        let parked = std::mem::take(&mut h.parked);
        match result {
            Ok(claim) => {
                if let Some(c) = claim {
                    h.ctx = h.ctx.clone().with_claim(c);
                }
                h.claim = ClaimPhase::Ready;
                for job in parked {
                    self.push_ready(job);
                }
            }
            Err(failure) => {
                // Classified like any failed attempt of each of the hook's jobs; a retry
                // checks the body in again first.
                h.claim = ClaimPhase::Needed;
                let now = self.clock.now_ms();
                for mut job in parked {
                    job.attempts += 1;
                    job.first_ms.get_or_insert(now);
                    job.last_ms = now;
                    self.failed(job, copy(&failure), false);
                }
            }
        }
    }

    /// Queue a job for its sink. A job held by an open breaker keeps no intake permit:
    /// fresh hooks to other sinks flow.
    fn push_ready(&mut self, mut job: Job) {
        if self.breakers[job.sink].is_open() {
            job.permit = None;
        }
        self.ready[job.sink].push_back(job);
    }

    /// Start every attempt the limits and breakers allow.
    fn pump(&mut self, now: Instant) {
        let n = self.slots.len();
        for i in 0..n {
            // Once per HELD_SCAN, not on every message: a scan walks the whole queue.
            if self.breakers[i].is_open() && !self.ready[i].is_empty() && now >= self.held_scan[i] {
                self.expire_held(i);
                self.held_scan[i] = now + HELD_SCAN;
            }
        }
        // Round robin, one attempt per sink per turn, starting after the sink served last:
        // a sink with a deep queue (a burst of woken retries) cannot keep the global slots
        // from the others.
        loop {
            let mut started = false;
            for k in 0..n {
                let i = (self.next_sink + k) % n;
                let Some(next) = self.ready[i].front() else {
                    continue;
                };
                if !self.has_room(i, next.weight) {
                    continue;
                }
                let before = self.breakers[i].state();
                if !self.breakers[i].admit(now) {
                    continue;
                }
                self.breaker_moved(i, before);
                let job = self.ready[i].pop_front().expect("not empty");
                self.start(job);
                self.next_sink = (i + 1) % n;
                started = true;
            }
            if !started {
                return;
            }
        }
    }

    /// Whether sink `i` may start an attempt of `weight` body bytes now.
    fn has_room(&self, i: usize, weight: u32) -> bool {
        let slot = &self.slots[i];
        if !slot.counted() {
            return true;
        }
        let per_sink = self.config.sink_concurrency;
        match slot.window {
            None => {
                self.in_flight_total < self.config.concurrency
                    && per_sink.is_none_or(|c| self.in_flight[i] < c)
            }
            Some(w) => {
                let bytes = self.in_flight_bytes[i];
                self.in_flight[i] < per_sink.unwrap_or(w.deliveries.get())
                    && (bytes == 0 || bytes.saturating_add(weight as usize) <= w.bytes.get())
            }
        }
    }

    /// Dead-letter the jobs an open breaker held past the horizon, and those whose next
    /// attempt would be their last: the policy allows no retry after it (a run without
    /// retries), so holding them would only wait for a probe per `open_for` while the
    /// destination stays down: they fail now, as that attempt most likely would.
    fn expire_held(&mut self, sink: usize) {
        let horizon = i64::try_from(self.config.policy.max_elapsed.as_millis()).unwrap_or(i64::MAX);
        let now = self.clock.now_ms();
        let queue = std::mem::take(&mut self.ready[sink]);
        for job in queue {
            let start = job
                .first_ms
                .or_else(|| self.hooks.get(&job.hook).map(|h| h.submitted_ms))
                .unwrap_or(now);
            let last_chance = matches!(
                decide(
                    Class::Transient,
                    job.attempts.saturating_add(1),
                    start,
                    now,
                    &self.config.policy,
                    &mut rand::rng(),
                )
                .action,
                Action::DeadLetter { .. }
            );
            if last_chance || now.saturating_sub(start) >= horizon {
                let failure = job.last_failure.as_ref().map_or_else(
                    || {
                        Failure::transient(Reason(
                            "circuit breaker open: not attempted (the sink's last attempts \
                             failed in a row)"
                                .into(),
                        ))
                        .with_may_have_landed(Some(false))
                    },
                    copy,
                );
                self.dead_letter(job, failure);
            } else {
                self.ready[sink].push_back(job);
            }
        }
    }

    fn start(&mut self, mut job: Job) {
        let Some(h) = self.hooks.get(&job.hook) else {
            return;
        };
        let slot = &self.slots[job.sink];
        job.attempts += 1;
        let now = self.clock.now_ms();
        job.first_ms.get_or_insert(now);
        job.last_ms = now;
        let ctx = h
            .ctx
            .clone()
            .with_attempt(h.first_attempt.saturating_add(job.attempts - 1))
            .with_batch(slot.batched);
        let env = h.env.clone();
        let sink = slot.sink.clone();
        let name = slot.name.clone();
        let traceparent = h.traceparent.clone();
        // No attempt runs past the horizon: it could only dead-letter after it.
        let horizon = self.config.policy.max_elapsed;
        let elapsed = Duration::from_millis(
            u64::try_from(now.saturating_sub(job.first_ms.unwrap_or(now))).unwrap_or(0),
        );
        let timeout = self.config.attempt_timeout.min(
            horizon
                .saturating_sub(elapsed)
                .max(Duration::from_millis(1)),
        );
        let id = self.next_attempt;
        self.next_attempt += 1;
        if slot.counted() {
            self.in_flight[job.sink] += 1;
            if slot.window.is_some() {
                self.in_flight_bytes[job.sink] += job.weight as usize;
            } else {
                self.in_flight_total += 1;
            }
        }
        slot.metrics.attempts.increment(1);
        self.running.insert(id, job);
        let tx = self.tx.clone();
        // Boxed: the task then holds a pointer, not the attempt's whole state, which tokio
        // would otherwise copy several times on the way in and again when it completes.
        let handle = self.tasks.spawn(Box::pin(async move {
            let started = Instant::now();
            let result = attempt_in_trace(
                &name,
                &env,
                &ctx,
                traceparent.as_deref(),
                safe_deliver(&*sink, &env, &ctx, Some(timeout)),
            )
            .await;
            let _ = tx.send(Report::Done {
                attempt: id,
                result,
                took: started.elapsed(),
            });
        }));
        self.task_attempt.insert(handle.id(), id);
    }

    /// A task ended. A task that died (a panic outside the sink, which `safe_deliver`
    /// already catches, or in the claim store) fails its attempt or check-in transient, or
    /// reports its dead letter unstored, rather than leak the pair.
    fn joined(&mut self, joined: Result<(tokio::task::Id, ()), tokio::task::JoinError>) {
        let (id, died) = match joined {
            Ok((id, ())) => (id, false),
            Err(e) => (e.id(), !e.is_cancelled()),
        };
        let attempt = self.task_attempt.remove(&id);
        let dead_letter = self.task_dead_letter.remove(&id);
        let check_in = self.task_claim.remove(&id);
        if !died {
            return;
        }
        if let Some(hook) = check_in {
            // The store panicked: a failed check-in, retried, not a hook parked forever.
            let f = Failure::transient(Reason("the claim check-in task died".into()));
            self.claimed(hook, Err(f));
        }
        if let Some(attempt) = attempt {
            let f = Failure::transient(Reason("the attempt task died".into()));
            self.done(attempt, Err(f), Duration::ZERO);
        }
        if let Some(dl) = dead_letter {
            self.dead_lettered(dl, Err("the dead-letter task died".into()));
        }
    }

    fn done(&mut self, attempt: u64, result: Result<(), Failure>, took: Duration) {
        let Some(job) = self.running.remove(&attempt) else {
            return;
        };
        let slot = &self.slots[job.sink];
        if slot.counted() {
            self.in_flight[job.sink] -= 1;
            if slot.window.is_some() {
                self.in_flight_bytes[job.sink] -= job.weight as usize;
            } else {
                self.in_flight_total -= 1;
            }
        }
        slot.metrics.seconds.record(took.as_secs_f64());
        match result {
            Ok(()) => {
                let before = self.breakers[job.sink].state();
                self.breakers[job.sink].success();
                self.breaker_moved(job.sink, before);
                self.set_breaker_gauge(job.sink);
                self.finish(job, Outcome::Delivered);
            }
            Err(f) => self.failed(job, f, true),
        }
    }

    /// What to do after a failed attempt (or check-in, `from_sink = false`).
    fn failed(&mut self, mut job: Job, failure: Failure, from_sink: bool) {
        let first = job.first_ms.unwrap_or(job.last_ms);
        let decision = decide(
            failure.class(),
            job.attempts,
            first,
            self.clock.now_ms(),
            &self.config.policy,
            &mut rand::rng(),
        );
        let name = self.slots[job.sink].name.clone();
        record(&name, &decision);
        job.last_pause_ms = decision
            .pause
            .and_then(|p| NonZeroU32::new(u32::try_from(p.as_millis()).unwrap_or(u32::MAX)));
        if from_sink {
            let before = self.breakers[job.sink].state();
            if decision.counts_toward_breaker {
                let was_closed = !self.breakers[job.sink].is_open();
                self.breakers[job.sink].failure(Instant::now());
                if was_closed && self.breakers[job.sink].is_open() {
                    // Just opened: the jobs it now holds give their intake permits back.
                    for held in &mut self.ready[job.sink] {
                        held.permit = None;
                    }
                }
            } else {
                // The destination answered: it is up, whatever it thought of this hook.
                self.breakers[job.sink].success();
            }
            self.breaker_moved(job.sink, before);
            self.set_breaker_gauge(job.sink);
        }
        match decision.action {
            Action::Retry { delay, .. } if self.stopping.is_none() => {
                if failure.may_have_landed() == Some(true) {
                    self.slots[job.sink]
                        .metrics
                        .may_have_landed_retries
                        .increment(1);
                }
                job.last_failure = Some(failure);
                // A waiting job holds no intake permit and no concurrency slot.
                job.permit = None;
                let at = Instant::now() + delay;
                self.seq += 1;
                self.waiting.push(Reverse(Waiting {
                    at,
                    seq: self.seq,
                    job,
                }));
                self.waiting_changed();
            }
            Action::Retry { .. } => {
                job.last_failure = Some(failure);
                self.unfinished(job, false);
            }
            Action::DeadLetter { .. } => self.dead_letter(job, failure),
        }
    }

    fn wake_due(&mut self, now: Instant) {
        let mut woke = false;
        while self.waiting.peek().is_some_and(|Reverse(w)| w.at <= now) {
            let Reverse(w) = self.waiting.pop().expect("peeked");
            self.enqueue(w.job);
            woke = true;
        }
        if woke {
            self.waiting_changed();
        }
    }

    fn waiting_changed(&self) {
        self.waiting_count
            .store(self.waiting.len(), Ordering::Relaxed);
    }

    /// The waiting gauge: jobs in the retry queue and jobs an open breaker holds (they
    /// wait too, and an outage would otherwise show nothing waiting). Set when it moved.
    fn report_waiting(&mut self) {
        let held: usize = self
            .ready
            .iter()
            .zip(&self.breakers)
            .filter(|(_, b)| b.is_open())
            .map(|(q, _)| q.len())
            .sum();
        let n = self.waiting.len() + held;
        if n != self.waiting_reported {
            self.waiting_reported = n;
            metrics::gauge!(m::WAITING).set(n as f64);
        }
    }

    /// Log a breaker's move from `before` to its state now, naming the sink: an outage
    /// is never silent, and its end is visible too.
    fn breaker_moved(&self, sink: usize, before: BreakerState) {
        let after = self.breakers[sink].state();
        let name = &*self.slots[sink].name;
        let open_for_s = self.config.breaker.open_for.as_secs();
        match (before, after) {
            (BreakerState::Closed { .. }, BreakerState::Open { .. }) => tracing::warn!(
                target: "ankusa_dispatch",
                sink = name,
                failures = self.config.breaker.failures,
                open_for_s,
                "circuit breaker opened: the sink's attempts are held"
            ),
            (BreakerState::HalfOpen { .. }, BreakerState::Open { .. }) => tracing::warn!(
                target: "ankusa_dispatch",
                sink = name,
                open_for_s,
                "circuit breaker open again: the probe failed"
            ),
            (BreakerState::Open { .. }, BreakerState::HalfOpen { .. }) => tracing::info!(
                target: "ankusa_dispatch",
                sink = name,
                "circuit breaker half-open: one probe goes"
            ),
            (
                BreakerState::Open { .. } | BreakerState::HalfOpen { .. },
                BreakerState::Closed { .. },
            ) => tracing::info!(
                target: "ankusa_dispatch",
                sink = name,
                "circuit breaker closed: the sink's attempts flow again"
            ),
            _ => {}
        }
    }

    fn dead_letter(&mut self, job: Job, failure: Failure) {
        let error_class = failure.error_class();
        let Some(h) = self.hooks.get(&job.hook) else {
            return;
        };
        let name = self.slots[job.sink].name.clone();
        let first = job.first_ms.unwrap_or(job.last_ms);
        let outcome = |failure| Outcome::DeadLettered {
            failure,
            error_class,
            store_error: None,
        };
        let Some(dl) = self.dead_letter.clone() else {
            return self.finish(job, outcome(failure));
        };
        let info = DeadLetterInfo::new(&name, &failure, job.attempts, first, job.last_ms);
        let (env, ctx) = (h.env.clone(), h.ctx.clone());
        let delivery = self.delivery(job, outcome(failure));
        // The delivery stays here until the store answers: a shutdown that ends first
        // hands the pair back instead of losing it with the aborted task.
        let id = self.next_dead_letter;
        self.next_dead_letter += 1;
        self.pending_dead_letters.insert(
            id,
            PendingDeadLetter {
                delivery,
                dl,
                env,
                ctx,
                info,
                failures: 0,
                retry_at: None,
            },
        );
        self.store_dead_letter(id);
    }

    /// Start storing the pending dead letter `id`.
    fn store_dead_letter(&mut self, id: u64) {
        let Some(p) = self.pending_dead_letters.get_mut(&id) else {
            return;
        };
        p.retry_at = None;
        let (dl, env, ctx, info) = (p.dl.clone(), p.env.clone(), p.ctx.clone(), p.info.clone());
        let timeout = self.config.attempt_timeout;
        let tx = self.tx.clone();
        let handle = self.tasks.spawn(async move {
            let result = dl.store(&env, &ctx, &info, timeout).await;
            let _ = tx.send(Report::DeadLettered { id, result });
        });
        self.task_dead_letter.insert(handle.id(), id);
    }

    /// Store again the held dead letters whose backoff is over.
    fn wake_dead_letters(&mut self, now: Instant) {
        let due: Vec<u64> = self
            .pending_dead_letters
            .iter()
            .filter(|(_, p)| p.retry_at.is_some_and(|at| at <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            self.store_dead_letter(id);
        }
    }

    /// The dead letter `id` was stored, or not: report its delivery. One of a hook from a
    /// durable source that could not be stored is held instead and written again with
    /// backoff (1 s doubling to 60 s) while intake pauses: given back to the broker it
    /// would only come back, be delivered again to every sink and fail the same way.
    fn dead_lettered(&mut self, id: u64, result: Result<(), String>) {
        let Some(p) = self.pending_dead_letters.get_mut(&id) else {
            return;
        };
        let error = result.err();
        if let Some(e) = &error
            && p.delivery.settle.is_some()
            && self.stopping.is_none()
        {
            p.failures = p.failures.saturating_add(1);
            let backoff = dead_letter_backoff(p.failures);
            p.retry_at = Some(Instant::now() + backoff);
            let (hook_id, sink) = (p.env.id().to_owned(), p.info.sink.clone());
            self.held_changed();
            let held = self.held_dead_letters();
            self.log_dead_letter_error(|| {
                tracing::error!(
                    target: "ankusa_dispatch",
                    hook_id,
                    sink,
                    held,
                    retry_in_s = backoff.as_secs(),
                    error = %e,
                    "a dead letter cannot be stored: its hook is held unacknowledged and \
                     intake is paused until it is"
                );
            });
            return;
        }
        let p = self
            .pending_dead_letters
            .remove(&id)
            .expect("looked up above");
        let mut d = p.delivery;
        if let (Some(e), Outcome::DeadLettered { store_error, .. }) = (error, &mut d.outcome) {
            let (hook_id, sink) = (p.env.id(), &*p.info.sink);
            self.log_dead_letter_error(|| {
                tracing::error!(
                    target: "ankusa_dispatch",
                    hook_id,
                    sink,
                    error = %e,
                    "a dead letter could not be stored"
                );
            });
            *store_error = Some(e);
            // Neither delivered nor filed: the source must give the hook out again.
            HookSettle::mark_unfinished(&d.settle);
        }
        if p.failures > 0 {
            self.held_changed();
        }
        self.emit(d);
    }

    /// Log a dead letter's failure to be stored, at most once a minute: a full disk fails
    /// every one of them, and the log may be on that disk.
    fn log_dead_letter_error(&mut self, log: impl FnOnce()) {
        let now = Instant::now();
        if self
            .dead_letter_log
            .is_none_or(|at| now.duration_since(at) >= DEAD_LETTER_LOG_EVERY)
        {
            self.dead_letter_log = Some(now);
            log();
        }
    }

    /// Dead letters held after a failed store.
    fn held_dead_letters(&self) -> usize {
        self.pending_dead_letters
            .values()
            .filter(|p| p.failures > 0)
            .count()
    }

    /// Pause intake (and set the gauge) while any dead letter is held.
    fn held_changed(&self) {
        let held = self.held_dead_letters() > 0;
        self.intake_hold.set(held);
        metrics::gauge!(m::DEAD_LETTER_BLOCKED).set(if held { 1.0 } else { 0.0 });
    }

    /// Build the delivery for a finished job and retire it from its hook.
    fn delivery(&mut self, job: Job, outcome: Outcome) -> Delivery {
        let h = self.hooks.get_mut(&job.hook).expect("a job's hook lives");
        let envelope = h.env.clone();
        let replay_id = h.ctx.replay_id.clone();
        let settle = h.settle.clone();
        h.jobs_left -= 1;
        if h.jobs_left == 0 {
            HookSettle::mark_done(&settle);
            self.hooks.remove(&job.hook);
        }
        Delivery {
            envelope,
            sink: self.slots[job.sink].name.clone(),
            attempts: job.attempts,
            first_attempt_ms: job.first_ms.unwrap_or(job.last_ms),
            last_attempt_ms: job.last_ms,
            replay_id,
            retry_after_ms: match outcome {
                Outcome::DeadLettered { .. } => job.last_pause_ms.map(|ms| u64::from(ms.get())),
                Outcome::Delivered => None,
            },
            outcome,
            _permit: job.permit,
            settle,
        }
    }

    fn finish(&mut self, job: Job, outcome: Outcome) {
        let d = self.delivery(job, outcome);
        self.emit(d);
    }

    fn emit(&mut self, d: Delivery) {
        if let Some(slot) = self.slots.iter().find(|s| Arc::ptr_eq(&s.name, &d.sink)) {
            match &d.outcome {
                Outcome::Delivered => slot.metrics.delivered(),
                Outcome::DeadLettered { failure, .. } => {
                    slot.metrics.dead_lettered(failure.class())
                }
            }
        }
        // A caller that dropped its stream no longer wants outcomes.
        let _ = self.out.send(d);
    }

    fn set_breaker_gauge(&self, sink: usize) {
        let open = if self.breakers[sink].is_open() {
            1.0
        } else {
            0.0
        };
        self.slots[sink].metrics.breaker_open.set(open);
    }

    fn unfinished(&mut self, job: Job, was_in_flight: bool) {
        let Some(h) = self.hooks.get_mut(&job.hook) else {
            return;
        };
        let u = Unfinished {
            envelope: h.env.clone(),
            sink: self.slots[job.sink].name.clone(),
            attempts: job.attempts,
            last_failure: job.last_failure,
            was_in_flight,
            replay_id: h.ctx.replay_id.clone(),
            retry_after_ms: job.last_pause_ms.map(|ms| u64::from(ms.get())),
        };
        HookSettle::mark_unfinished(&h.settle);
        h.jobs_left -= 1;
        if h.jobs_left == 0 {
            self.hooks.remove(&job.hook);
        }
        if let Some(s) = &mut self.stopping {
            s.unfinished.push(u);
        }
    }

    fn begin_shutdown(&mut self, grace: Duration, reply: oneshot::Sender<Vec<Unfinished>>) {
        let deadline = Instant::now()
            .checked_add(grace)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        if let Some(s) = &mut self.stopping {
            // A second shutdown: the first caller gets the list, this one an empty list
            // when it is ready; the shorter grace wins.
            s.deadline = s.deadline.min(deadline);
            s.more_replies.push(reply);
            return;
        }
        self.stopping = Some(Stopping {
            deadline,
            reply,
            more_replies: Vec::new(),
            unfinished: Vec::new(),
        });
        // Nothing new starts: every job not in flight is handed back now.
        let mut idle: Vec<Job> = Vec::new();
        for q in &mut self.ready {
            idle.extend(q.drain(..));
        }
        idle.extend(self.waiting.drain().map(|Reverse(w)| w.job));
        for h in self.hooks.values_mut() {
            idle.append(&mut h.parked);
        }
        self.waiting_changed();
        self.report_waiting();
        for job in idle {
            self.unfinished(job, false);
        }
        // Held dead letters go back to their source now (nack), not at the deadline.
        let held: Vec<u64> = self
            .pending_dead_letters
            .iter()
            .filter(|(_, p)| p.retry_at.is_some())
            .map(|(&id, _)| id)
            .collect();
        for id in held {
            if let Some(p) = self.pending_dead_letters.remove(&id) {
                self.hand_back(p);
            }
        }
        self.held_changed();
    }

    /// A dead letter still pending at a shutdown goes back with its last failure (its
    /// record may or may not have been written: a replay is a duplicate, never a loss).
    fn hand_back(&mut self, p: PendingDeadLetter) {
        let d = p.delivery;
        HookSettle::mark_unfinished(&d.settle);
        let last_failure = match d.outcome {
            Outcome::DeadLettered { failure, .. } => Some(failure),
            Outcome::Delivered => None,
        };
        if let Some(s) = &mut self.stopping {
            s.unfinished.push(Unfinished {
                envelope: d.envelope,
                sink: d.sink,
                attempts: d.attempts,
                last_failure,
                was_in_flight: false,
                replay_id: d.replay_id,
                retry_after_ms: d.retry_after_ms,
            });
        }
    }

    fn finish_shutdown(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<In>,
        reports: &mut mpsc::UnboundedReceiver<Report>,
    ) {
        // What was already sent is handled, not dropped with the channels: a submit that
        // raced the shutdown is handed back, an attempt that answered is reported.
        rx.close();
        while let Ok(msg) = rx.try_recv() {
            self.take(msg);
        }
        while let Ok(report) = reports.try_recv() {
            self.handle(report);
        }
        self.tasks.abort_all();
        let running: Vec<Job> = self.running.drain().map(|(_, j)| j).collect();
        for job in running {
            self.unfinished(job, true);
        }
        // Dead letters still being stored go back.
        let pending: Vec<PendingDeadLetter> =
            self.pending_dead_letters.drain().map(|(_, p)| p).collect();
        for p in pending {
            self.hand_back(p);
        }
        self.held_changed();
        if let Some(s) = self.stopping.take() {
            let _ = s.reply.send(s.unfinished);
            for r in s.more_replies {
                let _ = r.send(Vec::new());
            }
        }
    }
}

/// A dead letter on its way to the store, or held to be written again.
struct PendingDeadLetter {
    delivery: Delivery,
    dl: DeadLetter,
    env: Arc<Envelope>,
    ctx: Ctx,
    info: DeadLetterInfo,
    /// Failed stores so far.
    failures: u32,
    /// Held: stored again at this time. `None` while a store runs.
    retry_at: Option<Instant>,
}

/// A held dead letter's failure is logged at most this often.
const DEAD_LETTER_LOG_EVERY: Duration = Duration::from_secs(60);

/// A copy of `f` for another job: same class and landing, the reason as text.
fn copy(f: &Failure) -> Failure {
    Failure::new(f.class(), Reason(f.reason_chain())).with_may_have_landed(f.may_have_landed())
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
