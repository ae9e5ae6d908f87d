//! Hooks from a durable source through a [`Dispatcher`]: each record is read, decoded
//! (an envelope as JSON or a Message v1), submitted with its acknowledgement, and
//! acknowledged to its source only after every sink of its route delivered it or
//! dead-lettered it. What `ankusa-sink forward --from` runs, for library users.
//!
//! [`Forward::run`] is the whole loop: it reads until the source ends, fails or is
//! stopped ([`ForwardStop`]), then shuts the dispatcher down within the drain time,
//! closes the source and reports. [`Forward::read`] is its intake half alone, for a caller
//! that reads the [`Deliveries`] itself (the CLI writes an outcome line for each).
//!
//! ```
//! use ankusa_dispatch::forward::Forward;
//! use ankusa_dispatch::Dispatcher;
//! use ankusa_sink_core::{Ctx, Envelope, Failure, Sink, async_trait};
//! use ankusa_source::{MemorySource, Settlement};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! #[derive(Debug)]
//! struct Accept;
//!
//! #[async_trait]
//! impl Sink for Accept {
//!     async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let hook = Envelope::builder("h1", "stripe", "{}").build().unwrap();
//! let source = MemorySource::new([serde_json::to_vec(&hook).unwrap(), b"not json".to_vec()]);
//! let settled = source.settlements();
//! let (dispatcher, deliveries) = Dispatcher::builder()
//!     .sink("accept", Arc::new(Accept))
//!     .build()
//!     .unwrap();
//! let report = Forward::new(Box::new(source), dispatcher)
//!     .run(deliveries, Duration::from_secs(5))
//!     .await;
//! assert_eq!((report.submitted, report.delivered, report.invalid), (1, 1, 1));
//! assert!(report.error.is_none());
//! // The hook was delivered, the undecodable record has no dead-letter file to go to:
//! // both are acknowledged, neither is read again.
//! assert!(settled.lock().unwrap().iter().all(|(_, how)| *how == Settlement::Ack));
//! # }
//! ```

use crate::dead_letter::dead_letter_backoff;
use crate::record::{PairRecord, PairState, RecordFilter};
use crate::{DeadLetter, Deliveries, Delivery, Dispatcher, Hook, Outcome, SubmitError, Unfinished};
use ankusa_claimcheck::ClaimStore;
use ankusa_message::MessageBody;
use ankusa_sink_core::{Claim, Class, Envelope};
use ankusa_source::{Ack, Record, Source, SourceError, Window};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How an envelope is read from a JSON tree, and a refusal explained without quoting a
/// value from it (serde's own messages do; envelopes carry secrets).
pub type EnvelopeParser = fn(serde_json::Value) -> Result<Envelope, String>;

/// Stops a [`Forward`]: no record is read after it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ForwardStop(Arc<watch::Sender<bool>>);

impl Default for ForwardStop {
    /// A handle not stopped yet (for [`browse`]; a [`Forward`] makes its own).
    fn default() -> Self {
        ForwardStop(Arc::new(watch::channel(false).0))
    }
}

impl ForwardStop {
    /// Stop reading. Records handed out still settle.
    pub fn stop(&self) {
        self.0.send_replace(true);
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }
}

/// Why reading stopped before the source ended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ForwardError {
    /// The source cannot go on.
    #[error("the source failed: {0}")]
    Source(#[from] SourceError),
    /// The dispatcher refused a hook for a reason other than its shutdown (an unknown
    /// route or sink): every other record would be refused the same way.
    #[error("{0}")]
    Submit(SubmitError),
    /// The dispatcher's scheduler task died ([`DispatcherDied`]): reading stopped.
    #[error("{0}")]
    Died(DispatcherDied),
}

/// The dispatcher's scheduler task died (a panic: a bug in `ankusa-dispatch`;
/// [`Dispatcher::has_died`]): [`drive`] stopped reading, and the pairs the scheduler held
/// have no outcome. Hooks from a durable source are released to it, never acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the dispatcher's scheduler task died (a bug): reading stopped; the hooks it held have \
     no outcome (those from a durable source are released to it)"
)]
#[non_exhaustive]
pub struct DispatcherDied;

/// What happened to one record, as [`Forward::read`] reports it.
#[derive(Debug)]
#[non_exhaustive]
pub enum ForwardEvent {
    /// The record's hook was submitted: its deliveries will come.
    Submitted {
        /// Where the record came from.
        position: String,
        /// Its (hook, sink) pairs: the deliveries that will come for it.
        pairs: usize,
    },
    /// The record's hook was not taken: the dispatcher was shutting down. The record is
    /// released to its source with the hook.
    NotTaken {
        /// Where the record came from.
        position: String,
        /// The hook.
        hook: Box<Hook>,
    },
    /// The record is not a hook (or is longer than the limit): it is filed in the
    /// dead-letter file with its raw bytes, then acknowledged.
    Invalid {
        /// Where the record came from.
        position: String,
        /// Why; never a value from the record.
        reason: String,
    },
    /// A redrive left the record where it is (see [`Forward::redrive`]): it does not match
    /// the filter, is not a hook's dead letter, or its sink is not in this dispatcher. It
    /// is released to its source once reading ends.
    Left {
        /// Where the record came from.
        position: String,
        /// Why; never a value from the record.
        reason: String,
    },
    /// Reading stopped: the source failed, or the dispatcher refuses every hook.
    Failed(ForwardError),
}

/// What [`Forward::run`] did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ForwardReport {
    /// Records submitted as hooks.
    pub submitted: u64,
    /// Records that were not hooks (dead-lettered raw, acknowledged).
    pub invalid: u64,
    /// (hook, sink) pairs delivered.
    pub delivered: u64,
    /// (hook, sink) pairs dead-lettered.
    pub dead_lettered: u64,
    /// (hook, sink) pairs parked: written to the sink's park destination, to resume when
    /// read back.
    pub parked: u64,
    /// Hooks read but not taken: the run was stopping (released to the source).
    pub not_taken: u64,
    /// Records a redrive left where they were (released to the source).
    pub left: u64,
    /// (hook, sink) pairs the shutdown left unfinished (released to the source).
    pub unfinished: Vec<Unfinished>,
    /// Why reading stopped early, if it did.
    pub error: Option<ForwardError>,
}

