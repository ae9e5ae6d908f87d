//! `deliver` and `forward`: hooks through an `ankusa-dispatch` dispatcher to one sink or
//! several (fan-out), one outcome line per (hook, sink).

use crate::from_source::OpenError;
use crate::hooks::{NamedSink, Stop, hook_of};
use crate::lines::{Parsed, spawn_reader};
use crate::output::{Output, escape_control};
use crate::{
    DeliverArgs, DispatchArgs, EXIT_FAILED, EXIT_OUTPUT, EXIT_SOFTWARE, EXIT_USAGE, ForwardArgs,
    RetryArgs, UsageError,
};
use ankusa_claimcheck::ClaimStore;
use ankusa_dispatch::forward::{Forward, ForwardEvent};
use ankusa_dispatch::record::RecordFilter;
use ankusa_dispatch::{
    BreakerConfig, Concurrency, DeadLetter, DeadLetterInfo, Delivery, DispatchConfig,
    DispatchPolicy, Dispatcher, Exponential, Hook, Outcome, SinkDispatch, SubmitError,
    split_record,
};
use ankusa_message::push_json_str;
use ankusa_sink_core::{Class, Envelope, Failure};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt as _;
use tokio::sync::{mpsc, watch};

mod intake;
mod report;

use intake::*;
use report::*;

/// A sink file's `[dispatch]` table as the dispatcher's settings for that sink; what it
/// leaves out stays the flags' (the breaker's other half included).
fn sink_settings(t: &ankusa_sinks::DispatchTable, d: &DispatchArgs) -> SinkDispatch {
    let mut s = SinkDispatch::default();
    if let Some(c) = t.concurrency {
        s = s.with_concurrency(match c {
            ankusa_sinks::ConcurrencySetting::Fixed(n) => Concurrency::Fixed(n.get()),
            ankusa_sinks::ConcurrencySetting::Adaptive { max } => {
                Concurrency::Adaptive { max: max.get() }
            }
            _ => Concurrency::Adaptive {
                max: ankusa_sinks::DEFAULT_MAX_CONCURRENCY.get(),
            },
        });
    }
    if let Some(r) = t.rate_per_second {
        s = s.with_rate_per_second(r);
    }
    if let Some(n) = t.tenant_concurrency {
        s = s.with_tenant_concurrency(n);
    }
    if t.breaker_failures.is_some() || t.breaker_open_seconds.is_some() {
        s = s.with_breaker(BreakerConfig::new(
            t.breaker_failures.map_or(d.breaker_failures, |n| n.get()),
            Duration::from_secs(t.breaker_open_seconds.unwrap_or(d.breaker_open)),
        ));
    }
    s
}

/// The dispatch policy of the retry flags: without `--retry`, one attempt.
fn policy(retry: &RetryArgs) -> DispatchPolicy {
    DispatchPolicy {
        retry: Box::new(Exponential {
            max_attempts: if retry.retry { retry.max_attempts } else { 1 },
            ..Exponential::default()
        }),
        max_elapsed: Duration::from_secs(retry.max_elapsed),
        ..DispatchPolicy::default()
    }
}

