//! [`SubscriberCache`]: whether a destination that drops unread messages (a Pub/Sub or SNS
//! topic without a subscription) has anyone to read them, looked up at most once per
//! interval.

use ankusa_sink_core::{Class, Failure, Reason};
use std::future::Future;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The default interval between two subscriber lookups: one minute.
pub const DEFAULT_SUBSCRIBER_CHECK_INTERVAL: Duration = Duration::from_secs(60);
/// The longest interval between two subscriber lookups: one hour.
pub const MAX_SUBSCRIBER_CHECK_INTERVAL: Duration = Duration::from_secs(3_600);

/// `interval` as whole seconds when it is from 1 s to [`MAX_SUBSCRIBER_CHECK_INTERVAL`]
/// (the range of a sink's `subscriber_check_interval_s`), else `None`.
pub fn subscriber_check_interval(interval: Duration) -> Option<Duration> {
    (Duration::from_secs(1)..=MAX_SUBSCRIBER_CHECK_INTERVAL)
        .contains(&interval)
        .then(|| Duration::from_secs(interval.as_secs()))
}

/// One lookup's answer and when it came.
struct Verdict {
    at: Instant,
    /// `Ok(true)`: someone reads; `Ok(false)`: no one; `Err`: the lookup failed (class and
    /// reason text and landing, shared with the deliveries that waited for it).
    outcome: Result<bool, (Class, String, Option<bool>)>,
}

/// A cached answer to "does anyone read this destination?", for sinks whose destination
/// accepts messages it will never deliver.
///
/// # Behavior
/// - [`has_subscriber`](Self::has_subscriber) runs the lookup when no answer is younger than
///   the interval; concurrent callers wait for one lookup instead of each making their own,
///   so a sink makes at most one lookup per interval while the answers succeed.
/// - Both answers are kept for the interval: a subscription created after a "no one" answer
///   is seen within one interval, and one deleted after a "yes" answer likewise.
/// - A failed lookup is not kept: the callers that were waiting for it get its failure (same
///   class, same text); the next caller looks up again.
#[derive(Debug)]
pub struct SubscriberCache {
    interval: Duration,
    state: Mutex<Option<Verdict>>,
}

impl std::fmt::Debug for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verdict")
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}

impl SubscriberCache {
    /// A cache whose answers live for `interval`.
    pub fn new(interval: Duration) -> Self {
        SubscriberCache {
            interval,
            state: Mutex::new(None),
        }
    }

    /// How long an answer is kept.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Whether anyone reads: the kept answer when it is younger than the interval, else
    /// `lookup`'s (at most one lookup runs at a time).
    ///
    /// # Errors
    /// The lookup's failure, for this caller and those that waited for the same lookup.
    pub async fn has_subscriber<F, Fut>(&self, lookup: F) -> Result<bool, Failure>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<bool, Failure>>,
    {
        let asked = Instant::now();
        let mut state = self.state.lock().await;
        if let Some(v) = state.as_ref() {
            let young = v.outcome.is_ok() && v.at.elapsed() < self.interval;
            // A lookup that finished while this caller waited answers it too, even a failed
            // one: otherwise every waiter repeats a lookup that just failed.
            if young || v.at > asked {
                return v.outcome.clone().map_err(|(class, text, landed)| {
                    Failure::new(class, Reason(text)).with_may_have_landed(landed)
                });
            }
        }
        let outcome = lookup().await;
        *state = Some(Verdict {
            at: Instant::now(),
            outcome: outcome
                .as_ref()
                .copied()
                .map_err(|f| (f.class(), f.reason_chain(), f.may_have_landed())),
        });
        outcome
    }

    /// `Ok` when [`has_subscriber`](Self::has_subscriber) says someone reads, else
    /// `nobody()`'s failure; the lookup's failure as it is. Nothing is sent either way, so
    /// every failure says the message did not land.
    ///
    /// # Errors
    /// `nobody()` when no one reads; the lookup's failure.
    pub async fn require<F, Fut>(
        &self,
        lookup: F,
        nobody: impl FnOnce() -> Failure,
    ) -> Result<(), Failure>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<bool, Failure>>,
    {
        match self.has_subscriber(lookup).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(nobody().with_may_have_landed(Some(false))),
            Err(f) => Err(f.with_may_have_landed(Some(false))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counting(
        calls: &Arc<AtomicUsize>,
        answer: Result<bool, Class>,
    ) -> impl Future<Output = Result<bool, Failure>> + use<> {
        let calls = Arc::clone(calls);
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            answer.map_err(|c| Failure::new(c, Reason("lookup failed".into())))
        }
    }

    #[test]
    fn the_interval_range_is_one_second_to_one_hour_in_whole_seconds() {
        let s = Duration::from_secs;
        assert_eq!(subscriber_check_interval(s(1)), Some(s(1)));
        assert_eq!(
            subscriber_check_interval(Duration::from_millis(1_500)),
            Some(s(1))
        );
        assert_eq!(subscriber_check_interval(s(3_600)), Some(s(3_600)));
        for bad in [
            Duration::ZERO,
            Duration::from_millis(999),
            s(3_601),
            Duration::from_millis(3_600_001),
        ] {
            assert_eq!(subscriber_check_interval(bad), None, "{bad:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_kept_for_the_interval_then_looked_up_again() {
        let cache = SubscriberCache::new(Duration::from_secs(60));
        let calls = Arc::new(AtomicUsize::new(0));
        assert!(!ask(&cache, &calls, Ok(false)).await.unwrap());
        tokio::time::advance(Duration::from_secs(59)).await;
        // Kept: the lookup that would say "yes" is not made.
        assert!(!ask(&cache, &calls, Ok(true)).await.unwrap());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(ask(&cache, &calls, Ok(true)).await.unwrap());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    /// One caller's answer, its lookup (if made) answering `answer`.
    async fn ask(
        cache: &SubscriberCache,
        calls: &Arc<AtomicUsize>,
        answer: Result<bool, Class>,
    ) -> Result<bool, Failure> {
        cache.has_subscriber(|| counting(calls, answer)).await
    }

    /// `n` callers asking at once, every lookup answering `answer`: their answers.
    async fn at_once(
        cache: &Arc<SubscriberCache>,
        calls: &Arc<AtomicUsize>,
        n: usize,
        answer: Result<bool, Class>,
    ) -> Vec<Result<bool, Failure>> {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let (cache, calls) = (Arc::clone(cache), Arc::clone(calls));
                tokio::spawn(async move { ask(&cache, &calls, answer).await })
            })
            .collect();
        let mut answers = Vec::with_capacity(n);
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        answers
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_callers_share_one_lookup() {
        let cache = Arc::new(SubscriberCache::new(Duration::from_secs(60)));
        let calls = Arc::new(AtomicUsize::new(0));
        let answers = at_once(&cache, &calls, 20, Ok(true)).await;
        assert_eq!(answers.len(), 20);
        assert!(answers.into_iter().all(|a| a.unwrap()));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_lookup_answers_its_waiters_and_is_not_kept() {
        let cache = Arc::new(SubscriberCache::new(Duration::from_secs(60)));
        let calls = Arc::new(AtomicUsize::new(0));
        let answers = at_once(&cache, &calls, 5, Err(Class::Transient)).await;
        assert_eq!(answers.len(), 5);
        for a in answers {
            let f = a.unwrap_err();
            assert_eq!(f.class(), Class::Transient);
            assert_eq!(f.reason_chain(), "lookup failed");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // The next caller, after the failure, looks up again.
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(ask(&cache, &calls, Ok(true)).await.unwrap());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}
