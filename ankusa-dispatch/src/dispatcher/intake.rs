//! Hooks coming in: jobs per sink, the claim check-in, and starting what the limits allow.

use super::*;
use std::hash::BuildHasher as _;

impl Scheduler {
    pub(super) fn submit(&mut self, hook: Hook, sinks: &[usize], permits: Vec<Permit>) {
        if self.stopping.is_some() {
            // Raced with a shutdown: hand it back as unfinished rather than drop it.
            let env = hook.envelope;
            if let Some(s) = &mut self.stopping {
                for &i in sinks {
                    s.unfinished.push(Unfinished {
                        envelope: env.clone(),
                        sink: self.slots[i].name.clone(),
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
            sinks.iter().map(|&i| self.slots[i].threshold).collect()
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
            let weight = match self.slots[sink].threshold {
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
            self.slots[sink].metrics.unparked.increment(1);
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
        let handle = self.tasks.spawn(async move {
            let result = store
                .claim_for(&env, thresholds)
                .await
                .map_err(Failure::from);
            metrics::counter!(m::CLAIM_CHECKINS, "result" => if result.is_ok() { "ok" } else { "failed" })
                .increment(1);
            let _ = tx.send(Report::Claimed { hook, result });
        });
        self.task_claim.insert(handle.id(), hook);
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
                    self.failed(job, copy(&failure), false);
                }
            }
        }
    }

    /// Queue a job for its sink. A job held by an open breaker keeps no intake permit:
    /// fresh hooks to other sinks flow.
    pub(super) fn push_ready(&mut self, mut job: Job) {
        if self.breakers[job.sink].is_open() {
            job.permit = None;
        }
        self.ready[job.sink].push_back(job);
    }

    /// Start every attempt the limits and breakers allow.
    pub(super) fn pump(&mut self, now: Instant) {
        let n = self.slots.len();
        for i in 0..n {
            // Once per HELD_SCAN, not on every message: a scan walks the whole queue.
            if self.breakers[i].is_open() && !self.ready[i].is_empty() && now >= self.held_scan[i] {
                self.expire_held(i);
                self.held_scan[i] = now + HELD_SCAN;
            }
        }
        // Round robin, one attempt per sink per turn, starting after the sink served last:
        // a sink with a deep queue (a burst of woken retries) cannot keep the global slots
        // from the others.
        loop {
            let mut started = false;
            for k in 0..n {
                let i = (self.next_sink + k) % n;
                let cap = self.tenant_cap(i);
                let Some(next) = self.ready[i].peek(cap) else {
                    continue;
                };
                if !self.has_room(i, next.weight) || !self.may_start(i, now) {
                    continue;
                }
                let before = self.breakers[i].state();
                if !self.breakers[i].admit(now) {
                    continue;
                }
                self.breaker_moved(i, before);
                let job = self.ready[i].pop(cap).expect("peeked");
                self.start(job);
                self.next_sink = (i + 1) % n;
                started = true;
            }
            if !started {
                return;
            }
        }
    }

    /// The cap on one tenant's attempts in flight on sink `i` (never on a batching sink,
    /// whose attempts wait in its batcher).
    pub(super) fn tenant_cap(&self, i: usize) -> Option<u32> {
        let slot = &self.slots[i];
        slot.tenant_concurrency.filter(|_| !slot.batched)
    }

    /// Whether sink `i` may start an attempt at `now`: no pause the destination asked for
    /// (an adaptive sink), a token in its rate limit's bucket (taken when it starts).
    pub(super) fn may_start(&mut self, i: usize, now: Instant) -> bool {
        let slot = &mut self.slots[i];
        if let Some(Limit::Adaptive(a)) = &slot.limit
            && now < a.ready_at()
        {
            return false;
        }
        slot.bucket.as_mut().is_none_or(|b| b.ready(now))
    }

    /// Whether sink `i` may start an attempt of `weight` body bytes now.
    pub(super) fn has_room(&self, i: usize, weight: u32) -> bool {
        let slot = &self.slots[i];
        if !slot.counted() {
            return true;
        }
        let per_sink = self.config.sink_concurrency;
        if let Some(limit) = &slot.limit {
            let bytes = self.in_flight_bytes[i];
            let fits = slot.window.is_none_or(|w| {
                bytes == 0 || bytes.saturating_add(weight as usize) <= w.bytes.get()
            });
            return self.in_flight[i] < limit.current() && fits;
        }
        match slot.window {
            None => {
                self.in_flight_total < self.config.concurrency
                    && per_sink.is_none_or(|c| self.in_flight[i] < c)
            }
            Some(w) => {
                let bytes = self.in_flight_bytes[i];
                // A batching sink's deliveries are not counted against `sink_concurrency`:
                // they wait in its batcher for a batch to fill, which a cap on deliveries
                // would prevent. Its window bounds them; its batcher bounds requests.
                let cap = match per_sink {
                    Some(c) if !slot.batched => c,
                    _ => w.deliveries.get(),
                };
                self.in_flight[i] < cap
                    && (bytes == 0 || bytes.saturating_add(weight as usize) <= w.bytes.get())
            }
        }
    }
}
