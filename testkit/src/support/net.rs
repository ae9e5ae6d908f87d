//! Loopback network helpers: a free port, and a proxy that makes an outage on demand.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::io::AsyncReadExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// A loopback port nobody listens on (bound, then released): the address of a destination
/// that refuses connections, or a port to start a private server on.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// The accept loop and the connections it proxies.
type Running = (JoinHandle<()>, Arc<Mutex<JoinSet<()>>>);

/// What a [`TcpProxy`] does with the bytes of its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Join each connection to the upstream.
    Forward,
    /// Keep each connection open, read what the client sends and drop it, answer nothing.
    Blackhole,
}

/// A TCP proxy on a loopback port in front of a real destination, that a test can stop
/// (listener closed, every proxied connection cut) and start again on the same port: an
/// outage of the destination on demand, for [`Harness::stop`] and [`Harness::start`] and for faults
/// that must not be done to a server other tests share. Dropping it stops it.
///
/// Two more faults on demand, for a sink that is already connected (a warm fault,
/// [`Harness::warm_fault`]): [`blackhole`](Self::blackhole), a destination that goes silent
/// on the connections the sink holds (it takes every write and never answers), and
/// [`redirect`](Self::redirect), a destination that comes back as another server (one that
/// refuses the credential or throttles) after cutting every connection.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use ankusa_sink_testkit::support::TcpProxy;
///
/// let proxy = TcpProxy::start("127.0.0.1:6379").await?;
/// let url = format!("redis://{}", proxy.addr()); // give the sink this address
/// proxy.stop().await; // deliveries now fail: connection refused
/// proxy.restart().await?; // and recover
/// proxy.blackhole(); // every write is taken, nothing is ever answered
/// proxy.redirect("127.0.0.1:6380").await; // connections cut, new ones reach another server
/// # Ok(())
/// # }
/// ```
///
/// [`Harness::stop`]: crate::Harness::stop
/// [`Harness::start`]: crate::Harness::start
/// [`Harness::warm_fault`]: crate::Harness::warm_fault
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    upstream: Arc<Mutex<String>>,
    mode: watch::Sender<Mode>,
    running: Mutex<Option<Running>>,
    /// What clients sent while silent, since the last `blackhole`.
    heard: Arc<Mutex<Vec<u8>>>,
}

/// At most this much of what clients send to a silent proxy is kept for
/// [`TcpProxy::heard`]: a fault's hook, its login and its retries fit many times over.
const HEARD_MAX: usize = 16 << 20;

impl TcpProxy {
    /// A running proxy on a free loopback port; each connection it accepts is joined to a
    /// new connection to `upstream` (`host:port`, resolved per connection).
    ///
    /// # Errors
    /// No loopback port could be bound.
    pub async fn start(upstream: impl Into<String>) -> io::Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy = TcpProxy {
            addr: listener.local_addr()?,
            upstream: Arc::new(Mutex::new(upstream.into())),
            mode: watch::Sender::new(Mode::Forward),
            running: Mutex::new(None),
            heard: Arc::default(),
        };
        proxy.serve(listener);
        Ok(proxy)
    }

    /// Where clients connect: the proxy's loopback address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where new connections are joined to (`host:port`).
    pub fn upstream(&self) -> String {
        lock(&self.upstream).clone()
    }

    fn serve(&self, listener: TcpListener) {
        let conns = Arc::new(Mutex::new(JoinSet::new()));
        let tracked = Arc::clone(&conns);
        let upstream = Arc::clone(&self.upstream);
        let mode = self.mode.subscribe();
        let heard = Arc::clone(&self.heard);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = lock(&upstream).clone();
                let mode = mode.clone();
                let heard = Arc::clone(&heard);
                lock(&tracked).spawn(pump(client, upstream, mode, heard));
            }
        });
        *lock(&self.running) = Some((accept, conns));
    }

    /// Close the listener and cut every proxied connection, and return only once both are
    /// done: an abort alone takes effect later, and a delivery made just after it could
    /// still go through an old connection.
    pub async fn stop(&self) {
        let running = lock(&self.running).take();
        if let Some((accept, conns)) = running {
            accept.abort();
            let _ = accept.await;
            let mut conns = std::mem::take(&mut *lock(&conns));
            conns.shutdown().await;
        }
    }

    /// Listen again on the same port, forwarding (after a [`blackhole`](Self::blackhole)
    /// too); retries for up to 5 s while the old socket closes.
    ///
    /// # Errors
    /// The port could not be bound again in that time.
    pub async fn restart(&self) -> io::Result<()> {
        self.stop().await;
        self.mode.send_replace(Mode::Forward);
        let mut tries = 100;
        loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => {
                    self.serve(listener);
                    return Ok(());
                }
                Err(e) if tries == 0 => return Err(e),
                Err(_) => tries -= 1,
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Go silent: every open connection stays open, the client's writes are read and
    /// dropped and nothing is ever answered (the upstream connection is closed); new
    /// connections are accepted and treated the same. A destination that took the first
    /// messages and then never acknowledges another: the fault a sink waiting for its acks
    /// on a connection it already holds must meet with its own ack timeout. Takes effect on
    /// every connection before the next byte is forwarded; [`restart`](Self::restart)
    /// forwards again.
    ///
    /// What the clients send from now on is kept for [`heard`](Self::heard).
    pub fn blackhole(&self) {
        lock(&self.heard).clear();
        self.mode.send_replace(Mode::Blackhole);
    }

    /// The bytes clients sent since the last [`blackhole`](Self::blackhole), in the order
    /// each connection sent them (connections one after another as they were read; the
    /// first 16 MiB): whether a sink sent anything of a hook into the silence, for
    /// [`Setup::with_heard`](crate::Setup::with_heard). Empty before any blackhole.
    pub fn heard(&self) -> Vec<u8> {
        lock(&self.heard).clone()
    }

    /// Join new connections to `upstream` from now on, and cut every open one (returning
    /// once they are cut), so the sink's next request reconnects to the other server: a
    /// destination that came back refusing the sink's credential, or throttling, after the
    /// sink had been delivering to it. Forwards (after a [`blackhole`](Self::blackhole)
    /// too). A stopped proxy stays stopped until [`restart`](Self::restart).
    pub async fn redirect(&self, upstream: impl Into<String>) {
        *lock(&self.upstream) = upstream.into();
        self.mode.send_replace(Mode::Forward);
        let conns = lock(&self.running).as_ref().map(|(_, c)| Arc::clone(c));
        if let Some(conns) = conns {
            let mut cut = std::mem::take(&mut *lock(&conns));
            cut.shutdown().await;
        }
    }
}

