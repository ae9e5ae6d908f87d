//! The `--metrics-addr` listener: `GET /metrics` as Prometheus text, and nothing a client
//! can do there costs the run more than [`MAX_CONNECTIONS`] descriptors, a connection more
//! than the connection timeout, or stderr more than a line per [`LOG_EVERY`].
//!
//! It runs as tasks on the command's one runtime thread, so nothing here blocks: reads and
//! writes are async and bounded by a deadline, and rendering goes to the blocking pool.
//! One request per connection (`Connection: close`): a scraper opens one per scrape anyway.
//! Idle connections cannot starve scrapes: with every slot taken, the connection open
//! longest without a whole request head is closed to make room. With a token
//! (`--metrics-token-file`), every request must carry it as `Authorization: Bearer`.

use ankusa_sink_core::Secret;
use metrics_exporter_prometheus::{BuildError, PrometheusBuilder, PrometheusHandle};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError, oneshot};

/// Connections served at once. Further ones wait in the kernel's accept queue rather than
/// being accepted and closed: accepting costs a descriptor, the very thing a flood exhausts,
/// and accept-then-close would turn a flood into a busy loop; a queued scraper is served as
/// soon as a slot frees, at the latest one connection timeout later.
const MAX_CONNECTIONS: usize = 64;
/// How long a connection may stay open, from accept to close: to send its request head and
/// to take the answer. A client sending its head a byte at a time cannot extend it.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// The accept queue asked of the kernel (which caps it at `net.core.somaxconn`): queued
/// connections cost the process nothing.
const BACKLOG: u32 = 1024;
/// A request head (request line and headers) longer than this is refused with 431.
const MAX_HEAD_BYTES: usize = 8 * 1024;
/// The first pause after a failed accept, doubled on each failure in a row up to
/// [`MAX_BACKOFF`]: a listener that cannot accept (out of descriptors) stays readable, and
/// retrying at once is a busy loop.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
/// The longest pause between accepts while they keep failing.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// At most one log line per this long about failing accepts.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// How often histogram samples are folded into summaries, as the exporter's own listener
/// does: between scrapes they would otherwise pile up.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);
/// The content type of the Prometheus text exposition format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Why the listener could not start.
#[derive(Debug)]
pub(crate) enum StartError {
    /// The address could not be bound (in use, not local, not permitted).
    Bind(std::io::Error),
    /// The metrics recorder could not be installed.
    Recorder(BuildError),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bind(e) => write!(f, "cannot listen there: {e}"),
            Self::Recorder(e) => write!(f, "cannot install the metrics recorder: {e}"),
        }
    }
}

/// Bind `addr`, install the Prometheus recorder and serve it there for the rest of the run;
/// with a `token`, only to requests that carry it (`Authorization: Bearer TOKEN`).
/// Must be called on the runtime: the listener and its tasks live there.
pub(crate) fn start(addr: SocketAddr, token: Option<Secret>) -> Result<(), StartError> {
    // Bind first: an address that cannot be served leaves nothing installed.
    let listener = bind(addr).map_err(StartError::Bind)?;
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(StartError::Recorder)?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(UPKEEP_EVERY).await;
            upkeep.run_upkeep();
        }
    });
    let serving = Serving {
        handle,
        token: token.map(Arc::new),
        timeout: connection_timeout(),
    };
    tokio::spawn(accept_loop(listener, serving));
    Ok(())
}

/// The token of `--metrics-token-file PATH`: the file's first line, without its line end
/// and surrounding blanks. An unreadable file, or an empty or non-ASCII first line, is an
/// error naming the path, never the content.
pub(crate) fn read_token(path: &std::path::Path) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "--metrics-token-file {}: cannot read it: {e}",
            path.display()
        )
    })?;
    let token = text.lines().next().unwrap_or("").trim();
    // A header value: visible ASCII only (RFC 9110, 5.5), or no client could send it.
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "--metrics-token-file {}: its first line must be the token (visible ASCII, no \
             spaces)",
            path.display()
        ));
    }
    Ok(Secret::new(token))
}

/// What every connection is served with.
#[derive(Clone)]
struct Serving {
    handle: PrometheusHandle,
    /// The bearer token every request must carry, if any.
    token: Option<Arc<Secret>>,
    /// How long a connection may stay open.
    timeout: Duration,
}