/// Records of a durable source through a dispatcher. See the [module](self) docs.
pub struct Forward {
    lanes: Vec<Lane>,
    reader: Reader,
}

/// One source and the sink its records are for (`None`: every sink of the route).
struct Lane {
    sink: Option<String>,
    source: Box<dyn Source>,
    /// The sink's park destination read back: its records are park records.
    park: bool,
}

/// What every lane reads with.
#[derive(Clone)]
struct Reader {
    dispatcher: Dispatcher,
    claims: Option<ClaimStore>,
    dead_letter: Option<DeadLetter>,
    max_record_bytes: usize,
    limit_name: &'static str,
    envelope: EnvelopeParser,
    stop: ForwardStop,
    redrive: Option<Arc<Redrive>>,
    pacer: Option<Arc<Pacer>>,
}

/// A redrive: dead-letter records read back, each to the sink it died at (see
/// [`Forward::redrive`]).
#[derive(Debug, Clone)]
pub struct Redrive {
    filter: RecordFilter,
    replay_id: String,
    idle: Duration,
}

impl Redrive {
    /// Redrive the dead letters `filter` matches, each hook carrying `replay_id` (one per
    /// redrive job). Reading ends after 3 s without a record ([`idle`](Self::idle)).
    pub fn new(filter: RecordFilter, replay_id: impl Into<String>) -> Self {
        Redrive {
            filter,
            replay_id: replay_id.into(),
            idle: Duration::from_secs(3),
        }
    }

    /// Reading ends once the source has given no record for `idle` while its window had
    /// room: every dead letter present has been read.
    pub fn idle(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    /// The filter.
    pub fn filter(&self) -> &RecordFilter {
        &self.filter
    }
}

/// Spaces submissions evenly, over every caller that shares it: at most one per interval.
/// What [`Forward::rate`] paces with; `ankusa-sink forward --input --rate` uses it too.
#[derive(Debug)]
pub struct Pacer {
    every: Duration,
    next: tokio::sync::Mutex<tokio::time::Instant>,
}

impl Pacer {
    /// At most `per_second` turns a second; `None` when that is not positive and finite
    /// (no limit).
    pub fn per_second(per_second: f64) -> Option<Self> {
        Duration::try_from_secs_f64(1.0 / per_second)
            .ok()
            .filter(|_| per_second > 0.0)
            .map(|every| Pacer {
                every,
                next: tokio::sync::Mutex::new(tokio::time::Instant::now()),
            })
    }

    /// Wait for this submission's turn.
    pub async fn turn(&self) {
        let at = {
            let mut next = self.next.lock().await;
            let at = (*next).max(tokio::time::Instant::now());
            *next = at + self.every;
            at
        };
        tokio::time::sleep_until(at).await;
    }
}

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sources: Vec<_> = self
            .lanes
            .iter()
            .map(|l| (l.sink.as_deref(), l.source.describe()))
            .collect();
        f.debug_struct("Forward")
            .field("sources", &sources)
            .field("max_record_bytes", &self.reader.max_record_bytes)
            .field("stopped", &self.reader.stop.is_stopped())
            .finish_non_exhaustive()
    }
}

impl Forward {
    /// Read `source` into `dispatcher`. No claim store (a claimed Message v1 is invalid),
    /// no dead-letter file (an invalid record is only reported), no size limit.
    pub fn new(source: Box<dyn Source>, dispatcher: Dispatcher) -> Self {
        Self::with_lanes(
            vec![Lane {
                sink: None,
                source,
                park: false,
            }],
            dispatcher,
        )
    }

    /// Read one source per sink: each `(sink, source)` pair's records are hooks for that
    /// sink alone, acknowledged to that source once that sink delivered or dead-lettered
    /// them. Each source reads on its own (its own consumer group, durable consumer or
    /// queue, and its own window), so a sink that fails or is slow holds back only its own
    /// source: the other sinks' deliveries go on. The dispatcher gives each sink an intake
    /// of its own, so none waits on another's backlog there either. Reading stops for every
    /// source when one fails.
    pub fn per_sink(sources: Vec<(String, Box<dyn Source>)>, dispatcher: Dispatcher) -> Self {
        let lanes = sources
            .into_iter()
            .map(|(sink, source)| Lane {
                sink: Some(sink),
                source,
                park: false,
            })
            .collect();
        Self::with_lanes(lanes, dispatcher)
    }

    fn with_lanes(lanes: Vec<Lane>, dispatcher: Dispatcher) -> Self {
        Forward {
            lanes,
            reader: Reader {
                dispatcher,
                claims: None,
                dead_letter: None,
                max_record_bytes: usize::MAX,
                limit_name: "the record limit",
                envelope: |v| {
                    serde_json::from_value(v).map_err(|e| {
                        format!("{:?} error (not an envelope's keys or types)", e.classify())
                    })
                },
                stop: ForwardStop(Arc::new(watch::channel(false).0)),
                redrive: None,
                pacer: None,
            },
        }
    }

    /// Read `sink`'s park destination back through `source` too (see
    /// [`Park`](crate::Park)): each record is a parked record ([`record`](mod@crate::record)), sent as it
    /// is or as the body of a Message v1; it resumes for `sink` alone at its attempt count,
    /// its next attempt waits for its not-before, and its horizon counts from its first
    /// attempt. It is acknowledged to `source` once it is delivered, dead-lettered or
    /// parked again. A record that is not a park record for `sink` is invalid (reported,
    /// dead-lettered raw, acknowledged).
    pub fn park_source(mut self, sink: impl Into<String>, source: Box<dyn Source>) -> Self {
        self.lanes.push(Lane {
            sink: Some(sink.into()),
            source,
            park: true,
        });
        self
    }

    /// Read the source as dead letters ([`record`](mod@crate::record)) and redrive them: each record
    /// that is a hook's dead letter and matches the filter goes to the sink it died at
    /// alone (one of this dispatcher's), keeping its id (its idempotency key) and carrying
    /// the redrive's replay id; it is acknowledged once that sink delivered it (or it died
    /// again, and was dead-lettered again). Every other record (not matching, not a dead
    /// letter, a sink this dispatcher lacks) is reported [`ForwardEvent::Left`], held, and
    /// released to the source when reading ends: it stays for a later redrive. Reading
    /// reads the records present when it starts (as the source's lag counts them once it
    /// can say) and ends then, or after [`Redrive::idle`] without a record.
    ///
    /// Records are taken as dead letters only here, on the operator's word: a hook whose
    /// body looks like one is never unwrapped, nor rerouted, by an ordinary forward.
    pub fn redrive(mut self, redrive: Redrive) -> Self {
        self.reader.redrive = Some(Arc::new(redrive));
        self
    }

