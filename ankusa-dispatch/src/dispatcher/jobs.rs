//! A job's way, as the scheduler coordinates it: a hook in (jobs per sink, the claim
//! check-in), its sink's admission (`SinkState::admit`), the attempt in a task of its own,
//! the answer (`SinkState::answered`, the policy's decision), the retry queue and the jobs
//! an open breaker holds.

use super::scheduler::{
    ClaimPhase, HookState, Job, MAX_SINK_PANICS, Permit, Report, Scheduler, copy,
};
use super::sink::{Answer, Refused, SinkState};
use super::tasks::TaskOf;
use super::types::{Hook, HookSettle, Outcome, Unfinished};
use crate::attempt;
use crate::metrics as m;
use crate::policy::{Action, Decision, decide, record};
use ankusa_claimcheck::needs_claim;
use ankusa_message::TraceContext;
use ankusa_sink_core::{Claim, Class, Ctx, Failure, Reason, SinkFault, safe_deliver};
use std::hash::BuildHasher as _;
use std::num::NonZeroU32;
use std::time::Duration;
use tokio::time::Instant;

impl Scheduler {
    pub(super) fn submit(&mut self, hook: Hook, sinks: &[usize], permits: Vec<Permit>) {
        if self.stopping.is_some() {
            // Raced with a shutdown: hand it back as unfinished rather than drop it.
            let env = hook.envelope;
            if let Some(s) = &mut self.stopping {
                for &i in sinks {
                    s.unfinished.push(Unfinished {
                        envelope: env.clone(),
                        sink: self.sinks[i].name.clone(),
                        attempts: 0,
                        last_failure: None,
                        was_in_flight: false,
                        replay_id: hook.replay_id.clone(),
                        retry_after_ms: None,
                    });
                }
            }
            return;
        }
        let id = self.next_hook;
        self.next_hook += 1;
        let mut ctx = Ctx::for_envelope(&hook.envelope);
        if let Some(r) = hook.replay_id {
            ctx = ctx.with_replay_id(r);
        }
        let mut claim = ClaimPhase::Ready;
        let size = hook.envelope.size();
        // A check-in needs them, and only a claim store checks in.
        let thresholds: Vec<_> = if self.claim_store.is_some() {
            sinks.iter().map(|&i| self.sinks[i].threshold).collect()
        } else {
            Vec::new()
        };
        if let Some(c) = hook.claim {
            ctx = ctx.with_claim(c);
        } else if self.claim_store.is_some() && needs_claim(size, thresholds.iter().copied()) {
            claim = ClaimPhase::Needed;
        }
        let now = self.clock.now_ms();
        // A claim travels instead of the body to every sink the body is too large for,
        // once a claim exists (given, or checked in before any job runs).
        let claims = ctx.claim.is_some() || claim == ClaimPhase::Needed;
        let tenant = self
            .tenant_keys
            .hash_one(hook.envelope.tenant_id().unwrap_or(""));
        self.hooks.insert(
            id,
            HookState {
                env: hook.envelope,
                ctx,
                parent: hook
                    .traceparent
                    .as_deref()
                    .and_then(TraceContext::parse)
                    .map(|t| match hook.tracestate.as_deref() {
                        Some(state) => t.with_tracestate(state),
                        None => t,
                    }),
                claim,
                thresholds,
                parked: Vec::new(),
                jobs_left: sinks.len(),
                submitted_ms: now,
                first_attempt: hook.first_attempt,
                settle: HookSettle::new(hook.ack),
                panic_logged: false,
            },
        );
        // A hook resumed from a park: its horizon counts from its first attempt, and its
        // next attempt waits for the not-before (in the retry queue, holding no permit).
        let resume = hook.resume;
        for (&sink, permit) in sinks.iter().zip(permits) {
            let weight = match self.sinks[sink].threshold {
                Some(t) if claims && size > t.get() as u64 => 0,
                _ => u32::try_from(size).unwrap_or(u32::MAX),
            };
            let job = Job {
                hook: id,
                sink,
                tenant,
                attempts: 0,
                first_ms: None,
                last_ms: now,
                last_failure: None,
                last_pause_ms: None,
                weight,
                panics: 0,
                permit: Some(permit),
            };
            let Some((first_ms, not_before_ms)) = resume else {
                self.enqueue(job);
                continue;
            };
            self.sinks[sink].metrics.unparked.increment(1);
            let mut job = job;
            job.first_ms = Some(first_ms);
            let wait = u64::try_from(not_before_ms.saturating_sub(now)).unwrap_or(0);
            if wait == 0 {
                self.enqueue(job);
                continue;
            }
            self.waiting.push(
                job,
                super::later(Instant::now(), Duration::from_millis(wait)),
            );
        }
    }

    /// A job is ready to run: park it behind its hook's check-in, or queue it for its sink.
    pub(super) fn enqueue(&mut self, job: Job) {
        let hook = job.hook;
        let Some(h) = self.hooks.get_mut(&hook) else {
            return;
        };
        match h.claim {
            ClaimPhase::Ready => self.sinks[job.sink].push_ready(job),
            ClaimPhase::Pending => h.parked.push(job),
            ClaimPhase::Needed => {
                h.claim = ClaimPhase::Pending;
                h.parked.push(job);
                self.check_in(hook);
            }
        }
    }

