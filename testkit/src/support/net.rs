//! Loopback network helpers: a free port, and a proxy that makes an outage on demand.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
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

/// A TCP proxy on a loopback port in front of a real destination, that a test can stop
/// (listener closed, every proxied connection cut) and start again on the same port: an
/// outage of the destination on demand, for [`Harness::stop`] and [`Harness::start`] and for faults
/// that must not be done to a server other tests share. Dropping it stops it.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use ankusa_sink_testkit::support::TcpProxy;
///
/// let proxy = TcpProxy::start("127.0.0.1:6379").await?;
/// let url = format!("redis://{}", proxy.addr()); // give the sink this address
/// proxy.stop().await; // deliveries now fail: connection refused
/// proxy.restart().await?; // and recover
/// # Ok(())
/// # }
/// ```
///
/// [`Harness::stop`]: crate::Harness::stop
/// [`Harness::start`]: crate::Harness::start
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    upstream: String,
    running: Mutex<Option<Running>>,
}

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
            upstream: upstream.into(),
            running: Mutex::new(None),
        };
        proxy.serve(listener);
        Ok(proxy)
    }

    /// Where clients connect: the proxy's loopback address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn serve(&self, listener: TcpListener) {
        let conns = Arc::new(Mutex::new(JoinSet::new()));
        let tracked = Arc::clone(&conns);
        let upstream = self.upstream.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                lock(&tracked).spawn(async move {
                    if let Ok(mut up) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
                    }
                });
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

    /// Listen again on the same port; retries for up to 5 s while the old socket closes.
    ///
    /// # Errors
    /// The port could not be bound again in that time.
    pub async fn restart(&self) -> io::Result<()> {
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

    #[test]
    fn a_free_port_refuses_connections() {
        let port = free_port();
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}
