//! A hand-written HTTP/1.1 server on 127.0.0.1 that scripts its answers (statuses,
//! Retry-After, slow answers, resets, huge bodies, TLS) and captures every request
//! byte for byte.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};
use tokio::task::{JoinHandle, JoinSet};

/// One request as it arrived.
#[derive(Debug, Clone)]
pub(crate) struct Captured {
    pub(crate) method: String,
    pub(crate) target: String,
    /// Names lowercased, in arrival order.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    /// Which accepted connection carried it (0-based).
    pub(crate) connection: usize,
    /// The status the script answers it with (`None`: reset, no status).
    pub(crate) status: Option<u16>,
}

impl Captured {
    /// Every value of `name`.
    pub(crate) fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The single value of `name` (panics when repeated).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let all = self.all(name);
        assert!(all.len() <= 1, "{name} sent {} times", all.len());
        all.first().copied()
    }
}

/// What the server does with one request.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// Answer with this status, headers and body.
    Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Wait, then do the inner reply.
    Slow(Duration, Box<Reply>),
    /// Read the head and half the body, then reset the connection (no answer).
    ResetMidRequest,
    /// Send the status line and `declared` content-length, `sent` body bytes, then reset.
    ResetMidAnswer {
        status: u16,
        declared: usize,
        sent: usize,
    },
    /// Answer `status` with a body of `total` bytes, written until the client stops reading.
    Huge { status: u16, total: u64 },
    /// Answer `status` declaring `total` body bytes, then send one byte every `every`.
    Trickle {
        status: u16,
        total: usize,
        every: Duration,
    },
}

impl Reply {
    /// The status this reply answers with, if it answers at all.
    pub(crate) fn final_status(&self) -> Option<u16> {
        match self {
            Reply::Answer { status, .. }
            | Reply::ResetMidAnswer { status, .. }
            | Reply::Huge { status, .. }
            | Reply::Trickle { status, .. } => Some(*status),
            Reply::Slow(_, inner) => inner.final_status(),
            Reply::ResetMidRequest => None,
        }
    }

