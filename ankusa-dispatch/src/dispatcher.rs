//! The dispatcher: one scheduler task owns every (hook, sink) job; attempts run in tasks of
//! their own and report back.

use crate::breaker::Breaker;
use crate::dead_letter::DeadLetter;
use crate::metrics as m;
use ankusa_claimcheck::ClaimStore;
use ankusa_sink_core::{Capabilities, Sink, safe_capabilities};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, oneshot};
// tokio's clock, not std's: the same in production, and it follows `tokio::time::pause`
// (a std deadline under a paused clock made the scheduler spin).
use tokio::time::Instant;

/// A map keyed by a number the dispatcher assigns itself (hook, attempt, task ids), never
/// by input: a fast hash instead of SipHash, which was 4 % of a delivery's CPU.
type IdMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

mod adaptive;
mod desk;
mod endings;
mod fair;
mod jobs;
mod rate;
mod scheduler;
mod sink;
mod tasks;
mod types;
mod waiting;

use desk::Desk;
use scheduler::{Clock, DEFAULT_INTAKE_BYTES, In, MAX_INTAKE_BYTES, Permit, READ_AHEAD, Scheduler};

use sink::{Limit, SinkState};
use tasks::Tasks;
pub use types::{
    BuildError, Concurrency, Deliveries, Delivery, DispatchConfig, Hook, Outcome, Park,
    SinkDispatch, SubmitError, Unfinished,
};
use waiting::RetryQueue;

/// Builds a [`Dispatcher`].
#[derive(Debug, Default)]
pub struct DispatcherBuilder {
    sinks: Vec<(String, Arc<dyn Sink>)>,
    /// Sinks with settings of their own.
    settings: HashMap<String, SinkDispatch>,
    routes: Vec<(String, Vec<String>)>,
    config: DispatchConfig,
    claim_store: Option<ClaimStore>,
    dead_letter: Option<DeadLetter>,
}

impl DispatcherBuilder {
    /// Add a sink under `name` (the `sink` label of metrics and outcomes).
    pub fn sink(mut self, name: impl Into<String>, sink: Arc<dyn Sink>) -> Self {
        self.sinks.push((name.into(), sink));
        self
    }

    /// Give sink `name` a concurrency of its own: a fixed number of attempts in flight, or
    /// an adaptive limit ([`Concurrency::Adaptive`]). The sink then runs on it, outside
    /// the shared `concurrency`, instead of its window's delivery count (its window's bytes
    /// still bound it) and of `sink_concurrency`.
    pub fn sink_concurrency(mut self, name: impl Into<String>, c: Concurrency) -> Self {
        self.settings.entry(name.into()).or_default().concurrency = Some(c);
        self
    }

    /// How sink `name` runs, over the dispatcher-wide config: its concurrency, rate,
    /// tenant cap and breaker ([`SinkDispatch`]; a sink file's `[dispatch]` table).
    pub fn sink_settings(mut self, name: impl Into<String>, settings: SinkDispatch) -> Self {
        self.settings.insert(name.into(), settings);
        self
    }

    /// Add a route: hooks submitted with it go to these sinks. Without a route, a hook
    /// goes to every sink.
    pub fn route<I, S>(mut self, name: impl Into<String>, sinks: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.routes
            .push((name.into(), sinks.into_iter().map(Into::into).collect()));
        self
    }

    /// The knobs.
    pub fn config(mut self, config: DispatchConfig) -> Self {
        self.config = config;
        self
    }

    /// Where bodies over a sink's inline threshold are checked in (once per hook).
    pub fn claim_store(mut self, store: ClaimStore) -> Self {
        self.claim_store = Some(store);
        self
    }

    /// Where dead letters go.
    pub fn dead_letter(mut self, dl: DeadLetter) -> Self {
        self.dead_letter = Some(dl);
        self
    }

