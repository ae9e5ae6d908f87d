//! A generic request batcher for sinks whose destination takes several messages per request
//! (SQS `SendMessageBatch`, SNS `PublishBatch`, ...).

mod limit;

use ankusa_sink_core::{Class, Failure};
use async_trait::async_trait;
use limit::Limit;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Sends one request that carries several entries.
#[async_trait]
pub trait BatchSend: Send + Sync + 'static {
    /// One prepared message.
    type Entry: Send + 'static;

    /// Send `entries` (never empty) in one request.
    ///
    /// # Behavior
    /// - Answers exactly one result per entry, in the order of `entries`: the entry's own
    ///   outcome (an entry the destination accepted is `Ok`, whatever happened to the
    ///   others). A failure of the whole request is a failure of every entry.
    async fn send_batch(&self, entries: Vec<Self::Entry>) -> Vec<Result<(), Failure>>;
}

/// The limits of a [`Batcher`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchConfig {
    /// Entries per request (SQS and SNS: 10).
    pub max_entries: NonZeroUsize,
    /// Total declared bytes per request (SQS: 1 MiB; SNS: 256 KiB by default).
    pub max_bytes: NonZeroUsize,
    /// The longest an entry waits for companions. Default 10 ms. A linger too long to add
    /// to the clock (e.g. `Duration::MAX`) means no time limit: requests leave only when
    /// full or when the batcher is dropped.
    pub linger: Duration,
    /// Entries waiting in the queue, all tenants. Default 10,000.
    pub max_queued: NonZeroUsize,
    /// Entries of one tenant waiting in the queue. Default 2,500.
    pub max_queued_per_tenant: NonZeroUsize,
    /// Requests in flight at once. Default 16.
    pub max_requests: NonZeroUsize,
    /// The round trip a request should stay under. `None` (the default): `max_requests`
    /// requests are in flight whenever entries wait. `Some(t)`: the limit adapts to the
    /// destination, from one request up to `max_requests`: it doubles per round trip while
    /// answers come within `t` (slow start), then grows by one per round trip, and drops
    /// by a quarter on an answer slower than `t` or one that says
    /// [`Class::Throttled`](ankusa_sink_core::Class::Throttled). A destination that queues requests
    /// instead of serving them in parallel then gets as many as it answers within `t`,
    /// not enough to time out; one that serves them in parallel gets `max_requests`.
    /// A sink sets it to a quarter of its call timeout: slow start overshoots about
    /// twofold, so even then a round trip stays well within the timeout.
    pub latency_target: Option<Duration>,
}

impl BatchConfig {
    /// Limits of `max_entries` entries and `max_bytes` bytes per request, other limits at
    /// their defaults.
    pub fn new(max_entries: NonZeroUsize, max_bytes: NonZeroUsize) -> Self {
        BatchConfig {
            max_entries,
            max_bytes,
            linger: Duration::from_millis(10),
            max_queued: NonZeroUsize::new(10_000).expect("non-zero"),
            max_queued_per_tenant: NonZeroUsize::new(2_500).expect("non-zero"),
            max_requests: NonZeroUsize::new(16).expect("non-zero"),
            latency_target: None,
        }
    }
    /// Set [`linger`](Self::linger).
    pub fn with_linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }
    /// Set [`max_queued`](Self::max_queued).
    pub fn with_max_queued(mut self, max: NonZeroUsize) -> Self {
        self.max_queued = max;
        self
    }
    /// Set [`max_queued_per_tenant`](Self::max_queued_per_tenant).
    pub fn with_max_queued_per_tenant(mut self, max: NonZeroUsize) -> Self {
        self.max_queued_per_tenant = max;
        self
    }
    /// Set [`max_requests`](Self::max_requests).
    pub fn with_max_requests(mut self, max: NonZeroUsize) -> Self {
        self.max_requests = max;
        self
    }
    /// Set [`latency_target`](Self::latency_target): requests in flight adapt to keep a
    /// round trip under `target`.
    pub fn with_latency_target(mut self, target: Duration) -> Self {
        self.latency_target = Some(target);
        self
    }
}

