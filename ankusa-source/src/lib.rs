#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How a record is settled with its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Every sink of the record's route delivered it or dead-lettered it (the dead-letter
    /// record written): the source may forget it.
    Ack,
    /// The record is not finished (a shutdown cut it off, a dead letter could not be
    /// stored, it was never submitted): the broker must give it out again, here or to
    /// another forwarder. Kafka cannot release one record: its offset is simply never
    /// committed past.
    Release,
}

/// A source's side of one record's acknowledgement.
///
/// `settle` is called once, from whatever task finished the record (the dispatcher's
/// scheduler): it must not block. Send the settlement to the source's own task, or spawn.
pub trait Settle: Send + 'static {
    /// Settle the record.
    fn settle(self: Box<Self>, how: Settlement);
}

/// The ack handle of one record. Dropped without [`ack`](Self::ack) or
/// [`release`](Self::release), it releases the record: a handle lost on a path nobody
/// thought of never acknowledges a record that was not delivered.
pub struct Ack {
    inner: Option<(Box<dyn Settle>, OwnedSemaphorePermit)>,
}

impl Ack {
    /// A handle that settles through `settle` and holds one place of the source's
    /// [`Window`] until it is settled.
    pub fn new(settle: impl Settle, permit: Permit) -> Self {
        Ack {
            inner: Some((Box::new(settle), permit.0)),
        }
    }

    /// The record is finished.
    pub fn ack(mut self) {
        self.settle(Settlement::Ack);
    }

    /// The record is not finished: give it out again.
    pub fn release(mut self) {
        self.settle(Settlement::Release);
    }

    /// Settle as `how` (the dispatcher's verdict).
    pub fn settle_as(mut self, how: Settlement) {
        self.settle(how);
    }

    fn settle(&mut self, how: Settlement) {
        if let Some((s, permit)) = self.inner.take() {
            s.settle(how);
            // The place in the window is given back only after the source heard of it.
            drop(permit);
        }
    }
}

impl Drop for Ack {
    fn drop(&mut self) {
        self.settle(Settlement::Release);
    }
}

impl fmt::Debug for Ack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ack")
            .field("settled", &self.inner.is_none())
            .finish()
    }
}

/// One record read from a source.
#[derive(Debug)]
#[non_exhaustive]
pub struct Record {
    /// The record's bytes: an envelope as JSON or a Message v1.
    pub payload: Vec<u8>,
    /// Where it came from, for outcome lines and logs (`topic/partition@offset`,
    /// `queue#delivery_tag`, `stream/consumer@sequence`): never a secret.
    pub position: String,
    /// Settle it after its final outcome.
    pub ack: Ack,
}

impl Record {
    /// A record.
    pub fn new(payload: Vec<u8>, position: impl Into<String>, ack: Ack) -> Self {
        Record {
            payload,
            position: position.into(),
            ack,
        }
    }
}

/// The bound on records handed out and not yet settled: what keeps a slow sink from
/// growing a forwarder's memory. Cheap to clone; every clone is the same window.
#[derive(Debug, Clone)]
pub struct Window {
    places: Arc<Semaphore>,
    size: usize,
}

/// One place in a [`Window`], held by a record's [`Ack`].
#[derive(Debug)]
pub struct Permit(OwnedSemaphorePermit);

impl Window {
    /// A window of `size` records; `None` for zero.
    pub fn new(size: usize) -> Option<Self> {
        (size > 0).then(|| Window {
            places: Arc::new(Semaphore::new(size)),
            size,
        })
    }

    /// A place: waits while `size` records are unsettled.
    pub async fn acquire(&self) -> Permit {
        let p = self
            .places
            .clone()
            .acquire_owned()
            .await
            .expect("the window's semaphore is never closed");
        Permit(p)
    }

    /// Records handed out and not settled now.
    pub fn unsettled(&self) -> usize {
        self.size - self.places.available_permits()
    }

    /// The window's size.
    pub fn size(&self) -> usize {
        self.size
    }
}

/// What every source is opened with, besides its own config file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SourceOptions {
    /// Records handed out and not settled at once ([`Window`]).
    pub max_unacked: NonZeroUsize,
    /// How long one hook may take before its final outcome is known, at most (the
    /// attempt timeout): a source whose broker redelivers unacknowledged records after a
    /// deadline (NATS `ack_wait`) keeps that deadline longer, and says it is still working
    /// on a record in between.
    pub attempt_timeout: Duration,
    /// Concurrency of the dispatcher behind the source (AMQP's default prefetch).
    pub concurrency: NonZeroUsize,
}

impl SourceOptions {
    /// Options for a dispatcher of `concurrency` attempts in flight: a window of
    /// `max_unacked` records, attempts cut at `attempt_timeout`.
    pub fn new(
        max_unacked: NonZeroUsize,
        attempt_timeout: Duration,
        concurrency: NonZeroUsize,
    ) -> Self {
        SourceOptions {
            max_unacked,
            attempt_timeout,
            concurrency,
        }
    }
}

/// Why a source cannot go on. Transient trouble (a broker restarting, a lost connection)
/// is not an error: sources reconnect by themselves and say so in their logs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The configuration cannot work: credentials refused, the queue, stream or consumer
    /// does not exist, a bad option. Never holds a secret.
    #[error("{0}")]
    Config(String),
    /// The source failed in a way it cannot recover from by itself.
    #[error("{0}")]
    Fatal(String),
}

/// A durable source of records.
#[async_trait::async_trait]
pub trait Source: Send {
    /// The next record; waits while the [`Window`] is full and while the broker has
    /// nothing. `None` after [`stop`](Self::stop): no more records will come.
    async fn next(&mut self) -> Option<Result<Record, SourceError>>;

    /// Stop fetching. Records handed out still settle; [`close`](Self::close) then makes
    /// their acknowledgements final.
    fn stop(&mut self);

    /// Make the settlements so far final (commit offsets, flush acks) within `grace`, and
    /// leave the broker: every record not acknowledged goes back to it.
    async fn close(self: Box<Self>, grace: Duration);

    /// What this source reads, for logs: hosts, topic, queue or stream; never a secret.
    fn describe(&self) -> String;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Log(Arc<Mutex<Vec<Settlement>>>);
    impl Settle for Log {
        fn settle(self: Box<Self>, how: Settlement) {
            self.0.lock().unwrap().push(how);
        }
    }

    #[tokio::test]
    async fn a_dropped_handle_releases_and_frees_its_place() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let w = Window::new(2).unwrap();
        let a = Ack::new(Log(log.clone()), w.acquire().await);
        let b = Ack::new(Log(log.clone()), w.acquire().await);
        assert_eq!(w.unsettled(), 2);
        // A third place waits for one of the two.
        let third = tokio::time::timeout(Duration::from_millis(50), w.acquire()).await;
        assert!(third.is_err(), "the window is full");
        a.ack();
        drop(b);
        assert_eq!(*log.lock().unwrap(), [Settlement::Ack, Settlement::Release]);
        assert_eq!(w.unsettled(), 0);
    }

    #[test]
    fn a_window_of_zero_is_refused() {
        assert!(Window::new(0).is_none());
    }
}
