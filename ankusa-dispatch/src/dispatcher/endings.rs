//! How a job ends, as the scheduler coordinates it: its delivery, a dead letter stored
//! or held (the `Desk`), a park written, or an unfinished pair handed back at a shutdown.

use super::desk::{PendingDeadLetter, PendingPark};
use super::scheduler::{In, Job, Report, Scheduler, Stopping};
use super::tasks::TaskOf;
use super::types::{Delivery, HookSettle, Outcome, Unfinished};
use crate::dead_letter::{DeadLetterInfo, deliver_carrier};
use crate::record::{PairState, carrier, record_attrs};
use ankusa_sink_core::{Failure, Reason};
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

    /// Whether `job`'s retry in `delay` goes to its sink's park destination instead of the
    /// retry queue: the sink parks, the wait reaches its threshold, and the hook came from
    /// a durable source (a hook from input lines has no record to free).
    pub(super) fn parks(&self, job: &Job, delay: Duration) -> bool {
        self.sinks[job.sink]
            .park
            .as_ref()
            .is_some_and(|p| delay >= p.after)
            && self
                .hooks
                .get(&job.hook)
                .is_some_and(|h| h.settle.is_some())
    }

    /// Write `job` (its last failure in `last_failure`, next attempt in `delay`) to its
    /// sink's park destination. It waits for the answer as a pending park: written, it is
    /// finished as [`Outcome::Parked`]; not written, it waits in the retry queue as it
    /// would have.
    pub(super) fn park(&mut self, mut job: Job, delay: Duration) {
        let (Some(park), Some(h)) = (self.sinks[job.sink].park.clone(), self.hooks.get(&job.hook))
        else {
            return;
        };
        let now = self.clock.now_ms();
        let not_before_ms =
            now.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
        let unknown = Failure::transient(Reason("parked".into()));
        let info = DeadLetterInfo::new(
            &self.sinks[job.sink].name,
            job.last_failure.as_ref().unwrap_or(&unknown),
            self.attempt_number(&job, job.attempts),
            job.first_ms.unwrap_or(job.last_ms),
            job.last_ms,
        );
        let state = PairState::Parked {
            not_before_ms,
            parked_at_ms: now,
        };
        let at = super::later(Instant::now(), delay);
        // A parking job holds no intake permit and no slot, as a waiting one does.
        job.permit = None;
        let attrs = record_attrs(&info, &state);
        let env = match carrier(&h.env, &info, &state) {
            Ok(env) => env,
            Err(e) => {
                self.park_failed(job, at, &e.to_string());
                return;
            }
        };
        let id = self.tasks.next_record();
        self.desk.add_park(
            id,
            PendingPark {
                job,
                at,
                not_before_ms,
            },
        );
        let timeout = self.config.attempt_timeout;
        let tx = self.tx.clone();
        // A parked record over the park sink's inline threshold goes by claim, like a hook.
        let claims = self.claim_store.clone();
        self.tasks.spawn(TaskOf::Park(id), async move {
            let result = deliver_carrier(&*park.sink, &env, attrs, claims.as_ref(), timeout).await;
            let _ = tx.send(Report::Parked { id, result });
        });
    }

    /// The park `id` was written (the pair is finished here) or not (it waits in memory).
    pub(super) fn parked(&mut self, id: u64, result: Result<(), String>) {
        let Some(p) = self.desk.remove_park(id) else {
            return;
        };
        match result {
            Ok(()) if self.stopping.is_none() || self.hooks.contains_key(&p.job.hook) => {
                let mut job = p.job;
                let failure = job
                    .last_failure
                    .take()
                    .unwrap_or_else(|| Failure::transient(Reason("parked".into())));
                self.sinks[job.sink].metrics.parked.increment(1);
                self.finish(
                    job,
                    Outcome::Parked {
                        failure,
                        not_before_ms: p.not_before_ms,
                    },
                );
            }
            Ok(()) => {}
            Err(e) => self.park_failed(p.job, p.at, &e),
        }
    }

    /// A park could not be written: the pair waits in the retry queue instead, as without
    /// a park destination (a WARN at most once a minute).
    fn park_failed(&mut self, job: Job, at: Instant, error: &str) {
        let sink = self.sinks[job.sink].name.clone();
        self.desk.log_park_error(|| {
            tracing::warn!(
                target: "ankusa_dispatch",
                sink = &*sink,
                error,
                "a long retry wait could not be parked: it waits in memory, holding its \
                 source record"
            );
        });
        if self.stopping.is_some() {
            return self.unfinished(job, false);
        }
        self.waiting.push(job, at);
    }

    /// Parks still being written at a shutdown's end go back unfinished (written or not,
    /// the record is released: a replay is a duplicate, never a loss).
    pub(super) fn hand_back_parks(&mut self) {
        for p in self.desk.take_parks() {
            self.unfinished(p.job, false);
        }
    }
}
