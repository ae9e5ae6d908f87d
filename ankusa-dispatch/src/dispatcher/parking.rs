//! Parking: a pair whose next attempt is far off is written to its sink's park destination
//! and finished here, so its source record holds no commit and no window place meanwhile.

use super::desk::PendingPark;
use super::scheduler::{Job, Report, Scheduler};
use super::tasks::TaskOf;
use super::types::Outcome;
use crate::dead_letter::{DeadLetterInfo, deliver_carrier};
use crate::record::{PairState, carrier, record_attrs};
use ankusa_sink_core::{Failure, Reason};
use std::time::Duration;
use tokio::time::Instant;

impl Scheduler {
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
        let at = Instant::now() + delay;
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
        self.tasks.spawn(TaskOf::Park(id), async move {
            let result = deliver_carrier(&*park.sink, &env, attrs, timeout).await;
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
        self.wait(job, at);
    }

    /// Parks still being written at a shutdown's end go back unfinished (written or not,
    /// the record is released: a replay is a duplicate, never a loss).
    pub(super) fn hand_back_parks(&mut self) {
        for p in self.desk.take_parks() {
            self.unfinished(p.job, false);
        }
    }
}