/// Why the batcher itself failed a delivery.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// The queue holds `max_queued` entries (retry-after).
    #[error("batcher queue is full ({queued} entries waiting, cap {cap})")]
    QueueFull {
        /// Entries waiting.
        queued: usize,
        /// The cap.
        cap: usize,
    },
    /// This tenant holds its share of the queue (retry-after).
    #[error("tenant {tenant:?} holds its share of the batcher queue ({queued} of {share})")]
    TenantShare {
        /// The tenant (empty: no tenant).
        tenant: String,
        /// Its entries waiting.
        queued: usize,
        /// Its share.
        share: usize,
    },
    /// The sender answered fewer results than entries (transient).
    #[error("the batch sender gave no result for this entry")]
    NoResult,
    /// The request task ended without answering, e.g. it panicked (transient).
    #[error("the batch request ended without a result for this entry")]
    Dropped,
}

struct Pending<E> {
    tenant: String,
    bytes: usize,
    since: Instant,
    entry: E,
    reply: oneshot::Sender<Result<(), Failure>>,
}

struct State<E> {
    queue: VecDeque<Pending<E>>,
    bytes: usize,
    per_tenant: HashMap<String, usize>,
    flusher: Option<JoinHandle<()>>,
    closed: bool,
}

struct Shared<S: BatchSend> {
    sender: S,
    config: BatchConfig,
    state: Mutex<State<S::Entry>>,
    wake: Notify,
    requests: Arc<Semaphore>,
    limit: Arc<Limit>,
}

impl<S: BatchSend> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, State<S::Entry>> {
        // A panic while holding the lock leaves consistent counters (no await inside).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Groups entries into requests.
///
/// A sink whose [`Capabilities::batched`](ankusa_sink_core::Capabilities::batched) is true and that sees `ctx.batch` hands
/// its prepared entry to [`Batcher::submit`] and awaits that entry's own result. The
/// batcher groups waiting entries into requests and sends them through the sink's
/// [`BatchSend`].
///
/// # Behavior
/// - A request carries at most [`max_entries`](BatchConfig::max_entries) entries whose
///   declared sizes add up to at most [`max_bytes`](BatchConfig::max_bytes); an entry
///   larger than `max_bytes` on its own is sent alone (the destination decides).
/// - An entry waits at most [`linger`](BatchConfig::linger) for companions: a request leaves
///   when it is full (by count or bytes) or when its oldest entry has waited `linger`.
/// - *Requests*, not messages, count toward [`max_requests`](BatchConfig::max_requests):
///   a request needs a permit of the batcher's semaphore (shareable with
///   [`Batcher::with_semaphore`]). While every permit is taken, entries keep gathering, so
///   batches grow under load. With a [`latency_target`](BatchConfig::latency_target), how
///   many of those permits are used follows the destination's round trips
///   ([`Batcher::request_limit`]).
/// - Bounded: at most [`max_queued`](BatchConfig::max_queued) entries wait in the queue, at
///   most [`max_queued_per_tenant`](BatchConfig::max_queued_per_tenant) of one tenant
///   (no tenant is a tenant of its own), so one tenant cannot fill it. Over either cap,
///   `submit` queues nothing and answers [`Class::Throttled`](ankusa_sink_core::Class::Throttled)
///   (dispatch draws the pause): back-pressure, like a destination's throttle. Entries
///   leave the queue (and free their share) when their request starts.
/// - Each waiting delivery gets the result of its own entry: [`BatchSend::send_batch`]
///   answers one result per entry, in order. A missing result, or a request task that
///   panicked, is a transient failure for the entries concerned; nothing is re-sent by the
///   batcher (dispatch retries the failed deliveries only).
/// - A caller that stops waiting (a deadline) does not withdraw its entry: it is still
///   sent (at-least-once).
/// - Dropping the batcher sends what is queued without waiting for `linger`; the
///   background task then ends.
pub struct Batcher<S: BatchSend> {
    shared: Arc<Shared<S>>,
}

impl<S: BatchSend> fmt::Debug for Batcher<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let queued = self.shared.lock().queue.len();
        f.debug_struct("Batcher")
            .field("config", &self.shared.config)
            .field("queued", &queued)
            .field("request_limit", &self.shared.limit.current())
            .finish_non_exhaustive()
    }
}

impl<S: BatchSend> Batcher<S> {
    /// A batcher sending through `sender`, with its own semaphore of
    /// [`max_requests`](BatchConfig::max_requests) permits.
    pub fn new(sender: S, config: BatchConfig) -> Self {
        let max = config.max_requests.get();
        Self::build(sender, config, Arc::new(Semaphore::new(max)), max)
    }

