//! An HTTP/1.1 endpoint on 127.0.0.1 for the dispatch benches that go through the real HTTP
//! sink: each request is answered after the delay `answer` decides, 200 or 429
//! (`Retry-After: 1`), keeping connections alive.

use ankusa_bench_support::http::read_request;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt as _;

/// What the endpoint counts.
#[derive(Default)]
pub(crate) struct Server {
    pub(crate) in_flight: AtomicUsize,
    pub(crate) requests: AtomicU64,
    pub(crate) refused: AtomicU64,
    /// Arrival times in the last second (the 429 server).
    // Only the adaptive bench's rate-limiting endpoint keeps it.
    #[allow(dead_code)]
    pub(crate) recent: Mutex<VecDeque<Instant>>,
}

/// What a request gets: after how long, and whether it is refused.
pub(crate) type Answer = fn(&Server) -> (Duration, bool);

/// Serve on a fresh port: its URL, and what it counts.
pub(crate) async fn serve(answer: Answer) -> (String, Arc<Server>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks", listener.local_addr().unwrap());
    let server = Arc::new(Server::default());
    let s = server.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let s = s.clone();
            tokio::spawn(async move {
                let (mut r, mut w) = stream.into_split();
                let mut buf = Vec::new();
                loop {
                    if read_request(&mut r, &mut buf).await.is_none() {
                        return;
                    }
                    s.requests.fetch_add(1, Ordering::SeqCst);
                    s.in_flight.fetch_add(1, Ordering::SeqCst);
                    let (wait, refuse) = answer(&s);
                    tokio::time::sleep(wait).await;
                    s.in_flight.fetch_sub(1, Ordering::SeqCst);
                    let reply: &[u8] = if refuse {
                        s.refused.fetch_add(1, Ordering::SeqCst);
                        b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n"
                    } else {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
                    };
                    if w.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, server)
}
