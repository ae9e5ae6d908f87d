//! A sink's rate limit: a token bucket. A hook over the rate waits for a token; it is not
//! a failure.

use std::time::Duration;
use tokio::time::Instant;
/// Tokens refill at `per_s`; the bucket holds a tenth of a second's worth (at least one),
/// so a sink idle for a while sends a short burst, not a second's worth at once.
#[derive(Debug)]
pub(super) struct Bucket {
    per_s: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    pub(super) fn new(per_s: f64, now: Instant) -> Self {
        let burst = (per_s / 10.0).max(1.0);
        Bucket {
            per_s,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let gained = now.saturating_duration_since(self.last).as_secs_f64() * self.per_s;
        self.tokens = (self.tokens + gained).min(self.burst);
        self.last = now;
    }

    /// Whether a token is there at `now` (not taken).
    pub(super) fn ready(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= 1.0
    }

    /// Take the token [`ready`](Self::ready) saw.
    pub(super) fn take(&mut self) {
        self.tokens -= 1.0;
    }

    /// When the next token is there.
    pub(super) fn next_token(&self) -> Instant {
        let missing = (1.0 - self.tokens).max(0.0);
        // A rate is at least 0.001 a second (checked at build): at most 1,000 s a token.
        let wait = Duration::try_from_secs_f64(missing / self.per_s).unwrap_or(Duration::MAX);
        super::later(self.last, wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_at_the_rate_after_a_short_burst() {
        let t0 = Instant::now();
        let mut b = Bucket::new(20.0, t0);
        // Two in the burst (a tenth of a second's worth), then one each 50 ms.
        for _ in 0..2 {
            assert!(b.ready(t0));
            b.take();
        }
        assert!(!b.ready(t0));
        assert_eq!(b.next_token(), t0 + Duration::from_millis(50));
        assert!(b.ready(t0 + Duration::from_millis(50)));
        b.take();
        assert!(!b.ready(t0 + Duration::from_millis(60)));
        // Idle for a minute: still only the burst.
        let later = t0 + Duration::from_secs(60);
        assert!(b.ready(later));
        b.take();
        assert!(b.ready(later));
        b.take();
        assert!(!b.ready(later));
    }
}
