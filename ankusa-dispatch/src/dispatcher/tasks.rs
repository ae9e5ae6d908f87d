//! The scheduler's own tasks (attempts, check-ins, dead-letter stores, parks) and what
//! each runs, so that a task that dies is reported as what it was doing.

use super::IdMap;
use std::future::Future;
use tokio::task::{Id, JoinError, JoinSet};

/// What a task runs, by the id its report carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TaskOf {
    Attempt(u64),
    /// The check-in of a hook's body.
    CheckIn(u64),
    DeadLetter(u64),
    Park(u64),
}

/// The tasks in flight, and the ids the scheduler gives attempts and records.
#[derive(Default)]
pub(super) struct Tasks {
    set: JoinSet<()>,
    of: IdMap<Id, TaskOf>,
    next_attempt: u64,
    /// Ids of dead letters and parks (one record format, one sequence).
    next_record: u64,
}

impl Tasks {
    /// A fresh attempt id.
    pub(super) fn next_attempt(&mut self) -> u64 {
        let id = self.next_attempt;
        self.next_attempt += 1;
        id
    }

    /// A fresh dead-letter or park id.
    pub(super) fn next_record(&mut self) -> u64 {
        let id = self.next_record;
        self.next_record += 1;
        id
    }

    /// Run `task`, remembered as `of` until it ends.
    pub(super) fn spawn<F>(&mut self, of: TaskOf, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let handle = self.set.spawn(task);
        self.of.insert(handle.id(), of);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The next task to end.
    pub(super) async fn join_next(&mut self) -> Option<Result<(Id, ()), JoinError>> {
        self.set.join_next_with_id().await
    }

    /// A task that has ended, if any.
    pub(super) fn try_join_next(&mut self) -> Option<Result<(Id, ()), JoinError>> {
        self.set.try_join_next_with_id()
    }

    /// A task ended: what it ran when it died (a panic), `None` when it returned or was
    /// aborted. Its report, if it returned, comes on the report channel.
    pub(super) fn ended(&mut self, joined: Result<(Id, ()), JoinError>) -> Option<TaskOf> {
        let (id, died) = match joined {
            Ok((id, ())) => (id, false),
            Err(e) => (e.id(), !e.is_cancelled()),
        };
        let of = self.of.remove(&id);
        of.filter(|_| died)
    }

    pub(super) fn abort_all(&mut self) {
        self.set.abort_all();
    }
}
