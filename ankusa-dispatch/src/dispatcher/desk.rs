//! The dead-letter desk: dead letters being stored or held to be stored again, parks being
//! written (one record format, `crate::record`), and the pause on intake while any dead
//! letter is held.

use super::scheduler::Job;
use super::types::Delivery;
use super::{IdMap, IntakeHold};
use crate::dead_letter::{DeadLetter, DeadLetterInfo, dead_letter_backoff};
use crate::metrics as m;
use ankusa_sink_core::Envelope;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A held dead letter's failure is logged at most this often.
pub(super) const DEAD_LETTER_LOG_EVERY: Duration = Duration::from_secs(60);

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

/// A park on its way to the destination.
pub(super) struct PendingPark {
    pub(super) job: Job,
    /// When the job would retry, should the park fail.
    pub(super) at: Instant,
    pub(super) not_before_ms: i64,
}

/// What the scheduler has on its way to a dead-letter store or a park destination.
pub(super) struct Desk {
    /// Where dead letters go, if anywhere.
    store: Option<DeadLetter>,
    /// Dead letters being stored, or held to be stored again, by id: their deliveries
    /// wait for the store's answer.
    dead_letters: IdMap<u64, PendingDeadLetter>,
    /// Parks being written, by id.
    parks: IdMap<u64, PendingPark>,
    /// Shared with `submit`: paused while a dead letter is held.
    intake_hold: Arc<IntakeHold>,
    /// When a dead letter's failure to be stored was last logged (at most once a minute).
    dead_letter_log: Option<Instant>,
    /// When a failed park was last logged.
    park_log: Option<Instant>,
}

impl Desk {
    pub(super) fn new(store: Option<DeadLetter>, intake_hold: Arc<IntakeHold>) -> Self {
        Desk {
            store,
            dead_letters: IdMap::default(),
            parks: IdMap::default(),
            intake_hold,
            dead_letter_log: None,
            park_log: None,
        }
    }

    /// Where dead letters go, if anywhere.
    pub(super) fn store(&self) -> Option<&DeadLetter> {
        self.store.as_ref()
    }

    /// Nothing on its way: no dead letter, no park.
    pub(super) fn is_idle(&self) -> bool {
        self.dead_letters.is_empty() && self.parks.is_empty()
    }

    pub(super) fn add_dead_letter(&mut self, id: u64, p: PendingDeadLetter) {
        self.dead_letters.insert(id, p);
    }

    /// What storing the dead letter `id` takes, as its store starts (it is no longer held).
    pub(super) fn storing(
        &mut self,
        id: u64,
    ) -> Option<(DeadLetter, Arc<Envelope>, DeadLetterInfo)> {
        let p = self.dead_letters.get_mut(&id)?;
        p.retry_at = None;
        Some((p.dl.clone(), p.env.clone(), p.info.clone()))
    }

    pub(super) fn dead_letter(&self, id: u64) -> Option<&PendingDeadLetter> {
        self.dead_letters.get(&id)
    }

    pub(super) fn remove_dead_letter(&mut self, id: u64) -> Option<PendingDeadLetter> {
        self.dead_letters.remove(&id)
    }

    /// The held dead letters whose backoff is over.
    pub(super) fn due(&self, now: Instant) -> Vec<u64> {
        self.dead_letters
            .iter()
            .filter(|(_, p)| p.retry_at.is_some_and(|at| at <= now))
            .map(|(&id, _)| id)
            .collect()
    }

    /// When the next held dead letter is due.
    pub(super) fn wake_at(&self) -> Option<Instant> {
        self.dead_letters.values().filter_map(|p| p.retry_at).min()
    }

    /// The dead letter `id` could not be stored (`error`): hold it and store it again with
    /// backoff (1 s doubling to 60 s), intake paused meanwhile.
    pub(super) fn hold(&mut self, id: u64, error: &str) {
        let Some(p) = self.dead_letters.get_mut(&id) else {
            return;
        };
        p.failures = p.failures.saturating_add(1);
        let backoff = dead_letter_backoff(p.failures);
        p.retry_at = Some(super::later(Instant::now(), backoff));
        let (hook_id, sink) = (p.env.id().to_owned(), p.info.sink.clone());
        self.held_changed();
        let held = self.held();
        self.log_dead_letter_error(|| {
            tracing::error!(
                target: "ankusa_dispatch",
                hook_id,
                sink,
                held,
                retry_in_s = backoff.as_secs(),
                error = %error,
                "a dead letter cannot be stored: its hook is held unacknowledged and \
                 intake is paused until it is"
            );
        });
    }

    /// The held dead letters, taken (a shutdown hands them back now).
    pub(super) fn take_held(&mut self) -> Vec<PendingDeadLetter> {
        let held: Vec<u64> = self
            .dead_letters
            .iter()
            .filter(|(_, p)| p.retry_at.is_some())
            .map(|(&id, _)| id)
            .collect();
        held.into_iter()
            .filter_map(|id| self.dead_letters.remove(&id))
            .collect()
    }

    /// Every dead letter still pending, taken.
    pub(super) fn take_dead_letters(&mut self) -> Vec<PendingDeadLetter> {
        self.dead_letters.drain().map(|(_, p)| p).collect()
    }

    pub(super) fn add_park(&mut self, id: u64, p: PendingPark) {
        self.parks.insert(id, p);
    }

    pub(super) fn remove_park(&mut self, id: u64) -> Option<PendingPark> {
        self.parks.remove(&id)
    }

    /// Every park still being written, taken.
    pub(super) fn take_parks(&mut self) -> Vec<PendingPark> {
        self.parks.drain().map(|(_, p)| p).collect()
    }

    /// Log a dead letter's failure to be stored, at most once a minute: a full disk fails
    /// every one of them, and the log may be on that disk.
    pub(super) fn log_dead_letter_error(&mut self, log: impl FnOnce()) {
        if may_log(&mut self.dead_letter_log) {
            log();
        }
    }

    /// Log a park's failure to be written, at most once a minute.
    pub(super) fn log_park_error(&mut self, log: impl FnOnce()) {
        if may_log(&mut self.park_log) {
            log();
        }
    }

    /// Dead letters held after a failed store.
    fn held(&self) -> usize {
        self.dead_letters
            .values()
            .filter(|p| p.failures > 0)
            .count()
    }

    /// Pause intake (and set the gauge) while any dead letter is held.
    pub(super) fn held_changed(&self) {
        let held = self.held() > 0;
        self.intake_hold.set(held);
        metrics::gauge!(m::DEAD_LETTER_BLOCKED).set(if held { 1.0 } else { 0.0 });
    }
}

/// Whether a log last written at `last` may be written now (then it is, now).
fn may_log(last: &mut Option<Instant>) -> bool {
    let now = Instant::now();
    if last.is_none_or(|at| now.duration_since(at) >= DEAD_LETTER_LOG_EVERY) {
        *last = Some(now);
        return true;
    }
    false
}
