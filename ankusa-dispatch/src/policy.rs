//! What to do after a failed attempt: retry when, or dead-letter with which error class.
//!
//! [`decide`] is a pure function of the failure's class, the attempt count, the first
//! attempt's time, now and the policy. [`record`] reports the one metric the contract names,
//! `ankusa_dispatch_config_errors_total{sink}`.

use crate::throttle::throttle_after_ms_with;
use ankusa_sink_core::{Class, ErrorClass};
use rand::{Rng, RngCore};
use std::fmt;
use std::time::Duration;

/// The config-error counter: a source needs a config fix and then a DLQ replay.
pub const CONFIG_ERRORS_METRIC: &str = "ankusa_dispatch_config_errors_total";

/// When to try again after the `attempts`-th failed attempt, or `None` to give up.
pub trait RetryPolicy: Send + Sync + fmt::Debug {
    /// `attempts` counts every attempt made so far, including the one that just failed.
    fn backoff(&self, attempts: u32, rng: &mut dyn RngCore) -> Option<Duration>;
}

/// Exponential backoff with full jitter: a uniform draw from `[0, min(max, base * 2^(n-1))]`;
/// gives up once `attempts >= max_attempts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exponential {
    /// First delay before jitter. Default 100 ms.
    pub base: Duration,
    /// Cap applied before jitter. Default 5 minutes.
    pub max: Duration,
    /// Give up at this many attempts. Default 84.
    pub max_attempts: u32,
    /// Full jitter (default) or the exact exponential delay.
    pub jitter: bool,
}

impl Default for Exponential {
    fn default() -> Self {
        Exponential {
            base: Duration::from_millis(100),
            max: Duration::from_secs(300),
            max_attempts: 84,
            jitter: true,
        }
    }
}

impl Exponential {
    /// The delay before jitter for `attempts`.
    pub fn ceiling(&self, attempts: u32) -> Duration {
        let exp = attempts.max(1) - 1;
        let factor = 2u32.checked_pow(exp.min(31)).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .unwrap_or(self.max)
            .min(self.max)
    }
}

impl RetryPolicy for Exponential {
    fn backoff(&self, attempts: u32, rng: &mut dyn RngCore) -> Option<Duration> {
        if attempts >= self.max_attempts {
            return None;
        }
        let ceiling = self.ceiling(attempts);
        if !self.jitter {
            return Some(ceiling);
        }
        let ms = ceiling.as_millis() as u64;
        Some(Duration::from_millis(rng.random_range(0..=ms)))
    }
}

/// The dispatch-wide knobs.
#[derive(Debug)]
pub struct DispatchPolicy {
    /// Decides transient retries and when to give up.
    pub retry: Box<dyn RetryPolicy>,
    /// Cap on a destination's requested pause. Default 1 hour.
    pub max_retry_after: Duration,
    /// A delivery still failing this long after its first attempt dead-letters. Default 24 h.
    pub max_elapsed: Duration,
}

impl Default for DispatchPolicy {
    fn default() -> Self {
        DispatchPolicy {
            retry: Box::new(Exponential::default()),
            max_retry_after: Duration::from_secs(3600),
            max_elapsed: Duration::from_secs(24 * 3600),
        }
    }
}

/// What to do with the hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Attempt again after `delay`, at `at_ms` (Unix ms).
    Retry {
        /// The wait.
        delay: Duration,
        /// `now_ms + delay`.
        at_ms: i64,
    },
    /// Dead-letter the hook, filed under this error class.
    DeadLetter {
        /// Why, as an operator filters dead letters.
        error_class: ErrorClass,
    },
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Retry or dead-letter.
    pub action: Action,
    /// Whether the failure counts toward the sink's circuit breaker (never for permanent
    /// and config failures).
    pub counts_toward_breaker: bool,
    /// Whether the config-error counter goes up.
    pub config_error: bool,
    /// The pause the destination asked for, capped at `max_retry_after`: the stated
    /// [`Class::RetryAfter`], or for [`Class::Throttled`] the
    /// [`throttle_after_ms`](crate::throttle_after_ms)`(attempts)` drawn here. `None` for
    /// the other classes. Set whether the hook is retried or dead-lettered: an outcome
    /// reports it (the CLI's `retry_after_ms`).
    pub pause: Option<Duration>,
}

