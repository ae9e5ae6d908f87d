//! HttpSink vs a raw reqwest client (same settings), both POSTing the same body and headers
//! to an in-process HTTP/1.1 keep-alive server on 127.0.0.1.
//! `cargo bench -p ankusa-sink-http --bench vs_raw`; JSON goes to `$BENCH_OUT_DIR/http.json`.
#![allow(missing_docs)]

use ankusa_bench_support::http::request_head;
use ankusa_bench_support::vs_raw::{self, Op, VsRawBench};
use ankusa_message::forwarded_headers;
use ankusa_sink_core::Envelope;
use ankusa_sink_http::{HttpSink, USER_AGENT};
use bytes::{Buf, BytesMut};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The headers the sink sends for `env` (unsigned), built once for the raw client.
fn raw_headers(env: &Envelope) -> HeaderMap {
    let ctx = ankusa_bench_support::vs_raw::raw_ctx(env);
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
    // The sink sends the attempt's trace context; a raw client propagating one sends the
    // same header (one fixed value here: the raw side pays no id generation).
    put(
        &mut h,
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    );
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
        while let Ok(Some(head)) = request_head(&buf) {
            let total = head.total_len();
            if buf.len() < total {
                break;
            }
            buf.advance(total);
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

/// The sink and a raw client with the sink's settings, both POSTing to one local server.
struct Http {
    sink: Arc<HttpSink>,
    client: reqwest::Client,
    url: reqwest::Url,
}

impl Http {
    async fn setup() -> Http {
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
        Http { sink, client, url }
    }
}

impl VsRawBench for Http {
    const ADAPTER: &'static str = "http";
    const MIN_N: usize = 500;
    const MAX_BYTES: usize = 2 << 30;
    const ONLY_N: (usize, usize) = (5_000, 2_000);
    type Sink = HttpSink;

    fn sink(&self) -> &Arc<HttpSink> {
        &self.sink
    }

    fn raw_op(&self, env: &Arc<Envelope>) -> Op {
        let headers = raw_headers(env);
        let (client, url, body) = (self.client.clone(), self.url.clone(), env.body().clone());
        Arc::new(move || {
            let req = client
                .post(url.clone())
                .headers(headers.clone())
                .body(body.clone());
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
}

fn main() {
    vs_raw::run(Http::setup());
}
