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
//! each a tokio task (default 64, the best of 16, 32, 64, 128 and 256 on the 2-core bench
//! machine: see docs/benchmarks.md). Exits 0 only when every request got a 2xx answer and
//! its (empty) body was read; 1 otherwise.

use bytes::Bytes;
use std::io::BufRead;
use std::process::ExitCode;
use std::time::Duration;
use tokio::task::JoinSet;

const DEFAULT_CONCURRENCY: usize = 64;
const USAGE: &str = "usage: http_raw_loop FILE URL [--concurrency N]";

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
    let mut reader = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(file)?);
    let mut tasks = JoinSet::new();
    let (mut sent, mut done, mut printed) = (0u64, 0u64, false);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        while tasks.len() >= concurrency {
            if let Some(r) = tasks.join_next().await {
                done += ok(r, &mut printed);
            }
        }
        tasks.spawn(post(
            client.clone(),
            url.clone(),
            Bytes::copy_from_slice(&line),
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
    let concurrency = match (args.get(2).map(String::as_str), args.get(3)) {
        (None, _) => DEFAULT_CONCURRENCY,
        (Some("--concurrency"), Some(n)) => n.parse::<usize>()?.max(1),
        _ => return Err(USAGE.into()),
    };
    let (sent, done) = send(file, url, concurrency).await?;
    eprintln!("http_raw_loop: {sent} sent, {done} answered 2xx (concurrency {concurrency})");
    Ok(if sent == done {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match rt.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("http_raw_loop: {e}");
            ExitCode::FAILURE
        }
    }
}
