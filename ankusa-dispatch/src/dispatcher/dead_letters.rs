//! Dead letters: stored, or held and stored again while a durable source's hook waits.

use super::*;

impl Scheduler {
    pub(super) fn dead_letter(&mut self, job: Job, failure: Failure) {
        let Some(h) = self.hooks.get(&job.hook) else {
            return;
        };
        let name = self.slots[job.sink].name.clone();
        let first = job.first_ms.unwrap_or(job.last_ms);
        let outcome = |failure| Outcome::DeadLettered {
            failure,
            store_error: None,
        };
        let Some(dl) = self.dead_letter.clone() else {
            return self.finish(job, outcome(failure));
        };
        let info = DeadLetterInfo::new(&name, &failure, job.attempts, first, job.last_ms);
        let env = h.env.clone();
        let delivery = self.delivery(job, outcome(failure));
        // The delivery stays here until the store answers: a shutdown that ends first
        // hands the pair back instead of losing it with the aborted task.
        let id = self.next_dead_letter;
        self.next_dead_letter += 1;
        self.pending_dead_letters.insert(
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
        let Some(p) = self.pending_dead_letters.get_mut(&id) else {
            return;
        };
        p.retry_at = None;
        let (dl, env, info) = (p.dl.clone(), p.env.clone(), p.info.clone());
        let timeout = self.config.attempt_timeout;
        let tx = self.tx.clone();
        let handle = self.tasks.spawn(async move {
            let result = dl.store(&env, &info, timeout).await;
            let _ = tx.send(Report::DeadLettered { id, result });
        });
        self.task_dead_letter.insert(handle.id(), id);
    }

    /// Store again the held dead letters whose backoff is over.
    pub(super) fn wake_dead_letters(&mut self, now: Instant) {
        let due: Vec<u64> = self
            .pending_dead_letters
            .iter()
            .filter(|(_, p)| p.retry_at.is_some_and(|at| at <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            self.store_dead_letter(id);
        }
    }

    /// The dead letter `id` was stored, or not: report its delivery. One of a hook from a
    /// durable source that could not be stored is held instead and written again with
    /// backoff (1 s doubling to 60 s) while intake pauses: given back to the broker it
    /// would only come back, be delivered again to every sink and fail the same way.
    pub(super) fn dead_lettered(&mut self, id: u64, result: Result<(), String>) {
        let Some(p) = self.pending_dead_letters.get_mut(&id) else {
            return;
        };
        let error = result.err();
        if let Some(slot) = self.slots.iter().find(|s| *s.name == *p.info.sink) {
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
            p.failures = p.failures.saturating_add(1);
            let backoff = dead_letter_backoff(p.failures);
            p.retry_at = Some(Instant::now() + backoff);
            let (hook_id, sink) = (p.env.id().to_owned(), p.info.sink.clone());
            self.held_changed();
            let held = self.held_dead_letters();
            self.log_dead_letter_error(|| {
                tracing::error!(
                    target: "ankusa_dispatch",
                    hook_id,
                    sink,
                    held,
                    retry_in_s = backoff.as_secs(),
                    error = %e,
                    "a dead letter cannot be stored: its hook is held unacknowledged and \
                     intake is paused until it is"
                );
            });
            return;
        }
        let p = self
            .pending_dead_letters
            .remove(&id)
            .expect("looked up above");
        let mut d = p.delivery;
        if let (Some(e), Outcome::DeadLettered { store_error, .. }) = (error, &mut d.outcome) {
            let (hook_id, sink) = (p.env.id(), &*p.info.sink);
            self.log_dead_letter_error(|| {
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
            self.held_changed();
        }
        self.emit(d);
    }

    /// Log a dead letter's failure to be stored, at most once a minute: a full disk fails
    /// every one of them, and the log may be on that disk.
    pub(super) fn log_dead_letter_error(&mut self, log: impl FnOnce()) {
        let now = Instant::now();
        if self
            .dead_letter_log
            .is_none_or(|at| now.duration_since(at) >= DEAD_LETTER_LOG_EVERY)
        {
            self.dead_letter_log = Some(now);
            log();
        }
    }

    /// Dead letters held after a failed store.
    pub(super) fn held_dead_letters(&self) -> usize {
        self.pending_dead_letters
            .values()
            .filter(|p| p.failures > 0)
            .count()
    }

    /// Pause intake (and set the gauge) while any dead letter is held.
    pub(super) fn held_changed(&self) {
        let held = self.held_dead_letters() > 0;
        self.intake_hold.set(held);
        metrics::gauge!(m::DEAD_LETTER_BLOCKED).set(if held { 1.0 } else { 0.0 });
    }
}

/// A dead letter on its way to the store, or held to be written again.
pub(super) struct PendingDeadLetter {
    pub(super) delivery: Delivery,
    pub(super) dl: DeadLetter,
    pub(super) env: Arc<Envelope>,
    pub(super) info: DeadLetterInfo,
    /// Failed stores so far.
    pub(super) failures: u32,
    /// Held: stored again at this time. `None` while a store runs.
    pub(super) retry_at: Option<Instant>,
}

/// A held dead letter's failure is logged at most this often.
pub(super) const DEAD_LETTER_LOG_EVERY: Duration = Duration::from_secs(60);
