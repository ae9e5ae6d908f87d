//! The pause for a throttle that named no duration
//! ([`Class::Throttled`](ankusa_sink_core::Class::Throttled)).
//!
//! [`decide`](crate::decide) draws it. The contract states only the range (on
//! `Class::Throttled`); the draw is dispatch's, so it lives here with its one caller.

use rand::{Rng, RngCore};
use std::num::NonZeroU64;

/// The pause for a throttle that named no duration: full jitter, uniform in
/// `1..=min(30_000, 500 * 2^(attempt - 1))` ms, so throttled deliveries do not all come
/// back in the same instant. `attempt` is `ctx.attempt` (0 is treated as 1).
pub fn throttle_after_ms(attempt: u32) -> NonZeroU64 {
    throttle_after_ms_with(attempt, &mut rand::rng())
}

/// [`throttle_after_ms`] with a given random source.
pub fn throttle_after_ms_with<R: RngCore + ?Sized>(attempt: u32, rng: &mut R) -> NonZeroU64 {
    let exp = attempt.max(1) - 1;
    // 500 * 2^6 = 32_000 already exceeds the cap, so larger exponents need no shift.
    let cap = if exp >= 6 {
        30_000
    } else {
        (500u64 << exp).min(30_000)
    };
    NonZeroU64::new(rng.random_range(1..=cap)).expect("range starts at 1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(7)
    }

    #[test]
    fn throttle_bounds_per_attempt() {
        let mut r = rng();
        for (attempt, cap) in [
            (0, 500),
            (1, 500),
            (2, 1000),
            (3, 2000),
            (6, 16_000),
            (7, 30_000),
            (40, 30_000),
            (u32::MAX, 30_000),
        ] {
            let mut max_seen = 0;
            let mut min_seen = u64::MAX;
            for _ in 0..4000 {
                let v = throttle_after_ms_with(attempt, &mut r).get();
                assert!((1..=cap).contains(&v), "attempt {attempt}: {v} > {cap}");
                max_seen = max_seen.max(v);
                min_seen = min_seen.min(v);
            }
            // Full jitter spans the whole range: the extremes of 4000 draws are near both ends.
            assert!(
                max_seen > cap * 95 / 100,
                "attempt {attempt}: max {max_seen}"
            );
            assert!(min_seen < cap / 20 + 1, "attempt {attempt}: min {min_seen}");
        }
    }

    #[test]
    fn throttle_is_uniform() {
        // Chi-squared over 10 buckets of 1..=2000 (attempt 3), 20_000 draws. The 99.9 %
        // critical value for 9 degrees of freedom is 27.88.
        let mut r = rng();
        let mut buckets = [0u32; 10];
        for _ in 0..20_000 {
            let v = throttle_after_ms_with(3, &mut r).get();
            buckets[((v - 1) / 200) as usize] += 1;
        }
        let expected = 2000.0;
        let chi2: f64 = buckets
            .iter()
            .map(|&o| (o as f64 - expected).powi(2) / expected)
            .sum();
        assert!(chi2 < 27.88, "chi2 {chi2}, buckets {buckets:?}");
        // The real entry point draws from the thread RNG within the same bounds.
        assert!(throttle_after_ms(1).get() <= 500);
    }
}
