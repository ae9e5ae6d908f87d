//! Additive increase, multiplicative decrease: the one rule both concurrency limits of the
//! workspace move by (the batcher's requests in flight, the dispatcher's adaptive
//! concurrency per sink). What counts as a reason to grow or to cut (a round trip over a
//! target, a throttle, a window of queueing) stays with each caller.

/// A limit in `1..=max` that grows by a step and is cut by a factor.
///
/// ```
/// use ankusa_sink_kit::Aimd;
/// let aimd = Aimd::new(4, 0.5);
/// assert_eq!(aimd.increase(3.0, 1.0), 4.0);
/// assert_eq!(aimd.increase(4.0, 1.0), 4.0, "never above max");
/// assert_eq!(aimd.decrease(4.0), 2.0);
/// assert_eq!(aimd.decrease(1.5), 1.0, "never below one");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Aimd {
    max: f64,
    factor: f64,
}

impl Aimd {
    /// A limit of at most `max` (at least 1), cut to `factor` of itself on a decrease.
    pub fn new(max: usize, factor: f64) -> Self {
        Aimd {
            max: max.max(1) as f64,
            factor,
        }
    }

    /// The most the limit may be.
    pub fn max(&self) -> f64 {
        self.max
    }

    /// `limit` grown by `step`, at most `max`.
    pub fn increase(&self, limit: f64, step: f64) -> f64 {
        (limit + step).min(self.max)
    }

    /// `limit` cut by the factor, at least 1.
    pub fn decrease(&self, limit: f64) -> f64 {
        (limit * self.factor).max(1.0)
    }
}
