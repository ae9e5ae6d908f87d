//! The `proxy` option, against a tiny forward proxy on 127.0.0.1: `http://` endpoints are
//! reached with absolute-form requests through it, `https://` ones through a `CONNECT`
//! tunnel; the proxy's userinfo is its basic auth and is never printed; no environment
//! proxy is ever used.

use crate::config::assert_clean;
use crate::server::{Reply, Server, always};
use crate::tls::{fixture, https_server};
use crate::{deliver, envelope};
use ankusa_sink_core::{Check, Class, Sink, Subject};
use ankusa_sink_http::{HttpError, HttpSink};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// base64("proxy-user:pr0xy-pa55word")
const PROXY_BASIC: &str = "Basic cHJveHktdXNlcjpwcjB4eS1wYTU1d29yZA==";

/// The head of the first request on one client connection.
#[derive(Debug, Clone)]
struct Seen {
    request_line: String,
    proxy_authorization: Option<String>,
}

/// A forward proxy: records each connection's first request head, then pipes bytes to
/// the upstream it names (the absolute-form URI's authority, or the `CONNECT` target).
struct ForwardProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl ForwardProxy {
    async fn start() -> ForwardProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(relay(sock, log.clone()));
            }
        });
        ForwardProxy { addr, seen, task }
    }

    fn url(&self, userinfo: &str) -> String {
        format!("http://{userinfo}{}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(mut client: TcpStream, seen: Arc<Mutex<Vec<Seen>>>) {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if !matches!(client.read_buf(&mut buf).await, Ok(1..)) {
            return;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let proxy_authorization = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case("proxy-authorization"))
        .map(|(_, v)| v.trim().to_owned());
    seen.lock().unwrap().push(Seen {
        request_line: request_line.clone(),
        proxy_authorization,
    });
    let mut parts = request_line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (upstream, forward) = if method == "CONNECT" {
        (target.to_owned(), buf[head_end..].to_vec())
    } else {
        // Absolute-form: forward the request as it came (origin servers accept that form).
        let authority = target
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or("");
        (authority.to_owned(), buf)
    };
    let Ok(mut up) = TcpStream::connect(upstream).await else {
        let _ = client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    if method == "CONNECT"
        && client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
    {
        return;
    }
    if up.write_all(&forward).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
}

#[tokio::test]
async fn http_endpoints_go_through_the_proxy_in_absolute_form() {
    let proxy = ForwardProxy::start().await;
    let server = Server::start(always(Reply::status(200))).await;
    let endpoint = server.url("/services/T0/B0/p4th-t0ken");
    let sink = HttpSink::builder(endpoint.as_str())
        .proxy(proxy.url("proxy-user:pr0xy-pa55word@"))
        .build()
        .unwrap();
    deliver(&sink, &envelope(b"{\"via\":\"proxy\"}"))
        .await
        .unwrap();

    let seen = proxy.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].request_line, format!("POST {endpoint} HTTP/1.1"));
    assert_eq!(seen[0].proxy_authorization.as_deref(), Some(PROXY_BASIC));
    let got = &server.captured()[0];
    assert_eq!(got.target, endpoint, "the endpoint got the proxy's request");
    assert_eq!(got.body, b"{\"via\":\"proxy\"}");

    // The proxy's userinfo is a secret: never printed.
    let shown = format!(
        "{sink:?} {:?}",
        sink.describe(&Subject::new("s", None)).unwrap()
    );
    assert!(
        shown.contains(&format!("http://{}/", proxy.addr)),
        "{shown}"
    );
    for secret in ["pr0xy-pa55word", "proxy-user", "p4th-t0ken"] {
        assert!(!shown.contains(secret), "{secret}: {shown}");
    }
    assert_clean("proxied sink Debug", &shown);
}

