//! A loopback TCP proxy that can be stopped (listener closed, every connection cut) and
//! started again on the same port: an outage of the destination, for the recovery case.

use std::net::SocketAddr;
use std::sync::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

/// The accept loop and the abort handles of its connections.
type Running = (JoinHandle<()>, std::sync::Arc<Mutex<Vec<AbortHandle>>>);

pub(crate) struct Proxy {
    addr: SocketAddr,
    upstream: String,
    running: Mutex<Option<Running>>,
}

impl Proxy {
    /// A running proxy on a free loopback port, forwarding to `upstream` (`host:port`).
    pub(crate) async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = Proxy {
            addr: listener.local_addr().unwrap(),
            upstream: upstream.to_owned(),
            running: Mutex::new(None),
        };
        p.serve(listener);
        p
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn serve(&self, listener: TcpListener) {
        let conns = std::sync::Arc::new(Mutex::new(Vec::<AbortHandle>::new()));
        let tracked = std::sync::Arc::clone(&conns);
        let upstream = self.upstream.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut up) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                    }
                });
                tracked.lock().unwrap().push(task.abort_handle());
            }
        });
        *self.running.lock().unwrap() = Some((accept, conns));
    }

    /// Close the listener and cut every connection.
    pub(crate) fn stop(&self) {
        if let Some((accept, conns)) = self.running.lock().unwrap().take() {
            accept.abort();
            for c in conns.lock().unwrap().drain(..) {
                c.abort();
            }
        }
    }

    /// Listen again on the same port (bounded retries while the old socket closes).
    pub(crate) async fn restart(&self) {
        for _ in 0..100 {
            if let Ok(l) = TcpListener::bind(self.addr).await {
                self.serve(l);
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("could not listen on {} again", self.addr);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}
