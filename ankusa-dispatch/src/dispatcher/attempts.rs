//! Attempts: started in tasks of their own, their answers, and what a failure leads to.

use super::*;

impl Scheduler {
    pub(super) fn start(&mut self, mut job: Job) {
        let Some(h) = self.hooks.get(&job.hook) else {
            return;
        };
        let slot = &self.slots[job.sink];
        job.attempts += 1;
        let now = self.clock.now_ms();
        job.first_ms.get_or_insert(now);
        job.last_ms = now;
        let ctx = h
            .ctx
            .clone()
            .with_attempt(h.first_attempt.saturating_add(job.attempts - 1))
            .with_batch(slot.batched);
        let env = h.env.clone();
        let sink = slot.sink.clone();
        let name = slot.name.clone();
        let parent = h.parent.clone();
        // No attempt runs past the horizon: it could only dead-letter after it.
        let horizon = self.config.policy.max_elapsed;
        let elapsed = Duration::from_millis(
            u64::try_from(now.saturating_sub(job.first_ms.unwrap_or(now))).unwrap_or(0),
        );
        let timeout = self.config.attempt_timeout.min(
            horizon
                .saturating_sub(elapsed)
                .max(Duration::from_millis(1)),
        );
        let id = self.next_attempt;
        self.next_attempt += 1;
        if slot.counted() {
            self.in_flight[job.sink] += 1;
            if slot.window.is_some() {
                self.in_flight_bytes[job.sink] += job.weight as usize;
            }
            if slot.shares_concurrency() {
                self.in_flight_total += 1;
            }
        }
        let in_flight = self.in_flight[job.sink];
        if let Some(Limit::Adaptive(a)) = &mut self.slots[job.sink].limit {
            a.started(in_flight);
        }
        if let Some(b) = &mut self.slots[job.sink].bucket {
            b.take();
        }
        let slot = &self.slots[job.sink];
        slot.metrics.attempts.increment(1);
        self.running.insert(id, job);
        let tx = self.tx.clone();
        // Boxed: the task then holds a pointer, not the attempt's whole state, which tokio
        // would otherwise copy several times on the way in and again when it completes.
        let handle = self.tasks.spawn(Box::pin(async move {
            let started = Instant::now();
            let (span, ctx) = attempt::traced(&name, &env, ctx, parent.as_ref());
            let result = attempt::run(span, safe_deliver(&*sink, &env, &ctx, Some(timeout))).await;
            let _ = tx.send(Report::Done {
                attempt: id,
                result,
                took: started.elapsed(),
            });
        }));
        self.task_attempt.insert(handle.id(), id);
    }

    /// A task ended. A task that died (a panic outside the sink, which `safe_deliver`
    /// already catches, or in the claim store) fails its attempt or check-in transient, or
    /// reports its dead letter unstored, rather than leak the pair.
    pub(super) fn joined(&mut self, joined: Result<(tokio::task::Id, ()), tokio::task::JoinError>) {
        let (id, died) = match joined {
            Ok((id, ())) => (id, false),
            Err(e) => (e.id(), !e.is_cancelled()),
        };
        let attempt = self.task_attempt.remove(&id);
        let dead_letter = self.task_dead_letter.remove(&id);
        let check_in = self.task_claim.remove(&id);
        let park = self.task_park.remove(&id);
        if !died {
            return;
        }
        if let Some(hook) = check_in {
            // The store panicked: a failed check-in, retried, not a hook parked forever.
            let f = Failure::transient(Reason("the claim check-in task died".into()));
            self.claimed(hook, Err(f));
        }
        if let Some(attempt) = attempt {
            let f = Failure::transient(Reason("the attempt task died".into()));
            self.done(attempt, Err(f), Duration::ZERO);
        }
        if let Some(dl) = dead_letter {
            self.dead_lettered(dl, Err("the dead-letter task died".into()));
        }
        if let Some(p) = park {
            self.parked(p, Err("the park task died".into()));
        }
    }