    /// A batcher whose requests take permits of `requests` (e.g. the sink's concurrency
    /// limit, shared with its unbatched deliveries); `max_requests` is then not used.
    pub fn with_semaphore(sender: S, config: BatchConfig, requests: Arc<Semaphore>) -> Self {
        // `max_requests` is not the bound here: the semaphore is.
        Self::build(sender, config, requests, usize::MAX)
    }

    fn build(sender: S, config: BatchConfig, requests: Arc<Semaphore>, max: usize) -> Self {
        let limit = Limit::new(max, config.latency_target);
        Batcher {
            shared: Arc::new(Shared {
                sender,
                config,
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    bytes: 0,
                    per_tenant: HashMap::new(),
                    flusher: None,
                    closed: false,
                }),
                wake: Notify::new(),
                requests,
                limit: Arc::new(limit),
            }),
        }
    }

    /// The limits.
    pub fn config(&self) -> &BatchConfig {
        &self.shared.config
    }

    /// The sender.
    pub fn sender(&self) -> &S {
        &self.shared.sender
    }

    /// Entries waiting for a request right now.
    pub fn queued(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// The requests the batcher sends at once now: `max_requests`, or with a
    /// [`latency_target`](BatchConfig::latency_target) what the destination's round trips
    /// allow (1 to `max_requests`). A batcher made [`with_semaphore`](Self::with_semaphore)
    /// is bounded by its semaphore instead (`usize::MAX` here without a target).
    pub fn request_limit(&self) -> usize {
        self.shared.limit.current()
    }

    /// Queue `entry` (of `bytes` declared bytes) for `tenant` and wait for its own result.
    ///
    /// When the queue or the tenant's share is full, nothing is queued and the answer is
    /// [`Class::Throttled`](ankusa_sink_core::Class::Throttled). Must be called inside a Tokio runtime:
    /// the first call starts the batcher's background task.
    pub async fn submit(
        &self,
        tenant: Option<&str>,
        bytes: usize,
        entry: S::Entry,
    ) -> Result<(), Failure> {
        let (rx, wake) = self.enqueue(tenant.unwrap_or(""), bytes, entry)?;
        if wake {
            self.shared.wake.notify_one();
        }
        rx.await
            .unwrap_or_else(|_| Err(Failure::transient(BatchError::Dropped)))
    }

    /// Queue the entry; also whether the flusher must hear of it. Only two arrivals change
    /// what it waits for: the first entry (it starts the linger clock) and the one that
    /// fills a request. Waking it for every entry cost a wake-up and a poll per delivery.
    fn enqueue(
        &self,
        tenant: &str,
        bytes: usize,
        entry: S::Entry,
    ) -> Result<(oneshot::Receiver<Result<(), Failure>>, bool), Failure> {
        let cfg = &self.shared.config;
        let mut st = self.shared.lock();
        if st.queue.len() >= cfg.max_queued.get() {
            let err = BatchError::QueueFull {
                queued: st.queue.len(),
                cap: cfg.max_queued.get(),
            };
            return Err(Failure::new(Class::Throttled, err).with_may_have_landed(Some(false)));
        }
        let mine = st.per_tenant.get(tenant).copied().unwrap_or(0);
        if mine >= cfg.max_queued_per_tenant.get() {
            let err = BatchError::TenantShare {
                tenant: tenant.to_owned(),
                queued: mine,
                share: cfg.max_queued_per_tenant.get(),
            };
            return Err(Failure::new(Class::Throttled, err).with_may_have_landed(Some(false)));
        }
        let (reply, rx) = oneshot::channel();
        *st.per_tenant.entry(tenant.to_owned()).or_insert(0) += 1;
        st.bytes += bytes;
        st.queue.push_back(Pending {
            tenant: tenant.to_owned(),
            bytes,
            since: Instant::now(),
            entry,
            reply,
        });
        if st.flusher.as_ref().is_none_or(JoinHandle::is_finished) {
            st.flusher = Some(tokio::spawn(flush_loop(Arc::clone(&self.shared))));
        }
        let max_bytes = cfg.max_bytes.get();
        let wake = st.queue.len() == 1
            || st.queue.len() == cfg.max_entries.get()
            || (st.bytes >= max_bytes && st.bytes - bytes < max_bytes);
        Ok((rx, wake))
    }
}

