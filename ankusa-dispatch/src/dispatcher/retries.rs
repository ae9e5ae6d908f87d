//! What waits: the retry queue, the jobs an open breaker holds, and the breaker's moves.

use super::scheduler::{Job, Scheduler, Waiting, copy};
use super::sink::SinkState;
use crate::metrics as m;
use crate::policy::{Action, decide};
use ankusa_sink_core::{Class, Failure, Reason};
use std::cmp::Reverse;
use std::sync::atomic::Ordering;
use tokio::time::Instant;
impl Scheduler {
    /// Dead-letter the jobs an open breaker held past the horizon, and those whose next
    /// attempt would be their last: the policy allows no retry after it (a run without
    /// retries), so holding them would only wait for a probe per `open_for` while the
    /// destination stays down: they fail now, as that attempt most likely would.
    pub(super) fn expire_held(&mut self, sink: usize) {
        let now = self.clock.now_ms();
        let queue = self.sinks[sink].ready.take_all();
        for job in queue {
            let start = job
                .first_ms
                .or_else(|| self.hooks.get(&job.hook).map(|h| h.submitted_ms))
                .unwrap_or(now);
            // `decide` ends a job at its horizon too: one check covers both.
            let last_chance = matches!(
                decide(
                    Class::Transient,
                    self.attempt_number(&job, job.attempts.saturating_add(1)),
                    start,
                    now,
                    &self.config.policy,
                    &mut rand::rng(),
                )
                .action,
                Action::DeadLetter { .. }
            );
            if last_chance {
                let failure = job.last_failure.as_ref().map_or_else(
                    || {
                        Failure::transient(Reason(
                            "circuit breaker open: not attempted (the sink's last attempts \
                             failed in a row)"
                                .into(),
                        ))
                        .with_may_have_landed(Some(false))
                    },
                    copy,
                );
                self.dead_letter(job, failure);
            } else {
                self.sinks[sink].ready.push_back(job);
            }
        }
    }

    /// Put `job` in the retry queue until `at`. A waiting job holds no intake permit (and
    /// no concurrency slot): fresh hooks flow meanwhile.
    pub(super) fn wait(&mut self, mut job: Job, at: Instant) {
        job.permit = None;
        self.seq += 1;
        self.waiting.push(Reverse(Waiting {
            at,
            seq: self.seq,
            job,
        }));
        self.waiting_changed();
    }

    pub(super) fn wake_due(&mut self, now: Instant) {
        let mut woke = false;
        while self.waiting.peek().is_some_and(|Reverse(w)| w.at <= now) {
            let Reverse(w) = self.waiting.pop().expect("peeked");
            self.enqueue(w.job);
            woke = true;
        }
        if woke {
            self.waiting_changed();
        }
    }

    pub(super) fn waiting_changed(&self) {
        self.waiting_count
            .store(self.waiting.len(), Ordering::Relaxed);
    }

    /// The waiting gauge: jobs in the retry queue and jobs an open breaker holds (they
    /// wait too, and an outage would otherwise show nothing waiting). Set when it moved.
    pub(super) fn report_waiting(&mut self) {
        let held: usize = self.sinks.iter().map(SinkState::held).sum();
        let n = self.waiting.len() + held;
        if n != self.waiting_reported {
            self.waiting_reported = n;
            metrics::gauge!(m::WAITING).set(n as f64);
        }
        for sink in &mut self.sinks {
            sink.report_tenants();
        }
    }
}
