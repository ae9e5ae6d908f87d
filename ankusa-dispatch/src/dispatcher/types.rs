//! The dispatcher's public values: its config, its errors, a hook on its way in, and what
//! becomes of each (hook, sink) pair.

use super::scheduler::Permit;
use crate::BreakerConfig;
use crate::policy::DispatchPolicy;
use ankusa_sink_core::{Claim, Envelope, Failure, Sink};
use ankusa_source::{Ack, Settlement};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
/// The most attempts in flight any concurrency takes (`concurrency`, `sink_concurrency`,
/// `tenant_concurrency`, a sink's [`Concurrency`]): 1,000,000. More is a typo, and past
/// what a semaphore can count it would stop the scheduler.
pub const MAX_CONCURRENCY: usize = 1_000_000;

/// The rates a sink's `rate_per_second` takes: 0.001 (one attempt in 1,000 s) to 1,000,000.
pub const RATE_PER_SECOND: std::ops::RangeInclusive<f64> = 0.001..=1_000_000.0;

/// The longest a breaker stays open before its probe ([`BreakerConfig::open_for`]): a day,
/// the default horizon. An open breaker past the horizon only holds hooks that dead-letter.
pub const MAX_BREAKER_OPEN: Duration = Duration::from_secs(86_400);

/// The dispatcher's knobs.
#[derive(Debug)]
#[non_exhaustive]
pub struct DispatchConfig {
    /// Retry policy, the retry-after cap and the horizon.
    pub policy: DispatchPolicy,
    /// Attempts in flight at once over every sink without a window of its own (see
    /// `sink_windows`; batching sinks' attempts are not counted). 1 to
    /// [`MAX_CONCURRENCY`], checked at build, as are `sink_concurrency` and
    /// `tenant_concurrency`.
    pub concurrency: usize,
    /// Attempts in flight at once per sink (the attempts of a batching sink without a window
    /// not counted); for a sink with a window, this replaces the window's delivery count.
    pub sink_concurrency: Option<usize>,
    /// Attempts of one tenant in flight at once per sink, at most (a batching sink's not
    /// counted); `None` (the default): no cap. Whatever the cap, each sink serves the
    /// tenants with waiting hooks round robin.
    pub tenant_concurrency: Option<u32>,
    /// Whether a sink that declares a pipeline window ([`Capabilities::in_flight`](ankusa_sink_core::Capabilities::in_flight)) runs on it,
    /// outside `concurrency` (default `true`). `false`: every sink shares `concurrency`.
    pub sink_windows: bool,
    /// An attempt that has not answered after this long is a transient failure.
    pub attempt_timeout: Duration,
    /// The per-sink circuit breaker.
    pub breaker: BreakerConfig,
    /// (hook, sink) jobs of one sink admitted before their first attempt has settled:
    /// what [`Dispatcher::submit`](super::Dispatcher::submit) waits on, for each sink of
    /// the hook (every sink has an intake of its own, so a slow or failing sink never holds
    /// up hooks for the others).
    /// Default: `concurrency` plus the sink's own window or concurrency, plus 4,096 more:
    /// the read-ahead round robin over tenants reaches, so that one tenant's backlog does
    /// not delay another's hooks (bounded by `intake_bytes` too).
    pub intake: Option<usize>,
    /// Body bytes of one sink's jobs admitted before their first attempt has settled, at
    /// most (a larger body is admitted alone). Default: 64 MiB, or twice the sink's window
    /// bytes when that is more.
    pub intake_bytes: Option<usize>,
    /// Which provider headers every attempt forwards, and how many
    /// ([`HeaderPolicy`](ankusa_message::HeaderPolicy): an allow-list, or the default
    /// deny-list; the caps). `None`: the default policy. A sink's own
    /// ([`SinkDispatch::header_policy`]) wins.
    pub header_policy: Option<ankusa_message::HeaderPolicy>,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            policy: DispatchPolicy::default(),
            concurrency: 32,
            sink_concurrency: None,
            tenant_concurrency: None,
            sink_windows: true,
            attempt_timeout: Duration::from_secs(30),
            breaker: BreakerConfig::default(),
            intake: None,
            intake_bytes: None,
            header_policy: None,
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

