//! One sink in the scheduler: what it is, its ready jobs, what it has in flight, and what
//! decides whether its next attempt may start (its admission) and what an answer changes.

use super::adaptive::Adaptive;
use super::fair::Ready;
use super::rate::Bucket;
use super::scheduler::{HELD_SCAN, Job};
use super::types::{DispatchConfig, Park};
use crate::breaker::{Breaker, State as BreakerState};
use crate::metrics as m;
use ankusa_sink_core::{Class, Failure, InFlight, Sink};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A sink's own concurrency.
#[derive(Debug)]
pub(super) enum Limit {
    Fixed(usize),
    Adaptive(Adaptive),
}

impl Limit {
    pub(super) fn current(&self) -> usize {
        match self {
            Limit::Fixed(n) => *n,
            Limit::Adaptive(a) => a.limit(),
        }
    }
}

/// Why a sink's next attempt may not start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// No job is ready.
    Idle,
    /// Every tenant with a ready job has its cap of attempts in flight.
    TenantCap,
    /// The shared `concurrency`, or `sink_concurrency`, is used up.
    Concurrency,
    /// The sink's window is full: its deliveries, or its bytes.
    Window,
    /// The sink's own limit (fixed or adaptive) is reached.
    Limit,
    /// The destination asked for a pause that ends then.
    Paused { until: Instant },
    /// The rate limit's bucket is empty: a token comes in `wait`.
    Rate { wait: Duration },
    /// The breaker holds the sink's attempts (open, or its one probe is out).
    BreakerOpen,
}

/// What an attempt's answer was, for the sink's own state.
pub(super) enum Answer<'a> {
    Delivered,
    Failed {
        failure: &'a Failure,
        /// The policy counts it toward the breaker (otherwise it is neutral there).
        counts_toward_breaker: bool,
    },
    /// The sink panicked. Neither toward the breaker nor the adaptive limit: a panic is a
    /// bug in the sink (often one hook's input), not the destination failing or pushing
    /// back, and counted it would let one bad hook hold a healthy sink's breaker open for
    /// the whole horizon. Not a success either: a panicking probe keeps the breaker as it
    /// is (`neutral`), so a sink that panics on everything does not close it.
    Panicked,
}

/// A sink in the scheduler.
pub(super) struct SinkState {
    pub(super) name: Arc<str>,
    pub(super) sink: Arc<dyn Sink>,
    pub(super) batched: bool,
    /// The sink's own pipeline window, when it has one and windows are on.
    pub(super) window: Option<InFlight>,
    pub(super) threshold: Option<NonZeroUsize>,
    pub(super) metrics: m::SinkMetrics,
    /// The sink's own concurrency, when it has one: it then runs on it, outside the shared
    /// `concurrency` and instead of its window's delivery count.
    pub(super) limit: Option<Limit>,
    /// The sink's rate limit, if it has one.
    pub(super) bucket: Option<Bucket>,
    /// Attempts of one tenant in flight on it, at most (its own, or the dispatcher's).
    pub(super) tenant_concurrency: Option<u32>,
    /// Where its long waits are parked, if anywhere.
    pub(super) park: Option<Park>,
    /// The header policy its attempts carry, when not the default.
    pub(super) header_policy: Option<ankusa_message::HeaderPolicy>,
    /// Its jobs ready to start, per tenant.
    pub(super) ready: Ready,
    breaker: Breaker,
    /// Attempts in flight (counted ones only: see [`counted`](Self::counted)).
    in_flight: usize,
    /// Body bytes in flight (windowed sinks only).
    in_flight_bytes: usize,
    /// When its held jobs are next checked against the horizon.
    held_scan: Instant,
    /// The value last set on its tenants-waiting gauge.
    tenants_reported: usize,
}

impl SinkState {
    /// A sink as built: nothing ready, nothing in flight.
    #[expect(clippy::too_many_arguments, reason = "one constructor, called once")]
    pub(super) fn new(
        name: Arc<str>,
        sink: Arc<dyn Sink>,
        batched: bool,
        window: Option<InFlight>,
        threshold: Option<NonZeroUsize>,
        metrics: m::SinkMetrics,
        limit: Option<Limit>,
        bucket: Option<Bucket>,
        tenant_concurrency: Option<u32>,
        park: Option<Park>,
        breaker: Breaker,
    ) -> Self {
        SinkState {
            name,
            sink,
            batched,
            window,
            threshold,
            metrics,
            limit,
            bucket,
            tenant_concurrency,
            park,
            header_policy: None,
            ready: Ready::default(),
            breaker,
            in_flight: 0,
            in_flight_bytes: 0,
            held_scan: Instant::now(),
            tenants_reported: 0,
        }
    }

    /// Whether this sink's attempts count against a limit: a batching sink without a
    /// window is bounded by its own batcher alone; with one, it runs on its window like any
    /// pipelining sink.
    fn counted(&self) -> bool {
        !self.batched || self.window.is_some() || self.limit.is_some()
    }

