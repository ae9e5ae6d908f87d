//! Issue 21's baseline for HTTP: what a user writes instead of `ankusa-sink forward`, with
//! reqwest alone (`scripts/bench_pipeline.py --only http` times it against `forward`, both
//! POSTing to `examples/sink_server.rs`).
//!
//! ```text
//! http_raw_loop FILE URL [--concurrency N]
//! ```
//!
//! POSTs each line of FILE (without its newline), as is, as one request body with
//! `content-type: application/json`: no parsing, no signature. One reqwest client (HTTP/1.1
//! keep-alive pool, no proxy, 5 s timeout); up to `--concurrency` requests in flight at once,
//! each a tokio task, on a current-thread runtime (`--threads N`: N workers instead). The
//! defaults (32 in flight, one thread) are the best found on the 2-core bench machine:
//! 100,000 POSTs took 4.3 / 3.4 / 2.6–3.3 / 3.0–3.1 / 3.0–3.4 / 4.6 / 5.1 s at 4 / 8 / 16 /
//! 32 / 64 / 128 / 256 in flight on two workers, and 2.5–2.9 s at 32 on one thread. Exits 0
//! only when every request got a 2xx answer and its (empty) body was read; 1 otherwise.

use ankusa_bench_support::raw_loop::{self, Lines};
use bytes::Bytes;
use std::process::ExitCode;
use std::time::Duration;
use tokio::task::JoinSet;

const DEFAULT_CONCURRENCY: usize = 32;
const USAGE: &str = "usage: http_raw_loop FILE URL [--concurrency N] [--threads N]";

type Error = Box<dyn std::error::Error + Send + Sync>;

/// One POST: whether it got a 2xx and its body was read.
async fn post(client: reqwest::Client, url: reqwest::Url, body: Bytes) -> Result<(), String> {
    let resp = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    resp.bytes().await.map_err(|e| e.to_string())?;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("status {status}"))
    }
}

/// 1 when one finished request succeeded, else 0 (the first failure is printed).
fn ok(r: Result<Result<(), String>, tokio::task::JoinError>, printed: &mut bool) -> u64 {
    let e = match r {
        Ok(Ok(())) => return 1,
        Ok(Err(e)) => e,
        Err(e) => e.to_string(),
    };
    if !*printed {
        eprintln!("http_raw_loop: request failed: {e}");
        *printed = true;
    }
    0
}

/// POSTs every line of `file`; (requests sent, requests answered 2xx).
async fn send(file: &str, url: reqwest::Url, concurrency: usize) -> Result<(u64, u64), Error> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()?;
    let mut lines = Lines::open(file)?;
    let mut tasks = JoinSet::new();
    let (mut sent, mut done, mut printed) = (0u64, 0u64, false);
    while let Some(line) = lines.next_line()? {
        while tasks.len() >= concurrency {
            if let Some(r) = tasks.join_next().await {
                done += ok(r, &mut printed);
            }
        }
        tasks.spawn(post(
            client.clone(),
            url.clone(),
            Bytes::copy_from_slice(line),
        ));
        sent += 1;
    }
    while let Some(r) = tasks.join_next().await {
        done += ok(r, &mut printed);
    }
    Ok((sent, done))
}

async fn run(args: Vec<String>) -> Result<ExitCode, Error> {
    let (file, url) = match (args.first(), args.get(1)) {
        (Some(f), Some(u)) => (f.as_str(), reqwest::Url::parse(u)?),
        _ => return Err(USAGE.into()),
    };
    let mut concurrency = DEFAULT_CONCURRENCY;
    let mut rest = args[2..].iter();
    while let Some(flag) = rest.next() {
        match (flag.as_str(), rest.next()) {
            ("--concurrency", Some(n)) => concurrency = n.parse::<usize>()?.max(1),
            // Read by `main`, before the runtime starts.
            ("--threads", Some(_)) => {}
            _ => return Err(USAGE.into()),
        }
    }
    let (sent, done) = send(file, url, concurrency).await?;
    eprintln!("http_raw_loop: {sent} sent, {done} answered 2xx (concurrency {concurrency})");
    Ok(if sent == done {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `--threads N` (default 1: a current-thread runtime).
fn threads() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1)?.parse::<usize>().ok())
        .unwrap_or(1)
}

fn main() -> ExitCode {
    raw_loop::main("http_raw_loop", raw_loop::runtime(threads()), run)
}
