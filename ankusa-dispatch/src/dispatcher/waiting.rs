//! The retry queue: jobs waiting for their retry time, in time order, and the counts of
//! them that `Dispatcher::waiting` and the waiting gauge show.

use super::scheduler::Job;
use crate::metrics as m;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::time::Instant;

/// A job waiting for its retry time.
struct Waiting {
    at: Instant,
    /// Breaks ties between equal times: first in, first out.
    seq: u64,
    job: Job,
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// Jobs waiting for their retry time.
pub(super) struct RetryQueue {
    heap: BinaryHeap<Reverse<Waiting>>,
    seq: u64,
    /// Shared with the `Dispatcher` handles (`waiting()`).
    count: Arc<AtomicUsize>,
    /// The value last set on the waiting gauge.
    reported: usize,
}

impl RetryQueue {
    pub(super) fn new(count: Arc<AtomicUsize>) -> Self {
        RetryQueue {
            heap: BinaryHeap::new(),
            seq: 0,
            count,
            reported: 0,
        }
    }

    /// Put `job` in the queue until `at`. A waiting job holds no intake permit (and no
    /// concurrency slot): fresh hooks flow meanwhile.
    pub(super) fn push(&mut self, mut job: Job, at: Instant) {
        job.permit = None;
        self.seq += 1;
        self.heap.push(Reverse(Waiting {
            at,
            seq: self.seq,
            job,
        }));
        self.changed();
    }

    /// The next job due at `now`, if any ([`changed`](Self::changed) is the caller's, once
    /// it has taken every due one).
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<Job> {
        if self.heap.peek().is_some_and(|Reverse(w)| w.at <= now) {
            return self.heap.pop().map(|Reverse(w)| w.job);
        }
        None
    }

    /// When the next job is due.
    pub(super) fn next_at(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(w)| w.at)
    }

    /// Every waiting job, taken.
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = Job> + '_ {
        self.heap.drain().map(|Reverse(w)| w.job)
    }

    /// Publish the count after it moved.
    pub(super) fn changed(&self) {
        self.count.store(self.heap.len(), Ordering::Relaxed);
    }

    /// Set the waiting gauge, when it moved: these jobs and `held` more (those an open
    /// breaker holds wait too, and an outage would otherwise show nothing waiting).
    pub(super) fn report(&mut self, held: usize) {
        let n = self.heap.len() + held;
        if n != self.reported {
            self.reported = n;
            metrics::gauge!(m::WAITING).set(n as f64);
        }
    }
}
