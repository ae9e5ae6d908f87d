//! `deliver` and `forward`: one attempt, or a whole dispatcher loop per hook.

use crate::output::{Output, escape_control};
use crate::{
    DeliverArgs, EXIT_FAILED, EXIT_OUTPUT, EXIT_USAGE, ForwardArgs, RetryArgs, UsageError,
};
use ankusa_sink_core::dispatch::{Action, DispatchPolicy, Exponential, decide, record};
use ankusa_sink_core::{Class, Ctx, Envelope, Failure, Sink, attempt, safe_deliver};
use futures_util::StreamExt as _;
use serde::Serialize;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, BufReader};
use tokio::sync::watch;

/// Why a run stopped taking new hooks before its input ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGINT or SIGTERM (the signal number).
    Signal(i32),
    /// Outcome lines can no longer be written: delivering more would report nothing.
    Output,
}

/// What happened to one hook.
#[derive(Debug)]
pub(crate) enum Outcome {
    Ok {
        attempts: u32,
    },
    /// Failed (one attempt) or dead-lettered (with `--retry`).
    Failed {
        dead_lettered: bool,
        failure: Failure,
        attempts: u32,
    },
    /// The run was stopped while the hook waited to be retried: it was not delivered.
    Abandoned {
        failure: Failure,
        attempts: u32,
    },
}

/// The exact `--json` outcome line.
#[derive(Serialize)]
struct Line<'a> {
    id: &'a str,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    class: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_class: Option<&'static str>,
    /// Outer `None`: no key; `Some(None)`: `null` (a failure that asked for no pause).
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    attempts: u32,
}

/// The `--json` line for an input line that is not a valid envelope.
#[derive(Serialize)]
struct InvalidLine<'a> {
    line: u64,
    outcome: &'static str,
    reason: &'a str,
}

/// What is reported of a requested pause: what dispatch would honour, never more than its
/// cap (a destination may ask for `u64::MAX` ms).
fn reported_retry_after(class: Class) -> Option<u64> {
    let cap = DispatchPolicy::default().max_retry_after.as_millis();
    class
        .retry_after_ms()
        .map(|ms| ms.min(u64::try_from(cap).unwrap_or(u64::MAX)))
}

impl Outcome {
    fn json(&self, id: &str) -> String {
        let failed = |outcome, failure: &Failure, attempts| Line {
            id,
            outcome,
            class: Some(failure.class().as_str()),
            error_class: Some(failure.error_class().as_str()),
            retry_after_ms: Some(reported_retry_after(failure.class())),
            reason: Some(failure.reason_chain()),
            attempts,
        };
        let line = match self {
            Outcome::Ok { attempts } => Line {
                id,
                outcome: "ok",
                class: None,
                error_class: None,
                retry_after_ms: None,
                reason: None,
                attempts: *attempts,
            },
            Outcome::Failed {
                dead_lettered,
                failure,
                attempts,
            } => failed(
                if *dead_lettered {
                    "dead_lettered"
                } else {
                    "failed"
                },
                failure,
                *attempts,
            ),
            Outcome::Abandoned { failure, attempts } => failed("abandoned", failure, *attempts),
        };
        serde_json::to_string(&line).expect("an outcome line serializes")
    }

    fn human(&self, id: &str) -> String {
        let failed = |what: &str, failure: &Failure, attempts: u32| {
            // The reason may hold text the destination wrote: no terminal escapes.
            format!(
                "{what} {id}: {} (error class: {}, attempts: {attempts})",
                escape_control(&failure.to_string()),
                failure.error_class()
            )
        };
        match self {
            Outcome::Ok { attempts } => format!("ok {id} (attempts: {attempts})"),
            Outcome::Failed {
                dead_lettered,
                failure,
                attempts,
            } => failed(
                if *dead_lettered {
                    "DEAD-LETTERED"
                } else {
                    "FAILED"
                },
                failure,
                *attempts,
            ),
            Outcome::Abandoned { failure, attempts } => failed("ABANDONED", failure, *attempts),
        }
    }

