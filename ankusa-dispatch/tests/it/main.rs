//! The dispatcher at the library level: scripted sinks, a real HTTP sink against a
//! loopback server, claim stores in memory and on disk, virtual time where it helps.

mod breaker;
mod claims;
mod classes;
mod dead_letters;
mod fanout;
mod forward;
mod headers;
mod http;
mod panics;
mod parking;
mod routing;
mod settings;
mod shutdown;
mod slots;
mod source_ack;
mod span;
mod tenants;
mod windows;

use ankusa_dispatch::{
    Deliveries, Delivery, DispatchConfig, DispatchPolicy, Dispatcher, Exponential, Hook, Outcome,
};
use ankusa_sink_core::{
    Capabilities, Claim, Class, Ctx, Envelope, Failure, InFlight, Reason, Sink, async_trait,
};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use std::collections::{HashMap, VecDeque};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

pub(crate) use ankusa_sink_testkit::support::unique_name;

/// What a scripted sink answers to one call.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    Ok,
    Permanent,
    Config,
    RetryAfter(u64),
    /// A throttle without a stated pause.
    Throttled,
    Transient,
    /// Wait, then answer.
    Delay(Duration, Box<Step>),
    Panic,
}

impl Step {
    pub(crate) fn after(d: Duration, then: Step) -> Step {
        Step::Delay(d, Box::new(then))
    }
}

/// One call a scripted sink saw.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) hook: String,
    pub(crate) attempt: u32,
    pub(crate) claim: Option<Claim>,
    pub(crate) batch: bool,
    pub(crate) replay_id: Option<String>,
    pub(crate) at: Instant,
}

/// A sink that answers from a script: `first` in order, then `then` forever.
#[derive(Debug)]
pub(crate) struct Script {
    first: Mutex<VecDeque<Step>>,
    then: Step,
    inline_max: Option<NonZeroUsize>,
    batched: bool,
    window: Option<InFlight>,
    calls: AtomicUsize,
    /// Deliveries running now, and the most that ever ran at once.
    active: AtomicUsize,
    peak: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
}

impl Script {
    pub(crate) fn new(then: Step) -> Self {
        Script {
            first: Mutex::new(VecDeque::new()),
            then,
            inline_max: None,
            batched: false,
            window: None,
            calls: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn first(self, steps: impl IntoIterator<Item = Step>) -> Self {
        self.first.lock().unwrap().extend(steps);
        self
    }

    pub(crate) fn inline_max(mut self, n: usize) -> Self {
        self.inline_max = NonZeroUsize::new(n);
        self
    }

    pub(crate) fn batched(mut self) -> Self {
        self.batched = true;
        self
    }

    /// Declare a pipeline window of `deliveries` and `bytes`.
    pub(crate) fn window(mut self, deliveries: usize, bytes: usize) -> Self {
        self.window = Some(InFlight::new(
            NonZeroUsize::new(deliveries).unwrap(),
            NonZeroUsize::new(bytes).unwrap(),
        ));
        self
    }

    /// The most deliveries that ever ran at once.
    pub(crate) fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    /// Deliveries running now.
    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    pub(crate) fn arc(self) -> Arc<Self> {
        Arc::new(self)
    }

    pub(crate) fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl Sink for Script {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let _active = Active(&self.active);
        self.seen.lock().unwrap().push(Seen {
            hook: env.id().to_owned(),
            attempt: ctx.attempt.get(),
            claim: ctx.claim.clone(),
            batch: ctx.batch,
            replay_id: ctx.replay_id.clone(),
            at: Instant::now(),
        });
        let step = self
            .first
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| self.then.clone());
        let step = match step {
            Step::Delay(d, then) => {
                tokio::time::sleep(d).await;
                *then
            }
            other => other,
        };
        let why = || Reason("scripted".into());
        match step {
            Step::Ok => Ok(()),
            Step::Permanent => Err(Failure::permanent(why())),
            Step::Config => Err(Failure::config(why())),
            Step::RetryAfter(ms) => Err(Failure::retry_after_ms(ms, why())),
            Step::Throttled => Err(Failure::new(Class::Throttled, why())),
            Step::Transient => Err(Failure::transient(why())),
            Step::Panic => panic!("scripted panic"),
            Step::Delay(..) => unreachable!("one level of delay"),
        }
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::new(true, self.inline_max);
        if self.batched {
            caps = caps.with_batch(None);
        }
        if let Some(window) = self.window {
            caps = caps.with_in_flight(window);
        }
        caps
    }
}

/// Counts a delivery out when it ends, however it ends (a dropped future too).
struct Active<'a>(&'a AtomicUsize);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(crate) fn env(id: &str) -> Envelope {
    Envelope::builder(id, "src", "{}").build().unwrap()
}

pub(crate) fn env_sized(id: &str, size: usize) -> Envelope {
    Envelope::builder(id, "src", "x".repeat(size))
        .tenant_id("acme")
        .build()
        .unwrap()
}

