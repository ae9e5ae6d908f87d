//! One sink's ready jobs, queued per tenant and served round robin: one tenant's backlog
//! delays another tenant's first hook by one round at most. A tenant may be capped to a
//! number of attempts in flight on the sink (`tenant_concurrency`).

use super::IdMap;
use super::scheduler::Job;
use std::collections::VecDeque;
/// A sink's ready jobs by tenant (the tenant id's hash: [`Job::tenant`]).
#[derive(Default)]
pub(super) struct Ready {
    /// Each tenant's jobs, oldest first. A tenant without jobs has no entry.
    queues: IdMap<u64, VecDeque<Job>>,
    /// The tenants with jobs, in the order they are served next.
    turn: VecDeque<u64>,
    /// Attempts in flight per tenant (only counted under a cap).
    running: IdMap<u64, u32>,
    len: usize,
}

impl Ready {
    /// Queue `job` behind its tenant's others.
    pub(super) fn push_back(&mut self, job: Job) {
        let tenant = job.tenant;
        let q = self.queues.entry(tenant).or_default();
        if q.is_empty() {
            self.turn.push_back(tenant);
        }
        q.push_back(job);
        self.len += 1;
    }

    /// The next job to serve: the oldest of the first tenant in turn that is under `cap`
    /// (`None`: no cap).
    pub(super) fn peek(&self, cap: Option<u32>) -> Option<&Job> {
        let tenant = self.next_tenant(cap)?;
        self.queues.get(&tenant).and_then(VecDeque::front)
    }

    /// Take the job [`peek`](Self::peek) showed; its tenant goes to the back of the turn.
    pub(super) fn pop(&mut self, cap: Option<u32>) -> Option<Job> {
        let tenant = self.next_tenant(cap)?;
        let at = self.turn.iter().position(|&t| t == tenant)?;
        self.turn.remove(at);
        let q = self.queues.get_mut(&tenant)?;
        let job = q.pop_front()?;
        if q.is_empty() {
            self.queues.remove(&tenant);
        } else {
            self.turn.push_back(tenant);
        }
        self.len -= 1;
        if cap.is_some() {
            *self.running.entry(tenant).or_default() += 1;
        }
        Some(job)
    }

    /// An attempt of `tenant` taken under a cap ended.
    pub(super) fn finished(&mut self, tenant: u64) {
        if let Some(n) = self.running.get_mut(&tenant) {
            *n -= 1;
            if *n == 0 {
                self.running.remove(&tenant);
            }
        }
    }

    fn next_tenant(&self, cap: Option<u32>) -> Option<u64> {
        match cap {
            None => self.turn.front().copied(),
            Some(cap) => self
                .turn
                .iter()
                .copied()
                .find(|t| self.running.get(t).copied().unwrap_or(0) < cap),
        }
    }

    /// Jobs queued.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Tenants with jobs waiting here.
    pub(super) fn tenants_waiting(&self) -> usize {
        self.turn.len()
    }

    /// Every queued job.
    pub(super) fn jobs_mut(&mut self) -> impl Iterator<Item = &mut Job> {
        self.queues.values_mut().flatten()
    }

    /// Take every queued job (each tenant's in order, tenants in turn order).
    pub(super) fn take_all(&mut self) -> Vec<Job> {
        let mut all = Vec::with_capacity(self.len);
        for t in self.turn.drain(..) {
            if let Some(q) = self.queues.remove(&t) {
                all.extend(q);
            }
        }
        self.len = 0;
        all
    }
}