    fn failure(&self) -> Option<&Failure> {
        match self {
            Outcome::Ok { .. } => None,
            Outcome::Failed { failure, .. } | Outcome::Abandoned { failure, .. } => Some(failure),
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Deliver `env`: one attempt, or with `--retry` a dispatcher loop by the core rules. A
/// stop (signal) ends a wait for a retry with [`Outcome::Abandoned`]; an attempt in flight
/// is let finish.
pub(crate) async fn run_hook(
    sink: &dyn Sink,
    kind: &str,
    env: &Envelope,
    base: &Ctx,
    retry: &RetryArgs,
    mut stop: watch::Receiver<Option<Stop>>,
) -> Outcome {
    let policy = DispatchPolicy {
        retry: Box::new(Exponential {
            max_attempts: retry.max_attempts,
            ..Exponential::default()
        }),
        max_elapsed: Duration::from_secs(retry.max_elapsed),
        ..DispatchPolicy::default()
    };
    let attempt_timeout = Duration::from_secs(retry.attempt_timeout);
    let started = Instant::now();
    let first_ms = now_ms();
    let mut n = base.attempt();
    let mut attempts = 0;
    loop {
        attempts += 1;
        // With --retry, no attempt runs past the horizon: it could only dead-letter after.
        let deadline = if retry.retry {
            let left = policy.max_elapsed.saturating_sub(started.elapsed());
            attempt_timeout.min(left.max(Duration::from_millis(1)))
        } else {
            attempt_timeout
        };
        let ctx = base.clone().with_attempt(n);
        let res = attempt(
            kind,
            env,
            &ctx,
            safe_deliver(sink, env, &ctx, Some(deadline)),
        )
        .await;
        let failure = match res {
            Ok(()) => return Outcome::Ok { attempts },
            Err(f) => f,
        };
        if !retry.retry {
            return Outcome::Failed {
                dead_lettered: false,
                failure,
                attempts,
            };
        }
        let decision = decide(
            failure.class(),
            attempts,
            first_ms,
            now_ms(),
            &policy,
            &mut rand::rng(),
        );
        record(kind, &decision);
        match decision.action {
            Action::Retry { delay, .. } => {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stop.wait_for(Option::is_some) => {
                        return Outcome::Abandoned { failure, attempts };
                    }
                }
                n = n.saturating_add(1);
            }
            Action::DeadLetter { .. } => {
                return Outcome::Failed {
                    dead_lettered: true,
                    failure,
                    attempts,
                };
            }
        }
    }
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
    kind: &'static str,
    sink: Arc<dyn Sink>,
    stop: watch::Receiver<Option<Stop>>,
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
    if a.attempt == 0 {
        return Err(UsageError("--attempt must be at least 1".into()));
    }
    let mut ctx = Ctx::for_envelope(&env).with_attempt(a.attempt);
    if let Some(r) = &a.replay_id {
        ctx = ctx.with_replay_id(r.clone());
    }
    let outcome = run_hook(&*sink, kind, &env, &ctx, &a.retry, stop.clone()).await;
    let mut out = Output::new();
    let written = if a.retry.json {
        out.stdout_line(&outcome.json(env.id()))
    } else {
        out.stdout_line(&outcome.human(env.id()))
    };
    Ok(if !written {
        ExitCode::from(EXIT_OUTPUT)
    } else if let Some(Stop::Signal(sig)) = *stop.borrow() {
        signal_exit(sig)
    } else {
        match outcome {
            Outcome::Ok { .. } => ExitCode::SUCCESS,
            _ => ExitCode::from(EXIT_FAILED),
        }
    })
}

/// 128 + the signal number, as shells report a command a signal stopped.
fn signal_exit(sig: i32) -> ExitCode {
    ExitCode::from(u8::try_from(128 + sig).unwrap_or(EXIT_FAILED))
}

async fn open_input(spec: &str) -> Result<Box<dyn AsyncRead + Unpin + Send>, UsageError> {
    if spec == "-" {
        Ok(Box::new(tokio::io::stdin()))
    } else {
        let f = tokio::fs::File::open(spec)
            .await
            .map_err(|e| UsageError(format!("cannot open the input {spec}: {e}")))?;
        Ok(Box::new(f))
    }
}

/// One line of input, at most `max` bytes (without the newline).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum InputLine {
    /// The line's bytes.
    Bytes(Vec<u8>),
    /// The line was longer than the cap: it was skipped up to its newline, never held.
    TooLong,
}

/// Read the next line, holding at most `max` bytes of it; `None` at the end of the input.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
) -> std::io::Result<Option<InputLine>> {
    let mut line = Vec::new();
    let mut too_long = false;
    let mut any = false;
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            break;
        }
        any = true;
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1),
            None => (buf, buf.len()),
        };
        let found_newline = done > chunk.len();
        if !too_long {
            if line.len() + chunk.len() > max {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        r.consume(done);
        if found_newline {
            break;
        }
    }
    if !any {
        return Ok(None);
    }
    if too_long {
        return Ok(Some(InputLine::TooLong));
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Some(InputLine::Bytes(line)))
}