    /// Start the dispatcher (on the current tokio runtime) and the stream of its
    /// deliveries.
    pub fn build(self) -> Result<(Dispatcher, Deliveries), BuildError> {
        if self.sinks.is_empty() {
            return Err(BuildError::NoSinks);
        }
        if self.config.concurrency == 0 || self.config.sink_concurrency == Some(0) {
            return Err(BuildError::ZeroConcurrency);
        }
        let (index, slots) = slots(self.sinks, &self.settings, &self.config)?;
        let routes = routes(self.routes, &index)?;
        let n = slots.len();
        // Each sink has an intake of its own: a sink that is slow or failing fills only its
        // own, and hooks for the other sinks keep coming in.
        let sizes: Vec<(usize, usize)> = slots
            .iter()
            .map(|slot| slot_intake(slot, &self.settings, &self.config))
            .collect();
        let shared = Arc::new(Shared {
            index,
            routes,
            all: (0..n).collect(),
            single: (0..n).map(|i| Arc::from([i])).collect(),
            intake: sizes
                .iter()
                .map(|&(jobs, _)| Arc::new(Semaphore::new(jobs)))
                .collect(),
            intake_bytes: sizes
                .iter()
                .map(|&(_, bytes)| Arc::new(Semaphore::new(bytes)))
                .collect(),
            intake_bytes_max: sizes
                .iter()
                .map(|&(_, bytes)| u32::try_from(bytes).unwrap_or(u32::MAX))
                .collect(),
            closed: AtomicBool::new(false),
            waiting: Arc::new(AtomicUsize::new(0)),
            held: Arc::new(IntakeHold::default()),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        // Reports from the scheduler's own tasks come on a channel of their own, so the
        // intake channel closes when the last `Dispatcher` handle is dropped.
        let (report_tx, report_rx) = mpsc::unbounded_channel();
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        metrics::gauge!(m::DEAD_LETTER_BLOCKED).set(0.0);
        metrics::gauge!(m::WAITING).set(0.0);
        // A dead-letter sink without a claim store of its own uses the dispatcher's.
        let dead_letter = match (self.dead_letter, &self.claim_store) {
            (Some(dl), Some(store)) if !dl.has_claim_store() => {
                Some(dl.with_claim_store(store.clone()))
            }
            (dl, _) => dl,
        };
        let scheduler = Scheduler {
            sinks: slots,
            config: self.config,
            claim_store: self.claim_store,
            tx: report_tx,
            out: out_tx,
            clock: Clock::new(),
            hooks: IdMap::default(),
            next_hook: 0,
            tenant_keys: foldhash::fast::RandomState::default(),
            in_flight_shared: 0,
            running: IdMap::default(),
            tasks: Tasks::default(),
            waiting: RetryQueue::new(shared.waiting.clone()),
            next_sink: 0,
            desk: Desk::new(dead_letter, shared.held.clone()),
            stopping: None,
            intake_open: true,
        };
        tokio::spawn(scheduler.run(rx, report_rx));
        Ok((Dispatcher { shared, tx }, Deliveries(out_rx)))
    }
}

/// One sink's intake: (hook, sink) jobs admitted before their first attempt settles, and
/// their body bytes. The jobs: `concurrency` plus the sink's own window or concurrency,
/// plus [`READ_AHEAD`] more (what round robin over tenants can reach), unless
/// `config.intake` says; the bytes: [`DEFAULT_INTAKE_BYTES`], or twice the sink's window
/// bytes when that is more, unless `config.intake_bytes` says.
fn slot_intake(
    slot: &SinkState,
    settings: &HashMap<String, SinkDispatch>,
    config: &DispatchConfig,
) -> (usize, usize) {
    let own = settings
        .get(&*slot.name)
        .and_then(|s| s.concurrency)
        .map_or(0, |c| match c {
            Concurrency::Fixed(n) => n,
            Concurrency::Adaptive { max } => max,
        });
    let window = slot.window.map_or(0, |w| w.deliveries.get());
    let in_flight = config
        .concurrency
        .saturating_add(window)
        .saturating_add(own);
    let jobs = config
        .intake
        .unwrap_or(in_flight.saturating_add(READ_AHEAD))
        .max(1);
    let window_bytes = slot.window.map_or(0, |w| w.bytes.get());
    let bytes = config
        .intake_bytes
        .unwrap_or(DEFAULT_INTAKE_BYTES.max(window_bytes.saturating_mul(2)))
        .clamp(1, MAX_INTAKE_BYTES);
    (jobs, bytes)
}

/// Each sink's slot, and its position by name; a name given twice is an error.
fn slots(
    sinks: Vec<(String, Arc<dyn Sink>)>,
    settings: &HashMap<String, SinkDispatch>,
    config: &DispatchConfig,
) -> Result<(HashMap<String, usize>, Vec<SinkState>), BuildError> {
    if let Some(name) = settings
        .keys()
        .find(|n| !sinks.iter().any(|(s, _)| s == *n))
    {
        return Err(BuildError::NoSuchSink(name.clone()));
    }
    let mut index = HashMap::new();
    let mut slots = Vec::new();
    for (i, (name, sink)) in sinks.into_iter().enumerate() {
        if index.insert(name.clone(), i).is_some() {
            return Err(BuildError::DuplicateSink(name));
        }
        // Read once, here: the one statement of the sink's facts.
        let caps = safe_capabilities(&sink).unwrap_or_else(|fault| {
            tracing::warn!(
                target: "ankusa_dispatch",
                sink = %name,
                error = %fault,
                "capabilities() failed; treating the sink as not durable, claiming every body"
            );
            Capabilities::unknown()
        });
        let threshold = caps.inline_max_bytes;
        let own = settings.get(&name).cloned().unwrap_or_default();
        let limit = match own.concurrency {
            None => None,
            Some(Concurrency::Fixed(0)) => return Err(BuildError::ZeroConcurrency),
            Some(Concurrency::Fixed(n)) => Some(Limit::Fixed(n)),
            Some(Concurrency::Adaptive { max }) => Some(Limit::Adaptive(adaptive::Adaptive::new(
                max,
                Instant::now(),
            ))),
        };
        let bucket = match own.rate_per_second {
            None => None,
            Some(r) if r.is_finite() && r > 0.0 => Some(rate::Bucket::new(r, Instant::now())),
            Some(_) => return Err(BuildError::BadRate(name)),
        };
        let tenant_concurrency = match own.tenant_concurrency {
            Some(n) => (n > 0).then_some(n),
            None => config.tenant_concurrency,
        };
        let window = config.sink_windows.then_some(caps.in_flight).flatten();
        let metrics = m::SinkMetrics::new(&name);
        // What limits the sink's attempts now (the shared limit is shared with others).
        let limit_now = match (&limit, window) {
            (Some(l), _) => l.current(),
            (None, Some(w)) => config.sink_concurrency.unwrap_or(w.deliveries.get()),
            (None, None) => config.sink_concurrency.unwrap_or(config.concurrency),
        };
        metrics.concurrency_limit.set(limit_now as f64);
        let breaker = Breaker::new(own.breaker.unwrap_or(config.breaker));
        let mut state = SinkState::new(
            Arc::from(name.as_str()),
            sink,
            caps.batched,
            window,
            threshold,
            metrics,
            limit,
            bucket,
            tenant_concurrency,
            own.park,
            breaker,
        );
        state.header_policy = own.header_policy.or_else(|| config.header_policy.clone());
        slots.push(state);
    }
    Ok((index, slots))
}

/// Each route's sinks as positions (each once); an empty route or an unknown sink is an
/// error.
fn routes(
    routes: Vec<(String, Vec<String>)>,
    index: &HashMap<String, usize>,
) -> Result<HashMap<String, Arc<[usize]>>, BuildError> {
    let mut out = HashMap::new();
    for (route, names) in routes {
        if names.is_empty() {
            return Err(BuildError::EmptyRoute(route));
        }
        let mut ids = Vec::new();
        for sink in names {
            let &i = index.get(&sink).ok_or_else(|| BuildError::UnknownSink {
                route: route.clone(),
                sink: sink.clone(),
            })?;
            if !ids.contains(&i) {
                ids.push(i);
            }
        }
        out.insert(route, ids.into());
    }
    Ok(out)
}

/// Takes hooks and delivers each to every sink of its route, by the failure classes:
/// retries in a timer queue (no slot held while waiting), retry-after honoured and capped,
/// dead letters at the horizon, a breaker per sink, the claim check once per hook.
///
/// Cheap to clone; every clone submits to the same scheduler. Dropping every clone without
/// a [`shutdown`](Self::shutdown) lets the dispatcher finish every hook it holds (retries
/// included, up to the horizon) and then end [`Deliveries`].
///
/// Retry times and the horizon run on tokio's clock (the wall clock is read once, at
/// [`build`](DispatcherBuilder::build), for the Unix ms reported): `tokio::time::pause`
/// drives them in tests, and a wall-clock step does not move a hook's horizon.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<In>,
}

#[derive(Debug)]
struct Shared {
    index: HashMap<String, usize>,
    // Shared slices: a submit takes its route's sinks without allocating.
    routes: HashMap<String, Arc<[usize]>>,
    all: Arc<[usize]>,
    /// `[i]` for each sink `i`: a hook for one named sink.
    single: Vec<Arc<[usize]>>,
    /// Each sink's intake: a job takes one permit of its sink's.
    intake: Vec<Arc<Semaphore>>,
    /// Each sink's body bytes: a job takes its hook's size (at most the sink's
    /// `intake_bytes_max`).
    intake_bytes: Vec<Arc<Semaphore>>,
    intake_bytes_max: Vec<u32>,
    closed: AtomicBool,
    waiting: Arc<AtomicUsize>,
    /// Intake is paused: a dead letter of a hook from a durable source could not be
    /// stored and is being written again (`DeadLetterHold`).
    held: Arc<IntakeHold>,
}

/// The pause on intake while dead letters cannot be stored: `submit` waits on it.
#[derive(Debug, Default)]
struct IntakeHold {
    paused: AtomicBool,
    resumed: tokio::sync::Notify,
}

impl IntakeHold {
    fn set(&self, paused: bool) {
        if self.paused.swap(paused, Ordering::AcqRel) && !paused {
            self.resumed.notify_waiters();
        }
    }