    /// Whether its attempts count against the shared `concurrency`.
    fn shares_concurrency(&self) -> bool {
        self.window.is_none() && self.limit.is_none()
    }

    /// The cap on one tenant's attempts in flight (never on a batching sink, whose
    /// attempts wait in its batcher).
    fn tenant_cap(&self) -> Option<u32> {
        self.tenant_concurrency.filter(|_| !self.batched)
    }

    /// Take the next job if it may start at `now`, counted in flight (`shared`: attempts
    /// in flight over the sinks that share `concurrency`); otherwise why not. The checks
    /// run in this order, each only if the last passed: the rate bucket refills and the
    /// breaker lets its probe go only when the attempt would otherwise start.
    // Inlined into `pump`, its one caller: without it the scheduler ran ~1 % more
    // instructions than before the split (callgrind, the dispatcher bench).
    #[inline]
    pub(super) fn admit(
        &mut self,
        now: Instant,
        shared: &mut usize,
        config: &DispatchConfig,
    ) -> Result<Job, Refused> {
        let cap = self.tenant_cap();
        let Some(next) = self.ready.peek(cap) else {
            return Err(if self.ready.is_empty() {
                Refused::Idle
            } else {
                Refused::TenantCap
            });
        };
        self.room(next.weight, *shared, config)?;
        if let Some(Limit::Adaptive(a)) = &self.limit
            && now < a.ready_at()
        {
            return Err(Refused::Paused {
                until: a.ready_at(),
            });
        }
        if let Some(b) = &mut self.bucket
            && !b.ready(now)
        {
            return Err(Refused::Rate {
                wait: b.next_token().saturating_duration_since(now),
            });
        }
        let before = self.breaker.state();
        if !self.breaker.admit(now) {
            return Err(Refused::BreakerOpen);
        }
        self.breaker_moved(before, config);
        let job = self.ready.pop(cap).expect("peeked");
        if self.counted() {
            self.in_flight += 1;
            if self.window.is_some() {
                self.in_flight_bytes += job.weight as usize;
            }
            if self.shares_concurrency() {
                *shared += 1;
            }
        }
        let in_flight = self.in_flight;
        if let Some(Limit::Adaptive(a)) = &mut self.limit {
            a.started(in_flight);
        }
        if let Some(b) = &mut self.bucket {
            b.take();
        }
        self.metrics.attempts.increment(1);
        Ok(job)
    }

    /// Whether an attempt of `weight` body bytes fits now.
    fn room(&self, weight: u32, shared: usize, config: &DispatchConfig) -> Result<(), Refused> {
        if !self.counted() {
            return Ok(());
        }
        let bytes_fit = |w: InFlight| {
            self.in_flight_bytes == 0
                || self.in_flight_bytes.saturating_add(weight as usize) <= w.bytes.get()
        };
        let per_sink = config.sink_concurrency;
        if let Some(limit) = &self.limit {
            if self.in_flight >= limit.current() {
                return Err(Refused::Limit);
            }
            return match self.window {
                Some(w) if !bytes_fit(w) => Err(Refused::Window),
                _ => Ok(()),
            };
        }
        match self.window {
            None => {
                if shared < config.concurrency && per_sink.is_none_or(|c| self.in_flight < c) {
                    Ok(())
                } else {
                    Err(Refused::Concurrency)
                }
            }
            Some(w) => {
                // A batching sink's deliveries are not counted against `sink_concurrency`:
                // they wait in its batcher for a batch to fill, which a cap on deliveries
                // would prevent. Its window bounds them; its batcher bounds requests.
                let (cap, refused) = match per_sink {
                    Some(c) if !self.batched => (c, Refused::Concurrency),
                    _ => (w.deliveries.get(), Refused::Window),
                };
                if self.in_flight >= cap {
                    Err(refused)
                } else if !bytes_fit(w) {
                    Err(Refused::Window)
                } else {
                    Ok(())
                }
            }
        }
    }

    /// An attempt [`admit`](Self::admit) took could not start after all: it leaves the
    /// in-flight counts.
    pub(super) fn abandoned(&mut self, job: &Job, shared: &mut usize) {
        self.uncount(job, shared);
    }

    fn uncount(&mut self, job: &Job, shared: &mut usize) {
        if self.counted() {
            self.in_flight -= 1;
            if self.window.is_some() {
                self.in_flight_bytes -= job.weight as usize;
            }
            if self.shares_concurrency() {
                *shared -= 1;
            }
        }
    }