/// Parse one input line into an envelope. The error never quotes the input: envelopes
/// carry provider secrets in headers and bodies.
fn parse_envelope(bytes: &[u8]) -> Result<Envelope, String> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("not UTF-8 (invalid byte at offset {})", e.valid_up_to()))?;
    if let Ok(env) = serde_json::from_str::<Envelope>(text) {
        return Ok(env);
    }
    // Slow path, errors only: serde's own messages quote the offending value.
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "not JSON ({:?} error at column {})",
            e.classify(),
            e.column()
        )
    })?;
    ankusa_sinks::from_json_value(value).map_err(|e| format!("not a valid envelope: {e}"))
}

/// What one line of input came to.
enum Done {
    Hook(String, Outcome),
    Invalid(u64, String),
    Blank,
}

/// Counts for the final summary.
#[derive(Default)]
struct Summary {
    delivered: u64,
    failed: BTreeMap<&'static str, u64>,
    abandoned: u64,
    invalid: u64,
}

pub(crate) async fn forward(
    a: &ForwardArgs,
    kind: &'static str,
    sink: Arc<dyn Sink>,
    stop_tx: Arc<watch::Sender<Option<Stop>>>,
) -> Result<ExitCode, UsageError> {
    if a.concurrency == 0 {
        return Err(UsageError("--concurrency must be at least 1".into()));
    }
    let max_line = usize::try_from(a.max_line_bytes).unwrap_or(usize::MAX);
    let input = open_input(&a.input).await?;
    let reader = BufReader::with_capacity(64 * 1024, input);
    let input_error: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let input_error = &input_error;
    // Lines are read only as fast as deliveries finish: memory is bounded by --concurrency
    // (and --max-line-bytes). A stop ends reading; a read error ends it too, for good: a
    // directory or a failing disk gives the same error forever.
    let stream = futures_util::stream::unfold(
        (reader, 0u64, stop_tx.subscribe()),
        move |(mut reader, n, mut stop)| async move {
            if stop.borrow().is_some() {
                return None;
            }
            let read = tokio::select! {
                biased;
                _ = stop.wait_for(Option::is_some) => return None,
                r = read_line(&mut reader, max_line) => r,
            };
            match read {
                Ok(Some(line)) => Some(((n + 1, line), (reader, n + 1, stop))),
                Ok(None) => None,
                Err(e) => {
                    *input_error.lock().expect("not poisoned") =
                        Some(format!("reading the input failed after line {n}: {e}"));
                    None
                }
            }
        },
    );
    let progress = indicatif::ProgressBar::new_spinner();
    progress.set_draw_target(if a.retry.json {
        indicatif::ProgressDrawTarget::hidden()
    } else {
        indicatif::ProgressDrawTarget::stderr()
    });
    let started = Instant::now();
    let mut summary = Summary::default();
    let retry = &a.retry;
    let sink = &*sink;
    let stop_rx = stop_tx.subscribe();
    let results = stream
        .map(|(n, line)| {
            let stop = stop_rx.clone();
            async move {
                let bytes = match line {
                    InputLine::TooLong => {
                        return Done::Invalid(
                            n,
                            format!("longer than --max-line-bytes ({max_line} bytes)"),
                        );
                    }
                    InputLine::Bytes(b) => b,
                };
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    return Done::Blank;
                }
                let env = match parse_envelope(&bytes) {
                    Ok(env) => env,
                    Err(reason) => return Done::Invalid(n, reason),
                };
                drop(bytes);
                let ctx = Ctx::for_envelope(&env);
                let outcome = run_hook(sink, kind, &env, &ctx, retry, stop).await;
                Done::Hook(env.id().to_owned(), outcome)
            }
        })
        .buffer_unordered(a.concurrency);
    let mut results = std::pin::pin!(results);
    let mut out = Output::new();
    while let Some(done) = results.next().await {
        let written = match done {
            Done::Blank => true,
            Done::Hook(id, outcome) => {
                match &outcome {
                    Outcome::Ok { .. } => summary.delivered += 1,
                    Outcome::Failed { failure, .. } => {
                        *summary.failed.entry(failure.class().as_str()).or_default() += 1;
                    }
                    Outcome::Abandoned { .. } => summary.abandoned += 1,
                }
                if retry.json {
                    out.stdout_line(&outcome.json(&id))
                } else if outcome.failure().is_some() {
                    progress.suspend(|| out.stderr_outcome(&outcome.human(&id)))
                } else {
                    true
                }
            }
            Done::Invalid(n, reason) => {
                summary.invalid += 1;
                if retry.json {
                    let line = InvalidLine {
                        line: n,
                        outcome: "invalid",
                        reason: &reason,
                    };
                    out.stdout_line(&serde_json::to_string(&line).expect("serializes"))
                } else {
                    progress.suspend(|| {
                        out.stderr_outcome(&format!("ankusa-sink: input line {n}: {reason}"))
                    })
                }
            }
        };
        if !written {
            // Nobody can learn what happens to further hooks: take no more.
            stop_tx.send_if_modified(|s| {
                let first = s.is_none();
                if first {
                    *s = Some(Stop::Output);
                }
                first
            });
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
    let input_error = input_error.lock().expect("not poisoned").take();
    if let Some(msg) = &input_error {
        out.note(&format!("ankusa-sink: {msg}"));
    }
    let elapsed = started.elapsed();
    let failed: u64 = summary.failed.values().sum();
    let total = summary.delivered + failed;
    let rate = total as f64 / elapsed.as_secs_f64().max(1e-9);
    let by_class: Vec<String> = [Class::Permanent, Class::Config, Class::Transient]
        .iter()
        .map(|c| c.as_str())
        .chain(["retry_after"])
        .map(|c| format!("{c}={}", summary.failed.get(c).copied().unwrap_or(0)))
        .collect();
    let abandoned = if summary.abandoned > 0 {
        format!(" abandoned {}", summary.abandoned)
    } else {
        String::new()
    };
    out.note(&format!(
        "delivered {} failed {} ({}){abandoned} invalid {} in {:.3}s, {:.0} hooks/s",
        summary.delivered,
        failed,
        by_class.join(" "),
        summary.invalid,
        elapsed.as_secs_f64(),
        rate
    ));
    let stop = *stop_tx.borrow();
    Ok(match stop {
        Some(Stop::Signal(sig)) => signal_exit(sig),
        _ if out.outcome_lost() => ExitCode::from(EXIT_OUTPUT),
        _ if failed > 0 || summary.abandoned > 0 => ExitCode::from(EXIT_FAILED),
        _ if summary.invalid > 0 || input_error.is_some() => ExitCode::from(EXIT_USAGE),
        _ => ExitCode::SUCCESS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<InputLine> {
        let mut r = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        while let Some(l) = read_line(&mut r, max).await.unwrap() {
            out.push(l);
        }
        out
    }

    #[tokio::test]
    async fn lines_are_capped_without_holding_them() {
        let got = lines(b"ab\r\n0123456789\nxyz", 5).await;
        assert_eq!(
            got,
            [
                InputLine::Bytes(b"ab".to_vec()),
                InputLine::TooLong,
                InputLine::Bytes(b"xyz".to_vec()),
            ]
        );
        assert_eq!(lines(b"", 5).await, []);
        assert_eq!(lines(b"\n\n", 5).await.len(), 2);
        assert_eq!(
            lines(b"12345\n", 5).await,
            [InputLine::Bytes(b"12345".to_vec())]
        );
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
        ] {
            let e = parse_envelope(text).unwrap_err();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains("SECRETVALUE"), "{e}");
        }
    }

    #[test]
    fn reported_pauses_are_capped_at_the_dispatch_cap() {
        let huge = Class::RetryAfter(std::num::NonZeroU64::MAX);
        assert_eq!(reported_retry_after(huge), Some(3_600_000));
        assert_eq!(reported_retry_after(Class::Transient), None);
    }
}
