//! `deliver` and `forward`: one attempt, or a whole dispatcher loop per hook.

use crate::{DeliverArgs, EXIT_FAILED, EXIT_USAGE, ForwardArgs, RetryArgs, UsageError};
use ankusa_sink_core::dispatch::{Action, DispatchPolicy, Exponential, decide, record};
use ankusa_sink_core::{Class, Ctx, Envelope, Failure, Sink, attempt, safe_deliver};
use futures_util::StreamExt as _;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, BufReader};

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
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    attempts: u32,
}

impl Outcome {
    fn json(&self, id: &str) -> String {
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
            } => Line {
                id,
                outcome: if *dead_lettered {
                    "dead_lettered"
                } else {
                    "failed"
                },
                class: Some(failure.class().as_str()),
                error_class: Some(failure.error_class().as_str()),
                retry_after_ms: Some(failure.class().retry_after_ms()),
                reason: Some(failure.reason_chain()),
                attempts: *attempts,
            },
        };
        serde_json::to_string(&line).expect("an outcome line serializes")
    }

    fn human(&self, id: &str) -> String {
        match self {
            Outcome::Ok { attempts } => format!("ok {id} (attempts: {attempts})"),
            Outcome::Failed {
                dead_lettered,
                failure,
                attempts,
            } => format!(
                "{} {id}: {failure} (error class: {}, attempts: {attempts})",
                if *dead_lettered {
                    "DEAD-LETTERED"
                } else {
                    "FAILED"
                },
                failure.error_class()
            ),
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Deliver `env`: one attempt, or with `--retry` a dispatcher loop by the core rules.
pub(crate) async fn run_hook(
    sink: &dyn Sink,
    kind: &str,
    env: &Envelope,
    base: &Ctx,
    retry: &RetryArgs,
) -> Outcome {
    let policy = DispatchPolicy {
        retry: Box::new(Exponential {
            max_attempts: retry.max_attempts,
            ..Exponential::default()
        }),
        max_elapsed: Duration::from_secs(retry.max_elapsed),
        ..DispatchPolicy::default()
    };
    let deadline = Some(Duration::from_secs(retry.attempt_timeout.max(1)));
    let first_ms = now_ms();
    let mut n = base.attempt();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let ctx = base.clone().with_attempt(n);
        let res = attempt(kind, env, &ctx, safe_deliver(sink, env, &ctx, deadline)).await;
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
                tokio::time::sleep(delay).await;
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
) -> Result<ExitCode, UsageError> {
    let body = read_body(a.body.as_deref()).await?;
    let id =
        a.id.clone()
            .unwrap_or_else(|| ulid::Ulid::new().to_string());
    let mut b = Envelope::builder(id, a.source_id.clone(), body).tenant(a.tenant.clone());
    for h in &a.headers {
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| UsageError(format!("--header {h:?}: expected `name: value`")))?;
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
    let outcome = run_hook(&*sink, kind, &env, &ctx, &a.retry).await;
    if a.retry.json {
        println!("{}", outcome.json(env.id()));
    } else {
        println!("{}", outcome.human(env.id()));
    }
    Ok(match outcome {
        Outcome::Ok { .. } => ExitCode::SUCCESS,
        Outcome::Failed { .. } => ExitCode::from(EXIT_FAILED),
    })
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

/// Counts for the final summary.
#[derive(Default)]
struct Summary {
    delivered: u64,
    failed: BTreeMap<&'static str, u64>,
    invalid: u64,
}

pub(crate) async fn forward(
    a: &ForwardArgs,
    kind: &'static str,
    sink: Arc<dyn Sink>,
) -> Result<ExitCode, UsageError> {
    if a.concurrency == 0 {
        return Err(UsageError("--concurrency must be at least 1".into()));
    }
    let input = open_input(&a.input).await?;
    let lines = BufReader::new(input).lines();
    // Lines are read only as fast as deliveries finish: memory is bounded by --concurrency.
    let stream = futures_util::stream::unfold((lines, 0u64), |(mut lines, n)| async move {
        match lines.next_line().await {
            Ok(Some(l)) => Some((Ok((n + 1, l)), (lines, n + 1))),
            Ok(None) => None,
            Err(e) => Some((Err(e), (lines, n + 1))),
        }
    });
    let progress = indicatif::ProgressBar::new_spinner();
    progress.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    let started = Instant::now();
    let mut summary = Summary::default();
    let retry = &a.retry;
    let sink = &*sink;
    let results = stream
        .map(|item| async move {
            let (n, line) = match item {
                Ok(x) => x,
                Err(e) => return Err(format!("reading the input failed: {e}")),
            };
            if line.trim().is_empty() {
                return Ok(None);
            }
            let env: Envelope = serde_json::from_str(&line)
                .map_err(|e| format!("input line {n}: not a valid envelope: {e}"))?;
            let ctx = Ctx::for_envelope(&env);
            let outcome = run_hook(sink, kind, &env, &ctx, retry).await;
            Ok(Some((env.id().to_owned(), outcome)))
        })
        .buffer_unordered(a.concurrency);
    let mut results = std::pin::pin!(results);
    let stdout = std::io::stdout();
    while let Some(r) = results.next().await {
        match r {
            Ok(None) => {}
            Ok(Some((id, outcome))) => {
                match &outcome {
                    Outcome::Ok { .. } => summary.delivered += 1,
                    Outcome::Failed { failure, .. } => {
                        *summary.failed.entry(failure.class().as_str()).or_default() += 1;
                    }
                }
                if retry.json {
                    let _ = writeln!(stdout.lock(), "{}", outcome.json(&id));
                } else if matches!(outcome, Outcome::Failed { .. }) {
                    progress.suspend(|| eprintln!("{}", outcome.human(&id)));
                }
            }
            Err(msg) => {
                summary.invalid += 1;
                progress.suspend(|| eprintln!("ankusa-sink: {msg}"));
            }
        }
        progress.inc(1);
    }
    progress.finish_and_clear();
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
    eprintln!(
        "delivered {} failed {} ({}) invalid {} in {:.3}s, {:.0} hooks/s",
        summary.delivered,
        failed,
        by_class.join(" "),
        summary.invalid,
        elapsed.as_secs_f64(),
        rate
    );
    Ok(if failed > 0 {
        ExitCode::from(EXIT_FAILED)
    } else if summary.invalid > 0 {
        ExitCode::from(EXIT_USAGE)
    } else {
        ExitCode::SUCCESS
    })
}
