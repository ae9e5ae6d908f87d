//! The dispatcher's metrics, through the `metrics` facade. Every name and label is listed
//! here; handles are made once per sink, so an attempt costs no label allocation.

pub use crate::policy::CONFIG_ERRORS_METRIC as CONFIG_ERRORS;
use ankusa_sink_core::Class;
use metrics::{Counter, Gauge, Histogram};

/// Attempts started, `{sink}`.
pub const ATTEMPTS: &str = "ankusa_dispatch_attempts_total";
/// Final outcomes, `{sink, outcome = delivered | dead_lettered, class}` (`class` is the last
/// failure's class, `none` when delivered).
pub const OUTCOMES: &str = "ankusa_dispatch_outcomes_total";
/// Attempt latency in seconds, `{sink}`.
pub const ATTEMPT_SECONDS: &str = "ankusa_dispatch_attempt_duration_seconds";
/// 1 while the sink's circuit breaker is open or half-open, `{sink}`.
pub const BREAKER_OPEN: &str = "ankusa_dispatch_breaker_open";
/// (hook, sink) jobs waiting: in the retry queue, or held by an open circuit breaker.
pub const WAITING: &str = "ankusa_dispatch_waiting_retry";
/// Tenants with hooks waiting for an attempt on the sink, `{sink}`: each sink serves them
/// round robin.
pub const TENANTS_WAITING: &str = "ankusa_dispatch_tenants_waiting";
/// Attempts in flight the sink may have now, `{sink}`: its adaptive limit as it moves, or
/// its fixed one (its own, its window's, or the shared `concurrency`).
pub const CONCURRENCY_LIMIT: &str = "ankusa_dispatch_concurrency_limit";
/// 1 while dead letters of hooks from a durable source cannot be stored: those hooks are
/// held unacknowledged, their dead letters written again with backoff, and intake is
/// paused; 0 otherwise.
pub const DEAD_LETTER_BLOCKED: &str = "ankusa_dispatch_dead_letter_blocked";
/// Retries of a failed attempt whose message may have reached the destination (the sink
/// said so: [`Failure::may_have_landed`](ankusa_sink_core::Failure::may_have_landed) is
/// `Some(true)`), `{sink}`: each may deliver the hook a second time, under the same
/// idempotency key.
pub const MAY_HAVE_LANDED_RETRIES: &str = "ankusa_dispatch_may_have_landed_retries_total";
/// 1 while a durable source's window is full (`--max-unacked` records or
/// `--max-unacked-bytes` handed out and not settled): reading for that sink waits until its
/// records are delivered or dead-lettered; 0 otherwise. `{sink}`: the sink that source is
/// read for, `*` for a source every sink shares.
pub const SOURCE_WINDOW_FULL: &str = "ankusa_source_window_full";
/// Records the source read for a sink is behind, as its broker reports it (Kafka: the
/// group's lag over the assigned partitions; JetStream: the consumer's `num_pending`;
/// RabbitMQ: the queue's ready messages), `{sink}` as for [`SOURCE_WINDOW_FULL`]. Polled
/// every 5 s; 0 until a source reports it (and for a source that cannot say).
pub const SOURCE_LAG: &str = "ankusa_source_lag";
/// (hook, sink) pairs written to the sink's park destination (their next attempt was at
/// least the park threshold away), `{sink}`.
pub const PARKED: &str = "ankusa_dispatch_parked_total";
/// (hook, sink) pairs read back from the sink's park destination, `{sink}`.
pub const UNPARKED: &str = "ankusa_dispatch_unparked_total";
/// Dead letters stored in the dead-letter destination, `{sink, class}` (a pair given up on
/// with nowhere to store it, or whose store failed, is not counted: see
/// [`DEAD_LETTER_ERRORS`]).
pub const DEAD_LETTERS: &str = "ankusa_dead_letters_total";
/// Dead letters the destination refused or failed to take, each try counted (a held one is
/// tried again), `{sink}`.
pub const DEAD_LETTER_ERRORS: &str = "ankusa_dead_letter_errors_total";
/// Attempts that panicked in the sink, `{sink}`: a bug in the sink, logged at ERROR once
/// per hook; the (hook, sink) pair is retried and given up on (permanent, "sink
/// panicked") at its third panic. Neither opens the breaker nor counts as back pressure.
pub const SINK_PANICS: &str = "ankusa_sink_panics_total";
/// Claim check-ins, `{result = ok | failed}`.
pub const CLAIM_CHECKINS: &str = "ankusa_dispatch_claim_checkins_total";