/// Connections that have not sent a whole request head yet, oldest first, each with the
/// sender that closes it. When every slot is taken, the oldest is closed to make room: a
/// client holding connections open without a request cannot keep a scraper out for longer
/// than it takes to open one more.
#[derive(Debug, Default)]
struct Idle(Mutex<VecDeque<(u64, oneshot::Sender<()>)>>);

impl Idle {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, oneshot::Sender<()>)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn push(&self, id: u64, close: oneshot::Sender<()>) {
        self.lock().push_back((id, close));
    }

    /// Connection `id` sent its whole head: it is answered, no longer idle.
    fn remove(&self, id: u64) {
        self.lock().retain(|(i, _)| *i != id);
    }

    /// Close the idle connection open longest (skipping any that ended meanwhile); `false`
    /// when there is none.
    fn close_oldest(&self) -> bool {
        let mut idle = self.lock();
        while let Some((_, close)) = idle.pop_front() {
            if close.send(()).is_ok() {
                return true;
            }
        }
        false
    }
}

/// A listening socket on `addr` with our backlog.
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As std's bind does: a new run may take the port while the last run's connections
    // linger in TIME_WAIT (another listener on it still fails).
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// [`CONNECTION_TIMEOUT`]; debug builds (the integration tests' binary) take
/// `ANKUSA_METRICS_IDLE_TIMEOUT_MS` instead, so a test need not wait 10 s per round.
/// Release builds never read it.
fn connection_timeout() -> Duration {
    #[cfg(debug_assertions)]
    if let Some(ms) = std::env::var("ANKUSA_METRICS_IDLE_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
    {
        return Duration::from_millis(ms);
    }
    CONNECTION_TIMEOUT
}

/// Accept while a slot is free, or once the oldest idle connection gave its slot up;
/// serve each connection on its own task.
async fn accept_loop(listener: TcpListener, serving: Serving) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let idle = Arc::new(Idle::default());
    let mut next_id = 0u64;
    let mut backoff = Backoff::default();
    let mut log = LogLimit::default();
    loop {
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(TryAcquireError::Closed) => return, // never closed
            Err(TryAcquireError::NoPermits) => {
                // Every slot is taken: the connection open longest without a request gives
                // its slot up (its task ends at once). Without an idle one, wait for a
                // request being answered to end; the next connection stays in the kernel's
                // queue meanwhile.
                idle.close_oldest();
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                slot
            }
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                backoff = Backoff::default();
                let (close, closed) = oneshot::channel();
                let id = next_id;
                next_id += 1;
                idle.push(id, close);
                let conn = Connection {
                    id,
                    idle: idle.clone(),
                    closed,
                    _slot: slot,
                };
                tokio::spawn(serve_connection(stream, serving.clone(), conn));
            }
            Err(e) => match accept_failure(&e) {
                AcceptFailure::ThatConnection => {}
                AcceptFailure::Listener => {
                    let pause = backoff.next_pause();
                    if let Some(held) = log.admit(Instant::now()) {
                        let held = match held {
                            0 => String::new(),
                            n => format!(" ({n} more since the last report)"),
                        };
                        tracing::warn!(
                            "metrics listener: accepting a connection failed: {e}; retrying \
                             with pauses up to {MAX_BACKOFF:?}{held}"
                        );
                    }
                    tokio::time::sleep(pause).await;
                }
            },
        }
    }
}

/// What a failed `accept` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AcceptFailure {
    /// One queued connection went bad before it was taken (the client reset it): take the
    /// next at once.
    ThatConnection,
    /// The process or system cannot take connections now (EMFILE, ENFILE, ENOBUFS, ENOMEM,
    /// ...): pause before trying again.
    Listener,
}

/// Classify a failed accept by its kind. EMFILE and ENFILE have no stable kind of their own;
/// they, and anything not known to concern one connection only, pause.
fn accept_failure(e: &std::io::Error) -> AcceptFailure {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::ConnectionAborted
        | ErrorKind::ConnectionReset
        | ErrorKind::ConnectionRefused
        | ErrorKind::Interrupted => AcceptFailure::ThatConnection,
        _ => AcceptFailure::Listener,
    }
}

/// Pauses between failing accepts: [`FIRST_BACKOFF`], doubling, at most [`MAX_BACKOFF`].
#[derive(Debug, Default)]
struct Backoff {
    /// The last pause given, `None` before the first failure.
    last: Option<Duration>,
}

impl Backoff {
    /// The pause before the next try.
    fn next_pause(&mut self) -> Duration {
        let pause = self
            .last
            .map_or(FIRST_BACKOFF, |d| (d * 2).min(MAX_BACKOFF));
        self.last = Some(pause);
        pause
    }
}

