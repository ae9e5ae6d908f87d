//! A fast webhook receiver for issue 21's pipeline benchmark (`scripts/bench_pipeline.py
//! --only http`), in a process of its own, separate from both the sender under test and the
//! benchmark: HTTP/1.1 keep-alive on 127.0.0.1, `204 No Content` to every request, built on
//! tokio alone (like the in-process server of `benches/vs_raw.rs`).
//!
//! ```text
//! sink_server [--port P] [--expect N]
//! ```
//!
//! Listens on `127.0.0.1:P` (default 0: any free port) and prints `listening 127.0.0.1:PORT`
//! on stdout first. Counts the requests it answered; prints `requests N` on stdout and exits
//! 0 on SIGTERM or SIGINT, or once N requests were answered with `--expect N`. Requests are
//! framed by `content-length` (no chunked bodies: every sender here sets the length).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Notify;

const USAGE: &str = "usage: sink_server [--port P] [--expect N]";

/// The requests answered so far, and who to wake when `expect` of them were.
struct Count {
    answered: AtomicU64,
    expect: Option<u64>,
    reached: Notify,
}

impl Count {
    fn add(&self, n: u64) {
        let total = self.answered.fetch_add(n, Ordering::Relaxed) + n;
        if self.expect.is_some_and(|e| total >= e) {
            self.reached.notify_one();
        }
    }
}

/// The `content-length` of a request head (0 when absent).
fn content_length(head: &[u8]) -> usize {
    std::str::from_utf8(head)
        .unwrap_or("")
        .split("\r\n")
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// One keep-alive connection: answers every complete request in what was read, in one write.
async fn connection(mut sock: TcpStream, count: Arc<Count>) {
    const NO_CONTENT: &[u8] = b"HTTP/1.1 204 No Content\r\n\r\n";
    let mut buf: Vec<u8> = Vec::with_capacity(256 * 1024);
    let mut out = Vec::with_capacity(4096);
    let mut start = 0;
    loop {
        let mut answered = 0;
        while let Some(end) = buf[start..].windows(4).position(|w| w == b"\r\n\r\n") {
            let head_end = start + end + 4;
            let len = content_length(&buf[start..head_end]);
            if buf.len() < head_end + len {
                break;
            }
            start = head_end + len;
            out.extend_from_slice(NO_CONTENT);
            answered += 1;
        }
        buf.drain(..start);
        start = 0;
        if !out.is_empty() {
            if sock.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
            count.add(answered);
        }
        match sock.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

async fn serve(listener: TcpListener, count: Arc<Count>) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            continue;
        };
        let _ = sock.set_nodelay(true);
        tokio::spawn(connection(sock, Arc::clone(&count)));
    }
}

async fn run(port: u16, expect: Option<u64>) -> std::io::Result<u64> {
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening {}", listener.local_addr()?)?;
        stdout.flush()?;
    }
    let count = Arc::new(Count {
        answered: AtomicU64::new(0),
        expect,
        reached: Notify::new(),
    });
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        () = serve(listener, Arc::clone(&count)) => {}
        _ = term.recv() => {}
        _ = int.recv() => {}
        () = count.reached.notified(), if expect.is_some() => {}
    }
    Ok(count.answered.load(Ordering::Relaxed))
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut port, mut expect) = (0u16, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().and_then(|v| v.parse::<u64>().ok());
        match (flag.as_str(), value) {
            ("--port", Some(p)) if p <= u64::from(u16::MAX) => port = p as u16,
            ("--expect", Some(n)) => expect = Some(n),
            _ => {
                eprintln!("{USAGE}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match rt.block_on(run(port, expect)) {
        Ok(n) => {
            println!("requests {n}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sink_server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
