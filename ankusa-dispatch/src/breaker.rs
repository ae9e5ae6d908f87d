//! A circuit breaker per sink: consecutive transient and retry-after failures open it.

use std::time::Duration;
// The runtime's clock: it follows `tokio::time::pause` like the scheduler's timers.
use tokio::time::Instant;

/// When a sink's breaker opens and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerConfig {
    /// Consecutive counted failures (transient, retry-after) that open the breaker.
    /// Default 5. Permanent and config failures never count.
    pub failures: u32,
    /// How long it stays open before one probe may go through. Default 30 s; at most
    /// [`MAX_BREAKER_OPEN`](crate::MAX_BREAKER_OPEN) (a day), checked at build.
    pub open_for: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures: 5,
            open_for: Duration::from_secs(30),
        }
    }
}

impl BreakerConfig {
    /// A breaker config; `failures` is at least 1.
    pub fn new(failures: u32, open_for: Duration) -> Self {
        BreakerConfig {
            failures: failures.max(1),
            open_for,
        }
    }
}

/// A breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Attempts flow; `failures` counted in a row so far.
    Closed { failures: u32 },
    /// Attempts wait until `until`.
    Open { until: Instant },
    /// One probe may go (`probing` once it has).
    HalfOpen { probing: bool },
}

/// One sink's breaker. Pure: every transition takes `now`.
#[derive(Debug)]
pub(crate) struct Breaker {
    config: BreakerConfig,
    state: State,
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Breaker {
            config,
            state: State::Closed { failures: 0 },
        }
    }

    /// The state now (for the transitions the dispatcher logs).
    pub(crate) fn state(&self) -> State {
        self.state
    }

    /// Whether an attempt may start now; a half-open breaker lets exactly one through.
    pub(crate) fn admit(&mut self, now: Instant) -> bool {
        match self.state {
            State::Closed { .. } => true,
            State::Open { until } if now >= until => {
                self.state = State::HalfOpen { probing: true };
                true
            }
            State::Open { .. } => false,
            State::HalfOpen { probing: false } => {
                self.state = State::HalfOpen { probing: true };
                true
            }
            State::HalfOpen { probing: true } => false,
        }
    }

    /// A success: closed (the only way it closes).
    pub(crate) fn success(&mut self) {
        self.state = State::Closed { failures: 0 };
    }

    /// An answer that neither counts nor closes it (permanent, config): a probe it answered
    /// frees the probe's place, so the next attempt probes; otherwise nothing changes.
    pub(crate) fn neutral(&mut self) {
        if self.state == (State::HalfOpen { probing: true }) {
            self.state = State::HalfOpen { probing: false };
        }
    }

    /// A counted failure: opens at the threshold, and a failed probe opens it again.
    pub(crate) fn failure(&mut self, now: Instant) {
        self.state = match self.state {
            State::Closed { failures } if failures + 1 < self.config.failures => State::Closed {
                failures: failures + 1,
            },
            _ => State::Open {
                until: crate::dispatcher::later(now, self.config.open_for),
            },
        };
    }

    /// Whether attempts are held (open, or half-open with its probe out).
    pub(crate) fn is_open(&self) -> bool {
        !matches!(self.state, State::Closed { .. })
    }

    /// When an open breaker lets a probe through.
    pub(crate) fn reopens_at(&self) -> Option<Instant> {
        match self.state {
            State::Open { until } => Some(until),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_probes_once_and_closes() {
        let t0 = Instant::now();
        let mut b = Breaker::new(BreakerConfig::new(3, Duration::from_secs(10)));
        b.failure(t0);
        b.failure(t0);
        b.success();
        b.failure(t0);
        b.failure(t0);
        assert!(b.admit(t0), "a success reset the count");
        b.failure(t0);
        assert_eq!(
            b.state(),
            State::Open {
                until: t0 + Duration::from_secs(10)
            }
        );
        assert!(!b.admit(t0 + Duration::from_secs(9)));
        assert!(b.admit(t0 + Duration::from_secs(10)), "the probe");
        assert!(!b.admit(t0 + Duration::from_secs(11)), "only one probe");
        b.failure(t0 + Duration::from_secs(12));
        assert_eq!(b.reopens_at(), Some(t0 + Duration::from_secs(22)));
        assert!(b.admit(t0 + Duration::from_secs(22)));
        b.success();
        assert!(!b.is_open());
        assert!(b.admit(t0 + Duration::from_secs(22)));
    }

    #[test]
    fn at_least_one_failure_opens_it() {
        let mut b = Breaker::new(BreakerConfig::new(0, Duration::from_secs(1)));
        b.failure(Instant::now());
        assert!(b.is_open());
    }
}