/// Exact (no jitter) backoff from `base`, giving up at `max_attempts`, dead-lettering at
/// `max_elapsed`.
pub(crate) fn policy(base: Duration, max_attempts: u32, max_elapsed: Duration) -> DispatchPolicy {
    DispatchPolicy {
        retry: Box::new(Exponential {
            base,
            max: base.max(Duration::from_secs(300)),
            max_attempts,
            jitter: false,
        }),
        max_retry_after: Duration::from_secs(3600),
        max_elapsed,
    }
}

pub(crate) fn config(policy: DispatchPolicy) -> DispatchConfig {
    DispatchConfig::default().with_policy(policy)
}

/// Retries from `base`, ten attempts within a minute: enough for the retries a test scripts.
pub(crate) fn retrying(base: Duration) -> DispatchConfig {
    config(policy(base, 10, Duration::from_secs(60)))
}

/// Retries from `base` for up to 100 attempts and a day: for tests of hooks that wait, never
/// of hooks given up on.
pub(crate) fn retrying_for_a_day(base: Duration) -> DispatchConfig {
    config(policy(base, 100, Duration::from_secs(86_400)))
}

/// `sink` named `name` beside `plain`, a sink that takes 10 ms a delivery, with one shared
/// slot (and intake for 100 hooks): for sinks whose own concurrency (a batch, a pipeline
/// window) stays outside the shared limit. Returns `plain` too.
pub(crate) fn one_slot_beside_plain(
    name: &str,
    sink: &Arc<Script>,
) -> (Dispatcher, Deliveries, Arc<Script>) {
    let plain = Script::new(Step::after(Duration::from_millis(10), Step::Ok)).arc();
    let (d, out) = Dispatcher::builder()
        .sink(name, sink.clone())
        .sink("plain", plain.clone())
        .config(
            DispatchConfig::default()
                .with_concurrency(1)
                .with_intake(100),
        )
        .build()
        .unwrap();
    (d, out, plain)
}

/// A dispatcher for `sink` alone, named `name`, under `config`.
pub(crate) fn alone(
    name: &str,
    sink: &Arc<Script>,
    config: DispatchConfig,
) -> (Dispatcher, Deliveries) {
    Dispatcher::builder()
        .sink(name, sink.clone())
        .config(config)
        .build()
        .unwrap()
}

/// Submits `n` hooks, `h0` to `h<n-1>`.
pub(crate) async fn submit_hooks(d: &Dispatcher, n: usize) {
    for i in 0..n {
        d.submit(Hook::new(env(&format!("h{i}")))).await.unwrap();
    }
}

/// The next `n` deliveries; fails the test after `within` (virtual time under a paused
/// clock).
pub(crate) async fn recv_n(d: &mut Deliveries, n: usize, within: Duration) -> Vec<Delivery> {
    let mut out = Vec::with_capacity(n);
    let deadline = Instant::now() + within;
    while out.len() < n {
        match tokio::time::timeout_at(deadline, d.recv()).await {
            Ok(Some(x)) => out.push(x),
            Ok(None) => panic!("the stream ended after {} of {n}", out.len()),
            Err(_) => panic!("only {} of {n} deliveries within {within:?}", out.len()),
        }
    }
    out
}

pub(crate) fn dead_class(d: &Delivery) -> Option<(ankusa_sink_core::Class, &'static str)> {
    match &d.outcome {
        Outcome::DeadLettered { failure, .. } => {
            Some((failure.class(), failure.class().error_class().as_str()))
        }
        _ => None,
    }
}

/// A process-wide recorder that keeps values (the debugging recorder's snapshot resets
/// them, which races between tests); tests read their own unique sink names.
#[derive(Debug, Default, Clone)]
pub(crate) struct Values(Arc<Mutex<HashMap<String, Arc<AtomicU64>>>>);

fn key_string(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Values {
    fn cell(&self, key: &Key) -> Arc<AtomicU64> {
        self.0
            .lock()
            .unwrap()
            .entry(key_string(key))
            .or_default()
            .clone()
    }

    fn get(&self, k: &str) -> Option<u64> {
        self.0
            .lock()
            .unwrap()
            .get(k)
            .map(|c| c.load(Ordering::SeqCst))
    }
}

impl Recorder for Values {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// Install the recorder (once); call before building a dispatcher whose metrics you read.
pub(crate) fn recorder() -> &'static Values {
    static V: OnceLock<Values> = OnceLock::new();
    V.get_or_init(|| {
        let v = Values::default();
        metrics::set_global_recorder(v.clone()).expect("the only global recorder");
        v
    })
}

/// A counter's value, e.g. `counter("ankusa_dispatch_config_errors_total", "sink=x")`.
pub(crate) fn counter(name: &str, labels: &str) -> Option<u64> {
    recorder().get(&format!("{name}{{{labels}}}"))
}

/// A gauge's value.
pub(crate) fn gauge(name: &str, labels: &str) -> Option<f64> {
    recorder()
        .get(&format!("{name}{{{labels}}}"))
        .map(f64::from_bits)
}

/// A scratch directory under the system temp dir.
pub(crate) fn scratch(prefix: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(unique_name(prefix));
    std::fs::create_dir_all(&p).unwrap();
    p
}