/// At most one report per [`LOG_EVERY`], counting those held back.
#[derive(Debug, Default)]
struct LogLimit {
    /// When the last report was let through.
    last: Option<Instant>,
    /// Reports held back since then.
    held: u64,
}

impl LogLimit {
    /// `Some(reports held back since the last one)` when one may be written at `now`.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < LOG_EVERY => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

/// One accepted connection's place: its slot, and its entry among the idle ones until
/// its head is whole.
struct Connection {
    id: u64,
    idle: Arc<Idle>,
    /// Fires when the accept loop closes this connection to make room.
    closed: oneshot::Receiver<()>,
    _slot: OwnedSemaphorePermit,
}

/// One connection, closed at the latest `timeout` after it was accepted, or when it is
/// closed to make room while still without a whole head; its slot is freed when this
/// returns.
async fn serve_connection(mut stream: TcpStream, serving: Serving, conn: Connection) {
    let Connection {
        id,
        idle,
        closed,
        _slot,
    } = conn;
    let made_room = async {
        // A sender dropped (the head came whole, so it left the idle list) is no close.
        if closed.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    // Any failure or the deadline ends the exchange the same way: the socket is dropped
    // (closed). There is no one to report a client's misbehaviour to.
    tokio::select! {
        _ = tokio::time::timeout(serving.timeout, exchange(&mut stream, &serving, || idle.remove(id))) => {}
        () = made_room => {}
    }
    idle.remove(id);
}

/// Read one request head, answer it, and wait for the client to close; `whole` is called
/// once the head is.
async fn exchange(
    stream: &mut TcpStream,
    serving: &Serving,
    whole: impl FnOnce(),
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    let answer = loop {
        if let Some(answer) = answer(&head, serving.token.as_deref()) {
            break answer;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(()); // closed before a whole head
        }
        head.extend_from_slice(&chunk[..n]);
    };
    whole();
    let response = match answer {
        Answer::Metrics => {
            let handle = serving.handle.clone();
            let body = tokio::task::spawn_blocking(move || handle.render())
                .await
                .map_err(std::io::Error::other)?;
            response("200 OK", &[("Content-Type", CONTENT_TYPE)], &body)
        }
        Answer::NotFound => response(
            "404 Not Found",
            &[],
            "not found: metrics are at GET /metrics\n",
        ),
        Answer::MethodNotAllowed => response(
            "405 Method Not Allowed",
            &[("Allow", "GET")],
            "method not allowed: /metrics takes GET\n",
        ),
        Answer::BadRequest => response("400 Bad Request", &[], "not an HTTP/1 request\n"),
        Answer::HeadTooLarge => response(
            "431 Request Header Fields Too Large",
            &[],
            "request head over 8 KiB\n",
        ),
        Answer::VersionNotSupported => response(
            "505 HTTP Version Not Supported",
            &[],
            "HTTP/1.0 and HTTP/1.1 only\n",
        ),
        Answer::Unauthorized => response(
            "401 Unauthorized",
            &[("WWW-Authenticate", "Bearer realm=\"metrics\"")],
            "unauthorized: send the metrics token as Authorization: Bearer\n",
        ),
    };
    let response = if is_head(&head) {
        // A HEAD answer is the GET answer's head alone (RFC 9110, 9.3.2).
        let end = memchr::memmem::find(&response, b"\r\n\r\n").map_or(response.len(), |i| i + 4);
        &response[..end]
    } else {
        &response[..]
    };
    stream.write_all(response).await?;
    stream.shutdown().await?;
    // Closing with unread bytes (a body, a pipelined request) would send a reset, which can
    // destroy the answer before the client reads it: read until the client closes.
    while stream.read(&mut chunk).await? > 0 {}
    Ok(())
}

/// A whole response: status line, `headers`, length, `Connection: close`, `body`.
fn response(status: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    if !headers.iter().any(|(n, _)| *n == "Content-Type") {
        out.push_str("Content-Type: text/plain; charset=utf-8\r\n");
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    let mut out = out.into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// The answer to a request, decided from its head alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// `GET /metrics` (any query): 200 with the Prometheus text.
    Metrics,
    /// Any other path: 404.
    NotFound,
    /// Another method on `/metrics`: 405.
    MethodNotAllowed,
    /// Not an HTTP/1 request line: 400.
    BadRequest,
    /// No end of the head within [`MAX_HEAD_BYTES`]: 431.
    HeadTooLarge,
    /// A well-formed request line of another HTTP version: 505.
    VersionNotSupported,
    /// A token is required and the request did not carry it: 401.
    Unauthorized,
}

/// The answer to the bytes received so far, or `None` while the head is incomplete. With
/// a `token`, a well-formed request without it is 401 (whatever its path: nothing is told
/// to a client without it).
fn answer(received: &[u8], token: Option<&Secret>) -> Option<Answer> {
    // A server should ignore empty lines before the request line (RFC 9112, 2.2).
    let start = received
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(received.len());
    let head = &received[start..];
    let Some(end) = head_end(head) else {
        return (received.len() >= MAX_HEAD_BYTES).then_some(Answer::HeadTooLarge);
    };
    if end > MAX_HEAD_BYTES {
        return Some(Answer::HeadTooLarge);
    }
    let line_end = memchr::memchr(b'\n', head).unwrap_or(head.len());
    let line = head[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&head[..line_end]);
    let routed = route(line);
    let needs_token = matches!(
        routed,
        Answer::Metrics | Answer::NotFound | Answer::MethodNotAllowed
    );
    match token {
        Some(t) if needs_token && !carries(&head[line_end..end], t) => Some(Answer::Unauthorized),
        _ => Some(routed),
    }
}

/// Whether the header lines `headers` carry `Authorization: Bearer TOKEN` (the first
/// `Authorization` header decides; the scheme is case-insensitive, the token exact).
fn carries(headers: &[u8], token: &Secret) -> bool {
    let Some(value) = headers.split(|&b| b == b'\n').find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = memchr::memchr(b':', line)?;
        line[..colon]
            .eq_ignore_ascii_case(b"authorization")
            .then(|| line[colon + 1..].trim_ascii())
    }) else {
        return false;
    };
    let Some(sent) = value
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
        .map(|_| value[7..].trim_ascii())
    else {
        return false;
    };
    same(sent, token.expose().as_bytes())
}

/// `a == b` in a time that depends on their lengths only, not on where they differ: the
/// answer's timing tells a guesser nothing about how much of the token was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Where the head ends (just past its empty line), if it does: lines end in CRLF or, as
/// RFC 9112 allows a recipient to accept, a bare LF.
fn head_end(head: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\n', head).find_map(|i| match &head[i + 1..] {
        [b'\n', ..] => Some(i + 2),
        [b'\r', b'\n', ..] => Some(i + 3),
        _ => None,
    })
}

