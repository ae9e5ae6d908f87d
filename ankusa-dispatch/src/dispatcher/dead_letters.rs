//! Dead letters: stored, or held and stored again while a durable source's hook waits.

use super::desk::PendingDeadLetter;
use super::scheduler::{Job, Report, Scheduler};
use super::tasks::TaskOf;
use super::types::{HookSettle, Outcome};
use crate::dead_letter::DeadLetterInfo;
use ankusa_sink_core::Failure;
use tokio::time::Instant;
impl Scheduler {
    pub(super) fn dead_letter(&mut self, job: Job, failure: Failure) {
        let Some(h) = self.hooks.get(&job.hook) else {
            return;
        };
        let name = self.sinks[job.sink].name.clone();
        let first = job.first_ms.unwrap_or(job.last_ms);
        let outcome = |failure| Outcome::DeadLettered {
            failure,
            store_error: None,
        };
        let Some(dl) = self.desk.store().cloned() else {
            return self.finish(job, outcome(failure));
        };
        let info = DeadLetterInfo::new(&name, &failure, job.attempts, first, job.last_ms);
        let env = h.env.clone();
        let delivery = self.delivery(job, outcome(failure));
        // The delivery stays here until the store answers: a shutdown that ends first
        // hands the pair back instead of losing it with the aborted task.
        let id = self.tasks.next_record();
        self.desk.add_dead_letter(
            id,
            PendingDeadLetter {
                delivery,
                dl,
                env,
                info,
                failures: 0,
                retry_at: None,
            },
        );
        self.store_dead_letter(id);
    }

    /// Start storing the pending dead letter `id`.
    pub(super) fn store_dead_letter(&mut self, id: u64) {
        let Some((dl, env, info)) = self.desk.storing(id) else {
            return;
        };
        let timeout = self.config.attempt_timeout;
        let tx = self.tx.clone();
        self.tasks.spawn(TaskOf::DeadLetter(id), async move {
            let result = dl.store(&env, &info, timeout).await;
            let _ = tx.send(Report::DeadLettered { id, result });
        });
    }

    /// Store again the held dead letters whose backoff is over.
    pub(super) fn wake_dead_letters(&mut self, now: Instant) {
        let due = self.desk.due(now);
        for id in due {
            self.store_dead_letter(id);
        }
    }

    /// The dead letter `id` was stored, or not: report its delivery. One of a hook from a
    /// durable source that could not be stored is held instead and written again with
    /// backoff (1 s doubling to 60 s) while intake pauses: given back to the broker it
    /// would only come back, be delivered again to every sink and fail the same way.
    pub(super) fn dead_lettered(&mut self, id: u64, result: Result<(), String>) {
        let Some(p) = self.desk.dead_letter(id) else {
            return;
        };
        let error = result.err();
        if let Some(slot) = self.sinks.iter().find(|s| *s.name == *p.info.sink) {
            match (&error, &p.delivery.outcome) {
                (Some(_), _) => slot.metrics.dead_letter_errors.increment(1),
                (None, Outcome::DeadLettered { failure, .. }) => {
                    slot.metrics.stored(failure.class())
                }
                (None, _) => {}
            }
        }
        if let Some(e) = &error
            && p.delivery.settle.is_some()
            && self.stopping.is_none()
        {
            self.desk.hold(id, e);
            return;
        }
        let p = self.desk.remove_dead_letter(id).expect("looked up above");
        let mut d = p.delivery;
        if let (Some(e), Outcome::DeadLettered { store_error, .. }) = (error, &mut d.outcome) {
            let (hook_id, sink) = (p.env.id(), &*p.info.sink);
            self.desk.log_dead_letter_error(|| {
                tracing::error!(
                    target: "ankusa_dispatch",
                    hook_id,
                    sink,
                    error = %e,
                    "a dead letter could not be stored"
                );
            });
            *store_error = Some(e);
            // Neither delivered nor filed: the source must give the hook out again.
            HookSettle::mark_unfinished(&d.settle);
        }
        if p.failures > 0 {
            self.desk.held_changed();
        }
        self.emit(d);
    }
}
