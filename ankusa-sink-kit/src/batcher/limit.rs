//! How many requests a [`Batcher`](super::Batcher) keeps in flight.
//!
//! Without a latency target the limit is `max_requests`. With one, it adapts the way TCP
//! sizes a window (additive increase, multiplicative decrease), keyed on each request's
//! round trip: a destination that queues requests instead of serving them in parallel
//! (an overloaded server, moto) answers ever later as more are sent, and a fixed limit
//! then turns its queue into call timeouts, each a `may_have_landed` duplicate. Vector's
//! adaptive request concurrency works the same way.

use crate::Aimd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The cut on a slow or throttled answer. Slow start overshoots to about twice the limit
/// that was fast, so a target of a quarter of the call timeout keeps even the overshoot's
/// round trips well within it.
const DECREASE: f64 = 0.75;

pub(super) struct Limit {
    aimd: Aimd,
    target: Option<Duration>,
    state: Mutex<State>,
    freed: Notify,
}

struct State {
    /// The current limit, in `1..=max`; a request may start while fewer than its whole
    /// part are in flight.
    limit: f64,
    in_flight: usize,
    /// Until the first slow answer, each fast request that used the whole limit adds one
    /// (the limit doubles per round trip); afterwards one per round trip.
    slow_start: bool,
    /// Requests started so far: each request's sequence number.
    started: u64,
    /// Requests numbered below this were in flight at the last cut: their slowness is the
    /// one already answered, so they cannot cut again.
    cut_at: u64,
    /// Requests numbered below this were in flight when the limit was last reached: only
    /// they say whether the whole limit is fast.
    reached_at: u64,
}

impl Limit {
    pub(super) fn new(max: usize, target: Option<Duration>) -> Self {
        let aimd = Aimd::new(max, DECREASE);
        Limit {
            aimd,
            target,
            state: Mutex::new(State {
                limit: if target.is_some() { 1.0 } else { aimd.max() },
                in_flight: 0,
                slow_start: true,
                started: 0,
                cut_at: 0,
                reached_at: 0,
            }),
            freed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No await and no panic inside: the counters stay consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The requests that may be in flight now.
    pub(super) fn current(&self) -> usize {
        self.lock().limit as usize
    }

    /// Wait until one more request may start. One task (the batcher's flusher) waits, so
    /// `notify_one`'s stored permit covers a request that finishes before it waits.
    pub(super) async fn room(&self) {
        loop {
            {
                let st = self.lock();
                if st.in_flight < st.limit as usize {
                    return;
                }
            }
            self.freed.notified().await;
        }
    }

    /// A request starts now; the ticket frees its place when dropped.
    pub(super) fn start(self: &Arc<Self>) -> Ticket {
        let mut st = self.lock();
        st.in_flight += 1;
        let seq = st.started;
        st.started += 1;
        if st.in_flight >= st.limit as usize {
            st.reached_at = st.started;
        }
        Ticket {
            limit: Arc::clone(self),
            seq,
            at: Instant::now(),
            throttled: None,
        }
    }

    fn finish(&self, t: &Ticket) {
        let mut st = self.lock();
        st.in_flight -= 1;
        if let (Some(target), Some(throttled)) = (self.target, t.throttled) {
            if throttled || t.at.elapsed() > target {
                if t.seq >= st.cut_at {
                    st.limit = self.aimd.decrease(st.limit);
                    st.cut_at = st.started;
                    st.slow_start = false;
                }
            } else if t.seq < st.reached_at {
                // Grow only when the whole limit was in flight: a limit that light load
                // never reaches says nothing about the destination.
                let step = if st.slow_start { 1.0 } else { 1.0 / st.limit };
                st.limit = self.aimd.increase(st.limit, step);
            }
        }
        drop(st);
        self.freed.notify_one();
    }
}

/// One request in flight.
pub(super) struct Ticket {
    limit: Arc<Limit>,
    seq: u64,
    at: Instant,
    /// Whether the answer said to slow down, set by [`Ticket::answered`]; `None` for a
    /// request that never answered (its task panicked): it frees its place without moving
    /// the limit.
    throttled: Option<bool>,
}

impl Ticket {
    /// The request answered; `throttled` when the destination asked to slow down.
    pub(super) fn answered(mut self, throttled: bool) {
        self.throttled = Some(throttled);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.limit.finish(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As many requests as the limit allows, all answering after `took`.
    fn round(l: &Arc<Limit>, took: Duration, throttled: bool) {
        let tickets: Vec<_> = (0..l.current()).map(|_| l.start()).collect();
        for mut t in tickets {
            t.at -= took;
            t.answered(throttled);
        }
    }

    /// One request alone, answering after `took`.
    fn answer(l: &Arc<Limit>, took: Duration, throttled: bool) {
        let mut t = l.start();
        t.at -= took;
        t.answered(throttled);
    }

    #[test]
    fn without_a_target_the_limit_is_max() {
        let l = Arc::new(Limit::new(16, None));
        assert_eq!(l.current(), 16);
        round(&l, Duration::from_secs(10), true);
        assert_eq!(l.current(), 16);
    }

    #[tokio::test(start_paused = true)]
    async fn fast_answers_grow_the_limit_to_max_and_slow_ones_cut_it() {
        let l = Arc::new(Limit::new(16, Some(Duration::from_millis(100))));
        assert_eq!(l.current(), 1);
        // Slow start: the limit doubles per round of fast answers.
        for expect in [2, 4, 8, 16, 16] {
            round(&l, Duration::from_millis(10), false);
            assert_eq!(l.current(), expect);
        }
        round(&l, Duration::from_millis(150), false);
        assert_eq!(l.current(), 12, "one cut per round of slow answers");
        round(&l, Duration::from_millis(10), true);
        assert_eq!(l.current(), 9, "a throttled answer cuts too");
        // After the first cut: a little under one more per round.
        for _ in 0..3 {
            round(&l, Duration::from_millis(10), false);
        }
        assert_eq!(l.current(), 11);
        for _ in 0..20 {
            round(&l, Duration::from_secs(10), false);
        }
        assert_eq!(l.current(), 1, "never below one");
    }

    #[tokio::test(start_paused = true)]
    async fn requests_in_flight_at_a_cut_do_not_cut_again() {
        let l = Arc::new(Limit::new(8, Some(Duration::from_millis(100))));
        l.lock().limit = 8.0;
        let slow: Vec<_> = (0..8).map(|_| l.start()).collect();
        tokio::time::advance(Duration::from_millis(500)).await;
        for t in slow {
            t.answered(false);
        }
        assert_eq!(l.current(), 6, "one cut for one window of slow answers");
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_light_load_never_reaches_does_not_grow() {
        let l = Arc::new(Limit::new(8, Some(Duration::from_millis(100))));
        l.lock().limit = 4.0;
        let held = l.start();
        for _ in 0..10 {
            answer(&l, Duration::from_millis(1), false);
        }
        assert_eq!(l.current(), 4);
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn room_waits_for_a_place() {
        let l = Arc::new(Limit::new(1, None));
        let t = l.start();
        let waiter = tokio::spawn({
            let l = Arc::clone(&l);
            async move { l.room().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        drop(t);
        waiter.await.unwrap();
    }
}