    /// Submit at most `per_second` hooks a second, evenly spaced (over every source): a
    /// redrive that cannot starve live traffic. Not positive or not finite: no limit.
    pub fn rate(mut self, per_second: f64) -> Self {
        self.reader.pacer = Pacer::per_second(per_second).map(Arc::new);
        self
    }

    /// Redeem the bodies of claimed Message v1 records from `store`.
    pub fn claim_store(mut self, store: ClaimStore) -> Self {
        self.reader.claims = Some(store);
        self
    }

    /// File records that are not hooks in `dl` (their raw bytes as base64 and why) before
    /// acknowledging them. One that cannot be filed is held and written again with backoff
    /// (1 s doubling to 60 s) until it is; a stop releases it.
    pub fn dead_letter(mut self, dl: DeadLetter) -> Self {
        self.reader.dead_letter = Some(dl);
        self
    }

    /// Records longer than `max` bytes are invalid, never decoded; their reason names the
    /// limit as `name` (`"--max-line-bytes"`, say).
    pub fn max_record_bytes(mut self, max: usize, name: &'static str) -> Self {
        self.reader.max_record_bytes = max;
        self.reader.limit_name = name;
        self
    }

    /// How an envelope is read from a record that is JSON but neither a Message v1 nor an
    /// envelope at first sight. The default names the kind of error, never a value.
    pub fn envelope_parser(mut self, parse: EnvelopeParser) -> Self {
        self.reader.envelope = parse;
        self
    }

    /// The handle that stops this forward.
    pub fn stopper(&self) -> ForwardStop {
        self.reader.stop.clone()
    }

    /// The intake alone: read records and submit their hooks until the source ends, fails
    /// or [`ForwardStop`] stops it, reporting each record to `on_event`. The source is
    /// stopped and handed back: close it ([`Source::close`]) once the dispatcher is done,
    /// so that the acknowledgements of the hooks it finished are made final. With a source
    /// per sink ([`per_sink`](Self::per_sink)), every source is read at once, one failing
    /// stops the others, and the one handed back closes them all.
    pub async fn read(self, mut on_event: impl FnMut(ForwardEvent) + Send) -> Box<dyn Source> {
        let Forward { mut lanes, reader } = self;
        let (lanes_stop, _) = watch::channel(false);
        if lanes.len() == 1 {
            let lane = lanes.pop().expect("one lane");
            return reader
                .lane(lane, lanes_stop.subscribe(), &mut on_event)
                .await;
        }
        let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
        let tasks: Vec<_> = lanes
            .into_iter()
            .map(|lane| {
                let (reader, tx, stop) = (reader.clone(), tx.clone(), lanes_stop.subscribe());
                tokio::spawn(async move {
                    reader
                        .lane(lane, stop, &mut |e| {
                            let _ = tx.send(e);
                        })
                        .await
                })
            })
            .collect();
        drop(tx);
        // Every lane's sender is dropped when its loop ends: this ends with the last.
        while let Some(e) = events.recv().await {
            if matches!(e, ForwardEvent::Failed(_)) {
                lanes_stop.send_replace(true);
            }
            on_event(e);
        }
        let mut sources = Vec::with_capacity(tasks.len());
        for t in tasks {
            match t.await {
                Ok(source) => sources.push(source),
                // A lane that panicked dropped its source: its records go back to the
                // broker, as for a crash.
                Err(e) => tracing::error!("a source's reading task failed: {e}"),
            }
        }
        Box::new(Lanes(sources))
    }

    /// The whole loop: read (as [`read`](Self::read)) until the source ends, fails or is
    /// stopped, and wait for the final outcome of every hook read; a stop shuts the
    /// dispatcher down within `drain` instead (the pairs it leaves unfinished are released
    /// to the source and listed in the report). Then the source is closed within `drain`.
    /// Call it in a task of the runtime (see [`Deliveries`]).
    pub async fn run(self, deliveries: Deliveries, drain: Duration) -> ForwardReport {
        let dispatcher = self.reader.dispatcher.clone();
        // Held for the whole run: were the last sender dropped with the intake, the stop
        // would fire at once and cut short the wait for the hooks still being delivered.
        let stop = self.reader.stop.clone();
        let mut stopped = stop.0.subscribe();
        let (tx, events) = tokio::sync::mpsc::unbounded_channel();
        let intake = async move {
            Some(
                self.read(move |e| {
                    let _ = tx.send(e);
                })
                .await,
            )
        };
        let stopping = async move {
            // A sender dropped is no stop.
            if stopped.wait_for(|s| *s).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let mut report = ForwardReport::default();
        let ended = drive(
            dispatcher,
            deliveries,
            intake,
            events,
            stopping,
            drain,
            &mut report,
        )
        .await;
        if let Err(died) = ended {
            // The lanes of a source per sink read in tasks of their own: stop them too.
            stop.stop();
            report.error = Some(ForwardError::Died(died));
        }
        drop(stop);
        report
    }
}

/// What [`drive`] reports to its caller, in order: each intake event as it comes (the
/// (hook, sink) pairs it added, whose deliveries the loop then waits for), each delivery
/// (dropping it settles its pair with the source), the end of each burst of deliveries, and
/// the pairs a shutdown left unfinished (already released to the source).
pub trait Observer {
    /// What the intake reports.
    type Event: Send + 'static;

    /// One intake event; the (hook, sink) pairs it submitted.
    fn event(&mut self, event: Self::Event) -> impl std::future::Future<Output = usize>;

    /// One final outcome. Dropped, it settles its pair's share of the source record.
    fn delivery(&mut self, delivery: Delivery);

    /// The deliveries that were ready at once have all been reported (a moment to write).
    fn burst(&mut self, _dispatcher: &Dispatcher) {}