    /// Wait while intake is paused (or until `closed`).
    async fn wait(&self, closed: &AtomicBool) {
        while self.paused.load(Ordering::Acquire) && !closed.load(Ordering::Acquire) {
            let resumed = self.resumed.notified();
            tokio::pin!(resumed);
            // Registered before the flag is read again: a resume in between is not lost.
            resumed.as_mut().enable();
            if !self.paused.load(Ordering::Acquire) || closed.load(Ordering::Acquire) {
                return;
            }
            resumed.await;
        }
    }
}

impl Dispatcher {
    /// A builder.
    pub fn builder() -> DispatcherBuilder {
        DispatcherBuilder::default()
    }

    /// Take a hook: waits while the intake is full (memory stays bounded by the intake and
    /// the retry queue, not by how fast hooks arrive), and while a durable source's dead
    /// letter cannot be stored. An unknown route or sink is an error for this hook only.
    pub async fn submit(&self, hook: Hook) -> Result<(), SubmitError> {
        let sinks = self.sinks_of(&hook)?;
        // Paused while a durable source's dead letter cannot be stored: reading on would
        // only pile up hooks that may end the same way.
        if self.shared.held.paused.load(Ordering::Relaxed) {
            self.shared.held.wait(&self.shared.closed).await;
        }
        // A place and the bytes in each of the hook's sinks' intakes, always in one order
        // (by sink, the place first), so two submits never wait on each other.
        let size = u32::try_from(hook.envelope.size()).unwrap_or(u32::MAX);
        let mut permits = Vec::with_capacity(sinks.len());
        for &i in sinks.iter() {
            let Ok(job) = self.shared.intake[i].clone().acquire_owned().await else {
                return Err(SubmitError::ShuttingDown(Box::new(hook)));
            };
            let weight = size.clamp(1, self.shared.intake_bytes_max[i]);
            let Ok(bytes) = self.shared.intake_bytes[i]
                .clone()
                .acquire_many_owned(weight)
                .await
            else {
                return Err(SubmitError::ShuttingDown(Box::new(hook)));
            };
            permits.push(Permit {
                _job: job,
                _bytes: bytes,
            });
        }
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(SubmitError::ShuttingDown(Box::new(hook)));
        }
        self.tx
            .send(In::Submit {
                hook: Box::new(hook),
                sinks,
                permits,
            })
            .map_err(|e| match e.0 {
                In::Submit { hook, .. } => SubmitError::ShuttingDown(hook),
                In::Shutdown { .. } => unreachable!("only submits are sent here"),
            })
    }

