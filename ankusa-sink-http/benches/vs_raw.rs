//! HttpSink vs a raw reqwest client (same settings), both POSTing the same body and headers
//! to an in-process HTTP/1.1 keep-alive server on 127.0.0.1.
//! `cargo bench -p ankusa-sink-http --bench vs_raw`; JSON goes to `$BENCH_OUT_DIR/http.json`.
#![allow(missing_docs)]

use ankusa_sink_core::{Ctx, Envelope, forwarded_headers};
use ankusa_sink_http::{HttpSink, USER_AGENT};
use bytes::{Buf, BytesMut};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ADAPTER: &str = "http";
const MIN_N: usize = 500;
/// Bytes of bodies per timed run, at most.
const MAX_BYTES: usize = 2 << 30;
/// Deliveries (1 KiB, 64 KiB) of the `--only` memory run, at concurrency 256.
const ONLY_N: (usize, usize) = (5_000, 2_000);

// ---- harness ----
include!("../../benches-common/vs_raw_harness.rs");

// ---- the HTTP specifics ----

/// Exactly the headers the sink sends for `env` (unsigned), built once for the raw client.
fn raw_headers(env: &Envelope) -> HeaderMap {
    let ctx = Ctx::for_envelope(env);
    let mut h = HeaderMap::new();
    let put = |h: &mut HeaderMap, name: &str, value: &str| {
        h.insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    };
    put(&mut h, "x-ankusa-id", env.id());
    put(&mut h, "x-ankusa-source", env.source_id());
    put(&mut h, "content-type", env.content_type().unwrap());
    put(&mut h, "x-ankusa-tenant", env.tenant_id().unwrap());
    put(&mut h, "user-agent", USER_AGENT);
    put(&mut h, "x-ankusa-idempotency-key", &env.idempotency_key());
    put(&mut h, "x-ankusa-dedupe-key", env.dedupe_key().unwrap());
    for (name, v) in forwarded_headers(env, &ctx) {
        if !h.contains_key(&*name) {
            put(&mut h, &name, &v);
        }
    }
    h
}

/// A minimal HTTP/1.1 keep-alive server: every request gets `200` with an empty body.
async fn serve(listener: TcpListener) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            continue;
        };
        let _ = sock.set_nodelay(true);
        tokio::spawn(connection(sock));
    }
}

async fn connection(mut sock: TcpStream) {
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
    let mut buf = BytesMut::with_capacity(128 * 1024);
    let mut out = Vec::with_capacity(4096);
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..end]).unwrap_or("");
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if buf.len() < end + 4 + len {
                break;
            }
            buf.advance(end + 4 + len);
            out.extend_from_slice(OK);
        }
        if !out.is_empty() {
            if sock.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        match sock.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(serve(listener));

        let sink = Arc::new(HttpSink::builder(url.as_str()).build().unwrap());
        // The sink's client settings: no redirects, no retries, no proxy, 5 s timeouts.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .connect_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let url = reqwest::Url::parse(&url).unwrap();
        let envs: Vec<(usize, Arc<Envelope>, Arc<HeaderMap>)> = [1024, 65_536]
            .into_iter()
            .map(|s| {
                let env = envelope(s);
                let h = raw_headers(&env);
                (s, Arc::new(env), Arc::new(h))
            })
            .collect();
        let ops = |mode: &str, body: usize| -> Op {
            let (_, env, headers) = envs.iter().find(|e| e.0 == body).unwrap().clone();
            if mode == "sink" {
                sink_op(&sink, &env)
            } else {
                let (client, url) = (client.clone(), url.clone());
                Arc::new(move || {
                    let req = client
                        .post(url.clone())
                        .headers((*headers).clone())
                        .body(env.body().clone());
                    Box::pin(async move {
                        match req.send().await {
                            Ok(resp) => {
                                let ok = resp.status().is_success();
                                ok && resp.bytes().await.is_ok()
                            }
                            Err(_) => false,
                        }
                    })
                })
            }
        };
        let after = || -> Pin<Box<dyn Future<Output = ()> + Send>> { Box::pin(async {}) };
        if let Some(mode) = only_mode() {
            only(ops, &after, &mode).await;
            return;
        }
        let runs = compare(&ops, &after).await;
        let rss = (peak_rss("sink"), peak_rss("raw"));
        write_json(runs, rss);
    });
}
