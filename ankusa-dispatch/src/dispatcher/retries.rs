//! What waits: the retry queue, the jobs an open breaker holds, and the breaker's moves.

use super::scheduler::{Job, Scheduler, copy};
use super::sink::SinkState;
use crate::policy::{Action, decide};
use ankusa_sink_core::{Class, Failure, Reason};
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

    /// Put `job` in the retry queue until `at`.
    pub(super) fn wait(&mut self, job: Job, at: Instant) {
        self.waiting.push(job, at);
    }

    pub(super) fn wake_due(&mut self, now: Instant) {
        let mut woke = false;
        while let Some(job) = self.waiting.pop_due(now) {
            self.enqueue(job);
            woke = true;
        }
        if woke {
            self.waiting.changed();
        }
    }

    /// The waiting gauge: jobs in the retry queue and jobs an open breaker holds (they
    /// wait too, and an outage would otherwise show nothing waiting). Set when it moved.
    pub(super) fn report_waiting(&mut self) {
        let held: usize = self.sinks.iter().map(SinkState::held).sum();
        self.waiting.report(held);
        for sink in &mut self.sinks {
            sink.report_tenants();
        }
    }
}