    /// The pairs a shutdown left unfinished.
    fn unfinished(&mut self, unfinished: Vec<Unfinished>);
}

/// Deliveries reported between two [`Observer::burst`] calls, at most.
const BURST: usize = 1024;

/// The one forward loop, settle then close: run `intake` (a task that submits hooks to
/// `dispatcher` and reports each on `events`, and hands back its source, stopped, if it
/// has one), report every event and every delivery to `observer`, until the intake is done
/// and every pair it submitted has its final outcome, or `stop` resolves (then the
/// dispatcher shuts down within `drain`, releasing what is unfinished). Only then, with
/// every delivery reported and dropped (so settled), is the source closed within `drain`:
/// its acknowledgements made final. [`Forward::run`] and the `ankusa-sink` CLI both run it.
///
/// Should the dispatcher's scheduler task die ([`Dispatcher::has_died`]), the intake is
/// stopped (dropped: a durable source's records go back to it), what was reported is
/// reported, and the loop ends with [`DispatcherDied`] instead of waiting for outcomes
/// that will never come.
pub async fn drive<O: Observer>(
    dispatcher: Dispatcher,
    mut deliveries: Deliveries,
    intake: impl std::future::Future<Output = Option<Box<dyn Source>>> + Send + 'static,
    mut events: tokio::sync::mpsc::UnboundedReceiver<O::Event>,
    stop: impl std::future::Future<Output = ()>,
    drain: Duration,
    observer: &mut O,
) -> Result<(), DispatcherDied> {
    let reader = tokio::spawn(intake);
    let mut died = false;
    let mut stop = std::pin::pin!(stop);
    let (mut expected, mut received) = (0usize, 0usize);
    let mut intake_done = false;
    let mut shutdown = None;
    loop {
        if intake_done && received >= expected && shutdown.is_none() {
            break;
        }
        tokio::select! {
            // What the intake took is counted before its outcomes are (it reports a hook
            // before it yields).
            biased;
            // Once the intake is done its channel answers `None` at once, every time:
            // polled again it would turn this loop into a spin while retries wait.
            e = events.recv(), if !intake_done => match e {
                Some(e) => expected += observer.event(e).await,
                None => intake_done = true,
            },
            d = deliveries.recv() => match d {
                Some(d) => {
                    // This delivery and whatever else is already in, then one burst.
                    let mut next = Some(d);
                    let mut burst = 0;
                    while let Some(d) = next.take() {
                        received += 1;
                        observer.delivery(d);
                        burst += 1;
                        if burst < BURST {
                            next = deliveries.try_recv();
                        }
                    }
                    observer.burst(&dispatcher);
                }
                // The dispatcher has shut down and every delivery is in; or it died.
                None => {
                    if dispatcher.has_died() {
                        // Every hook it is given now is refused: reading on would never end.
                        reader.abort();
                        died = true;
                    }
                    break;
                }
            },
            () = &mut stop, if shutdown.is_none() => {
                let d = dispatcher.clone();
                shutdown = Some(tokio::spawn(async move { d.shutdown(drain).await }));
            }
        }
    }
    // Every event the intake sent before it ended is reported.
    let source = reader.await.ok().flatten();
    while let Ok(e) = events.try_recv() {
        observer.event(e).await;
    }
    let unfinished = match shutdown {
        Some(h) => h.await.unwrap_or_default(),
        None => dispatcher.shutdown(Duration::ZERO).await,
    };
    while let Some(d) = deliveries.try_recv() {
        observer.delivery(d);
    }
    observer.unfinished(unfinished);
    observer.burst(&dispatcher);
    // Every finished hook is settled by now (its deliveries were reported and dropped; the
    // unfinished released): make the settlements final and leave the broker.
    if let Some(source) = source {
        source.close(drain).await;
    }
    if died || dispatcher.has_died() {
        return Err(DispatcherDied);
    }
    Ok(())
}

impl Observer for ForwardReport {
    type Event = ForwardEvent;

    async fn event(&mut self, e: ForwardEvent) -> usize {
        let pairs = match &e {
            ForwardEvent::Submitted { pairs, .. } => *pairs,
            _ => 0,
        };
        self.count(e);
        pairs
    }

    fn delivery(&mut self, d: Delivery) {
        ForwardReport::delivery(self, &d);
    }