/// Decide what happens after a failed attempt.
///
/// # Behavior
/// - [`Class::Permanent`] and [`Class::Config`]: dead-letter now (error class permanent),
///   not counted toward the breaker; config also sets `config_error`.
/// - Anything still failing `max_elapsed` after `first_attempt_ms`: dead-letter with the
///   failure's error class.
/// - Otherwise the retry policy: `None` dead-letters; a delay `d` retries after `d` for a
///   transient failure, after `max(min(ms, max_retry_after), d)` for a retry-after. A
///   [`Class::Throttled`] is a retry-after whose `ms` is drawn here,
///   [`throttle_after_ms`](crate::throttle_after_ms)`(attempts)` from `rng`: same cap,
///   same breaker counting, dead-lettered as `throttled`.
/// - A retry that could only start after `first_attempt_ms + max_elapsed` dead-letters
///   now, with the failure's error class (`throttled` when the destination asked for the
///   wait): waiting past the horizon only to give up would hold the hook for nothing.
pub fn decide(
    class: Class,
    attempts: u32,
    first_attempt_ms: i64,
    now_ms: i64,
    policy: &DispatchPolicy,
    rng: &mut dyn RngCore,
) -> Decision {
    let dead = |class: Class| Action::DeadLetter {
        error_class: class.error_class(),
    };
    if class.is_permanent() {
        return Decision {
            action: dead(class),
            counts_toward_breaker: false,
            config_error: class == Class::Config,
            pause: None,
        };
    }
    let pause = match class {
        Class::RetryAfter(ms) => Some(ms),
        Class::Throttled => Some(throttle_after_ms_with(attempts, rng)),
        _ => None,
    }
    .map(|ms| Duration::from_millis(ms.get()).min(policy.max_retry_after));
    let horizon_ms = first_attempt_ms.saturating_add(millis_i64(policy.max_elapsed));
    let action = if now_ms >= horizon_ms {
        dead(class)
    } else {
        match policy.retry.backoff(attempts, rng) {
            None => dead(class),
            Some(backoff) => {
                let delay = pause.map_or(backoff, |p| p.max(backoff));
                let at_ms = now_ms.saturating_add(millis_i64(delay));
                if at_ms > horizon_ms {
                    dead(class)
                } else {
                    Action::Retry { delay, at_ms }
                }
            }
        }
    };
    Decision {
        action,
        counts_toward_breaker: true,
        config_error: false,
        pause,
    }
}