    pub(crate) fn status(status: u16) -> Reply {
        Reply::Answer {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub(crate) fn with_header(status: u16, name: &str, value: &str) -> Reply {
        Reply::Answer {
            status,
            headers: vec![(name.into(), value.into())],
            body: Vec::new(),
        }
    }
}

/// The reply for the n-th request (0-based, across connections).
pub(crate) type Script = Arc<dyn Fn(usize) -> Reply + Send + Sync>;

/// Always the same reply.
pub(crate) fn always(reply: Reply) -> Script {
    Arc::new(move |_| reply.clone())
}

/// These replies in order, then `then` for ever.
pub(crate) fn sequence(replies: Vec<Reply>, then: Reply) -> Script {
    Arc::new(move |n| replies.get(n).cloned().unwrap_or_else(|| then.clone()))
}

#[derive(Default)]
struct State {
    captured: Mutex<Vec<Captured>>,
    requests: AtomicUsize,
    connections: AtomicUsize,
    /// Body bytes written by a `Huge` reply before the client went away.
    huge_written: AtomicU64,
    huge_done: AtomicUsize,
    /// Body bytes a `Trickle` reply wrote before the client went away.
    trickled: AtomicUsize,
    trickle_done: AtomicUsize,
    changed: Notify,
}

/// TLS material for an `https` server.
pub(crate) type Tls = tokio_rustls::TlsAcceptor;

pub(crate) struct Server {
    addr: SocketAddr,
    state: Arc<State>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

trait Conn: AsyncRead + AsyncWrite + Unpin + Send {
    fn tcp(&self) -> &TcpStream;
}

impl Conn for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl Conn for tokio_rustls::server::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

impl Server {
    /// A plain HTTP server on a fresh loopback port.
    pub(crate) async fn start(script: Script) -> Server {
        Self::start_on("127.0.0.1:0".parse().unwrap(), script, None).await
    }

    /// A plain HTTP server whose connections have a fixed send buffer of `bytes` (the
    /// kernel doubles it for its bookkeeping): what it has written is then what the
    /// client took, within that buffer and the client's receive buffer, instead of within
    /// the megabytes an autotuned buffer holds.
    pub(crate) async fn start_with_send_buffer(script: Script, bytes: u32) -> Server {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        // Accepted connections inherit it; set before listen, it is fixed (not autotuned).
        socket.set_send_buffer_size(bytes).expect("SO_SNDBUF");
        socket
            .bind("127.0.0.1:0".parse().unwrap())
            .expect("bind loopback");
        let listener = socket.listen(64).expect("listen");
        Self::serve_on(listener, script, None)
    }

    /// A server on `addr` (a port reused after [`stop`](Self::stop)), optionally TLS.
    pub(crate) async fn start_on(addr: SocketAddr, script: Script, tls: Option<Tls>) -> Server {
        assert!(addr.ip().is_loopback());
        let listener = TcpListener::bind(addr).await.expect("bind loopback");
        Self::serve_on(listener, script, tls)
    }

    fn serve_on(listener: TcpListener, script: Script, tls: Option<Tls>) -> Server {
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let (stop, mut stopped) = oneshot::channel();
        let st = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((sock, _)) = accepted else { continue };
                        let id = st.connections.fetch_add(1, Ordering::SeqCst);
                        let (st, script, tls) = (st.clone(), script.clone(), tls.clone());
                        conns.spawn(async move {
                            match tls {
                                None => serve(sock, id, st, script).await,
                                Some(tls) => {
                                    // A client that rejects our certificate aborts here.
                                    if let Ok(s) = tls.accept(sock).await {
                                        serve(s, id, st, script).await
                                    }
                                }
                            }
                        });
                    }
                }
            }
            conns.shutdown().await;
            drop(listener);
        });
        Server {
            addr,
            state,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stop listening and close every connection; returns when all are closed.
    pub(crate) async fn stop(mut self) {
        self.shutdown().await;
    }

    async fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    pub(crate) fn captured(&self) -> Vec<Captured> {
        self.state.captured.lock().unwrap().clone()
    }

    /// Requests whose head arrived (including ones reset before their body was read).
    pub(crate) fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    pub(crate) fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Waits (bounded) until a `Trickle` reply has finished and returns its bytes written.
    pub(crate) async fn trickled(&self) -> usize {
        let wait = async {
            loop {
                let notified = self.state.changed.notified();
                if self.state.trickle_done.load(Ordering::SeqCst) > 0 {
                    return self.state.trickled.load(Ordering::SeqCst);
                }
                notified.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .expect("trickle reply did not finish")
    }

    /// Waits (bounded) until a `Huge` reply has finished and returns its bytes written.
    pub(crate) async fn huge_written(&self) -> u64 {
        let wait = async {
            loop {
                let notified = self.state.changed.notified();
                if self.state.huge_done.load(Ordering::SeqCst) > 0 {
                    return self.state.huge_written.load(Ordering::SeqCst);
                }
                notified.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .expect("huge reply did not finish")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

async fn reset<S: Conn>(sock: S) {
    let _ = sock.tcp().set_zero_linger();
    drop(sock);
}

async fn serve<S: Conn>(mut sock: S, connection: usize, st: Arc<State>, script: Script) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                break i + 4;
            }
            match sock.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end - 4]).into_owned();
        let mut lines = head.split("\r\n");
        let mut request_line = lines.next().unwrap_or("").split(' ');
        let method = request_line.next().unwrap_or("").to_owned();
        let target = request_line.next().unwrap_or("").to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let n = st.requests.fetch_add(1, Ordering::SeqCst);
        let reply = script(n);
        if matches!(reply, Reply::ResetMidRequest) {
            while buf.len() < head_end + len / 2 {
                if !matches!(sock.read_buf(&mut buf).await, Ok(1..)) {
                    break;
                }
            }
            st.changed.notify_waiters();
            return reset(sock).await;
        }
        while buf.len() < head_end + len {
            match sock.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        let body = buf[head_end..head_end + len].to_vec();
        buf.drain(..head_end + len);
        st.captured.lock().unwrap().push(Captured {
            method,
            target,
            headers,
            body,
            connection,
            status: reply.final_status(),
        });
        st.changed.notify_waiters();
        if !answer(&mut sock, reply, &st).await {
            return reset(sock).await;
        }
    }
}

/// Writes one reply; `false` means reset the connection now.
async fn answer<S: Conn>(sock: &mut S, mut reply: Reply, st: &State) -> bool {
    while let Reply::Slow(d, inner) = reply {
        tokio::time::sleep(d).await;
        reply = *inner;
    }
    match reply {
        Reply::Answer {
            status,
            headers,
            body,
        } => {
            let mut out = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\n", body.len());
            for (n, v) in headers {
                out.push_str(&format!("{n}: {v}\r\n"));
            }
            out.push_str("\r\n");
            let mut bytes = out.into_bytes();
            bytes.extend_from_slice(&body);
            sock.write_all(&bytes).await.is_ok()
        }
        Reply::ResetMidAnswer {
            status,
            declared,
            sent,
        } => {
            let head = format!("HTTP/1.1 {status} X\r\ncontent-length: {declared}\r\n\r\n");
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(&vec![b'x'; sent]).await;
            let _ = sock.flush().await;
            false
        }
        Reply::Huge { status, total } => {
            let head = format!("HTTP/1.1 {status} X\r\ncontent-length: {total}\r\n\r\n");
            let chunk = vec![b'z'; 64 * 1024];
            let mut written = 0u64;
            let mut ok = sock.write_all(head.as_bytes()).await.is_ok();
            while ok && written < total {
                let n = chunk.len().min((total - written) as usize);
                match sock.write(&chunk[..n]).await {
                    Ok(0) | Err(_) => ok = false,
                    Ok(w) => written += w as u64,
                }
            }
            st.huge_written.store(written, Ordering::SeqCst);
            st.huge_done.fetch_add(1, Ordering::SeqCst);
            st.changed.notify_waiters();
            ok
        }
        Reply::Trickle {
            status,
            total,
            every,
        } => {
            let head = format!("HTTP/1.1 {status} X\r\ncontent-length: {total}\r\n\r\n");
            let mut ok = sock.write_all(head.as_bytes()).await.is_ok();
            let mut written = 0;
            while ok && written < total {
                // A write to a closed peer can still succeed once (it is buffered); the
                // next one fails, so `written` overcounts by at most one byte.
                ok = sock.write_all(b"t").await.is_ok() && sock.flush().await.is_ok();
                if ok {
                    written += 1;
                    tokio::time::sleep(every).await;
                }
            }
            st.trickled.store(written, Ordering::SeqCst);
            st.trickle_done.fetch_add(1, Ordering::SeqCst);
            st.changed.notify_waiters();
            ok
        }
        Reply::ResetMidRequest | Reply::Slow(..) => unreachable!(),
    }
}
