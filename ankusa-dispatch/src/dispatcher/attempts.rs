//! Attempts: started in tasks of their own, their answers, and what a failure leads to.

use super::scheduler::{Job, Report, Scheduler};
use super::sink::Answer;
use super::tasks::TaskOf;
use super::types::Outcome;
use crate::attempt;
use crate::policy::{Action, Decision, decide, record};
use ankusa_sink_core::{Failure, Reason, safe_deliver};
use std::num::NonZeroU32;
use std::time::Duration;
use tokio::time::Instant;
impl Scheduler {
    pub(super) fn start(&mut self, mut job: Job) {
        let Some(h) = self.hooks.get(&job.hook) else {
            self.sinks[job.sink].abandoned(&job, &mut self.in_flight_shared);
            return;
        };
        let slot = &self.sinks[job.sink];
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
        let id = self.tasks.next_attempt();
        self.running.insert(id, job);
        let tx = self.tx.clone();
        // Boxed: the task then holds a pointer, not the attempt's whole state, which tokio
        // would otherwise copy several times on the way in and again when it completes.
        let task = Box::pin(async move {
            let started = Instant::now();
            let (span, ctx) = attempt::traced(&name, &env, ctx, parent.as_ref());
            let result = attempt::run(span, safe_deliver(&*sink, &env, &ctx, Some(timeout))).await;
            let _ = tx.send(Report::Done {
                attempt: id,
                result,
                took: started.elapsed(),
            });
        });
        self.tasks.spawn(TaskOf::Attempt(id), task);
    }

    /// A task ended. A task that died (a panic outside the sink, which `safe_deliver`
    /// already catches, or in the claim store) fails its attempt or check-in transient, or
    /// reports its dead letter unstored, rather than leak the pair.
    pub(super) fn joined(&mut self, joined: Result<(tokio::task::Id, ()), tokio::task::JoinError>) {
        match self.tasks.ended(joined) {
            // The store panicked: a failed check-in, retried, not a hook parked forever.
            Some(TaskOf::CheckIn(hook)) => {
                let f = Failure::transient(Reason("the claim check-in task died".into()));
                self.claimed(hook, Err(f));
            }
            Some(TaskOf::Attempt(attempt)) => {
                let f = Failure::transient(Reason("the attempt task died".into()));
                self.done(attempt, Err(f), Duration::ZERO);
            }
            Some(TaskOf::DeadLetter(dl)) => {
                self.dead_lettered(dl, Err("the dead-letter task died".into()));
            }
            Some(TaskOf::Park(p)) => self.parked(p, Err("the park task died".into())),
            None => {}
        }
    }

    pub(super) fn done(&mut self, attempt: u64, result: Result<(), Failure>, took: Duration) {
        let Some(job) = self.running.remove(&attempt) else {
            return;
        };
        let decision = result.as_ref().err().map(|f| self.decide(&job, f));
        let answer = match (&result, &decision) {
            (Err(failure), Some(d)) => Answer::Failed {
                failure,
                counts_toward_breaker: d.counts_toward_breaker,
            },
            _ => Answer::Delivered,
        };
        self.sinks[job.sink].answered(&job, took, answer, &mut self.in_flight_shared, &self.config);
        match (result, decision) {
            (Err(f), Some(d)) => self.after_failure(job, f, d),
            _ => self.finish(job, Outcome::Delivered),
        }
    }

    /// The policy's decision on `failure` of `job`'s last attempt (or check-in), counted
    /// in the metrics.
    pub(super) fn decide(&self, job: &Job, failure: &Failure) -> Decision {
        let first = job.first_ms.unwrap_or(job.last_ms);
        // The hook's attempt number (`ctx.attempt`), not this dispatcher's count: a hook
        // fed again at attempt 5 backs off, and is throttled, as its fifth attempt.
        let decision = decide(
            failure.class(),
            self.attempt_number(job, job.attempts),
            first,
            self.clock.now_ms(),
            &self.config.policy,
            &mut rand::rng(),
        );
        record(&self.sinks[job.sink].name, &decision);
        decision
    }

    /// What to do after a failed attempt or check-in, as the policy decided.
    pub(super) fn after_failure(&mut self, mut job: Job, failure: Failure, decision: Decision) {
        job.last_pause_ms = decision
            .pause
            .and_then(|p| NonZeroU32::new(u32::try_from(p.as_millis()).unwrap_or(u32::MAX)));
        match decision.action {
            Action::Retry { delay, .. } if self.stopping.is_none() => {
                // A parked pair is retried too, when read back: counted alike.
                if failure.may_have_landed() == Some(true) {
                    self.sinks[job.sink]
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