    pub(super) fn check_in(&mut self, hook: u64) {
        let (Some(store), Some(h)) = (self.claim_store.clone(), self.hooks.get(&hook)) else {
            return;
        };
        let env = h.env.clone();
        let thresholds = h.thresholds.clone();
        let tx = self.tx.clone();
        self.tasks.spawn(TaskOf::CheckIn(hook), async move {
            let result = store
                .claim_for(&env, thresholds)
                .await
                .map_err(Failure::from);
            metrics::counter!(m::CLAIM_CHECKINS, "result" => if result.is_ok() { "ok" } else { "failed" })
                .increment(1);
            let _ = tx.send(Report::Claimed { hook, result });
        });
    }

    pub(super) fn claimed(&mut self, hook: u64, result: Result<Option<Claim>, Failure>) {
        let Some(h) = self.hooks.get_mut(&hook) else {
            return;
        };
        let parked = std::mem::take(&mut h.parked);
        match result {
            Ok(claim) => {
                if let Some(c) = claim {
                    h.ctx = h.ctx.clone().with_claim(c);
                }
                h.claim = ClaimPhase::Ready;
                for job in parked {
                    self.sinks[job.sink].push_ready(job);
                }
            }
            Err(failure) => {
                // Classified like any failed attempt of each of the hook's jobs; a retry
                // checks the body in again first.
                h.claim = ClaimPhase::Needed;
                let now = self.clock.now_ms();
                for mut job in parked {
                    job.attempts += 1;
                    job.first_ms.get_or_insert(now);
                    job.last_ms = now;
                    let failure = copy(&failure);
                    let decision = self.decide(&job, &failure);
                    self.after_failure(job, failure, decision);
                }
            }
        }
    }

    /// Start every attempt the limits and breakers allow.
    pub(super) fn pump(&mut self, now: Instant) {
        let n = self.sinks.len();
        for i in 0..n {
            if self.sinks[i].held_scan_due(now) {
                self.expire_held(i);
            }
        }
        // Round robin, one attempt per sink per turn, starting after the sink served last:
        // a sink with a deep queue (a burst of woken retries) cannot keep the global slots
        // from the others.
        loop {
            let mut started = false;
            for k in 0..n {
                let i = (self.next_sink + k) % n;
                match self.sinks[i].admit(now, &mut self.in_flight_shared, &self.config) {
                    Ok(job) => {
                        self.start(job);
                        self.next_sink = (i + 1) % n;
                        started = true;
                    }
                    Err(Refused::Idle) => {}
                    // Why a sink with ready jobs sends nothing, for whoever asks (trace).
                    Err(refused) => tracing::trace!(
                        target: "ankusa_dispatch",
                        sink = &*self.sinks[i].name,
                        ?refused,
                        "attempt not started"
                    ),
                }
            }
            if !started {
                return;
            }
        }
    }

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
        let mut ctx = h
            .ctx
            .clone()
            .with_attempt(h.first_attempt.saturating_add(job.attempts - 1))
            .with_batch(slot.batched);
        if let Some(p) = &slot.header_policy {
            ctx = ctx.with_extension(p.clone());
        }
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
        let Some(mut job) = self.running.remove(&attempt) else {
            return;
        };
        let mut panicked = false;
        let result = match result {
            Err(f) if panic_text(&f).is_some() => {
                panicked = true;
                Err(self.sink_panicked(&mut job, f))
            }
            other => other,
        };
        let decision = result.as_ref().err().map(|f| self.decide(&job, f));
        let answer = match (&result, &decision) {
            // A panic is the sink's bug, not the destination's answer: see `Answer::Panicked`.
            (Err(_), Some(_)) if panicked => Answer::Panicked,
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

    /// A panic in the sink on `job`'s last attempt: counted, logged at ERROR once per hook,
    /// and the failure to decide on: transient (retried like any) until the pair's
    /// [`MAX_SINK_PANICS`]th panic, then permanent ("sink panicked"): a bug does not go
    /// away by waiting, and retrying it to the horizon only keeps its intake place.
    fn sink_panicked(&mut self, job: &mut Job, failure: Failure) -> Failure {
        let sink = &self.sinks[job.sink];
        sink.metrics.panics.increment(1);
        job.panics = job.panics.saturating_add(1);
        let text = panic_text(&failure).unwrap_or_default().to_owned();
        let attempt = self.attempt_number(job, job.attempts);
        let gives_up = job.panics >= MAX_SINK_PANICS;
        if let Some(h) = self.hooks.get_mut(&job.hook) {
            if h.panic_logged {
                tracing::debug!(
                    target: "ankusa_dispatch",
                    sink = &*sink.name,
                    hook_id = h.env.id(),
                    attempt,
                    panics = job.panics,
                    "sink panicked again"
                );
            } else {
                h.panic_logged = true;
                tracing::error!(
                    target: "ankusa_dispatch",
                    sink = &*sink.name,
                    hook_id = h.env.id(),
                    attempt,
                    panic = %text,
                    "sink panicked delivering a hook (a bug in the sink); the pair is given up \
                     on after {MAX_SINK_PANICS} panics"
                );
            }
        }
        if !gives_up {
            return failure;
        }
        Failure::permanent(SinkFault::Panicked(text))
            .with_may_have_landed(failure.may_have_landed())
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
                    self.waiting.push(job, super::later(Instant::now(), delay));
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

/// The panic message of a failure `safe_deliver` made of a panic in the sink, read from its
/// typed reason (a sink's own failure whose text says "panicked" is not one).
fn panic_text(failure: &Failure) -> Option<&str> {
    match failure.reason().downcast_ref::<SinkFault>() {
        Some(SinkFault::Panicked(text)) => Some(text),
        _ => None,
    }
}