    pub(super) fn done(&mut self, attempt: u64, result: Result<(), Failure>, took: Duration) {
        let Some(job) = self.running.remove(&attempt) else {
            return;
        };
        self.ready[job.sink].finished(job.tenant);
        let slot = &mut self.slots[job.sink];
        if slot.counted() {
            self.in_flight[job.sink] -= 1;
            if slot.window.is_some() {
                self.in_flight_bytes[job.sink] -= job.weight as usize;
            }
            if slot.shares_concurrency() {
                self.in_flight_total -= 1;
            }
        }
        slot.metrics.seconds.record(took.as_secs_f64());
        if let Some(Limit::Adaptive(a)) = &mut slot.limit {
            // The destination pushing back: a throttle, or a transient failure (a timeout,
            // a 5xx, a lost connection). A permanent answer says nothing of its load.
            let pushed = result.as_ref().is_err_and(|f| {
                matches!(
                    f.class(),
                    Class::Transient | Class::Throttled | Class::RetryAfter(_)
                )
            });
            let now = Instant::now();
            if let Err(f) = &result
                && let Class::RetryAfter(ms) = f.class()
            {
                // Capped like any retry-after: a destination cannot stop the sink for ever.
                let pause = Duration::from_millis(ms.get()).min(self.config.policy.max_retry_after);
                a.pause(now, pause);
            }
            if let Some(limit) = a.answered(took, pushed, self.in_flight[job.sink], now) {
                slot.metrics.concurrency_limit.set(limit as f64);
            }
        }
        match result {
            Ok(()) => {
                let before = self.breakers[job.sink].state();
                self.breakers[job.sink].success();
                self.breaker_moved(job.sink, before);
                self.set_breaker_gauge(job.sink);
                self.finish(job, Outcome::Delivered);
            }
            Err(f) => self.failed(job, f, true),
        }
    }

    /// What to do after a failed attempt (or check-in, `from_sink = false`).
    pub(super) fn failed(&mut self, mut job: Job, failure: Failure, from_sink: bool) {
        let first = job.first_ms.unwrap_or(job.last_ms);
        // The hook's attempt number (`ctx.attempt`), not this dispatcher's count: a hook
        // fed again at attempt 5 backs off, and is throttled, as its fifth attempt.
        let decision = decide(
            failure.class(),
            self.attempt_number(&job, job.attempts),
            first,
            self.clock.now_ms(),
            &self.config.policy,
            &mut rand::rng(),
        );
        let name = self.slots[job.sink].name.clone();
        record(&name, &decision);
        job.last_pause_ms = decision
            .pause
            .and_then(|p| NonZeroU32::new(u32::try_from(p.as_millis()).unwrap_or(u32::MAX)));
        if from_sink {
            let before = self.breakers[job.sink].state();
            if decision.counts_toward_breaker {
                let was_closed = !self.breakers[job.sink].is_open();
                self.breakers[job.sink].failure(Instant::now());
                if was_closed && self.breakers[job.sink].is_open() {
                    // Just opened: the jobs it now holds give their intake permits back.
                    for held in self.ready[job.sink].jobs_mut() {
                        held.permit = None;
                    }
                }
            } else {
                // Neither counted nor a success: a permanent or config answer may come
                // from the sink itself, without a word from the destination, so it never
                // closes the breaker (only a success does); a probe it answered lets the
                // next one go.
                self.breakers[job.sink].neutral();
            }
            self.breaker_moved(job.sink, before);
            self.set_breaker_gauge(job.sink);
        }
        match decision.action {
            Action::Retry { delay, .. } if self.stopping.is_none() => {
                // A parked pair is retried too, when read back: counted alike.
                if failure.may_have_landed() == Some(true) {
                    self.slots[job.sink]
                        .metrics
                        .may_have_landed_retries
                        .increment(1);
                }
                job.last_failure = Some(failure);
                if self.parks(&job, delay) {
                    self.park(job, delay);
                } else {
                    self.wait(job, Instant::now() + delay);
                }
            }
            Action::Retry { .. } => {
                job.last_failure = Some(failure);
                self.unfinished(job, false);
            }
            Action::DeadLetter { .. } => self.dead_letter(job, failure),
        }
    }

    /// The hook's attempt number (`ctx.attempt`) of a job's `n`-th attempt here.
    pub(super) fn attempt_number(&self, job: &Job, n: u32) -> u32 {
        let first = self.hooks.get(&job.hook).map_or(1, |h| h.first_attempt);
        first.saturating_add(n.max(1) - 1)
    }
}