    /// Attempts of one tenant in flight at once per sink, at most; 0: no cap.
    pub fn with_tenant_concurrency(mut self, n: u32) -> Self {
        self.tenant_concurrency = (n > 0).then_some(n);
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

    /// The header policy of every attempt (see [`header_policy`](Self::header_policy)).
    pub fn with_header_policy(mut self, policy: ankusa_message::HeaderPolicy) -> Self {
        self.header_policy = Some(policy);
        self
    }

    /// Jobs of one sink admitted before their first attempt settles.
    pub fn with_intake(mut self, n: usize) -> Self {
        self.intake = Some(n);
        self
    }

    /// Body bytes of one sink's jobs admitted before their first attempts settle.
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
    /// Settings were given for a sink that was not added.
    #[error("settings are given for `{0}`, which is not a sink")]
    NoSuchSink(String),
    /// A sink's `rate_per_second` is outside [`RATE_PER_SECOND`].
    #[error("sink `{0}`: rate_per_second must be a number from 0.001 to 1000000")]
    BadRate(String),
    /// A setting is outside its range: `key` names it (`concurrency`,
    /// `breaker.open_for`, ...), `sink` the sink whose own setting it is.
    #[error("{}`{key}` must be {range}", sink.as_ref().map(|s| format!("sink `{s}`: ")).unwrap_or_default())]
    OutOfRange {
        /// The sink, for a sink's own setting ([`SinkDispatch`]).
        sink: Option<String>,
        /// The setting.
        key: &'static str,
        /// Its range, in words.
        range: &'static str,
    },
}

/// A sink's own concurrency ([`DispatcherBuilder::sink_concurrency`](crate::DispatcherBuilder::sink_concurrency)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Concurrency {
    /// At most this many attempts in flight (at least 1).
    Fixed(usize),
    /// A limit that adapts, from 1 up to `max`: one more per round trip while the
    /// destination's round-trip time holds, a tenth less on back pressure (a throttle, a
    /// transient failure: a timeout, a 5xx) or when the round trip grows over a tenth above
    /// its recent low (requests queueing there). `ankusa_dispatch_concurrency_limit{sink}`
    /// shows it.
    Adaptive {
        /// The most it grows to (the specification's default: 256).
        max: usize,
    },
}

/// How the dispatcher runs one sink, over the dispatcher-wide [`DispatchConfig`]
/// ([`DispatcherBuilder::sink_settings`](crate::DispatcherBuilder::sink_settings); a sink
/// file's `[dispatch]` table). `None` fields keep the dispatcher's own.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SinkDispatch {
    /// The sink's own concurrency, fixed or adaptive.
    pub concurrency: Option<Concurrency>,
    /// Attempts started per second, at most (a token bucket holding a tenth of a second's
    /// worth): a hook over the rate waits, it is not a failure.
    pub rate_per_second: Option<f64>,
    /// Attempts of one tenant in flight on this sink, at most (0: no cap).
    pub tenant_concurrency: Option<u32>,
    /// This sink's circuit breaker.
    pub breaker: Option<BreakerConfig>,
    /// Where a (hook, sink) pair whose next attempt is far off waits instead of in memory.
    pub park: Option<Park>,
    /// Which provider headers this sink's attempts forward, and how many (over the
    /// dispatcher's [`DispatchConfig::header_policy`]).
    pub header_policy: Option<ankusa_message::HeaderPolicy>,
}

/// Parking for one sink: a (hook, sink) pair from a durable source whose next attempt is
/// at least `after` away is written to `sink` (a durable destination: a Kafka retry
/// topic, a JetStream subject, a RabbitMQ queue) with its retry state, and only then
/// counts as finished for its source ([`Outcome::Parked`]): the source's record is
/// acknowledged, its window place freed. The caller reads the park destination back
/// (`forward::Forward::park_source`): each record resumes at its attempt count, waits for
/// its not-before, and keeps its horizon from the first attempt. A park that fails leaves
/// the pair waiting in memory as before (nothing is lost).
#[derive(Debug, Clone)]
pub struct Park {
    pub(super) sink: Arc<dyn Sink>,
    pub(super) after: Duration,
}

impl Park {
    /// Park in `sink` the pairs whose next attempt is at least `after` away.
    pub fn new(sink: Arc<dyn Sink>, after: Duration) -> Self {
        Park { sink, after }
    }

    /// The threshold.
    pub fn after(&self) -> Duration {
        self.after
    }
}

impl PartialEq for Park {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.sink, &other.sink) && self.after == other.after
    }
}

impl SinkDispatch {
    /// The sink's own concurrency.
    pub fn with_concurrency(mut self, c: Concurrency) -> Self {
        self.concurrency = Some(c);
        self
    }

    /// Attempts started per second, at most (within [`RATE_PER_SECOND`], checked at
    /// build: [`BuildError::BadRate`]).
    pub fn with_rate_per_second(mut self, per_s: f64) -> Self {
        self.rate_per_second = Some(per_s);
        self
    }

