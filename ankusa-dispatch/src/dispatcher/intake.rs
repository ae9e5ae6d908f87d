//! Hooks coming in: jobs per sink, the claim check-in, and starting what the limits allow.

use super::scheduler::{ClaimPhase, HookState, Job, Permit, Report, Scheduler, copy};
use super::sink::Refused;
use super::tasks::TaskOf;
use super::types::{Hook, HookSettle, Unfinished};
use crate::metrics as m;
use ankusa_claimcheck::needs_claim;
use ankusa_message::TraceContext;
use ankusa_sink_core::{Claim, Ctx, Failure};
use std::hash::BuildHasher as _;
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
            self.wait(job, Instant::now() + Duration::from_millis(wait));
        }
    }

    /// A job is ready to run: park it behind its hook's check-in, or queue it for its sink.
    pub(super) fn enqueue(&mut self, job: Job) {
        let hook = job.hook;
        let Some(h) = self.hooks.get_mut(&hook) else {
            return;
        };
        match h.claim {
            ClaimPhase::Ready => self.push_ready(job),
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
                    self.push_ready(job);
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

    /// Queue a job for its sink.
    pub(super) fn push_ready(&mut self, job: Job) {
        self.sinks[job.sink].push_ready(job);
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
                    Err(refused) => {
                        tracing::trace!(target: "ankusa_dispatch", sink = &*self.sinks[i].name, ?refused, "not started");
                    }
                }
            }
            if !started {
                return;
            }
        }
    }
}
