//! Adaptive concurrency for one sink: additive increase while the round-trip time holds,
//! multiplicative decrease on back pressure (throttles, transient failures: timeouts, 5xx,
//! lost connections) or on a round-trip time that grows (requests queueing at the
//! destination), as Vector's adaptive request concurrency does.
//!
//! The limit moves once per window of about one round trip. The baseline is the lowest
//! window mean of the recent windows (the destination's latency when nothing queues), so a
//! slowly growing queue cannot move the baseline with it. After a decrease the limit waits
//! some windows before it grows again, longer after each decrease in a row: probing above a
//! rate the destination refuses costs refused requests every time.
//!
//! A destination that states a pause (`Retry-After`) gets it from the whole sink, not only
//! from the hook it refused: one that refuses at once (a 429 in no time) would otherwise see
//! the limit's worth of attempts again and again in no time, however low the limit.

use ankusa_sink_kit::Aimd;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;
/// Decrease: the limit times this (at least 1).
const DECREASE: f64 = 0.9;
/// A window's mean round trip this far above the baseline is queueing: decrease. Below it
/// the destination takes more without refusing: a little queueing there buys throughput
/// (the linear-latency bench peaks past its knee), much of it only latency.
const QUEUEING: f64 = 1.5;
/// Windows the baseline is the minimum of.
const BASELINE_WINDOWS: usize = 64;
/// Windows without growth after a decrease, doubling with each decrease in a row (up to
/// [`MAX_HOLD`]).
const HOLD: u32 = 8;
const MAX_HOLD: u32 = 64;
/// The first window's length, before any round trip is known.
const FIRST_WINDOW: Duration = Duration::from_millis(50);

/// One sink's adaptive limit.
#[derive(Debug)]
pub(super) struct Adaptive {
    limit: usize,
    /// Whole steps: one up, [`DECREASE`] down, rounded down.
    aimd: Aimd,
    window_start: Instant,
    window: Duration,
    rtt_sum: Duration,
    answers: u32,
    back_pressure: bool,
    /// Attempts in flight reached the limit in this window: growing it can help.
    reached: bool,
    /// Recent window means, for the baseline.
    means: VecDeque<Duration>,
    /// Windows left before the limit may grow again.
    hold: u32,
    /// The hold after the next decrease.
    next_hold: u32,
    /// No attempt starts before this: the pause the destination last asked for.
    ready_at: Instant,
}

impl Adaptive {
    /// A limit starting at 1, growing to `max` at most.
    pub(super) fn new(max: usize, now: Instant) -> Self {
        Adaptive {
            limit: 1,
            aimd: Aimd::new(max, DECREASE),
            window_start: now,
            window: FIRST_WINDOW,
            rtt_sum: Duration::ZERO,
            answers: 0,
            back_pressure: false,
            reached: false,
            means: VecDeque::with_capacity(BASELINE_WINDOWS),
            hold: 0,
            next_hold: HOLD,
            ready_at: now,
        }
    }

    /// When the next attempt may start (the end of a pause the destination asked for).
    pub(super) fn ready_at(&self) -> Instant {
        self.ready_at
    }

    /// The destination asked for a pause of `pause`: no attempt of the sink starts before
    /// it ends.
    pub(super) fn pause(&mut self, now: Instant, pause: Duration) {
        self.ready_at = self.ready_at.max(super::later(now, pause));
    }

    /// The limit now.
    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// An attempt started; `in_flight` counts it.
    pub(super) fn started(&mut self, in_flight: usize) {
        if in_flight >= self.limit {
            self.reached = true;
        }
    }