    fn unfinished(&mut self, unfinished: Vec<Unfinished>) {
        self.unfinished = unfinished;
    }
}

impl Reader {
    /// One source's loop: read, decode and submit until the source ends or fails, the
    /// forward is stopped or another lane failed (`lanes_stop`). Hands the source back,
    /// stopped.
    async fn lane(
        self,
        lane: Lane,
        mut lanes_stop: watch::Receiver<bool>,
        on_event: &mut (impl FnMut(ForwardEvent) + Send),
    ) -> Box<dyn Source> {
        let Reader {
            dispatcher,
            claims,
            dead_letter,
            max_record_bytes,
            limit_name,
            envelope,
            stop,
            redrive,
            pacer,
        } = self;
        let Lane {
            sink,
            mut source,
            park,
        } = lane;
        let watch_window = source
            .window()
            .map(|w| tokio::spawn(watch_window(w, sink.clone())));
        let watch_lag = source
            .lag()
            .map(|l| tokio::spawn(watch_lag(l, sink.clone())));
        let mut stopped = stop.0.subscribe();
        let mut present = redrive.as_ref().map(|r| Present::new(&*source, r.idle));
        // Records a redrive leaves: released once reading ends, not at once (given back
        // now, a queue would hand them straight back to this reader).
        let mut left: Vec<Ack> = Vec::new();
        loop {
            if *stopped.borrow() || *lanes_stop.borrow() {
                break;
            }
            if present.as_mut().is_some_and(Present::all_read) {
                break;
            }
            let stopping = async {
                tokio::select! {
                    _ = stopped.wait_for(|s| *s) => {}
                    _ = lanes_stop.wait_for(|s| *s) => {}
                }
            };
            let next = next_record(&mut *source, present.as_mut(), left.len(), stopping).await;
            let record = match next {
                None | Some(None) => break,
                Some(Some(Err(e))) => {
                    on_event(ForwardEvent::Failed(ForwardError::Source(e)));
                    break;
                }
                Some(Some(Ok(r))) => r,
            };
            if let Some(p) = &mut present {
                p.read += 1;
            }
            let decoded = if record.payload.len() > max_record_bytes {
                Decoded::Invalid(format!(
                    "longer than {limit_name} ({max_record_bytes} bytes)"
                ))
            } else if park {
                decode_parked(&record.payload, sink.as_deref().unwrap_or_default())
            } else if let Some(r) = &redrive {
                decode_dead(&record.payload, r, sink.as_deref(), &dispatcher)
            } else {
                decode(&record.payload, claims.as_ref(), envelope).await
            };
            let Record {
                payload,
                position,
                ack,
                ..
            } = record;
            match decoded {
                Decoded::Hook(hook) => {
                    let mut hook = hook.source_ack(ack);
                    if let Some(s) = &sink {
                        hook = hook.only_sink(s.clone());
                    }
                    if let Some(p) = &pacer {
                        tokio::select! {
                            biased;
                            _ = stopped.wait_for(|s| *s) => {
                                let hook = Box::new(hook);
                                on_event(ForwardEvent::NotTaken { position, hook });
                                break;
                            }
                            () = p.turn() => {}
                        }
                    }
                    let pairs = dispatcher.pairs_of(&hook).unwrap_or(0);
                    match dispatcher.submit(hook).await {
                        Ok(()) => on_event(ForwardEvent::Submitted { position, pairs }),
                        Err(SubmitError::ShuttingDown(hook)) => {
                            on_event(ForwardEvent::NotTaken { position, hook })
                        }
                        Err(e) => {
                            on_event(ForwardEvent::Failed(ForwardError::Submit(e)));
                            break;
                        }
                    }
                }
                Decoded::Left(reason) => {
                    on_event(ForwardEvent::Left { position, reason });
                    left.push(ack);
                }
                Decoded::Invalid(reason) => {
                    on_event(ForwardEvent::Invalid {
                        position: position.clone(),
                        reason: reason.clone(),
                    });
                    // A record over the limit is kept only up to it: one huge record must
                    // not become a huge dead letter.
                    let mut raw = payload;
                    let raw_bytes = (raw.len() > max_record_bytes).then(|| {
                        let len = raw.len();
                        raw.truncate(max_record_bytes);
                        len
                    });
                    let invalid = InvalidRecord {
                        position,
                        reason,
                        raw,
                        raw_bytes,
                        ack,
                    };
                    dead_letter_invalid(dead_letter.as_ref(), invalid, stop.0.subscribe()).await;
                }
                Decoded::Later(reason) => {
                    tracing::warn!(position = %position, "{reason}; released to the source");
                    ack.release();
                }
            }
        }
        if let Some(p) = present {
            if !left.is_empty() && p.window_full() && p.only_holds(left.len()) {
                tracing::warn!(
                    left = left.len(),
                    "a redrive stopped with its window full of records it leaves (not \
                     matching, or another sink's): records past them were not read; raise \
                     the window (--max-unacked) to reach them"
                );
            }
            p.end();
        }
        for w in [watch_window, watch_lag].into_iter().flatten() {
            w.abort();
        }
        source.stop();
        for ack in left {
            ack.release();
        }
        source
    }
}

/// The source's next record; `None` once `stop` resolved or, with `present`, once the
/// source counts as read: its count reached (and what was on its way to this reader), or
/// nothing came for its idle time while the window had room (a full window waits for
/// deliveries, unless all it holds are the `left` records, which settle only when reading
/// ends).
async fn next_record(
    source: &mut dyn Source,
    mut present: Option<&mut Present>,
    left: usize,
    stop: impl std::future::Future<Output = ()>,
) -> Option<Option<Result<Record, SourceError>>> {
    let mut next = source.next();
    let mut stop = std::pin::pin!(stop);
    let mut waited = Duration::ZERO;
    loop {
        tokio::select! {
            biased;
            () = &mut stop => return None,
            r = &mut next => return Some(r),
            () = tokio::time::sleep(PRESENT_TICK), if present.is_some() => {
                waited += PRESENT_TICK;
                let caught_up = present.as_deref_mut().is_some_and(|p| {
                    p.all_read()
                        || (waited >= p.idle_now() && (!p.window_full() || p.only_holds(left)))
                });
                if caught_up {
                    return None;
                }
            }
        }
    }
}

/// What [`browse`] read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Browsed {
    /// Records read (each handed to the callback once).
    pub read: u64,
    /// Reading ended because the source's window was full: records past it were not read
    /// (open the source with a larger window to see them).
    pub window_full: bool,
}

/// Read the records `source` holds now without taking any: each is handed to `each`, held
/// unsettled (so a queue does not hand it out again) and released when reading ends, so
/// every record stays in the source. Reading ends once the records present at the start
/// are read (as the source's lag counts them, once it can say), after `idle` without a
/// record, when the source's window is full, or at `stop`. The source is then stopped and
/// closed within `grace`. What `ankusa-sink dead-letters stats` and `list` read with.
///
/// # Errors
/// The source failed (what was read so far is lost to the caller: start again).
pub async fn browse(
    mut source: Box<dyn Source>,
    idle: Duration,
    grace: Duration,
    stop: &ForwardStop,
    mut each: impl FnMut(&Record) + Send,
) -> Result<Browsed, SourceError> {
    let mut present = Present::new(&*source, idle);
    let mut stopped = stop.0.subscribe();
    let mut held = Vec::new();
    let mut browsed = Browsed::default();
    let mut error = None;
    loop {
        if *stopped.borrow() || present.all_read() {
            break;
        }
        let stopping = async {
            let _ = stopped.wait_for(|s| *s).await;
        };
        // Every record read is held: the window's records are all this reader's.
        let next = next_record(&mut *source, Some(&mut present), held.len(), stopping).await;
        if next.is_none() {
            browsed.window_full = present.window_full();
        }
        match next {
            None | Some(None) => break,
            Some(Some(Err(e))) => {
                error = Some(e);
                break;
            }
            Some(Some(Ok(record))) => {
                present.read += 1;
                browsed.read += 1;
                each(&record);
                held.push(record.ack);
            }
        }
    }
    present.end();
    source.stop();
    for ack in held {
        ack.release();
    }
    source.close(grace).await;
    match error {
        Some(e) => Err(e),
        None => Ok(browsed),
    }
}