    /// Attempts of one tenant in flight on this sink, at most; 0: no cap.
    pub fn with_tenant_concurrency(mut self, n: u32) -> Self {
        self.tenant_concurrency = Some(n);
        self
    }

    /// This sink's circuit breaker.
    pub fn with_breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// Park this sink's long waits ([`Park`]).
    pub fn with_park(mut self, park: Park) -> Self {
        self.park = Some(park);
        self
    }

    /// This sink's header policy: an allow-list of the provider headers it forwards
    /// (`HeaderPolicy::from(ForwardHeaders::only([...])?)`), or other caps.
    pub fn with_header_policy(mut self, policy: ankusa_message::HeaderPolicy) -> Self {
        self.header_policy = Some(policy);
        self
    }
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
    pub(super) envelope: Arc<Envelope>,
    pub(super) route: Option<String>,
    pub(super) sink: Option<String>,
    pub(super) replay_id: Option<String>,
    pub(super) traceparent: Option<String>,
    pub(super) tracestate: Option<String>,
    pub(super) claim: Option<Claim>,
    pub(super) first_attempt: u32,
    pub(super) ack: Option<Ack>,
    /// Resumed from a park: (Unix ms of the first attempt, Unix ms before which the next
    /// attempt must not start).
    pub(super) resume: Option<(i64, i64)>,
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
            tracestate: None,
            claim: None,
            first_attempt: 1,
            ack: None,
            resume: None,
        }
    }

    /// A hook resumed from a park: its first attempt was at `first_attempt_ms` (Unix ms:
    /// the horizon counts from it) and its next must not start before `not_before_ms`.
    /// Set [`first_attempt`](Self::first_attempt) to the attempts so far plus one.
    pub fn resume(mut self, first_attempt_ms: i64, not_before_ms: i64) -> Self {
        self.resume = Some((first_attempt_ms, not_before_ms));
        self
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

    /// The hook's stored W3C trace context: attempts join that trace (each attempt is a
    /// new span in it, which the sink sends on as `traceparent`). A malformed one is
    /// ignored: the attempts start a trace of their own.
    pub fn traceparent(mut self, tp: impl Into<String>) -> Self {
        self.traceparent = Some(tp.into());
        self
    }

    /// The hook's stored W3C `tracestate`, sent on beside every attempt's `traceparent`
    /// when it is well formed (and the hook has a valid [`traceparent`](Self::traceparent)).
    pub fn tracestate(mut self, ts: impl Into<String>) -> Self {
        self.tracestate = Some(ts.into());
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
    /// Its next attempt was far off: it was written to the sink's park destination with
    /// its retry state ([`Park`]) and is finished here; it resumes when read back.
    Parked {
        /// The last failure.
        failure: Failure,
        /// Unix ms before which its next attempt does not start.
        not_before_ms: i64,
    },
    /// Dispatch gave up: the failure decided it, or the horizon or the policy ended it.
    DeadLettered {
        /// The last failure (`failure.class().error_class()` is how it is filed).
        failure: Failure,
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
    pub(super) _permit: Option<Permit>,
    // The hook's source acknowledgement, settled when its last holder is dropped: after
    // the caller has seen every outcome of the hook.
    pub(super) settle: Option<Arc<HookSettle>>,
}

/// A hook's source acknowledgement, shared by the hook and its deliveries; settled when
/// the last of them is dropped.
#[derive(Debug)]
pub(super) struct HookSettle {
    // Behind a mutex only for `Sync` (a source's handle need not be): it is taken once,
    // in `drop`, with `&mut`.
    pub(super) ack: std::sync::Mutex<Option<Ack>>,
    /// Every pair got its final outcome (set when the last one does): a hook dropped
    /// before that (a scheduler that died) is released, never acknowledged.
    pub(super) done: AtomicBool,
    /// Some pair ended unfinished, or its dead letter was not stored.
    pub(super) unfinished: AtomicBool,
}

impl HookSettle {
    pub(super) fn new(ack: Option<Ack>) -> Option<Arc<Self>> {
        ack.map(|a| {
            Arc::new(HookSettle {
                ack: std::sync::Mutex::new(Some(a)),
                done: AtomicBool::new(false),
                unfinished: AtomicBool::new(false),
            })
        })
    }

    pub(super) fn mark_done(this: &Option<Arc<Self>>) {
        if let Some(s) = this {
            s.done.store(true, Ordering::Relaxed);
        }
    }

    pub(super) fn mark_unfinished(this: &Option<Arc<Self>>) {
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
pub struct Deliveries(pub(super) mpsc::UnboundedReceiver<Delivery>);

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
