//! A real sink: ankusa-sink-http against a loopback server that scripts its statuses.

use crate::*;
use ankusa_bench_support::http::read_request;
use ankusa_dispatch::{DeadLetter, Dispatcher, Hook, Outcome, split_record};
use ankusa_sink_core::Class;
use ankusa_sink_http::HttpSink;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// A status and an optional extra header.
type Answer = (u16, Option<(&'static str, &'static str)>);
/// A request's path and body.
type Request = (String, Vec<u8>);

/// Answers each request with the next scripted (status, extra header), then 200; records
/// each request's path and body.
#[derive(Clone, Default)]
struct Server {
    script: Arc<Mutex<VecDeque<Answer>>>,
    got: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    async fn start(script: Vec<Answer>) -> (Self, String) {
        let server = Server::default();
        server.script.lock().unwrap().extend(script);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let s = server.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut conn, &mut Vec::new()).await else {
                        return;
                    };
                    s.got.lock().unwrap().push(request);
                    let (status, header) =
                        s.script.lock().unwrap().pop_front().unwrap_or((200, None));
                    let extra = header
                        .map(|(k, v)| format!("{k}: {v}\r\n"))
                        .unwrap_or_default();
                    let answer = format!(
                        "HTTP/1.1 {status} Scripted\r\ncontent-length: 0\r\nconnection: close\r\n{extra}\r\n"
                    );
                    let _ = conn.write_all(answer.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        (server, format!("http://{addr}/hook"))
    }

    fn bodies(&self) -> Vec<Vec<u8>> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }
}

fn http(url: &str) -> Arc<HttpSink> {
    Arc::new(
        HttpSink::builder(url.to_owned())
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap(),
    )
}

#[tokio::test]
async fn http_503_is_retried_410_dead_letters_and_429_waits_its_retry_after() {
    let (server, url) = Server::start(vec![
        (503, None),
        (200, None),
        (410, None),
        (429, Some(("retry-after", "1"))),
        (200, None),
    ])
    .await;
    let dir = scratch("dispatch-http");
    let path = dir.join("dead.jsonl");
    let audit = Script::new(Step::Ok).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("http", http(&url))
        .sink("audit", audit.clone())
        .route("web", ["http"])
        .dead_letter(DeadLetter::jsonl(&path).unwrap())
        .config(retrying(Duration::from_millis(20)))
        .build()
        .unwrap();
    // 503 then 200, fanned out with a second sink.
    d.submit(Hook::new(
        Envelope::builder("h1", "src", "one").build().unwrap(),
    ))
    .await
    .unwrap();
    let got = recv_n(&mut out, 2, Duration::from_secs(10)).await;
    let h = got.iter().find(|x| &*x.sink == "http").unwrap();
    assert!(matches!(h.outcome, Outcome::Delivered));
    assert_eq!(h.attempts, 2);
    assert_eq!(audit.calls(), 1);
    // 410: dead-lettered at once, permanent.
    d.submit(Hook::new(Envelope::builder("h2", "src", "two").build().unwrap()).route("web"))
        .await
        .unwrap();
    let x = recv_n(&mut out, 1, Duration::from_secs(10)).await.remove(0);
    assert_eq!(dead_class(&x), Some((Class::Permanent, "permanent")));
    assert_eq!(x.attempts, 1);
    let line = std::fs::read_to_string(&path).unwrap();
    let (_, info) = split_record(serde_json::from_str(line.trim()).unwrap()).unwrap();
    let info = info.unwrap();
    assert_eq!((&*info.sink, &*info.error_class), ("http", "permanent"));
    // 429 Retry-After: 1 then 200: no retry before the second.
    let t0 = std::time::Instant::now();
    d.submit(Hook::new(Envelope::builder("h3", "src", "three").build().unwrap()).route("web"))
        .await
        .unwrap();
    let x = recv_n(&mut out, 1, Duration::from_secs(10)).await.remove(0);
    assert!(matches!(x.outcome, Outcome::Delivered));
    assert_eq!(x.attempts, 2);
    assert!(t0.elapsed() >= Duration::from_secs(1));
    let bodies = server.bodies();
    assert_eq!(
        bodies,
        [&b"one"[..], b"one", b"two", b"three", b"three"].map(|b| b.to_vec())
    );
    assert!(d.shutdown(Duration::from_secs(1)).await.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
