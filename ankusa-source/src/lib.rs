#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod memory;

pub use memory::{MemorySource, Settlements};

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default bound on the bytes of records handed out and not settled: 256 MiB.
pub const DEFAULT_MAX_UNACKED_BYTES: NonZeroUsize = NonZeroUsize::new(256 * 1024 * 1024).unwrap();

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
    inner: Option<(Box<dyn Settle>, Permit)>,
}

impl Ack {
    /// A handle that settles through `settle` and holds its record's place (and bytes) in
    /// the source's [`Window`] until it is settled.
    pub fn new(settle: impl Settle, permit: Permit) -> Self {
        Ack {
            inner: Some((Box::new(settle), permit)),
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

/// The bound on records handed out and not yet settled, in records and in bytes: what
/// keeps a slow sink, or a producer of large records, from growing a forwarder's memory.
/// Cheap to clone; every clone is the same window.
///
/// A source takes a place ([`acquire`](Self::acquire)) before it fetches a record, then
/// charges the record's bytes ([`charge`](Self::charge)) once it knows them. A record
/// larger than the whole byte budget is charged the whole budget: it waits until nothing
/// else holds bytes and then goes through alone, so no record can stall the source.
#[derive(Debug, Clone)]
pub struct Window {
    places: Arc<Semaphore>,
    size: usize,
    /// The byte budget in units of `1 << shift` bytes: a semaphore takes at most
    /// `u32::MAX` permits at once, so a budget past 4 GiB is counted in coarser units.
    bytes: Arc<Semaphore>,
    units: u32,
    shift: u32,
    max_bytes: usize,
}

/// One record's place in a [`Window`], and once [charged](Window::charge) its bytes;
/// held by the record's [`Ack`].
#[derive(Debug)]
pub struct Permit {
    _place: OwnedSemaphorePermit,
    bytes: Option<OwnedSemaphorePermit>,
}

impl Window {
    /// A window of `size` records and no byte bound; `None` for zero.
    pub fn new(size: usize) -> Option<Self> {
        Self::with_bytes(size, usize::MAX)
    }

    /// A window of `size` records and `max_bytes` bytes; `None` when either is zero.
    pub fn with_bytes(size: usize, max_bytes: usize) -> Option<Self> {
        if size == 0 || max_bytes == 0 {
            return None;
        }
        let shift = (usize::BITS - max_bytes.leading_zeros()).saturating_sub(32);
        let units = u32::try_from(max_bytes >> shift).expect("shifted into u32");
        Some(Window {
            places: Arc::new(Semaphore::new(size)),
            size,
            bytes: Arc::new(Semaphore::new(units as usize)),
            units,
            shift,
            max_bytes,
        })
    }

    /// The window `options` ask for: `max_unacked` records, `max_unacked_bytes` bytes.
    pub fn for_options(options: &SourceOptions) -> Self {
        Self::with_bytes(options.max_unacked.get(), options.max_unacked_bytes.get())
            .expect("both are non-zero")
    }

    /// A place: waits while `size` records are unsettled. It holds no bytes yet.
    pub async fn acquire(&self) -> Permit {
        let p = self
            .places
            .clone()
            .acquire_owned()
            .await
            .expect("the window's semaphore is never closed");
        Permit {
            _place: p,
            bytes: None,
        }
    }

    /// Charge `len` bytes to `permit` (a record of `len` bytes): waits until they fit
    /// beside the bytes other records hold. A record larger than the budget is charged the
    /// whole budget, so it waits until no other record holds bytes and then goes alone.
    /// A permit already charged is returned as it is.
    pub async fn charge(&self, mut permit: Permit, len: usize) -> Permit {
        if permit.bytes.is_none() {
            let p = self
                .bytes
                .clone()
                .acquire_many_owned(self.units_of(len))
                .await
                .expect("the window's semaphore is never closed");
            permit.bytes = Some(p);
        }
        permit
    }

    /// Waits until at least `len` bytes (at most the whole budget) are free; takes none.
    pub async fn until_free(&self, len: usize) {
        let p = self
            .bytes
            .acquire_many(self.units_of(len))
            .await
            .expect("the window's semaphore is never closed");
        drop(p);
    }

    /// Waits until at most `n` places are taken (the caller's own included); takes none.
    /// Exact up to a window of `u32::MAX` records.
    pub async fn until_unsettled_at_most(&self, n: usize) {
        let free = self.size.saturating_sub(n);
        let p = self
            .places
            .acquire_many(u32::try_from(free).unwrap_or(u32::MAX))
            .await
            .expect("the window's semaphore is never closed");
        drop(p);
    }

    /// The units a record of `len` bytes is charged: rounded up, never more than the budget.
    fn units_of(&self, len: usize) -> u32 {
        let units = len.div_ceil(1 << self.shift);
        u32::try_from(units).unwrap_or(u32::MAX).min(self.units)
    }

    /// Records handed out and not settled now.
    pub fn unsettled(&self) -> usize {
        self.size - self.places.available_permits()
    }

    /// Bytes charged to records not settled now (in the window's units: exact up to a
    /// budget of 4 GiB).
    pub fn unsettled_bytes(&self) -> usize {
        let held = self.units as usize - self.bytes.available_permits();
        held.saturating_mul(1 << self.shift).min(self.max_bytes)
    }

    /// Bytes that can be charged now without waiting.
    pub fn free_bytes(&self) -> usize {
        self.max_bytes - self.unsettled_bytes()
    }

    /// The window's size in records.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The window's byte budget (`usize::MAX`: none).
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }
}

/// A sink's name made fit for the name of what a source reads for that sink alone (a
/// consumer group, a durable consumer, a queue): ASCII letters, digits, `_`, `-` and the
/// `extra` characters are kept, any other character becomes `_`. Two sinks whose names
/// differ only in such characters get the same name: callers refuse that.
pub fn lane_name(sink: &str, extra: &[char]) -> String {
    sink.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' || extra.contains(&c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// What every source is opened with, besides its own config file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SourceOptions {
    /// Records handed out and not settled at once ([`Window`]).
    pub max_unacked: NonZeroUsize,
    /// Bytes of records handed out and not settled at once ([`Window`]); each source also
    /// keeps what its client prefetches within this budget (AMQP's prefetch, Kafka's fetch
    /// queue, a NATS pull's `max_bytes`). Default [`DEFAULT_MAX_UNACKED_BYTES`].
    pub max_unacked_bytes: NonZeroUsize,
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
    /// `max_unacked` records and [`DEFAULT_MAX_UNACKED_BYTES`], attempts cut at
    /// `attempt_timeout`.
    pub fn new(
        max_unacked: NonZeroUsize,
        attempt_timeout: Duration,
        concurrency: NonZeroUsize,
    ) -> Self {
        SourceOptions {
            max_unacked,
            max_unacked_bytes: DEFAULT_MAX_UNACKED_BYTES,
            attempt_timeout,
            concurrency,
        }
    }

    /// Bound the bytes of records handed out and not settled.
    pub fn with_max_unacked_bytes(mut self, max_unacked_bytes: NonZeroUsize) -> Self {
        self.max_unacked_bytes = max_unacked_bytes;
        self
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

    /// The source's [`Window`], for a caller that reports when it is full (the window
    /// holds no records; it is a shared handle). `None`: the source does not say.
    fn window(&self) -> Option<Window> {
        None
    }

    /// A handle that asks the broker how far behind this source's reader is, apart from
    /// the reading (a caller polls it while `next` runs). `None`: the source cannot say.
    fn lag(&self) -> Option<Arc<dyn Lag>> {
        None
    }
}

/// How far behind a source's reader is, as its broker reports it: records in the topic past
/// the group's committed offsets (Kafka), messages not yet delivered to the durable consumer
/// (JetStream `num_pending`), messages ready in the queue (RabbitMQ).
#[async_trait::async_trait]
pub trait Lag: Send + Sync {
    /// Records behind now; `None` when the broker cannot be asked at the moment (the
    /// previous figure then stands).
    async fn lag(&self) -> Option<u64>;

    /// Whether the figure counts the records this reader holds, read and not settled (a
    /// Kafka group's lag runs from its committed offsets), or only those not handed to a
    /// reader yet (a queue's ready count: RabbitMQ, NATS `num_pending`, SQS). Default:
    /// the latter.
    fn counts_read(&self) -> bool {
        false
    }
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
    fn lane_names_keep_what_brokers_take() {
        assert_eq!(lane_name("good-http_1", &[]), "good-http_1");
        assert_eq!(lane_name("a.b c/é", &[]), "a_b_c__");
        assert_eq!(lane_name("a.b c", &['.']), "a.b_c");
    }

    #[test]
    fn a_window_of_zero_is_refused() {
        assert!(Window::new(0).is_none());
        assert!(Window::with_bytes(1, 0).is_none());
        assert!(Window::with_bytes(0, 1).is_none());
    }

    /// Polls `f` once: `Some` if it finished at once (a semaphore that has the permits
    /// answers on the first poll, one that lacks them never does until a release).
    fn ready_now<F: std::future::Future>(f: F) -> Option<F::Output> {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }

    fn noop() -> Log {
        Log(Arc::default())
    }

    #[tokio::test]
    async fn bytes_bound_the_window_as_well_as_records() {
        let w = Window::with_bytes(10, 100).unwrap();
        let a = w.charge(w.acquire().await, 60).await;
        assert_eq!(
            (w.unsettled(), w.unsettled_bytes(), w.free_bytes()),
            (1, 60, 40)
        );
        // 50 more do not fit beside 60: the record waits with its place held.
        let place = w.acquire().await;
        assert!(ready_now(w.charge(place, 50)).is_none(), "waits for bytes");
        assert!(ready_now(w.until_free(41)).is_none());
        assert!(ready_now(w.until_free(40)).is_some());
        // The waiting charge was dropped with its place: one place is taken.
        assert!(
            ready_now(w.until_unsettled_at_most(0)).is_none(),
            "one place taken"
        );
        assert!(ready_now(w.until_unsettled_at_most(1)).is_some());
        // Settling the first frees its bytes and its place.
        let a = Ack::new(noop(), a);
        a.ack();
        assert_eq!((w.unsettled(), w.unsettled_bytes()), (0, 0));
        let b = ready_now(w.charge(w.acquire().await, 50)).expect("fits now");
        let c = ready_now(w.charge(w.acquire().await, 50)).expect("fits exactly");
        assert_eq!(w.free_bytes(), 0);
        // A record of no bytes still takes a place, and passes a full byte budget.
        let d = ready_now(w.charge(w.acquire().await, 0)).expect("no bytes");
        assert_eq!((w.unsettled(), w.unsettled_bytes()), (3, 100));
        drop((b, c, d));
        assert_eq!((w.unsettled(), w.unsettled_bytes()), (0, 0));
    }

    #[tokio::test]
    async fn a_record_larger_than_the_budget_goes_through_alone() {
        let w = Window::with_bytes(10, 100).unwrap();
        let small = w.charge(w.acquire().await, 1).await;
        let big = w.acquire().await;
        let mut big = std::pin::pin!(w.charge(big, 1_000));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(
            big.as_mut().poll(&mut cx).is_pending(),
            "waits for the others"
        );
        drop(small);
        let big = match big.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(p) => p,
            std::task::Poll::Pending => panic!("alone, it goes through"),
        };
        assert_eq!(w.unsettled_bytes(), 100, "it holds the whole budget");
        assert!(ready_now(w.charge(w.acquire().await, 1)).is_none(), "alone");
        drop(big);
        assert_eq!(w.free_bytes(), 100);
    }

    #[tokio::test]
    async fn a_charged_permit_is_not_charged_twice() {
        let w = Window::with_bytes(2, 10).unwrap();
        let p = w.charge(w.acquire().await, 4).await;
        let p = w.charge(p, 4).await;
        assert_eq!(w.unsettled_bytes(), 4);
        drop(p);
    }

    #[test]
    fn budgets_past_4_gib_count_in_coarser_units() {
        let w = Window::with_bytes(1, 1 << 40).unwrap();
        assert_eq!(w.max_bytes(), 1 << 40);
        assert_eq!((w.units, w.shift), (1 << 31, 9), "1 TiB in 512-byte units");
        assert_eq!(w.units_of(1), 1, "rounded up");
        assert_eq!(w.units_of(usize::MAX), w.units, "never past the budget");
        let unbounded = Window::new(1).unwrap();
        assert_eq!(unbounded.max_bytes(), usize::MAX);
        assert_eq!(unbounded.units_of(usize::MAX), unbounded.units);
        let exact = Window::with_bytes(1, u32::MAX as usize).unwrap();
        assert_eq!((exact.shift, exact.units_of(7)), (0, 7));
    }

    #[test]
    fn options_default_to_256_mib_of_records() {
        let o = SourceOptions::new(
            NonZeroUsize::new(5).unwrap(),
            Duration::from_secs(1),
            NonZeroUsize::MIN,
        );
        assert_eq!(o.max_unacked_bytes.get(), 268_435_456);
        let o = o.with_max_unacked_bytes(NonZeroUsize::new(7).unwrap());
        let w = Window::for_options(&o);
        assert_eq!((w.size(), w.max_bytes()), (5, 7));
    }
}