    /// An attempt answered after `rtt`; `back_pressure` when the destination pushed back.
    /// Returns the new limit when this answer closed a window that moved it.
    pub(super) fn answered(
        &mut self,
        rtt: Duration,
        back_pressure: bool,
        in_flight: usize,
        now: Instant,
    ) -> Option<usize> {
        self.rtt_sum += rtt;
        self.answers += 1;
        self.back_pressure |= back_pressure;
        if now.duration_since(self.window_start) < self.window {
            return None;
        }
        let before = self.limit;
        let mean = self.rtt_sum / self.answers;
        let baseline = self.means.iter().min().copied();
        let queueing = baseline.is_some_and(|b| mean.as_secs_f64() > b.as_secs_f64() * QUEUEING);
        if self.back_pressure || queueing {
            self.limit = self.aimd.decrease(self.limit as f64) as usize;
            self.hold = self.next_hold;
            self.next_hold = (self.next_hold * 2).min(MAX_HOLD);
        } else if self.hold > 0 {
            self.hold -= 1;
        } else if self.reached {
            self.limit = self.aimd.increase(self.limit as f64, 1.0) as usize;
            self.next_hold = HOLD;
        }
        if !self.back_pressure {
            if self.means.len() == BASELINE_WINDOWS {
                self.means.pop_front();
            }
            self.means.push_back(mean);
        }
        self.window = self
            .means
            .iter()
            .min()
            .copied()
            .unwrap_or(FIRST_WINDOW)
            .max(Duration::from_millis(1));
        self.window_start = now;
        self.rtt_sum = Duration::ZERO;
        self.answers = 0;
        self.back_pressure = false;
        self.reached = in_flight >= self.limit;
        (self.limit != before).then_some(self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Windows of answers at `rtt`, every attempt slot busy.
    fn windows(a: &mut Adaptive, now: &mut Instant, n: usize, rtt: Duration, pushed: bool) {
        for _ in 0..n {
            let limit = a.limit();
            a.started(limit);
            *now += a.window;
            a.answered(rtt, pushed, limit, *now);
        }
    }

    #[test]
    fn it_grows_while_the_round_trip_holds_and_backs_off_when_it_grows() {
        let mut now = Instant::now();
        let mut a = Adaptive::new(256, now);
        windows(&mut a, &mut now, 20, Duration::from_millis(10), false);
        assert_eq!(a.limit(), 21, "one more a window, from 1");
        // Queueing: the round trip 60 % over the baseline.
        windows(&mut a, &mut now, 1, Duration::from_millis(16), false);
        assert_eq!(a.limit(), 18);
        // It holds a while, then grows again.
        windows(
            &mut a,
            &mut now,
            HOLD as usize,
            Duration::from_millis(10),
            false,
        );
        assert_eq!(a.limit(), 18);
        windows(&mut a, &mut now, 2, Duration::from_millis(10), false);
        assert_eq!(a.limit(), 20);
    }

    #[test]
    fn back_pressure_decreases_it_and_holds_longer_each_time() {
        let mut now = Instant::now();
        let mut a = Adaptive::new(4, now);
        windows(&mut a, &mut now, 10, Duration::from_millis(10), false);
        assert_eq!(a.limit(), 4, "never above max");
        windows(&mut a, &mut now, 1, Duration::from_millis(10), true);
        assert_eq!(a.limit(), 3);
        windows(&mut a, &mut now, 1, Duration::from_millis(10), true);
        assert_eq!(a.limit(), 2);
        // Two decreases in a row: the hold doubled.
        windows(
            &mut a,
            &mut now,
            (HOLD * 2) as usize,
            Duration::from_millis(10),
            false,
        );
        assert_eq!(a.limit(), 2);
        windows(&mut a, &mut now, 1, Duration::from_millis(10), false);
        assert_eq!(a.limit(), 3);
        windows(&mut a, &mut now, 5, Duration::from_millis(10), true);
        assert_eq!(a.limit(), 1, "never below 1");
    }

    #[test]
    fn an_idle_sink_does_not_grow() {
        let mut now = Instant::now();
        let mut a = Adaptive::new(256, now);
        for _ in 0..10 {
            a.started(0);
            now += a.window;
            a.answered(Duration::from_millis(10), false, 0, now);
        }
        assert_eq!(a.limit(), 1, "never busy: no reason to grow");
    }
}