/// The answer to a request line (without its line end).
fn route(line: &[u8]) -> Answer {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Answer::BadRequest;
    };
    if method.is_empty() || !method.iter().all(|&b| is_token_byte(b)) || target.is_empty() {
        return Answer::BadRequest;
    }
    match version {
        b"HTTP/1.1" | b"HTTP/1.0" => {}
        v if v.starts_with(b"HTTP/") => return Answer::VersionNotSupported,
        _ => return Answer::BadRequest,
    }
    let Some(path) = path_of(target) else {
        return Answer::BadRequest;
    };
    match (path, method) {
        (b"/metrics", b"GET") => Answer::Metrics,
        (b"/metrics", _) => Answer::MethodNotAllowed,
        _ => Answer::NotFound,
    }
}

/// The path of a request target: origin-form (`/metrics?x`) or absolute-form
/// (`http://host/metrics`, which servers must accept); `None` for anything else.
fn path_of(target: &[u8]) -> Option<&[u8]> {
    let path = if target.starts_with(b"/") {
        target
    } else {
        let scheme_end = target.windows(3).position(|w| w == b"://")?;
        if !target[..scheme_end].eq_ignore_ascii_case(b"http")
            && !target[..scheme_end].eq_ignore_ascii_case(b"https")
        {
            return None;
        }
        let rest = &target[scheme_end + 3..];
        rest.iter()
            .position(|&b| b == b'/' || b == b'?')
            .map_or(&b"/"[..], |i| &rest[i..])
    };
    let end = path.iter().position(|&b| b == b'?' || b == b'#');
    Some(end.map_or(path, |i| &path[..i]))
}

/// Whether the request is a HEAD, whose answer has no body.
fn is_head(received: &[u8]) -> bool {
    received
        .iter()
        .skip_while(|&&b| b == b'\r' || b == b'\n')
        .take(5)
        .eq(b"HEAD ")
}