/// One sink's metric handles.
#[derive(Debug)]
pub(crate) struct SinkMetrics {
    pub(crate) attempts: Counter,
    pub(crate) seconds: Histogram,
    pub(crate) breaker_open: Gauge,
    pub(crate) tenants_waiting: Gauge,
    pub(crate) concurrency_limit: Gauge,
    pub(crate) may_have_landed_retries: Counter,
    pub(crate) parked: Counter,
    pub(crate) unparked: Counter,
    pub(crate) dead_letter_errors: Counter,
    pub(crate) panics: Counter,
    delivered: Counter,
    dead: [Counter; 4],
    stored: [Counter; 4],
}

impl SinkMetrics {
    pub(crate) fn new(sink: &str) -> Self {
        let dead = |class: &'static str| metrics::counter!(OUTCOMES, "sink" => sink.to_owned(), "outcome" => "dead_lettered", "class" => class);
        let stored = |class: &'static str| metrics::counter!(DEAD_LETTERS, "sink" => sink.to_owned(), "class" => class);
        let m = SinkMetrics {
            attempts: metrics::counter!(ATTEMPTS, "sink" => sink.to_owned()),
            seconds: metrics::histogram!(ATTEMPT_SECONDS, "sink" => sink.to_owned()),
            breaker_open: metrics::gauge!(BREAKER_OPEN, "sink" => sink.to_owned()),
            tenants_waiting: metrics::gauge!(TENANTS_WAITING, "sink" => sink.to_owned()),
            concurrency_limit: metrics::gauge!(CONCURRENCY_LIMIT, "sink" => sink.to_owned()),
            may_have_landed_retries: metrics::counter!(MAY_HAVE_LANDED_RETRIES, "sink" => sink.to_owned()),
            parked: metrics::counter!(PARKED, "sink" => sink.to_owned()),
            unparked: metrics::counter!(UNPARKED, "sink" => sink.to_owned()),
            delivered: metrics::counter!(OUTCOMES, "sink" => sink.to_owned(), "outcome" => "delivered", "class" => "none"),
            dead: [
                dead("permanent"),
                dead("config"),
                dead("retry_after"),
                dead("transient"),
            ],
            stored: [
                stored("permanent"),
                stored("config"),
                stored("retry_after"),
                stored("transient"),
            ],
            dead_letter_errors: metrics::counter!(DEAD_LETTER_ERRORS, "sink" => sink.to_owned()),
            panics: metrics::counter!(SINK_PANICS, "sink" => sink.to_owned()),
        };
        // Present from the start, so a dashboard sees the sink and its config errors at 0.
        m.breaker_open.set(0.0);
        // Not full until a source says so (`forward` keeps it per sink's source).
        metrics::gauge!(SOURCE_WINDOW_FULL, "sink" => sink.to_owned()).set(0.0);
        metrics::gauge!(SOURCE_LAG, "sink" => sink.to_owned()).set(0.0);
        m.tenants_waiting.set(0.0);
        metrics::counter!(CONFIG_ERRORS, "sink" => sink.to_owned()).increment(0);
        m.may_have_landed_retries.increment(0);
        m.parked.increment(0);
        m.unparked.increment(0);
        m.dead_letter_errors.increment(0);
        m.panics.increment(0);
        for c in &m.stored {
            c.increment(0);
        }
        m
    }

    pub(crate) fn delivered(&self) {
        self.delivered.increment(1);
    }

    pub(crate) fn dead_lettered(&self, class: Class) {
        self.dead[class_index(class)].increment(1);
    }

    /// A dead letter of `class` was stored.
    pub(crate) fn stored(&self, class: Class) {
        self.stored[class_index(class)].increment(1);
    }
}

/// The `class` label's slot: `permanent`, `config`, `retry_after` (both throttles),
/// `transient`.
fn class_index(class: Class) -> usize {
    match class {
        Class::Permanent => 0,
        Class::Config => 1,
        Class::RetryAfter(_) | Class::Throttled => 2,
        Class::Transient => 3,
    }
}
