//! Final words: a finished job's delivery, an unfinished one, and a shutdown that hands
//! back what is left.

use super::desk::PendingDeadLetter;
use super::scheduler::{In, Job, Report, Scheduler, Stopping};
use super::types::{Delivery, HookSettle, Outcome, Unfinished};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::sync::oneshot;
use tokio::time::Instant;
impl Scheduler {
    /// Build the delivery for a finished job and retire it from its hook.
    pub(super) fn delivery(&mut self, job: Job, outcome: Outcome) -> Delivery {
        let h = self.hooks.get_mut(&job.hook).expect("a job's hook lives");
        let envelope = h.env.clone();
        let replay_id = h.ctx.replay_id.clone();
        let settle = h.settle.clone();
        h.jobs_left -= 1;
        if h.jobs_left == 0 {
            HookSettle::mark_done(&settle);
            self.hooks.remove(&job.hook);
        }
        Delivery {
            envelope,
            sink: self.sinks[job.sink].name.clone(),
            attempts: job.attempts,
            first_attempt_ms: job.first_ms.unwrap_or(job.last_ms),
            last_attempt_ms: job.last_ms,
            replay_id,
            retry_after_ms: match outcome {
                Outcome::DeadLettered { .. } | Outcome::Parked { .. } => {
                    job.last_pause_ms.map(|ms| u64::from(ms.get()))
                }
                Outcome::Delivered => None,
            },
            outcome,
            _permit: job.permit,
            settle,
        }
    }

    pub(super) fn finish(&mut self, job: Job, outcome: Outcome) {
        let d = self.delivery(job, outcome);
        self.emit(d);
    }

    pub(super) fn emit(&mut self, d: Delivery) {
        if let Some(slot) = self.sinks.iter().find(|s| Arc::ptr_eq(&s.name, &d.sink)) {
            match &d.outcome {
                Outcome::Delivered => slot.metrics.delivered(),
                Outcome::DeadLettered { failure, .. } => {
                    slot.metrics.dead_lettered(failure.class())
                }
                // Counted when written (`ankusa_dispatch_parked_total`): not an outcome
                // of the hook's delivery.
                Outcome::Parked { .. } => {}
            }
        }
        // A caller that dropped its stream no longer wants outcomes.
        let _ = self.out.send(d);
    }

    pub(super) fn unfinished(&mut self, job: Job, was_in_flight: bool) {
        let Some(h) = self.hooks.get_mut(&job.hook) else {
            return;
        };
        let u = Unfinished {
            envelope: h.env.clone(),
            sink: self.sinks[job.sink].name.clone(),
            attempts: job.attempts,
            last_failure: job.last_failure,
            was_in_flight,
            replay_id: h.ctx.replay_id.clone(),
            retry_after_ms: job.last_pause_ms.map(|ms| u64::from(ms.get())),
        };
        HookSettle::mark_unfinished(&h.settle);
        h.jobs_left -= 1;
        if h.jobs_left == 0 {
            self.hooks.remove(&job.hook);
        }
        if let Some(s) = &mut self.stopping {
            s.unfinished.push(u);
        }
    }

    pub(super) fn begin_shutdown(
        &mut self,
        grace: Duration,
        reply: oneshot::Sender<Vec<Unfinished>>,
    ) {
        let deadline = Instant::now()
            .checked_add(grace)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        if let Some(s) = &mut self.stopping {
            // A second shutdown: the first caller gets the list, this one an empty list
            // when it is ready; the shorter grace wins.
            s.deadline = s.deadline.min(deadline);
            s.more_replies.push(reply);
            return;
        }
        self.stopping = Some(Stopping {
            deadline,
            reply,
            more_replies: Vec::new(),
            unfinished: Vec::new(),
        });
        // Nothing new starts: every job not in flight is handed back now.
        let mut idle: Vec<Job> = Vec::new();
        for sink in &mut self.sinks {
            idle.extend(sink.ready.take_all());
        }
        idle.extend(self.waiting.take_all());
        for h in self.hooks.values_mut() {
            idle.append(&mut h.parked);
        }
        self.waiting.changed();
        self.report_waiting();
        for job in idle {
            self.unfinished(job, false);
        }
        // Held dead letters go back to their source now (nack), not at the deadline.
        for p in self.desk.take_held() {
            self.hand_back(p);
        }
        self.desk.held_changed();
    }

    /// A dead letter still pending at a shutdown goes back with its last failure (its
    /// record may or may not have been written: a replay is a duplicate, never a loss).
    pub(super) fn hand_back(&mut self, p: PendingDeadLetter) {
        let d = p.delivery;
        HookSettle::mark_unfinished(&d.settle);
        let last_failure = match d.outcome {
            Outcome::DeadLettered { failure, .. } | Outcome::Parked { failure, .. } => {
                Some(failure)
            }
            Outcome::Delivered => None,
        };
        if let Some(s) = &mut self.stopping {
            s.unfinished.push(Unfinished {
                envelope: d.envelope,
                sink: d.sink,
                attempts: d.attempts,
                last_failure,
                was_in_flight: false,
                replay_id: d.replay_id,
                retry_after_ms: d.retry_after_ms,
            });
        }
    }

    pub(super) fn finish_shutdown(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<In>,
        reports: &mut mpsc::UnboundedReceiver<Report>,
    ) {
        // What was already sent is handled, not dropped with the channels: a submit that
        // raced the shutdown is handed back, an attempt that answered is reported.
        rx.close();
        while let Ok(msg) = rx.try_recv() {
            self.take(msg);
        }
        while let Ok(report) = reports.try_recv() {
            self.handle(report);
        }
        self.tasks.abort_all();
        let running: Vec<Job> = self.running.drain().map(|(_, j)| j).collect();
        for job in running {
            self.unfinished(job, true);
        }
        // Dead letters still being stored go back.
        for p in self.desk.take_dead_letters() {
            self.hand_back(p);
        }
        self.hand_back_parks();
        self.desk.held_changed();
        if let Some(s) = self.stopping.take() {
            let _ = s.reply.send(s.unfinished);
            for r in s.more_replies {
                let _ = r.send(Vec::new());
            }
        }
    }
}