/// How long a redrive (or [`browse`]) that has read the source's count waits for one more
/// record.
const CAUGHT_UP_IDLE: Duration = Duration::from_millis(300);

/// How often a redrive (or [`browse`]) waiting for a record looks again at the source's
/// count and how long it has waited.
const PRESENT_TICK: Duration = Duration::from_millis(100);

/// Records a redrive (or [`browse`]) reads past a Kafka count, at most.
const KAFKA_AHEAD: usize = 1024;

/// How long a redrive (or [`browse`]) waits for a record while its source cannot count yet.
const COUNT_WAIT: Duration = Duration::from_secs(30);

/// How far a redrive has read of what its source held when it began.
struct Present {
    /// Records read so far.
    read: u64,
    /// Stop after this many: the source's count (plus, for a queue's count, the records
    /// read before it came).
    target: Option<u64>,
    /// Records a queue had on its way to this reader, not in its count (at most the
    /// window's): read past the target by at most this many.
    ahead: u64,
    /// The source's count, once it can say, and whether it counts what this reader holds.
    count: Option<tokio::sync::oneshot::Receiver<(u64, bool)>>,
    asking: Option<tokio::task::JoinHandle<()>>,
    window: Option<Window>,
    idle: Duration,
}

impl Present {
    fn new(source: &dyn Source, idle: Duration) -> Self {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let asking = source.lag().map(|lag| {
            tokio::spawn(async move {
                // Kafka says nothing until the group has given this reader its partitions.
                loop {
                    if let Some(n) = lag.lag().await {
                        let _ = tx.send((n, lag.counts_read()));
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        });
        Present {
            read: 0,
            target: None,
            ahead: 0,
            count: asking.as_ref().map(|_| rx),
            asking,
            window: source.window(),
            idle,
        }
    }

    /// Whether every record present at the start has been read.
    fn all_read(&mut self) -> bool {
        if let Some(rx) = &mut self.count
            && let Ok((n, counts_read)) = rx.try_recv()
        {
            if counts_read {
                // Kafka: the lag already holds what was read and not committed. Its
                // watermark may trail the log a little: read on past it while records come
                // at once, by at most a window's worth (capped, for a busy topic).
                self.target = Some(n.max(self.read));
                self.ahead = self
                    .window
                    .as_ref()
                    .map_or(0, |w| w.size().min(KAFKA_AHEAD) as u64);
            } else {
                // A queue: what was read, plus its count, plus what was on its way here
                // (fetched into the window and not read yet) when it counted.
                let held = self.window.as_ref().map_or(0, |w| w.unsettled() as u64);
                self.ahead = held.saturating_sub(self.read);
                self.target = Some(self.read.saturating_add(n));
            }
            self.count = None;
        }
        self.target
            .is_some_and(|t| self.read >= t.saturating_add(self.ahead))
    }

    /// How long reading waits for a record before it takes the source as read: `idle`,
    /// and once the count is read, a moment (what a queue had on its way to this reader
    /// comes at once).
    fn idle_now(&self) -> Duration {
        match self.target {
            Some(t) if self.read >= t => self.idle.min(CAUGHT_UP_IDLE),
            // A Kafka reader counts only once the group gave it partitions: the silence
            // before that is no sign of an empty source.
            None if self.count.is_some() => self.idle.max(COUNT_WAIT),
            _ => self.idle,
        }
    }

    fn window_full(&self) -> bool {
        self.window
            .as_ref()
            .is_some_and(|w| w.unsettled() >= w.size())
    }

    /// Whether the window holds nothing but these `left` records.
    fn only_holds(&self, left: usize) -> bool {
        self.window.as_ref().is_some_and(|w| w.unsettled() <= left)
    }

    fn end(self) {
        if let Some(a) = self.asking {
            a.abort();
        }
    }
}

/// How often a source's window is looked at for `ankusa_source_window_full`.
const WINDOW_CHECK: Duration = Duration::from_secs(1);

/// How often, at most, a full window is logged (per source).
const WINDOW_FULL_LOG: Duration = Duration::from_secs(60);

/// Keep `ankusa_source_window_full{sink}` (1 while the window is full: reading for that
/// sink waits for its records to settle) and log a WARN naming the sink, at most once a
/// minute. `sink` is `None` for a source every sink shares (labelled `*`).
async fn watch_window(window: Window, sink: Option<String>) {
    let label = sink.unwrap_or_else(|| "*".to_owned());
    let gauge = metrics::gauge!(crate::metrics::SOURCE_WINDOW_FULL, "sink" => label.clone());
    let mut logged: Option<tokio::time::Instant> = None;
    let mut tick = tokio::time::interval(WINDOW_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let full = window.unsettled() >= window.size() || window.free_bytes() == 0;
        gauge.set(if full { 1.0 } else { 0.0 });
        if full && logged.is_none_or(|t| t.elapsed() >= WINDOW_FULL_LOG) {
            logged = Some(tokio::time::Instant::now());
            tracing::warn!(
                sink = %label,
                unacked = window.unsettled(),
                unacked_bytes = window.unsettled_bytes(),
                "the source window of sink {label} is full: reading for it waits until its \
                 records are delivered or dead-lettered (--max-unacked, --max-unacked-bytes)"
            );
        }
    }
}

/// How often a source's lag is asked for.
const LAG_CHECK: Duration = Duration::from_secs(5);

/// Keep `ankusa_source_lag{sink}` (`*` for a shared source) as the broker reports it.
async fn watch_lag(lag: Arc<dyn ankusa_source::Lag>, sink: Option<String>) {
    let label = sink.unwrap_or_else(|| "*".to_owned());
    let gauge = metrics::gauge!(crate::metrics::SOURCE_LAG, "sink" => label);
    let mut tick = tokio::time::interval(LAG_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // A broker that does not answer within the interval is asked again next time.
        if let Ok(Some(n)) = tokio::time::timeout(LAG_CHECK, lag.lag()).await {
            gauge.set(n as f64);
        }
    }
}

/// The sources of a per-sink forward, stopped, closed together.
struct Lanes(Vec<Box<dyn Source>>);

#[async_trait::async_trait]
impl Source for Lanes {
    async fn next(&mut self) -> Option<Result<Record, SourceError>> {
        None
    }

    fn stop(&mut self) {
        for s in &mut self.0 {
            s.stop();
        }
    }

    async fn close(self: Box<Self>, grace: Duration) {
        let closing: Vec<_> = self
            .0
            .into_iter()
            .map(|s| tokio::spawn(s.close(grace)))
            .collect();
        for c in closing {
            let _ = c.await;
        }
    }

    fn describe(&self) -> String {
        let all: Vec<String> = self.0.iter().map(|s| s.describe()).collect();
        all.join("; ")
    }
}

impl ForwardReport {
    fn count(&mut self, e: ForwardEvent) {
        match e {
            ForwardEvent::Submitted { .. } => self.submitted += 1,
            ForwardEvent::NotTaken { .. } => self.not_taken += 1,
            ForwardEvent::Invalid { .. } => self.invalid += 1,
            ForwardEvent::Left { .. } => self.left += 1,
            ForwardEvent::Failed(e) => self.error = Some(e),
        }
    }

    fn delivery(&mut self, d: &Delivery) {
        match d.outcome {
            Outcome::Delivered => self.delivered += 1,
            Outcome::DeadLettered { .. } => self.dead_lettered += 1,
            Outcome::Parked { .. } => self.parked += 1,
        }
    }
}

/// What a record turned out to be.
enum Decoded {
    /// A hook to submit.
    Hook(Box<Hook>),
    /// Not a hook: report it, dead-letter its bytes, acknowledge it.
    Invalid(String),
    /// A claimed body could not be redeemed now (the store is down): give the record back
    /// to the source rather than file a good hook as undecodable.
    Later(String),
    /// A redrive leaves this record where it is.
    Left(String),
}

/// Decode a dead-letter record for a redrive: the hook, bound to the sink it died at and
/// carrying the redrive's replay id, or why the record stays where it is.
fn decode_dead(payload: &[u8], r: &Redrive, lane: Option<&str>, d: &Dispatcher) -> Decoded {
    let record = match PairRecord::parse(payload) {
        Ok(record) => record,
        Err(e) => return Decoded::Left(e),
    };
    if record.state != PairState::Dead {
        return Decoded::Left("a parked record, not a dead letter".to_owned());
    }
    if !r.filter.matches(&record.envelope, &record.info) {
        return Decoded::Left("does not match the filter".to_owned());
    }
    let sink = record.info.sink;
    if lane.is_some_and(|l| l != sink) {
        return Decoded::Left(format!("a dead letter of sink {sink}, read for another"));
    }
    let hook = traced_hook(record.envelope)
        .only_sink(sink.clone())
        .replay_id(r.replay_id.clone());
    match d.pairs_of(&hook) {
        Ok(_) => Decoded::Hook(Box::new(hook)),
        Err(_) => Decoded::Left(format!("its sink {sink} is not in this run")),
    }
}

/// Decode a record of `sink`'s park destination: a parked record
/// ([`record`](mod@crate::record)) as it is, or as the body of a Message v1.
fn decode_parked(payload: &[u8], sink: &str) -> Decoded {
    let r = match crate::record::PairRecord::parse(payload) {
        Ok(r) => r,
        Err(e) => return Decoded::Invalid(e),
    };
    let crate::record::PairState::Parked { not_before_ms, .. } = r.state else {
        return Decoded::Invalid(format!(
            "a dead letter, not a parked record, read from the park source of sink {sink}"
        ));
    };
    if r.info.sink != sink {
        return Decoded::Invalid(format!(
            "a parked record of another sink, read from the park source of sink {sink}"
        ));
    }
    let hook = traced_hook(r.envelope)
        .first_attempt(r.info.attempts.saturating_add(1))
        .resume(r.info.first_attempt_ms, not_before_ms);
    Decoded::Hook(Box::new(hook))
}

/// The hook of an envelope: attempts join the trace of the `traceparent` header the hook
/// arrived with (and pass on its `tracestate`), if it carries one.
pub fn traced_hook(env: impl Into<Arc<Envelope>>) -> Hook {
    let env = env.into();
    let tp = env.header("traceparent").map(str::to_owned);
    let ts = env.header("tracestate").map(str::to_owned);
    let hook = Hook::new(env);
    let hook = match tp {
        Some(tp) => hook.traceparent(tp),
        None => hook,
    };
    match ts {
        Some(ts) => hook.tracestate(ts),
        None => hook,
    }
}

/// Decode one record: an envelope as JSON (the `gen` format) or a Message v1, told apart
/// by the message's `"v"` key. A Message v1 whose body is a claim is redeemed from
/// `claims` (and keeps its claim, so no sink checks it in again).
async fn decode(payload: &[u8], claims: Option<&ClaimStore>, envelope: EnvelopeParser) -> Decoded {
    // Fast path, no JSON tree: an envelope refuses unknown keys, so a Message v1 (its
    // `"v"`) never parses as one and what does parse is what the slow path would find.
    if let Ok(env) = serde_json::from_slice::<Envelope>(payload) {
        return Decoded::Hook(Box::new(traced_hook(env)));
    }
    let value: serde_json::Value = match serde_json::from_slice(payload) {
        Ok(v) => v,
        Err(e) => {
            return Decoded::Invalid(format!(
                "not JSON ({:?} error at line {}, column {})",
                e.classify(),
                e.line(),
                e.column()
            ));
        }
    };
    let is_message = value.get("v").is_some() && value.get("idempotency_key").is_some();
    if !is_message {
        return match envelope(value) {
            Ok(env) => Decoded::Hook(Box::new(traced_hook(env))),
            Err(e) => Decoded::Invalid(format!("neither an envelope nor a Message v1: {e}")),
        };
    }
    let m = match ankusa_message::decode(payload) {
        Ok(m) => m,
        Err(e) => return Decoded::Invalid(format!("not a valid Message v1: {e}")),
    };
    let (body, claim) = match &m.body {
        MessageBody::Inline(b) => (b.clone(), None),
        MessageBody::Claim(reference) => {
            let Some(store) = claims else {
                return Decoded::Invalid(
                    "a Message v1 whose body is a claim needs --claim-store to redeem it".into(),
                );
            };
            match store.redeem_message(&m).await {
                Ok(b) => (b, Claim::new(reference.clone(), m.sha256.as_str()).ok()),
                Err(e) if e.class() == Class::Transient => {
                    return Decoded::Later(format!("redeeming the claim: {e}"));
                }
                Err(e) => return Decoded::Invalid(format!("redeeming the claim: {e}")),
            }
        }
    };
    let mut b = Envelope::builder(m.id, m.source_id, body)
        .received_at(m.received_at)
        .headers(m.headers);
    if let Some(t) = m.tenant_id {
        b = b.tenant_id(t);
    }
    if let Some(ct) = m.content_type {
        b = b.content_type(ct);
    }
    if let Some(k) = m.dedupe_key {
        b = b.dedupe_key(k);
    }
    let env = match b.build() {
        Ok(env) => env,
        Err(e) => return Decoded::Invalid(format!("not a valid hook: {e}")),
    };
    let mut hook = traced_hook(env);
    if let Some(r) = m.replay_id {
        hook = hook.replay_id(r);
    }
    if let Some(c) = claim {
        hook = hook.claim(c);
    }
    Decoded::Hook(Box::new(hook))
}

/// A record that is not a hook, on its way to the dead-letter file.
struct InvalidRecord {
    position: String,
    reason: String,
    raw: Vec<u8>,
    /// The record's whole length, when `raw` is cut to the record limit.
    raw_bytes: Option<usize>,
    ack: Ack,
}

/// The dead-letter line of a record that is not a hook: its bytes, and why.
#[derive(Serialize)]
struct RawDeadLetter<'a> {
    raw_base64: String,
    /// `true` when `raw_base64` holds only the first `--max-line-bytes` of the record.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    raw_truncated: bool,
    /// The record's whole length, when truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    raw_bytes: Option<usize>,
    position: &'a str,
    dead_letter: RawInfo<'a>,
}

#[derive(Serialize)]
struct RawInfo<'a> {
    sink: Option<&'a str>,
    class: &'static str,
    error_class: &'static str,
    reason: &'a str,
}

/// File an undecodable record in the dead-letter file, then acknowledge it: it is never
/// retried forever, never skipped without a trace. Not filed (a full disk), it is held,
/// unacknowledged, and written again with backoff until it is, then acknowledged; a stop
/// releases it. Given back to the broker it would only come back at once and fail the same
/// way, for ever (logged, at most once a minute).
async fn dead_letter_invalid(
    dl: Option<&DeadLetter>,
    record: InvalidRecord,
    mut stop: watch::Receiver<bool>,
) {
    let InvalidRecord {
        position,
        reason,
        raw,
        raw_bytes,
        ack,
    } = record;
    let Some(dl) = dl else {
        return ack.ack();
    };
    use base64::Engine as _;
    let line = RawDeadLetter {
        raw_base64: base64::engine::general_purpose::STANDARD.encode(&raw),
        raw_truncated: raw_bytes.is_some(),
        raw_bytes,
        position: &position,
        dead_letter: RawInfo {
            sink: None,
            class: "permanent",
            error_class: "permanent",
            reason: &reason,
        },
    };
    // Strings and `None` only: it serializes.
    let Ok(line) = serde_json::to_string(&line) else {
        return ack.release();
    };
    let Err(first) = dl.store_line(line.clone()).await else {
        return ack.ack();
    };
    log_unstored(&position, &first);
    let dl = dl.clone();
    tokio::spawn(async move {
        let mut failures = 1;
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return ack.release(),
                () = tokio::time::sleep(dead_letter_backoff(failures)) => {}
            }
            match dl.store_line(line.clone()).await {
                Ok(()) => return ack.ack(),
                Err(e) => {
                    failures += 1;
                    log_unstored(&position, &e);
                }
            }
        }
    });
}