    fn sinks_of(&self, hook: &Hook) -> Result<Arc<[usize]>, SubmitError> {
        let route = match &hook.route {
            None => &self.shared.all,
            Some(r) => self
                .shared
                .routes
                .get(r)
                .ok_or_else(|| SubmitError::UnknownRoute(r.clone()))?,
        };
        match &hook.sink {
            None => Ok(route.clone()),
            Some(name) => {
                let &i = self
                    .shared
                    .index
                    .get(name)
                    .filter(|i| route.contains(i))
                    .ok_or_else(|| SubmitError::UnknownSink(name.clone()))?;
                Ok(self.shared.single[i].clone())
            }
        }
    }

    /// (hook, sink) jobs waiting in the retry queue now.
    pub fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Relaxed)
    }

    /// Whether the dispatcher has a sink named `name`.
    pub fn has_sink(&self, name: &str) -> bool {
        self.shared.index.contains_key(name)
    }

    /// The (hook, sink) pairs a [`submit`](Self::submit) of `hook` makes: the deliveries
    /// that will come for it. An unknown route or sink is the error `submit` would return.
    pub fn pairs_of(&self, hook: &Hook) -> Result<usize, SubmitError> {
        self.sinks_of(hook).map(|sinks| sinks.len())
    }

    /// Stop intake, let attempts in flight finish within `grace`, and hand back every
    /// (hook, sink) pair not finished: waiting for a retry, held by an open breaker, not
    /// yet started, still in flight when the grace ran out, or dead-lettered with its dead
    /// letter still being stored when the grace ran out. Deliveries that finish within the
    /// grace still arrive on [`Deliveries`], which then ends. Nothing is dropped.
    ///
    /// A second call (from a clone, say) waits for the same shutdown and gets an empty
    /// list: the first caller gets every pair. The shorter grace wins.
    pub async fn shutdown(&self, grace: Duration) -> Vec<Unfinished> {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.held.resumed.notify_waiters();
        for s in self.shared.intake.iter().chain(&self.shared.intake_bytes) {
            s.close();
        }
        let (reply, rx) = oneshot::channel();
        if self.tx.send(In::Shutdown { grace, reply }).is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }
}