/// Whole milliseconds of `d`, saturating at `i64::MAX` (a plain `as` cast wraps negative
/// for durations near `Duration::MAX`, which would mean "retry at once").
fn millis_i64(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Report a decision's metrics for `sink` through the `metrics` facade: a config error
/// increments `ankusa_dispatch_config_errors_total{sink}`.
pub fn record(sink: &str, decision: &Decision) {
    if decision.config_error {
        metrics::counter!(CONFIG_ERRORS_METRIC, "sink" => sink.to_owned()).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use std::num::NonZeroU64;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(7)
    }

    #[test]
    fn exponential_full_jitter() {
        let p = Exponential::default();
        assert_eq!(p.ceiling(1), Duration::from_millis(100));
        assert_eq!(p.ceiling(4), Duration::from_millis(800));
        assert_eq!(p.ceiling(13), Duration::from_secs(300));
        assert_eq!(p.ceiling(200), Duration::from_secs(300));
        let mut r = rng();
        let draws: Vec<u128> = (0..5000)
            .map(|_| p.backoff(4, &mut r).unwrap().as_millis())
            .collect();
        assert!(draws.iter().all(|&d| d <= 800));
        let mean = draws.iter().sum::<u128>() as f64 / draws.len() as f64;
        // Full jitter's mean is half the ceiling (400); [0.5, 1.0) jitter would give 600.
        assert!((370.0..430.0).contains(&mean), "mean {mean}");
        assert!(
            draws.iter().any(|&d| d < 80),
            "full jitter reaches near zero"
        );
        assert_eq!(p.backoff(84, &mut r), None);
        let exact = Exponential {
            jitter: false,
            ..Exponential::default()
        };
        assert_eq!(exact.backoff(2, &mut r), Some(Duration::from_millis(200)));
    }

    fn no_jitter() -> DispatchPolicy {
        DispatchPolicy {
            retry: Box::new(Exponential {
                jitter: false,
                ..Exponential::default()
            }),
            ..DispatchPolicy::default()
        }
    }

    #[test]
    fn permanent_and_config_dead_letter_now() {
        let p = no_jitter();
        for (class, config) in [(Class::Permanent, false), (Class::Config, true)] {
            let d = decide(class, 1, 0, 10, &p, &mut rng());
            assert_eq!(
                d,
                Decision {
                    action: Action::DeadLetter {
                        error_class: ErrorClass::Permanent
                    },
                    counts_toward_breaker: false,
                    config_error: config,
                    pause: None,
                }
            );
        }
    }

    #[test]
    fn transient_follows_policy() {
        let p = no_jitter();
        let d = decide(Class::Transient, 3, 0, 1_000, &p, &mut rng());
        assert_eq!(
            d.action,
            Action::Retry {
                delay: Duration::from_millis(400),
                at_ms: 1_400
            }
        );
        assert!(d.counts_toward_breaker && !d.config_error);
        let d = decide(Class::Transient, 84, 0, 1_000, &p, &mut rng());
        assert_eq!(
            d.action,
            Action::DeadLetter {
                error_class: ErrorClass::Transient
            }
        );
    }

    #[test]
    fn retry_after_waits_the_later_of_pause_and_backoff_capped() {
        let p = no_jitter();
        let ra = |ms| Class::RetryAfter(NonZeroU64::new(ms).unwrap());
        // Pause longer than the backoff wins.
        let d = decide(ra(5_000), 1, 0, 0, &p, &mut rng());
        assert_eq!(
            d.action,
            Action::Retry {
                delay: Duration::from_secs(5),
                at_ms: 5_000
            }
        );
        // Backoff longer than the pause wins.
        let d = decide(ra(10), 4, 0, 0, &p, &mut rng());
        assert_eq!(
            d.action,
            Action::Retry {
                delay: Duration::from_millis(800),
                at_ms: 800
            }
        );
        // Capped at one hour.
        let d = decide(ra(10 * 3_600_000), 1, 0, 0, &p, &mut rng());
        assert_eq!(
            d.action,
            Action::Retry {
                delay: Duration::from_secs(3600),
                at_ms: 3_600_000
            }
        );
        // The policy giving up ends it as throttled.
        let d = decide(ra(10), 84, 0, 0, &p, &mut rng());
        assert_eq!(
            d.action,
            Action::DeadLetter {
                error_class: ErrorClass::Throttled
            }
        );
        assert!(d.counts_toward_breaker);
    }

    #[test]
    fn max_elapsed_dead_letters() {
        let p = no_jitter();
        let day = 24 * 3_600_000;
        // Attempt 2 backs off 200 ms: a retry that starts before the horizon goes ahead.
        let d = decide(Class::Transient, 2, 0, day - 200, &p, &mut rng());
        assert!(matches!(d.action, Action::Retry { .. }));
        let d = decide(Class::Transient, 2, 0, day, &p, &mut rng());
        assert_eq!(
            d.action,
            Action::DeadLetter {
                error_class: ErrorClass::Transient
            }
        );
        let ra = Class::RetryAfter(NonZeroU64::new(1).unwrap());
        let d = decide(ra, 2, 0, day, &p, &mut rng());
        assert_eq!(
            d.action,
            Action::DeadLetter {
                error_class: ErrorClass::Throttled
            }
        );
    }

    #[test]
    fn a_retry_that_would_start_past_the_horizon_dead_letters_now() {
        // --max-elapsed 10 s against `Retry-After: 120`: give up at once, as throttled.
        let p = DispatchPolicy {
            max_elapsed: Duration::from_secs(10),
            ..no_jitter()
        };
        let ra = Class::RetryAfter(NonZeroU64::new(120_000).unwrap());
        let d = decide(ra, 1, 0, 1_000, &p, &mut rng());
        assert_eq!(
            d.action,
            Action::DeadLetter {
                error_class: ErrorClass::Throttled
            }
        );
        assert!(d.counts_toward_breaker);
        // A transient backoff that lands past the horizon ends as transient.
        let d = decide(Class::Transient, 8, 0, 9_000, &p, &mut rng());
        assert_eq!(
            d.action,
            Action::DeadLetter {
                error_class: ErrorClass::Transient
            }
        );
        // Landing exactly on the horizon still retries.
        let d = decide(Class::Transient, 1, 0, 9_900, &p, &mut rng());
        assert_eq!(
            d.action,
            Action::Retry {
                delay: Duration::from_millis(100),
                at_ms: 10_000
            }
        );
    }

    #[test]
    fn a_throttle_pauses_throttle_after_ms_like_a_stated_retry_after() {
        let p = no_jitter();
        for attempts in [1u32, 2, 3, 7, 40] {
            let cap = throttle_cap(attempts);
            let mut r = rng();
            for _ in 0..200 {
                let d = decide(Class::Throttled, attempts, 0, 0, &p, &mut r);
                let pause = d.pause.expect("a throttle reports its pause");
                assert!(
                    (1..=cap).contains(&(pause.as_millis() as u64)),
                    "{attempts}: {pause:?}"
                );
                // The later of the drawn pause and the policy's backoff, as for RetryAfter.
                let backoff = Exponential {
                    jitter: false,
                    ..Exponential::default()
                }
                .ceiling(attempts);
                if attempts < 84 {
                    let delay = pause.max(backoff);
                    assert_eq!(
                        d.action,
                        Action::Retry {
                            delay,
                            at_ms: delay.as_millis() as i64
                        }
                    );
                }
                assert!(d.counts_toward_breaker && !d.config_error);
            }
        }
        // The same seed draws the same pause: decide stays a function of its inputs.
        let a = decide(Class::Throttled, 3, 0, 0, &p, &mut rng());
        let b = decide(Class::Throttled, 3, 0, 0, &p, &mut rng());
        assert_eq!(a, b);
        // Given up on, it is filed as throttled and still reports the pause.
        let d = decide(Class::Throttled, 84, 0, 0, &p, &mut rng());
        assert_eq!(
            d.action,
            Action::DeadLetter {
                error_class: ErrorClass::Throttled
            }
        );
        assert!(d.pause.is_some_and(|p| p.as_millis() as u64 <= 30_000));
        // Capped at max_retry_after, like a stated pause.
        let tight = DispatchPolicy {
            max_retry_after: Duration::from_millis(3),
            ..no_jitter()
        };
        let d = decide(Class::Throttled, 40, 0, 0, &tight, &mut rng());
        assert!(d.pause.is_some_and(|p| p <= Duration::from_millis(3)));
        // Other classes report no pause; a stated one reports itself, capped.
        assert_eq!(
            decide(Class::Transient, 1, 0, 0, &p, &mut rng()).pause,
            None
        );
        let ra = Class::RetryAfter(NonZeroU64::new(7_200_000).unwrap());
        assert_eq!(
            decide(ra, 1, 0, 0, &p, &mut rng()).pause,
            Some(Duration::from_secs(3600))
        );
    }

    fn throttle_cap(attempts: u32) -> u64 {
        (500u64 << (attempts.max(1) - 1).min(6)).min(30_000)
    }

    #[test]
    fn huge_durations_saturate_instead_of_wrapping() {
        let p = DispatchPolicy {
            retry: Box::new(Exponential {
                base: Duration::MAX,
                max: Duration::MAX,
                jitter: false,
                ..Exponential::default()
            }),
            max_retry_after: Duration::MAX,
            max_elapsed: Duration::MAX,
        };
        let d = decide(Class::Transient, 1, 0, 5, &p, &mut rng());
        match d.action {
            Action::Retry { at_ms, .. } => assert_eq!(at_ms, i64::MAX),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn config_errors_are_counted_per_sink() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let p = no_jitter();
            for class in [
                Class::Config,
                Class::Config,
                Class::Permanent,
                Class::Transient,
            ] {
                record("amqp", &decide(class, 1, 0, 0, &p, &mut rng()));
            }
        });
        let snap = snapshotter.snapshot().into_vec();
        let counted: Vec<_> = snap
            .iter()
            .filter(|(k, ..)| k.key().name() == CONFIG_ERRORS_METRIC)
            .collect();
        assert_eq!(counted.len(), 1);
        let (key, _, _, value) = counted[0];
        assert_eq!(
            key.key()
                .labels()
                .map(|l| (l.key(), l.value()))
                .collect::<Vec<_>>(),
            [("sink", "amqp")]
        );
        assert_eq!(value, &DebugValue::Counter(2));
    }
}