impl<S: BatchSend> Drop for Batcher<S> {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

/// Wait until a request should leave; `false` when the batcher is closed and drained.
async fn ready<S: BatchSend>(shared: &Shared<S>) -> bool {
    let cfg = &shared.config;
    loop {
        let deadline = {
            let st = shared.lock();
            match st.queue.front() {
                None if st.closed => return false,
                None => None,
                Some(_)
                    if st.closed
                        || st.queue.len() >= cfg.max_entries.get()
                        || st.bytes >= cfg.max_bytes.get() =>
                {
                    return true;
                }
                // A linger past the end of time (`Duration::MAX`) never expires: the
                // request leaves when it is full or the batcher closes.
                Some(oldest) => oldest.since.checked_add(cfg.linger),
            }
        };
        match deadline {
            None => shared.wake.notified().await,
            Some(at) if Instant::now() >= at => return true,
            Some(at) => {
                let lingered = tokio::select! {
                    _ = tokio::time::sleep_until(at) => true,
                    _ = shared.wake.notified() => false,
                };
                if lingered {
                    return true;
                }
            }
        }
    }
}

/// Take the next request's entries off the queue.
fn take<S: BatchSend>(shared: &Shared<S>) -> Vec<Pending<S::Entry>> {
    let cfg = &shared.config;
    let mut st = shared.lock();
    let mut batch = Vec::new();
    let mut bytes = 0usize;
    while let Some(next) = st.queue.front() {
        let full = batch.len() >= cfg.max_entries.get()
            || (!batch.is_empty() && bytes + next.bytes > cfg.max_bytes.get());
        if full {
            break;
        }
        let p = st.queue.pop_front().expect("front exists");
        bytes += p.bytes;
        st.bytes -= p.bytes;
        if let Some(n) = st.per_tenant.get_mut(&p.tenant) {
            *n -= 1;
            if *n == 0 {
                st.per_tenant.remove(&p.tenant);
            }
        }
        batch.push(p);
    }
    batch
}

async fn flush_loop<S: BatchSend>(shared: Arc<Shared<S>>) {
    while ready(&shared).await {
        // Entries keep gathering while the limit is full, as while permits are taken.
        shared.limit.room().await;
        let Ok(permit) = Arc::clone(&shared.requests).acquire_owned().await else {
            // Only a caller-owned semaphore can be closed: nothing can be sent any more.
            fail_all(&shared);
            return;
        };
        let batch = take(&shared);
        if batch.is_empty() {
            continue;
        }
        let ticket = shared.limit.start();
        tokio::spawn(send(Arc::clone(&shared), batch, permit, ticket));
    }
}

fn fail_all<S: BatchSend>(shared: &Shared<S>) {
    let mut st = shared.lock();
    st.bytes = 0;
    st.per_tenant.clear();
    for p in st.queue.drain(..) {
        let _ = p.reply.send(Err(Failure::transient(BatchError::Dropped)));
    }
}

async fn send<S: BatchSend>(
    shared: Arc<Shared<S>>,
    batch: Vec<Pending<S::Entry>>,
    _permit: OwnedSemaphorePermit,
    ticket: limit::Ticket,
) {
    let mut replies = Vec::with_capacity(batch.len());
    let entries = batch
        .into_iter()
        .map(|p| {
            replies.push(p.reply);
            p.entry
        })
        .collect();
    let results = shared.sender.send_batch(entries).await;
    ticket.answered(
        results
            .iter()
            .any(|r| matches!(r, Err(f) if f.class() == Class::Throttled)),
    );
    let mut results = results.into_iter();
    for reply in replies {
        let res = results
            .next()
            .unwrap_or_else(|| Err(Failure::transient(BatchError::NoResult)));
        // The caller may have stopped waiting; its entry was still sent.
        let _ = reply.send(res);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::{Class, Reason};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Records every request; fails entries whose value is odd (permanent) and, when
    /// `short`, answers one result too few.
    #[derive(Default)]
    struct Recorder {
        requests: Mutex<Vec<Vec<u32>>>,
        in_flight: AtomicUsize,
        max_in_flight: AtomicUsize,
        gate: Option<Arc<Semaphore>>,
        short: bool,
    }

    #[async_trait]
    impl BatchSend for Arc<Recorder> {
        type Entry = u32;
        async fn send_batch(&self, entries: Vec<u32>) -> Vec<Result<(), Failure>> {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            if let Some(gate) = &self.gate {
                let _p = gate.acquire().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            self.requests.lock().unwrap().push(entries.clone());
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let take = if self.short {
                entries.len() - 1
            } else {
                entries.len()
            };
            entries
                .into_iter()
                .take(take)
                .map(|v| {
                    if v % 2 == 1 {
                        Err(Failure::permanent(Reason(format!("odd {v}"))))
                    } else {
                        Ok(())
                    }
                })
                .collect()
        }
    }

    fn nz(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    fn cfg(entries: usize, bytes: usize) -> BatchConfig {
        BatchConfig::new(nz(entries), nz(bytes))
    }

    async fn submit_all(b: &Arc<Batcher<Arc<Recorder>>>, n: u32) -> Vec<Result<(), Failure>> {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let b = Arc::clone(b);
                tokio::spawn(async move { b.submit(Some("t"), 10, i).await })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn groups_up_to_max_entries_and_answers_each_entry() {
        let rec = Arc::new(Recorder::default());
        let b = Arc::new(Batcher::new(
            Arc::clone(&rec),
            cfg(10, 1 << 20).with_max_requests(nz(1)),
        ));
        let results = submit_all(&b, 25).await;
        for (i, r) in results.iter().enumerate() {
            match r {
                Ok(()) => assert_eq!(i % 2, 0, "entry {i}"),
                Err(f) => {
                    assert_eq!(i % 2, 1, "entry {i}");
                    assert_eq!(f.class(), Class::Permanent);
                    assert_eq!(f.to_string(), format!("permanent: odd {i}"));
                }
            }
        }
        let reqs = rec.requests.lock().unwrap().clone();
        assert!(reqs.iter().all(|r| r.len() <= 10), "{reqs:?}");
        let mut sent: Vec<u32> = reqs.iter().flatten().copied().collect();
        sent.sort_unstable();
        assert_eq!(sent, (0..25).collect::<Vec<_>>(), "each entry sent once");
        assert_eq!(reqs.len(), 3, "{reqs:?}");
        assert_eq!(b.queued(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn total_bytes_split_requests() {
        let rec = Arc::new(Recorder::default());
        // 10-byte entries, 35 bytes per request: at most 3 per request.
        let b = Arc::new(Batcher::new(
            Arc::clone(&rec),
            cfg(10, 35).with_max_requests(nz(1)),
        ));
        let results = submit_all(&b, 9).await;
        assert_eq!(results.len(), 9);
        let reqs = rec.requests.lock().unwrap().clone();
        assert!(reqs.iter().all(|r| r.len() <= 3), "{reqs:?}");
        assert_eq!(reqs.iter().map(Vec::len).sum::<usize>(), 9);
    }

    #[tokio::test(start_paused = true)]
    async fn an_entry_larger_than_max_bytes_goes_alone() {
        let rec = Arc::new(Recorder::default());
        let b = Batcher::new(Arc::clone(&rec), cfg(10, 5));
        b.submit(None, 50, 2).await.unwrap();
        assert_eq!(rec.requests.lock().unwrap().clone(), vec![vec![2]]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_entry_waits_at_most_linger() {
        let rec = Arc::new(Recorder::default());
        let b = Batcher::new(
            Arc::clone(&rec),
            cfg(10, 1000).with_linger(Duration::from_millis(200)),
        );
        let start = Instant::now();
        b.submit(None, 1, 4).await.unwrap();
        let took = start.elapsed();
        // linger, plus the recorder's 5 ms request.
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(took < Duration::from_millis(300), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn requests_not_messages_count_toward_the_limit() {
        let rec = Arc::new(Recorder::default());
        let b = Arc::new(Batcher::new(
            Arc::clone(&rec),
            cfg(10, 1 << 20).with_max_requests(nz(2)),
        ));
        let results = submit_all(&b, 200).await;
        assert_eq!(results.len(), 200);
        assert!(rec.max_in_flight.load(Ordering::SeqCst) <= 2);
        let reqs = rec.requests.lock().unwrap().len();
        assert!((20..200).contains(&reqs), "{reqs} requests");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_and_a_tenants_share_answer_throttled() {
        let gate = Arc::new(Semaphore::new(0));
        let rec = Arc::new(Recorder {
            gate: Some(Arc::clone(&gate)),
            ..Recorder::default()
        });
        let b = Arc::new(Batcher::new(
            Arc::clone(&rec),
            cfg(1, 1 << 20)
                .with_max_requests(nz(1))
                .with_max_queued(nz(4))
                .with_max_queued_per_tenant(nz(2)),
        ));
        // One request in flight (held by the gate), then the queue fills.
        let spawn = |tenant: &'static str, v: u32| {
            let b = Arc::clone(&b);
            tokio::spawn(async move { b.submit(Some(tenant), 1, v).await })
        };
        let first = spawn("a", 0);
        while rec.in_flight.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let a1 = spawn("a", 2);
        let a2 = spawn("a", 4);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(b.queued(), 2);

        let over_share = b.submit(Some("a"), 1, 6).await.unwrap_err();
        assert_eq!(over_share.class(), Class::Throttled);
        assert!(over_share.to_string().contains("share"), "{over_share}");

        let b1 = spawn("b", 8);
        let none = spawn("", 10);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(b.queued(), 4);
        let full = b.submit(Some("c"), 1, 12).await.unwrap_err();
        assert_eq!(full.class(), Class::Throttled);
        assert!(full.to_string().contains("queue is full"), "{full}");

        gate.add_permits(100);
        for t in [first, a1, a2, b1, none] {
            t.await.unwrap().unwrap();
        }
        assert_eq!(b.queued(), 0);
        // Shares are free again.
        b.submit(Some("a"), 1, 14).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_result_is_transient() {
        let rec = Arc::new(Recorder {
            short: true,
            ..Recorder::default()
        });
        let b = Arc::new(Batcher::new(
            Arc::clone(&rec),
            cfg(10, 1 << 20).with_max_requests(nz(1)),
        ));
        let results = submit_all(&b, 2).await;
        let failures: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        assert_eq!(failures.len(), 1, "{results:?}");
        assert_eq!(failures[0].class(), Class::Transient);
        assert!(failures[0].to_string().contains("no result"));
    }

    /// A destination that serves one request at a time, 10 ms each (moto, an overloaded
    /// server): a request's round trip grows with the requests ahead of it.
    #[derive(Default)]
    struct Serial {
        server: tokio::sync::Mutex<()>,
        in_flight: AtomicUsize,
        max_in_flight: AtomicUsize,
        longest_ms: AtomicUsize,
    }

    #[async_trait]
    impl BatchSend for Arc<Serial> {
        type Entry = u32;
        async fn send_batch(&self, entries: Vec<u32>) -> Vec<Result<(), Failure>> {
            let start = Instant::now();
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            {
                let _served = self.server.lock().await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let took = usize::try_from(start.elapsed().as_millis()).unwrap();
            self.longest_ms.fetch_max(took, Ordering::SeqCst);
            entries.iter().map(|_| Ok(())).collect()
        }
    }

    async fn through_serial(config: BatchConfig, n: u32) -> (Arc<Serial>, usize) {
        let server = Arc::new(Serial::default());
        let b = Arc::new(Batcher::new(Arc::clone(&server), config));
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let b = Arc::clone(&b);
                tokio::spawn(async move { b.submit(None, 10, i).await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        (server, b.request_limit())
    }

    #[tokio::test(start_paused = true)]
    async fn a_latency_target_keeps_a_queueing_destinations_round_trips_within_it() {
        let base = cfg(10, 1 << 20).with_max_requests(nz(16));
        // Without a target all 16 requests queue at the server: the last waits 160 ms.
        let (fixed, limit) = through_serial(base.clone(), 2_000).await;
        assert_eq!(limit, 16);
        assert_eq!(fixed.max_in_flight.load(Ordering::SeqCst), 16);
        assert!(fixed.longest_ms.load(Ordering::SeqCst) >= 150);

        let (adaptive, limit) =
            through_serial(base.with_latency_target(Duration::from_millis(50)), 2_000).await;
        // 50 ms holds five 10 ms requests; slow start overshoots about twofold (each fast
        // answer from the last fast window adds one, one more already on its way).
        let longest = adaptive.longest_ms.load(Ordering::SeqCst);
        assert!(longest <= 110, "longest round trip {longest} ms");
        let most = adaptive.max_in_flight.load(Ordering::SeqCst);
        assert!(
            (4..=11).contains(&most),
            "{most} requests in flight at most"
        );
        assert!((3..=6).contains(&limit), "limit {limit}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_latency_target_reaches_max_requests_on_a_parallel_destination() {
        let rec = Arc::new(Recorder::default());
        let b = Arc::new(Batcher::new(
            Arc::clone(&rec),
            cfg(10, 1 << 20)
                .with_max_requests(nz(16))
                .with_latency_target(Duration::from_millis(50)),
        ));
        assert_eq!(b.request_limit(), 1, "it starts with one request");
        submit_all(&b, 2_000).await;
        assert_eq!(b.request_limit(), 16);
        assert_eq!(rec.max_in_flight.load(Ordering::SeqCst), 16);
    }

    struct Panics;

    #[async_trait]
    impl BatchSend for Panics {
        type Entry = ();
        async fn send_batch(&self, _: Vec<()>) -> Vec<Result<(), Failure>> {
            panic!("sender bug")
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_request_fails_its_entries_transiently() {
        let b = Batcher::new(Panics, cfg(10, 100));
        let err = b.submit(None, 1, ()).await.unwrap_err();
        assert_eq!(err.class(), Class::Transient);
        // The batcher still works for the next delivery.
        let err = b.submit(None, 1, ()).await.unwrap_err();
        assert_eq!(err.class(), Class::Transient);
    }

    #[tokio::test(start_paused = true)]
    async fn an_endless_linger_sends_full_requests_and_does_not_panic() {
        let rec = Arc::new(Recorder::default());
        let b = Arc::new(Batcher::new(
            Arc::clone(&rec),
            cfg(2, 1000).with_linger(Duration::MAX),
        ));
        let one = tokio::spawn({
            let b = Arc::clone(&b);
            async move { b.submit(None, 1, 2).await }
        });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!one.is_finished(), "a lone entry waits for a companion");
        let two = tokio::time::timeout(Duration::from_secs(5), b.submit(None, 1, 4))
            .await
            .expect("the flusher is alive and sends a full request");
        assert!(two.is_ok());
        assert!(one.await.unwrap().is_ok());
        assert_eq!(*rec.requests.lock().unwrap(), vec![vec![2, 4]]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_endless_linger_sends_a_request_full_by_bytes() {
        let rec = Arc::new(Recorder::default());
        // 10-byte entries, 25 bytes per request: the third entry fills one by bytes.
        let b = Arc::new(Batcher::new(
            Arc::clone(&rec),
            cfg(10, 25).with_linger(Duration::MAX),
        ));
        let first: Vec<_> = [2, 4]
            .into_iter()
            .map(|v| {
                let b = Arc::clone(&b);
                tokio::spawn(async move { b.submit(None, 10, v).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(
            first.iter().all(|t| !t.is_finished()),
            "20 of 25 bytes wait"
        );
        let third = tokio::spawn({
            let b = Arc::clone(&b);
            async move { b.submit(None, 10, 6).await }
        });
        for t in first {
            let res = tokio::time::timeout(Duration::from_secs(5), t)
                .await
                .expect("the flusher heard of the full request");
            assert!(res.unwrap().is_ok());
        }
        assert_eq!(*rec.requests.lock().unwrap(), vec![vec![2, 4]]);
        assert!(
            !third.is_finished(),
            "the third entry starts the next request"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_batcher_sends_what_is_queued() {
        let rec = Arc::new(Recorder::default());
        let b = Batcher::new(
            Arc::clone(&rec),
            cfg(10, 1000).with_linger(Duration::from_secs(3600)),
        );
        // A one-hour linger: the caller gives up waiting, its entry stays queued...
        tokio::select! {
            _ = b.submit(None, 1, 2) => panic!("answered before the linger ended"),
            _ = tokio::time::sleep(Duration::from_millis(1)) => {}
        }
        assert_eq!(b.queued(), 1);
        // ...and is sent at once when the batcher is dropped.
        drop(b);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(rec.requests.lock().unwrap().len(), 1);
    }
}