/// What a claim read may bring into memory when the input sets no bound of its own
/// (`deliver` of one hook): `--max-line-bytes`'s default.
const CLAIM_READ_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// A claim store from `--claim-store`: `file:///abs/dir`, `memory://`, or `s3://bucket`
/// with the usual AWS environment (`AWS_ENDPOINT_URL` and `AWS_ALLOW_HTTP` for a local S3).
/// No read brings more than `max_read_bytes` into memory: a claim is redeemed from a store
/// others write too, and a body the run would refuse inline (longer than
/// `--max-line-bytes`) is not taken by claim either.
pub(crate) fn claim_store(spec: &str, max_read_bytes: u64) -> Result<ClaimStore, UsageError> {
    let bad = |why: &str| UsageError(format!("--claim-store: {why}"));
    let url = url::Url::parse(spec)
        .map_err(|_| bad("not a URL (file:///dir, memory://, s3://bucket)"))?;
    let config = ankusa_claimcheck::ClaimConfig::builder()
        .max_read_bytes(max_read_bytes.max(1))
        .build()
        .map_err(|e| bad(&e.to_string()))?;
    match url.scheme() {
        "memory" => Ok(ClaimStore::with_config(
            Arc::new(ankusa_claimcheck::object_store::memory::InMemory::new()),
            config,
        )),
        "file" => {
            let dir = url
                .to_file_path()
                .map_err(|()| bad("a file URL needs an absolute path"))?;
            std::fs::create_dir_all(&dir)
                .map_err(|e| bad(&format!("cannot create {}: {e}", dir.display())))?;
            ClaimStore::local(dir, config).map_err(|e| bad(&e.to_string()))
        }
        #[cfg(feature = "s3")]
        "s3" | "s3a" => {
            use ankusa_claimcheck::object_store::aws::AmazonS3Builder;
            let s3 = AmazonS3Builder::from_env()
                .with_url(spec)
                .build()
                .map_err(|e| bad(&format!("S3: {e}")))?;
            Ok(ClaimStore::with_config(Arc::new(s3), config))
        }
        #[cfg(not(feature = "s3"))]
        "s3" | "s3a" => Err(bad("S3 needs the CLI's `s3` feature (part of the default)")),
        _ => Err(bad("unsupported scheme (file, memory, s3)")),
    }
}

/// The dispatcher for this run.
fn dispatcher(
    sinks: &[NamedSink],
    d: &DispatchArgs,
    retry: &RetryArgs,
    concurrency: Option<usize>,
    parks: bool,
    claims: Option<ClaimStore>,
    dead_letter: Option<DeadLetter>,
) -> Result<(Dispatcher, ankusa_dispatch::Deliveries), UsageError> {
    let mut config = DispatchConfig::default();
    // A limit the user set is a limit over every sink, as it always was; left unset,
    // each sink that pipelines runs on its own window.
    if let Some(n) = concurrency {
        config = config.with_concurrency(n).with_sink_windows(false);
    }
    let config = config
        .with_policy(policy(retry))
        .with_attempt_timeout(Duration::from_secs(retry.attempt_timeout))
        .with_tenant_concurrency(d.tenant_concurrency)
        .with_breaker(BreakerConfig::new(
            d.breaker_failures,
            Duration::from_secs(d.breaker_open),
        ));
    let mut b = Dispatcher::builder().config(config);
    for s in sinks {
        b = b.sink(s.name.clone(), s.sink.clone());
        if s.dispatch != ankusa_sinks::DispatchTable::default() {
            let mut settings = sink_settings(&s.dispatch, d);
            // Parking frees a durable source's record: a run from input lines has none.
            if let (Some(p), true) = (&s.park, parks) {
                settings = settings.with_park(ankusa_dispatch::Park::new(p.sink.clone(), p.after));
            }
            b = b.sink_settings(s.name.clone(), settings);
        }
    }
    if let Some(store) = claims {
        b = b.claim_store(store);
    }
    if let Some(dl) = dead_letter {
        b = b.dead_letter(dl);
    }
    b.build().map_err(|e| UsageError(e.to_string()))
}

/// Counts for the final summary, per (hook, sink) pair.
#[derive(Default)]
struct Summary {
    delivered: u64,
    failed: BTreeMap<&'static str, u64>,
    abandoned: u64,
    invalid: u64,
    /// Pairs written to their sink's park destination.
    parked: u64,
    /// Pairs whose dead letter could not be stored.
    dead_letter_errors: u64,
    /// Records a redrive left in place (not matching, not a dead letter, another sink's).
    left: u64,
}

/// One run: hooks from `input` through a dispatcher over `sinks`.
struct Run<'a> {
    json: bool,
    retry: bool,
    out: Output,
    summary: Summary,
    progress: &'a indicatif::ProgressBar,
    stop_tx: Arc<watch::Sender<Option<Stop>>>,
    dead_letter: Option<DeadLetter>,
    /// Input lines, when the hooks come from them.
    lines: Option<Lines>,
    /// (hook, sink) pairs submitted so far.
    submitted: usize,
    /// Why the input could not be read to its end, if it could not.
    input_error: Option<String>,
}