    /// `job`'s attempt answered after `took`: it leaves the in-flight counts, and the
    /// answer moves the adaptive limit (back pressure or not) and the breaker.
    // Inlined into `done`, its one caller, for the same reason as `admit`.
    #[inline]
    pub(super) fn answered(
        &mut self,
        job: &Job,
        took: Duration,
        answer: Answer<'_>,
        shared: &mut usize,
        config: &DispatchConfig,
    ) {
        self.ready.finished(job.tenant);
        self.uncount(job, shared);
        self.metrics.seconds.record(took.as_secs_f64());
        let class = match &answer {
            Answer::Delivered | Answer::Panicked => None,
            Answer::Failed { failure, .. } => Some(failure.class()),
        };
        if let Some(Limit::Adaptive(a)) = &mut self.limit
            && !matches!(answer, Answer::Panicked)
        {
            // The destination pushing back: a throttle, or a transient failure (a timeout,
            // a 5xx, a lost connection). A permanent answer says nothing of its load.
            let pushed = matches!(
                class,
                Some(Class::Transient | Class::Throttled | Class::RetryAfter(_))
            );
            let now = Instant::now();
            if let Some(Class::RetryAfter(ms)) = class {
                // Capped like any retry-after: a destination cannot stop the sink for ever.
                let pause = Duration::from_millis(ms.get()).min(config.policy.max_retry_after);
                a.pause(now, pause);
            }
            if let Some(limit) = a.answered(took, pushed, self.in_flight, now) {
                self.metrics.concurrency_limit.set(limit as f64);
            }
        }
        let before = self.breaker.state();
        match answer {
            Answer::Delivered => self.breaker.success(),
            Answer::Failed {
                counts_toward_breaker: true,
                ..
            } => {
                let was_closed = !self.breaker.is_open();
                self.breaker.failure(Instant::now());
                if was_closed && self.breaker.is_open() {
                    // Just opened: the jobs it now holds give their intake permits back.
                    for held in self.ready.jobs_mut() {
                        held.permit = None;
                    }
                }
            }
            // Neither counted nor a success: a permanent or config answer may come from
            // the sink itself, without a word from the destination, so it never closes the
            // breaker (only a success does); a probe it answered lets the next one go.
            Answer::Failed { .. } | Answer::Panicked => self.breaker.neutral(),
        }
        self.breaker_moved(before, config);
        self.set_breaker_gauge();
    }

    /// Queue a job. A job held by an open breaker keeps no intake permit: fresh hooks to
    /// other sinks flow.
    pub(super) fn push_ready(&mut self, mut job: Job) {
        if self.breaker.is_open() {
            job.permit = None;
        }
        self.ready.push_back(job);
    }

    /// Whether the jobs an open breaker holds are due to be checked against the horizon
    /// (once per [`HELD_SCAN`], not on every message: a scan walks the whole queue).
    pub(super) fn held_scan_due(&mut self, now: Instant) -> bool {
        if self.breaker.is_open() && !self.ready.is_empty() && now >= self.held_scan {
            self.held_scan = now + HELD_SCAN;
            return true;
        }
        false
    }

    /// The earliest time something that holds its ready jobs may have changed: the
    /// held-job scan and the breaker's reopening, the end of a pause, the next token.
    pub(super) fn wake_at(&self, now: Instant) -> Option<Instant> {
        if self.ready.is_empty() {
            return None;
        }
        let mut wake: Option<Instant> = None;
        let mut earliest = |t: Instant| wake = Some(wake.map_or(t, |w| w.min(t)));
        if self.breaker.is_open() {
            earliest(self.held_scan);
            if let Some(at) = self.breaker.reopens_at() {
                earliest(at);
            }
        }
        if let Some(Limit::Adaptive(a)) = &self.limit
            && a.ready_at() > now
        {
            earliest(a.ready_at());
        }
        if let Some(b) = &self.bucket {
            earliest(b.next_token());
        }
        wake
    }

    /// Jobs an open breaker holds (they wait too).
    pub(super) fn held(&self) -> usize {
        if self.breaker.is_open() {
            self.ready.len()
        } else {
            0
        }
    }

    /// Set the tenants-waiting gauge, when it moved.
    pub(super) fn report_tenants(&mut self) {
        let tenants = self.ready.tenants_waiting();
        if tenants != self.tenants_reported {
            self.tenants_reported = tenants;
            self.metrics.tenants_waiting.set(tenants as f64);
        }
    }

    /// Log a breaker's move from `before` to its state now, naming the sink: an outage
    /// is never silent, and its end is visible too.
    fn breaker_moved(&self, before: BreakerState, config: &DispatchConfig) {
        let after = self.breaker.state();
        let name = &*self.name;
        let open_for_s = config.breaker.open_for.as_secs();
        match (before, after) {
            (BreakerState::Closed { .. }, BreakerState::Open { .. }) => tracing::warn!(
                target: "ankusa_dispatch",
                sink = name,
                failures = config.breaker.failures,
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

    fn set_breaker_gauge(&self) {
        let open = if self.breaker.is_open() { 1.0 } else { 0.0 };
        self.metrics.breaker_open.set(open);
    }
}