/// One proxied connection: joined to `upstream` while the mode is forward, then (once it
/// is blackhole) the upstream closed and the client's bytes read and dropped until it
/// closes.
async fn pump(
    mut client: TcpStream,
    upstream: String,
    mut mode: watch::Receiver<Mode>,
    heard: Arc<Mutex<Vec<u8>>>,
) {
    if *mode.borrow_and_update() == Mode::Forward {
        let Ok(mut up) = TcpStream::connect(&upstream).await else {
            return;
        };
        tokio::select! {
            // The mode first: a write that arrives with the switch is never forwarded.
            biased;
            silent = mode.wait_for(|m| *m == Mode::Blackhole) => {
                if silent.is_err() {
                    // The proxy is gone.
                    return;
                }
            }
            _ = tokio::io::copy_bidirectional(&mut client, &mut up) => return,
        }
    }
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut kept = lock(&heard);
                let room = HEARD_MAX.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buf[..room]);
            }
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Some((accept, conns)) = lock(&self.running).take() {
            accept.abort();
            lock(&conns).abort_all();
        }
    }
}

/// A poisoned lock only means a test thread panicked: the data is still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// An echo server; the proxy in front of it; one round trip through the proxy.
    async fn echo_through(proxy: &TcpProxy) -> io::Result<Vec<u8>> {
        let mut c = TcpStream::connect(proxy.addr()).await?;
        c.write_all(b"ping").await?;
        let mut got = vec![0; 4];
        c.read_exact(&mut got).await?;
        Ok(got)
    }

    #[tokio::test]
    async fn stop_refuses_and_cuts_then_restart_recovers_on_the_same_port() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = echo.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let proxy = TcpProxy::start(upstream).await.unwrap();
        let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(echo_through(&proxy).await.unwrap(), b"ping");
        proxy.stop().await;
        assert!(echo_through(&proxy).await.is_err(), "refused while stopped");
        // The connection opened before the stop is cut: EOF (or a reset) on read.
        let mut buf = [0; 1];
        assert!(matches!(open.read(&mut buf).await, Ok(0) | Err(_)));
        proxy.restart().await.unwrap();
        assert_eq!(echo_through(&proxy).await.unwrap(), b"ping");
    }

    /// An echo server on loopback: its address.
    async fn echo_server() -> String {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = echo.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    /// A server that answers every connection with `greeting` and closes it.
    async fn greeting_server(greeting: &'static [u8]) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(greeting).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn blackhole_keeps_connections_open_and_answers_nothing() {
        let proxy = TcpProxy::start(echo_server().await).await.unwrap();
        let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
        open.write_all(b"ping").await.unwrap();
        let mut got = [0; 4];
        open.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        proxy.blackhole();
        // The open connection takes writes and answers nothing: no EOF, no echo. (A broken
        // blackhole would answer at once; the wait only bounds how long the test looks.)
        open.write_all(b"lost").await.unwrap();
        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        fresh.write_all(b"lost too").await.unwrap();
        for conn in [&mut open, &mut fresh] {
            let read = tokio::time::timeout(Duration::from_millis(300), conn.read(&mut got));
            assert!(read.await.is_err(), "a blackholed connection answered");
        }
        // What reached the silence is kept, and what went before it (the echoed ping) not.
        let heard = proxy.heard();
        assert!(
            heard == b"lostlost too" || heard == b"lost toolost",
            "{:?}",
            String::from_utf8_lossy(&heard)
        );
        proxy.restart().await.unwrap();
        assert_eq!(echo_through(&proxy).await.unwrap(), b"ping");
    }

    #[tokio::test]
    async fn redirect_cuts_connections_and_joins_new_ones_to_the_new_upstream() {
        let proxy = TcpProxy::start(echo_server().await).await.unwrap();
        let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(echo_through(&proxy).await.unwrap(), b"ping");
        let other = greeting_server(b"other").await;
        proxy.redirect(other.clone()).await;
        assert_eq!(proxy.upstream(), other);
        let mut buf = [0; 1];
        assert!(
            matches!(open.read(&mut buf).await, Ok(0) | Err(_)),
            "not cut"
        );
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"other");
    }

    #[test]
    fn a_free_port_refuses_connections() {
        let port = free_port();
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}