impl ankusa_dispatch::forward::Observer for Run<'_> {
    type Event = Read;

    async fn event(&mut self, r: Read) -> usize {
        let pairs = match &r {
            Read::Submitted { pairs, .. } => *pairs,
            _ => 0,
        };
        self.read(r).await;
        self.flush();
        pairs
    }

    fn delivery(&mut self, d: Delivery) {
        Run::delivery(self, &d);
        // Dropped here, reported: its pair is settled with the source.
        drop(d);
        self.progress.inc(1);
    }

    fn burst(&mut self, dispatcher: &Dispatcher) {
        self.flush();
        if !self.progress.is_hidden() {
            self.progress.set_message(format!(
                "read {} delivered {} failed {} waiting {}",
                self.submitted,
                self.summary.delivered,
                self.summary.failed.values().sum::<u64>(),
                dispatcher.waiting()
            ));
        }
    }

    fn unfinished(&mut self, unfinished: Vec<ankusa_dispatch::Unfinished>) {
        self.abandoned(&unfinished);
        self.flush();
    }
}

impl Run<'_> {
    fn report(&mut self, r: &Report<'_>) {
        let human = (r.failure.is_some() || r.outcome == "abandoned").then(|| r.human());
        self.line(|out| r.write_json(out), human);
    }

    /// One outcome line: `json()` on stdout with `--json`, else `human` (if any) on stderr.
    /// A line that cannot be written stops the run: nobody could learn what happens to
    /// further hooks.
    fn line(&mut self, json: impl FnOnce(&mut Vec<u8>), human: Option<String>) {
        let written = if self.json {
            self.out.buffer_line_with(json)
        } else if let Some(line) = human {
            let out = &mut self.out;
            self.progress.suspend(|| out.stderr_outcome(&line))
        } else {
            true
        };
        if !written {
            self.output_lost();
        }
    }

    /// Write the queued outcome lines (after a burst of outcomes, and at the end).
    fn flush(&mut self) {
        if !self.out.flush() {
            self.output_lost();
        }
    }

    /// An outcome line could not be written: stop the run, nobody could learn what happens
    /// to further hooks.
    fn output_lost(&mut self) {
        // A signal that stopped the run first keeps its exit code.
        self.stop_tx.send_if_modified(|s| {
            let first = s.is_none();
            if first {
                *s = Some(Stop::Output);
            }
            first
        });
    }

    /// A line per hook still unfinished when the dispatcher shut down.
    fn abandoned(&mut self, unfinished: &[ankusa_dispatch::Unfinished]) {
        for u in unfinished {
            self.summary.abandoned += 1;
            self.report(&Report {
                id: u.envelope.id(),
                sink: &u.sink,
                outcome: "abandoned",
                failure: u.last_failure.as_ref(),
                retry_after_ms: u.retry_after_ms,
                attempts: u.attempts,
                dead_letter_error: None,
                not_before_ms: None,
            });
        }
    }

    fn delivery(&mut self, d: &Delivery) {
        if let Some(l) = &mut self.lines {
            l.finished(&d.envelope);
        }
        let r = Report::of(d, self.retry && self.dead_letter.is_some());
        self.summary.dead_letter_errors += u64::from(r.dead_letter_error.is_some());
        match r.failure {
            None if r.outcome == "ok" => self.summary.delivered += 1,
            // Parked: neither delivered nor failed; it resumes from the park destination.
            Some(_) if r.outcome == "parked" => self.summary.parked += 1,
            Some(f) => *self.summary.failed.entry(f.class().as_str()).or_default() += 1,
            None => {}
        }
        self.report(&r);
    }

    /// What the reader reported: the run's record of it, and its line.
    async fn read(&mut self, r: Read) {
        match r {
            Read::Submitted { pairs, line } => {
                self.submitted += pairs;
                if let (Some(l), Some(line)) = (&mut self.lines, line) {
                    l.submitted(line, pairs);
                }
            }
            Read::Invalid(line, reason) => {
                if let Some(l) = &mut self.lines {
                    l.read(line);
                }
                self.summary.invalid += 1;
                let json = |out: &mut Vec<u8>| {
                    let l = InvalidLine {
                        line,
                        outcome: "invalid",
                        reason: &reason,
                    };
                    serde_json::to_writer(out, &l).expect("serializes");
                };
                let human = format!("ankusa-sink: input line {line}: {reason}");
                self.line(json, Some(human));
            }
            Read::NoSuchSink {
                id,
                sink,
                env,
                line,
            } => {
                if let (Some(l), Some(line)) = (&mut self.lines, line) {
                    l.read(line);
                }
                *self
                    .summary
                    .failed
                    .entry(Class::Config.as_str())
                    .or_default() += 1;
                let f = Failure::config(ankusa_sink_core::Reason(format!(
                    "no --sink is named `{sink}` (the dead letter's sink)"
                )));
                // Its final outcome is not ok: it goes to this run's dead letters too, so a
                // replay with the wrong --sink loses nothing.
                let mut dead_letter_error = None;
                if let (Some(dl), Some(env)) = (&self.dead_letter, env) {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                    let info = DeadLetterInfo::new(&sink, &f, 0, now, now);
                    if let Err(e) = dl.store(&env, &info, Duration::from_secs(30)).await {
                        dead_letter_error = Some(e);
                    }
                }
                self.summary.dead_letter_errors += u64::from(dead_letter_error.is_some());
                self.report(&Report {
                    id: &id,
                    sink: &sink,
                    outcome: "failed",
                    failure: Some(&f),
                    retry_after_ms: None,
                    attempts: 0,
                    dead_letter_error: dead_letter_error.as_deref(),
                    not_before_ms: None,
                });
            }
            Read::NotTaken { id, sinks, line } => {
                if let (Some(l), Some(line)) = (&mut self.lines, line) {
                    l.not_taken(line);
                }
                for sink in sinks {
                    self.summary.abandoned += 1;
                    self.report(&Report {
                        id: &id,
                        sink: &sink,
                        outcome: "abandoned",
                        failure: None,
                        retry_after_ms: None,
                        attempts: 0,
                        dead_letter_error: None,
                        not_before_ms: None,
                    });
                }
            }
            Read::InputError(msg) => self.input_error = Some(msg),
            Read::Left => self.summary.left += 1,
            Read::InvalidRecord { position, reason } => {
                self.summary.invalid += 1;
                let json = |out: &mut Vec<u8>| {
                    let l = crate::from_source::InvalidRecordLine {
                        position: &position,
                        outcome: "invalid",
                        reason: &reason,
                    };
                    serde_json::to_writer(out, &l).expect("serializes");
                };
                let human = format!(
                    "ankusa-sink: record {}: {}",
                    escape_control(&position),
                    escape_control(&reason)
                );
                self.line(json, Some(human));
            }
        }
    }
}