/// A byte of an HTTP token (RFC 9110, 5.6.2), what a method is made of.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(head: &str) -> Option<Answer> {
        answer(head.as_bytes(), None)
    }

    #[test]
    fn with_a_token_only_requests_that_carry_it_are_answered() {
        let t = Secret::new("s3cr3t-t0ken");
        let with = |head: &str| answer(head.as_bytes(), Some(&t));
        let ok = "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cr3t-t0ken\r\n\r\n";
        assert_eq!(with(ok), Some(Answer::Metrics));
        assert_eq!(
            with("GET /metrics HTTP/1.1\nauthorization:  bearer   s3cr3t-t0ken \n\n"),
            Some(Answer::Metrics)
        );
        for refused in [
            "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /metrics HTTP/1.1\r\nAuthorization: Bearer s3cr3t-t0kem\r\n\r\n",
            "GET /metrics HTTP/1.1\r\nAuthorization: Bearer s3cr3t-t0ken2\r\n\r\n",
            "GET /metrics HTTP/1.1\r\nAuthorization: Basic s3cr3t-t0ken\r\n\r\n",
            "GET /metrics HTTP/1.1\r\nAuthorization: s3cr3t-t0ken\r\n\r\n",
            "GET /metrics HTTP/1.1\r\nX-Authorization: Bearer s3cr3t-t0ken\r\n\r\n",
            // Another path or method tells a client without the token nothing either.
            "GET /other HTTP/1.1\r\n\r\n",
            "POST /metrics HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(with(refused), Some(Answer::Unauthorized), "{refused:?}");
        }
        // Malformed requests are answered as before; an incomplete head waits.
        assert_eq!(with("nonsense\r\n\r\n"), Some(Answer::BadRequest));
        assert_eq!(
            with("GET /metrics HTTP/1.1\r\nAuthorization: Bearer s3"),
            None
        );
    }

    #[test]
    fn the_token_is_the_first_line_of_its_file() {
        let dir = std::env::temp_dir().join(format!("ankusa-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "  abc.DEF-123 \r\nsecond line\n").unwrap();
        assert_eq!(read_token(&f).unwrap().expose(), "abc.DEF-123");
        for bad in ["", "\nabc", "two words\n", "caf\u{e9}\n"] {
            std::fs::write(&f, bad).unwrap();
            let e = read_token(&f).unwrap_err();
            assert!(e.contains("--metrics-token-file"), "{e}");
            if !bad.trim().is_empty() {
                assert!(!e.contains(bad.trim()), "the content is never told: {e}");
            }
        }
        let e = read_token(&dir.join("missing")).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn get_metrics_is_the_one_request_answered_with_metrics() {
        assert_eq!(
            a("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(Answer::Metrics)
        );
        assert_eq!(a("GET /metrics HTTP/1.0\r\n\r\n"), Some(Answer::Metrics));
        assert_eq!(
            a("GET /metrics?name[]=x HTTP/1.1\r\n\r\n"),
            Some(Answer::Metrics)
        );
        assert_eq!(
            a("GET http://127.0.0.1:9000/metrics HTTP/1.1\r\n\r\n"),
            Some(Answer::Metrics)
        );
        // Bare LF line ends, and empty lines before the request line.
        assert_eq!(
            a("\r\n\nGET /metrics HTTP/1.1\nHost: x\n\n"),
            Some(Answer::Metrics)
        );
    }

    #[test]
    fn other_paths_are_not_found() {
        for head in [
            "GET / HTTP/1.1\r\n\r\n",
            "GET /metrics/ HTTP/1.1\r\n\r\n",
            "GET /Metrics HTTP/1.1\r\n\r\n",
            "GET /health HTTP/1.1\r\n\r\n",
            "POST /other HTTP/1.1\r\n\r\n",
            "GET http://host HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(a(head), Some(Answer::NotFound), "{head:?}");
        }
    }

    #[test]
    fn other_methods_on_metrics_are_not_allowed() {
        for method in ["POST", "HEAD", "PUT", "DELETE", "OPTIONS", "get"] {
            let head = format!("{method} /metrics HTTP/1.1\r\n\r\n");
            assert_eq!(a(&head), Some(Answer::MethodNotAllowed), "{head:?}");
        }
    }

    #[test]
    fn only_head_requests_are_answered_without_a_body() {
        assert!(is_head(b"HEAD /metrics HTTP/1.1\r\n\r\n"));
        assert!(is_head(b"\r\nHEAD / HTTP/1.1\r\n\r\n"));
        assert!(!is_head(b"GET /metrics HTTP/1.1\r\n\r\n"));
        assert!(!is_head(b"HEADER /metrics HTTP/1.1\r\n\r\n"));
        assert!(!is_head(b"head /metrics HTTP/1.1\r\n\r\n"));
    }

    #[test]
    fn a_head_is_answered_only_once_it_is_whole() {
        for partial in [
            "",
            "\r\n",
            "GET /metr",
            "GET /metrics HTTP/1.1\r\n",
            "GET /metrics HTTP/1.1\r\nHost: x\r\n",
            "GET /metrics HTTP/1.1\r\nHost: x\r\n\r",
        ] {
            assert_eq!(a(partial), None, "{partial:?}");
        }
    }

    #[test]
    fn a_head_over_the_limit_is_refused() {
        let mut long = "GET /metrics HTTP/1.1\r\nX: ".to_owned();
        long.push_str(&"a".repeat(MAX_HEAD_BYTES));
        assert_eq!(a(&long), Some(Answer::HeadTooLarge));
        long.push_str("\r\n\r\n");
        assert_eq!(a(&long), Some(Answer::HeadTooLarge));
        // Just under the limit is fine.
        let mut fits = "GET /metrics HTTP/1.1\r\nX: ".to_owned();
        fits.push_str(&"a".repeat(MAX_HEAD_BYTES - fits.len() - 4));
        fits.push_str("\r\n\r\n");
        assert_eq!(fits.len(), MAX_HEAD_BYTES);
        assert_eq!(a(&fits), Some(Answer::Metrics));
    }

    #[test]
    fn what_is_not_an_http1_request_line_is_a_bad_request() {
        for head in [
            "GET /metrics\r\n\r\n",
            "GET  /metrics HTTP/1.1\r\n\r\n",
            "GET /metrics HTTP/1.1 extra\r\n\r\n",
            "GET /metrics FTP/1.1\r\n\r\n",
            "G(T /metrics HTTP/1.1\r\n\r\n",
            "GET metrics HTTP/1.1\r\n\r\n",
            "GET ftp://host/metrics HTTP/1.1\r\n\r\n",
            "\x16\x03\x01\x02\x00\x01\x00\x01\x7f\x03\x03\n\n",
        ] {
            assert_eq!(a(head), Some(Answer::BadRequest), "{head:?}");
        }
        assert_eq!(
            a("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
            Some(Answer::VersionNotSupported)
        );
    }

    #[test]
    fn responses_close_and_say_their_length() {
        let r = String::from_utf8(response(
            "200 OK",
            &[("Content-Type", CONTENT_TYPE)],
            "x 1\n",
        ))
        .unwrap();
        assert_eq!(
            r,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
             Content-Length: 4\r\nConnection: close\r\n\r\nx 1\n"
        );
        let r = String::from_utf8(response("404 Not Found", &[], "")).unwrap();
        assert_eq!(
            r,
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn accept_failures_of_one_connection_do_not_pause() {
        use std::io::{Error, ErrorKind};
        for kind in [
            ErrorKind::ConnectionAborted,
            ErrorKind::ConnectionReset,
            ErrorKind::ConnectionRefused,
            ErrorKind::Interrupted,
        ] {
            assert_eq!(
                accept_failure(&Error::from(kind)),
                AcceptFailure::ThatConnection,
                "{kind:?}"
            );
        }
        // EMFILE, ENFILE, ENOBUFS, ENOMEM: the process or system is out of something.
        for errno in [24, 23, 105, 12] {
            assert_eq!(
                accept_failure(&Error::from_raw_os_error(errno)),
                AcceptFailure::Listener,
                "errno {errno}"
            );
        }
    }

    #[test]
    fn backoff_doubles_from_small_up_to_a_second() {
        let mut b = Backoff::default();
        let pauses: Vec<u64> = (0..10)
            .map(|_| u64::try_from(b.next_pause().as_millis()).unwrap())
            .collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
    }

    #[test]
    fn failures_are_reported_at_most_once_per_ten_seconds() {
        let mut log = LogLimit::default();
        let t0 = Instant::now();
        assert_eq!(log.admit(t0), Some(0));
        assert_eq!(log.admit(t0 + Duration::from_millis(1)), None);
        assert_eq!(log.admit(t0 + Duration::from_millis(9_999)), None);
        assert_eq!(log.admit(t0 + LOG_EVERY), Some(2));
        assert_eq!(log.admit(t0 + LOG_EVERY + Duration::from_secs(1)), None);
        assert_eq!(log.admit(t0 + LOG_EVERY * 3), Some(1));
    }
}