/// Log that a record's dead letter could not be stored, at most once a minute: a full
/// disk fails every one, and the log may be on it.
fn log_unstored(position: &str, error: &str) {
    static LAST: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let now = std::time::Instant::now();
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if last.is_some_and(|t| now.duration_since(t) < Duration::from_secs(60)) {
        return;
    }
    *last = Some(now);
    drop(last);
    tracing::error!(
        position,
        error,
        "an undecodable record's dead letter cannot be stored: it is held unacknowledged \
         and written again with backoff"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict(v: serde_json::Value) -> Result<Envelope, String> {
        serde_json::from_value(v).map_err(|e| format!("{:?}", e.classify()))
    }

    #[tokio::test]
    async fn envelopes_and_messages_are_told_apart_per_record() {
        let env = Envelope::builder("h1", "stripe", &b"{\"a\":1}"[..])
            .tenant_id("acme")
            .dedupe_key("evt_1")
            .header("Stripe-Signature", "t=1")
            .build()
            .unwrap();
        let json = serde_json::to_vec(&env).unwrap();
        let Decoded::Hook(h) = decode(&json, None, strict).await else {
            panic!("an envelope")
        };
        assert_eq!(h.envelope().id(), "h1");
        let ctx = ankusa_sink_core::Ctx::for_envelope(&env).with_replay_id("r9");
        let msg = ankusa_message::encode(&env, &ctx, None).unwrap();
        let Decoded::Hook(h) = decode(&msg, None, strict).await else {
            panic!("a Message v1")
        };
        let back = h.envelope();
        assert_eq!(back.id(), "h1");
        assert_eq!(back.tenant_id(), Some("acme"));
        assert_eq!(back.dedupe_key(), Some("evt_1"));
        assert_eq!(back.body().as_ref(), b"{\"a\":1}");
        assert_eq!(back.header("stripe-signature"), Some("t=1"));
        for (bad, why) in [
            (&b"\xff\xfe"[..], "not JSON"),
            (b"[1,2]", "neither an envelope nor a Message v1"),
            (
                b"{\"v\":2,\"idempotency_key\":\"k\"}",
                "not a valid Message v1",
            ),
        ] {
            match decode(bad, None, strict).await {
                Decoded::Invalid(r) => assert!(r.contains(why), "{r}"),
                _ => panic!("{why}"),
            }
        }
    }

    #[test]
    fn a_hook_joins_the_trace_it_arrived_with() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let env = Envelope::builder("h1", "s", "{}")
            .header("traceparent", tp)
            .header("tracestate", "k=v")
            .build()
            .unwrap();
        let hook = format!("{:?}", traced_hook(env));
        assert!(hook.contains(tp) && hook.contains("k=v"), "{hook}");
    }
}