/// Run `input` through a dispatcher over `sinks` and report every (hook, sink) pair.
#[allow(clippy::too_many_arguments)]
async fn run(
    input: Input,
    sinks: Vec<NamedSink>,
    dispatch: &DispatchArgs,
    retry: &RetryArgs,
    concurrency: Option<usize>,
    dead_letter: Option<DeadLetter>,
    stop_tx: Arc<watch::Sender<Option<Stop>>>,
    summary_line: bool,
) -> Result<ExitCode, UsageError> {
    let names: Vec<String> = sinks.iter().map(|s| s.name.clone()).collect();
    let parks = matches!(input, Input::Source { .. });
    let max_read = match &input {
        Input::Lines { max_line, .. } | Input::Source { max_line, .. } => {
            u64::try_from(*max_line).unwrap_or(u64::MAX)
        }
        Input::One(_) => CLAIM_READ_MAX_BYTES,
    };
    let claims = dispatch
        .claim_store
        .as_deref()
        .map(|spec| claim_store(spec, max_read))
        .transpose()?;
    // A dead letter larger than its sink's inline threshold goes by claim, like a hook
    // (the run's own handle too: it files what the dispatcher never sees).
    let dead_letter = match (dead_letter, &claims) {
        (Some(dl), Some(store)) => Some(dl.with_claim_store(store.clone())),
        (dl, _) => dl,
    };
    let (dispatcher, deliveries) = dispatcher(
        &sinks,
        dispatch,
        retry,
        concurrency,
        parks,
        claims,
        dead_letter.clone(),
    )?;
    let progress = progress_bar(retry.json);
    let lines = matches!(input, Input::Lines { .. }).then(Lines::default);
    let mut run = Run {
        json: retry.json,
        retry: retry.retry,
        out: Output::new(),
        summary: Summary::default(),
        progress: &progress,
        stop_tx: stop_tx.clone(),
        dead_letter,
        lines,
        submitted: 0,
        input_error: None,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let intake = read_and_submit(
        input,
        dispatcher.clone(),
        names,
        run.dead_letter.clone(),
        stop_tx.subscribe(),
        tx,
    );
    let started = Instant::now();
    let mut stop = stop_tx.subscribe();
    let stopping = async move {
        // The sender lives as long as the run: an error is no stop.
        if stop.wait_for(Option::is_some).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let drain = Duration::from_secs(dispatch.drain_timeout);
    // The one forward loop (ankusa_dispatch::forward): every line reported, then the
    // source's settlements made final.
    let ended = ankusa_dispatch::forward::drive(
        dispatcher, deliveries, intake, rx, stopping, drain, &mut run,
    )
    .await;
    let input_error = run.input_error.take();
    progress.finish_and_clear();
    if let Some(msg) = &input_error {
        run.out.note(&format!("ankusa-sink: {msg}"));
    }
    let stop = *stop_tx.borrow();
    if summary_line {
        let mut note = summary_note(&run.summary, started.elapsed());
        if let (Some(_), Some(l)) = (stop, &run.lines) {
            let resume = l.resume_after();
            note.push_str(&format!(
                "; input lines read: {}, every line through {resume} finished: resume with \
                 --skip-lines {resume}",
                l.last
            ));
        }
        run.out.note(&note);
    }
    let s = &run.summary;
    let failed: u64 = s.failed.values().sum();
    if let Err(died) = ended {
        // A bug: the pairs the scheduler held have no outcome line.
        run.out.note(&format!("ankusa-sink: {died}"));
        return Ok(ExitCode::from(EXIT_SOFTWARE));
    }
    Ok(match stop {
        Some(Stop::Signal(sig)) => signal_exit(sig),
        _ if run.out.outcome_lost() || s.dead_letter_errors > 0 => ExitCode::from(EXIT_OUTPUT),
        _ if failed > 0 || s.abandoned > 0 => ExitCode::from(EXIT_FAILED),
        _ if s.invalid > 0 || input_error.is_some() => ExitCode::from(EXIT_USAGE),
        // A dead letter that names a sink this run lacks is `failed` above; one the filters
        // leave is not a failure.
        _ => ExitCode::SUCCESS,
    })
}

/// The `--summary` line: counts by outcome and failure class, time and rate.
fn summary_note(s: &Summary, elapsed: Duration) -> String {
    let failed: u64 = s.failed.values().sum();
    let rate = (s.delivered + failed) as f64 / elapsed.as_secs_f64().max(1e-9);
    // Both throttles count as `retry_after`.
    let by_class: Vec<String> = [
        Class::Permanent,
        Class::Config,
        Class::Transient,
        Class::Throttled,
    ]
    .iter()
    .map(|c| c.as_str())
    .map(|c| format!("{c}={}", s.failed.get(c).copied().unwrap_or(0)))
    .collect();
    let mut abandoned = if s.abandoned > 0 {
        format!(" abandoned {}", s.abandoned)
    } else {
        String::new()
    };
    if s.parked > 0 {
        abandoned.push_str(&format!(" parked {}", s.parked));
    }
    if s.left > 0 {
        abandoned.push_str(&format!(" left {}", s.left));
    }
    format!(
        "delivered {} failed {} ({}){abandoned} invalid {} in {:.3}s, {:.0} hooks/s",
        s.delivered,
        failed,
        by_class.join(" "),
        s.invalid,
        elapsed.as_secs_f64(),
        rate
    )
}

/// A progress bar on a terminal for long runs; hidden with `--json` or when stdout is not
/// a terminal.
fn progress_bar(json: bool) -> indicatif::ProgressBar {
    use std::io::IsTerminal as _;
    if json || !std::io::stdout().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} {msg} ({per_sec}, {elapsed})")
    {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

async fn read_body(spec: Option<&str>) -> Result<Vec<u8>, UsageError> {
    match spec {
        None => Ok(Vec::new()),
        Some("-") => {
            let mut buf = Vec::new();
            tokio::io::stdin()
                .read_to_end(&mut buf)
                .await
                .map_err(|e| UsageError(format!("cannot read the body from stdin: {e}")))?;
            Ok(buf)
        }
        Some(path) => tokio::fs::read(path)
            .await
            .map_err(|e| UsageError(format!("cannot read the body file {path}: {e}"))),
    }
}

pub(crate) async fn deliver_one(
    a: &DeliverArgs,
    sinks: Vec<NamedSink>,
    dead_letter: Option<DeadLetter>,
    stop_tx: Arc<watch::Sender<Option<Stop>>>,
) -> Result<ExitCode, UsageError> {
    let body = read_body(a.body.as_deref()).await?;
    let id =
        a.id.clone()
            .unwrap_or_else(|| ulid::Ulid::new().to_string());
    let mut b = Envelope::builder(id, a.source_id.clone(), body).tenant(a.tenant.clone());
    for h in &a.headers {
        // Not echoed: a header value may be a secret.
        let (name, value) = h.split_once(':').ok_or_else(|| {
            UsageError("--header: expected `name: value` (a colon after the name)".into())
        })?;
        b = b.header(name.trim(), value.trim());
    }
    if let Some(ct) = &a.content_type {
        b = b.content_type(ct.clone());
    }
    if let Some(k) = &a.dedupe_key {
        b = b.dedupe_key(k.clone());
    }
    let env = b
        .build()
        .map_err(|e| UsageError(format!("invalid hook: {e}")))?;
    let mut hook = hook_of(env).first_attempt(a.attempt);
    if let Some(r) = &a.replay_id {
        hook = hook.replay_id(r.clone());
    }
    let concurrency = Some(sinks.len());
    run(
        Input::One(Box::new(hook)),
        sinks,
        &a.dispatch,
        &a.retry,
        concurrency,
        dead_letter,
        stop_tx,
        false,
    )
    .await
}

/// 128 + the signal number, as shells report a command a signal stopped.
fn signal_exit(sig: i32) -> ExitCode {
    ExitCode::from(u8::try_from(128 + sig).unwrap_or(EXIT_FAILED))
}

pub(crate) fn open_input(spec: &str) -> Result<Box<dyn std::io::Read + Send>, UsageError> {
    if spec == "-" {
        Ok(Box::new(std::io::stdin()))
    } else {
        let f = std::fs::File::open(spec)
            .map_err(|e| UsageError(format!("cannot open the input {spec}: {e}")))?;
        Ok(Box::new(f))
    }
}

/// Refuse a `--dead-letter` file that is the input itself: the reader would take each dead
/// letter appended to it as more input, and a failing replay would grow it for ever.
fn refuse_own_dead_letters(
    input: &str,
    dead_letter: Option<&std::path::Path>,
) -> Result<(), UsageError> {
    use std::os::unix::fs::MetadataExt as _;
    let Some(dl) = dead_letter else {
        return Ok(());
    };
    let input = if input == "-" { "/dev/stdin" } else { input };
    if let (Ok(i), Ok(d)) = (std::fs::metadata(input), std::fs::metadata(dl))
        && (i.dev(), i.ino()) == (d.dev(), d.ino())
    {
        return Err(UsageError(format!(
            "--dead-letter {} is the input: replay a dead-letter file into another one",
            dl.display()
        )));
    }
    Ok(())
}

pub(crate) async fn forward(
    a: &ForwardArgs,
    sinks: Vec<NamedSink>,
    dead_letter: Option<DeadLetter>,
    stop_tx: Arc<watch::Sender<Option<Stop>>>,
) -> Result<ExitCode, UsageError> {
    let max_line = usize::try_from(a.max_line_bytes).unwrap_or(usize::MAX);
    let input = if let Some(from) = &a.from {
        crate::from_source::refuse_non_durable(&sinks, a.allow_non_durable)?;
        let mut concurrency = a
            .concurrency
            .unwrap_or(DispatchConfig::default().concurrency);
        if a.redrive {
            // The records a redrive leaves hold their places until it ends: a queue's
            // prefetch (which follows the concurrency) as large as the window lets it read
            // past them.
            concurrency = concurrency.max(usize::try_from(a.max_unacked).unwrap_or(usize::MAX));
        }
        let options = crate::from_source::options(
            a.max_unacked,
            a.max_unacked_bytes,
            Duration::from_secs(a.retry.attempt_timeout),
            concurrency,
        );
        let claims = match &a.dispatch.claim_store {
            Some(spec) => Some(claim_store(spec, a.max_line_bytes)?),
            None => None,
        };
        let source = match crate::from_source::open(from, &options, &sinks, a.redrive).await {
            Ok(source) => source,
            Err(OpenError::Usage(e)) => return Err(e),
            Err(OpenError::Unavailable(why)) => return Ok(crate::source_unavailable(&why)),
        };
        let redrive = a.redrive.then(|| {
            ankusa_dispatch::forward::Redrive::new(a.filter.filter(), ulid::Ulid::new().to_string())
        });
        Input::Source {
            source,
            claims,
            max_line,
            redrive,
            rate: a.rate,
        }
    } else {
        refuse_own_dead_letters(&a.input, a.dispatch.dead_letter.as_deref())?;
        // Message v1 sinks carry the body's SHA-256: the reader thread computes it.
        let subject = ankusa_sink_core::Subject::new("forward", None);
        let digest = sinks.iter().any(|s| {
            ankusa_sink_core::safe_describe(&*s.sink, &subject)
                .is_some_and(|d| d.payload == ankusa_sink_core::Payload::Message)
        });
        let lines = spawn_reader(
            open_input(&a.input)?,
            max_line,
            parse_line,
            digest,
            a.skip_lines,
        )
        .map_err(|e| UsageError(format!("cannot start the input reader: {e}")))?;
        Input::Lines {
            lines,
            max_line,
            filter: a.filter.filter(),
            rate: a.rate,
        }
    };
    run(
        input,
        sinks,
        &a.dispatch,
        &a.retry,
        a.concurrency,
        dead_letter,
        stop_tx,
        true,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::Sink;

    /// A claim store the CLI opens bounds its reads: a claim is not a way past
    /// `--max-line-bytes`, whatever another writer of the store checked in.
    #[tokio::test]
    async fn the_claim_store_reads_no_more_than_the_line_cap() {
        let dir = std::env::temp_dir().join(format!("ankusa-claim-cap-{}", ulid::Ulid::new()));
        let spec = format!("file://{}", dir.display());
        for spec in [spec.as_str(), "memory://"] {
            let store = claim_store(spec, 1024).unwrap();
            assert_eq!(store.config().max_read_bytes(), Some(1024), "{spec}");
            let claim = store
                .check_in(ankusa_claimcheck::ClaimItem::new("acme", vec![b'x'; 4096]))
                .await
                .unwrap();
            let e = store
                .redeem_claim(Some("acme"), &claim, 4096)
                .await
                .unwrap_err();
            assert!(
                matches!(e, ankusa_claimcheck::ClaimError::ReadTooLarge { .. }),
                "{spec}: {e}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn lines_without_a_failure_are_the_bytes_serde_writes() {
        let texts = [
            "h1",
            "",
            "quote\" and \\ backslash",
            "tab\tnew\nline\u{1}\u{1f}",
            "del\u{7f} é ✓ 🙂",
            "</script>",
        ];
        for id in texts {
            for sink in ["kafka", "a \"b\"", "ctl\u{0}"] {
                for (outcome, attempts) in [("ok", 1), ("abandoned", 0), ("ok", u32::MAX)] {
                    let r = Report {
                        id,
                        sink,
                        outcome,
                        failure: None,
                        retry_after_ms: Some(5),
                        attempts,
                        dead_letter_error: None,
                        not_before_ms: None,
                    };
                    let line = Line {
                        id,
                        sink,
                        outcome,
                        class: None,
                        error_class: None,
                        retry_after_ms: None,
                        reason: None,
                        may_have_landed: None,
                        attempts,
                        dead_letter_error: None,
                        not_before_ms: None,
                    };
                    assert_eq!(
                        r.json(),
                        serde_json::to_string(&line).unwrap(),
                        "{id:?} {sink:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn envelope_errors_never_quote_the_input() {
        for (text, want) in [
            (
                &br#"{"id":"h","source_id":"s","body_base64":"","headers":"SECRETVALUE"}"#[..],
                "key `headers`",
            ),
            (br#"{"id":17}"#, "key `id`: wrong type"),
            (b"{\"id\": \"SECRETVALUE", "not JSON (Eof error"),
            (
                b"\xff\xfeSECRETVALUE",
                "not UTF-8 (invalid byte at offset 0)",
            ),
            (
                br#"{"id":"h","dead_letter":{"sink":"SECRETVALUE"}}"#,
                "dead_letter",
            ),
        ] {
            let e = parse_line(text).unwrap_err();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains("SECRETVALUE"), "{e}");
        }
    }

    /// Fails every delivery with one class.
    #[derive(Debug)]
    struct Failing(Class);

    #[ankusa_sink_core::async_trait]
    impl Sink for Failing {
        async fn deliver(
            &self,
            _env: &Envelope,
            _ctx: &ankusa_sink_core::Ctx,
        ) -> Result<(), Failure> {
            Err(Failure::new(
                self.0,
                ankusa_sink_core::Reason("busy".into()),
            ))
        }
    }

    /// The JSON outcome line of one hook through the CLI's dispatcher to a sink that
    /// always fails with `class`.
    async fn outcome_line(class: Class, retry: bool, max_attempts: u32) -> serde_json::Value {
        let sinks = [NamedSink {
            name: "t".into(),
            sink: Arc::new(Failing(class)),
            dispatch: ankusa_sinks::DispatchTable::default(),
            park: None,
        }];
        let d = DispatchArgs {
            claim_store: None,
            dead_letter: None,
            metrics_addr: None,
            metrics_token_file: None,
            breaker_failures: 100,
            breaker_open: 30,
            tenant_concurrency: 0,
            drain_timeout: 30,
            otlp_endpoint: None,
            otlp_allow_insecure: false,
        };
        let r = RetryArgs {
            retry,
            max_elapsed: 86_400,
            max_attempts,
            attempt_timeout: 30,
            json: true,
        };
        let (dispatcher, mut deliveries) =
            dispatcher(&sinks, &d, &r, Some(1), false, None, None).unwrap();
        let env = Envelope::builder("h-1", "s", "x").build().unwrap();
        dispatcher
            .submit(ankusa_dispatch::Hook::new(env))
            .await
            .unwrap();
        let delivery = deliveries.recv().await.unwrap();
        // As a run with a dead-letter destination that stored it.
        serde_json::from_str(&Report::of(&delivery, retry).json()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_reports_the_pause_dispatch_drew() {
        // One attempt: throttle_after_ms(1) is in 1..=500.
        let v = outcome_line(Class::Throttled, false, 1).await;
        assert_eq!(v["class"], "retry_after");
        assert_eq!(v["error_class"], "throttled");
        assert_eq!(v["outcome"], "failed");
        let ms = v["retry_after_ms"].as_u64().expect("a positive pause");
        assert!((1..=500).contains(&ms), "{v}");
        // Three attempts: the last failure's pause, throttle_after_ms(3), in 1..=2000.
        let v = outcome_line(Class::Throttled, true, 3).await;
        assert_eq!(
            (v["outcome"].as_str(), v["attempts"].as_u64()),
            (Some("dead_lettered"), Some(3))
        );
        let ms = v["retry_after_ms"].as_u64().expect("a positive pause");
        assert!((1..=2000).contains(&ms), "{v}");
    }

    #[tokio::test(start_paused = true)]
    async fn reported_pauses_are_capped_at_the_dispatch_cap() {
        let huge = Class::RetryAfter(std::num::NonZeroU64::MAX);
        let v = outcome_line(huge, false, 1).await;
        assert_eq!(v["retry_after_ms"], 3_600_000);
        let v = outcome_line(Class::Transient, false, 1).await;
        assert_eq!(v["retry_after_ms"], serde_json::Value::Null);
        assert_eq!(v["class"], "transient");
        // The sink did not say whether the hook may have landed: null, but the key is there.
        assert_eq!(v.get("may_have_landed"), Some(&serde_json::Value::Null));
    }
}