#[tokio::test]
async fn https_endpoints_are_tunnelled_with_connect() {
    let proxy = ForwardProxy::start().await;
    let (server, url) = https_server().await;
    let sink = HttpSink::builder(url.as_str())
        .ca_file(fixture("ca.pem"))
        .proxy(proxy.url("proxy-user:pr0xy-pa55word@"))
        .build()
        .unwrap();
    deliver(&sink, &envelope(b"{}")).await.unwrap();
    let seen = proxy.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        seen[0].request_line,
        format!("CONNECT 127.0.0.1:{} HTTP/1.1", server.addr().port())
    );
    assert_eq!(seen[0].proxy_authorization.as_deref(), Some(PROXY_BASIC));
    // Inside the tunnel, the endpoint got an ordinary origin-form request.
    assert_eq!(server.captured()[0].target, "/hooks");
}

#[tokio::test]
async fn check_connects_to_the_proxy() {
    let proxy = ForwardProxy::start().await;
    // The endpoint's port is closed, but check only dials the proxy.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let sink = HttpSink::builder(format!("http://{closed}/hooks"))
        .proxy(proxy.url(""))
        .build()
        .unwrap();
    assert_eq!(sink.check().await.unwrap(), Check::Reachable);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(proxy.seen().is_empty(), "check sent a request");

    // A proxy that is down: the check fails naming the proxy, as a delivery would fail.
    let sink = HttpSink::builder("http://127.0.0.1:9/hooks")
        .proxy(format!("http://u:pr0xy-pa55word@{closed}"))
        .build()
        .unwrap();
    let f = sink.check().await.unwrap_err();
    assert_eq!(f.class(), Class::Transient);
    assert!(
        matches!(
            f.reason().downcast_ref::<HttpError>(),
            Some(HttpError::Unreachable { to: "proxy", .. })
        ),
        "{f:?}"
    );
    assert!(!format!("{f} {f:?}").contains("pr0xy-pa55word"));
    let delivered = deliver(&sink, &envelope(b"{}")).await.unwrap_err();
    assert_eq!(delivered.class(), Class::Transient);
    let text = format!("{delivered} {delivered:?} {}", delivered.reason_chain());
    assert!(!text.contains("pr0xy-pa55word"), "{text}");
}

/// Set in the child process that [`environment_proxies_are_never_used`] starts.
const CHILD: &str = "ANKUSA_HTTP_TEST_ENV_PROXY_CHILD";

/// HTTP(S)_PROXY, ALL_PROXY and NO_PROXY are never read: without `proxy` the sink goes
/// direct, and with it, NO_PROXY does not bypass it. Tests cannot set variables in their
/// own process, so the test binary runs this test again in a child with them set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_proxies_are_never_used() {
    if let Ok(target) = std::env::var(CHILD) {
        let configured = std::env::var("ANKUSA_HTTP_TEST_CONFIGURED_PROXY").unwrap();
        let direct = HttpSink::builder(target.as_str()).build().unwrap();
        deliver(&direct, &envelope(b"direct")).await.unwrap();
        let proxied = HttpSink::builder(target.as_str())
            .proxy(configured)
            .build()
            .unwrap();
        deliver(&proxied, &envelope(b"proxied")).await.unwrap();
        return;
    }
    let env_proxy = ForwardProxy::start().await;
    let configured = ForwardProxy::start().await;
    let server = Server::start(always(Reply::status(200))).await;
    let exe = std::env::current_exe().unwrap();
    let env_url = env_proxy.url("");
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "--exact",
        "proxy::environment_proxies_are_never_used",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, server.url("/hooks"))
    .env("ANKUSA_HTTP_TEST_CONFIGURED_PROXY", configured.url(""))
    .env("NO_PROXY", "127.0.0.1,localhost")
    .env("no_proxy", "127.0.0.1,localhost");
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        cmd.env(var, &env_url);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "child failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the child ran no test: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(env_proxy.seen().is_empty(), "{:?}", env_proxy.seen());
    assert_eq!(configured.seen().len(), 1, "NO_PROXY bypassed the proxy");
    let bodies: Vec<Vec<u8>> = server.captured().into_iter().map(|c| c.body).collect();
    assert_eq!(bodies, [b"direct".to_vec(), b"proxied".to_vec()]);
}
