//! Shared fixtures: the shared Redis, private `redis-server` processes, a stoppable TCP
//! proxy and a scripted RESP server.

use ankusa_sink_core::{BoxError, Envelope};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::task::{JoinHandle, JoinSet};

/// `host:port` of the shared Redis (`ANKUSA_REDIS_ADDR`, default 127.0.0.1:6379).
pub(crate) fn shared_addr() -> String {
    std::env::var("ANKUSA_REDIS_ADDR").unwrap_or_else(|_| "127.0.0.1:6379".into())
}

/// `redis://<shared>`.
pub(crate) fn shared_url() -> String {
    format!("redis://{}", shared_addr())
}

/// A plain connection to `url`.
pub(crate) async fn admin(url: &str) -> Result<redis::aio::MultiplexedConnection, BoxError> {
    let client = redis::Client::open(url)?;
    Ok(client.get_multiplexed_async_connection().await?)
}

/// One stream entry as `XRANGE` answers it: the id and the (field, value) list.
pub(crate) type Entry = (String, Vec<(String, Vec<u8>)>);

/// Every entry of `stream` as (field, value) lists, oldest first.
pub(crate) async fn entries(
    url: &str,
    stream: &str,
) -> Result<Vec<Vec<(String, Vec<u8>)>>, BoxError> {
    let e: Vec<Entry> = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(&mut admin(url).await?)
        .await?;
    Ok(e.into_iter().map(|(_, fields)| fields).collect())
}

/// `DEL key` on `url`.
pub(crate) async fn del(url: &str, key: &str) -> Result<(), BoxError> {
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query_async(&mut admin(url).await?)
        .await?;
    Ok(())
}

/// A hook with a tenant, a dedupe key and a header.
pub(crate) fn env(id: &str) -> Envelope {
    Envelope::builder(id, "stripe", &br#"{"type":"ping"}"#[..])
        .tenant_id("acme")
        .content_type("application/json")
        .dedupe_key("evt_1")
        .header("User-Agent", "Stripe/1.0")
        .received_at(1_700_000_000_123)
        .build()
        .unwrap()
}

/// A loopback port nobody listens on (bound, then released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A private `redis-server` on a free loopback port, killed on drop.
pub(crate) struct Server {
    child: Option<Child>,
    port: u16,
    args: Vec<String>,
    dir: PathBuf,
    tls: bool,
}

impl Server {
    /// Starts `redis-server` with `args` (`--requirepass`, `--maxmemory`, ...) and waits
    /// until it answers.
    pub(crate) async fn start(args: &[&str]) -> Server {
        let dir = std::env::temp_dir().join(ankusa_sink_testkit::support::unique_name("redis"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = Server {
            child: None,
            port: free_port(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            dir,
            tls: false,
        };
        s.spawn().await;
        s
    }

    /// A TLS-only server (`--tls-port`) with a certificate for `127.0.0.1` signed by a
    /// fresh CA; returns it and the CA's PEM file.
    pub(crate) async fn start_tls() -> (Server, PathBuf) {
        let dir = std::env::temp_dir().join(ankusa_sink_testkit::support::unique_name("redis-tls"));
        std::fs::create_dir_all(&dir).unwrap();
        let sh = r#"set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=ankusa test CA"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout srv.key -out srv.csr -subj "/CN=127.0.0.1"
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' > ext
openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt -days 2 -extfile ext
"#;
        let ok = std::process::Command::new("sh")
            .args(["-c", sh])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "openssl made the test certificates");
        let file = |f: &str| dir.join(f).to_str().unwrap().to_owned();
        let port = free_port();
        let mut s = Server {
            child: None,
            port,
            args: vec![
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                port.to_string(),
                "--tls-cert-file".into(),
                file("srv.crt"),
                "--tls-key-file".into(),
                file("srv.key"),
                "--tls-ca-cert-file".into(),
                file("ca.crt"),
                "--tls-auth-clients".into(),
                "no".into(),
            ],
            dir: dir.clone(),
            tls: true,
        };
        s.spawn().await;
        (s, dir.join("ca.crt"))
    }

    async fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--dir", self.dir.to_str().unwrap()])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server is installed (scripts/services/redis.sh)");
        self.child = Some(child);
        for _ in 0..200 {
            if answers(self.port, self.tls).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("redis-server on port {} did not answer", self.port);
    }

    /// `host:port`.
    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://host:port` (`rediss://` for a TLS server).
    pub(crate) fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://{}", self.addr())
    }

    /// Kills the server (every connection drops).
    pub(crate) async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Freezes the process (`SIGSTOP`): connections stay open, nothing is answered.
    pub(crate) fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused process run again (`SIGCONT`).
    pub(crate) fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().and_then(Child::id).expect("running");
        let ok = std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    /// Starts it again on the same port.
    pub(crate) async fn restart(&mut self) {
        self.stop().await;
        self.spawn().await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether something on `port` answers `PING` with a RESP line (`+PONG`, `-NOAUTH`, ...);
/// for TLS, whether it accepts a connection.
async fn answers(port: u16, tls: bool) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    if tls {
        return true;
    }
    if s.write_all(b"PING\r\n").await.is_err() {
        return false;
    }
    let mut line = String::new();
    let mut r = BufReader::new(s);
    matches!(r.read_line(&mut line).await, Ok(n) if n > 0 && (line.starts_with('+') || line.starts_with('-')))
}

/// A TCP proxy to the shared Redis that can be stopped (every connection dropped, the port
/// closed) and started again on the same port.
pub(crate) struct Proxy {
    pub(crate) addr: SocketAddr,
    task: Mutex<Option<JoinHandle<()>>>,
    /// The proxied connections, kept here so a stop can wait until every one is closed.
    conns: Arc<Mutex<JoinSet<()>>>,
}

impl Proxy {
    pub(crate) async fn start() -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy = Proxy {
            addr: listener.local_addr()?,
            task: Mutex::new(None),
            conns: Arc::new(Mutex::new(JoinSet::new())),
        };
        proxy.serve(listener);
        Ok(proxy)
    }

    fn serve(&self, listener: TcpListener) {
        let conns = self.conns.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                conns.lock().unwrap().spawn(async move {
                    if let Ok(mut upstream) = TcpStream::connect(shared_addr()).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        *self.task.lock().unwrap() = Some(task);
    }

    /// Stop listening and close every proxied connection, and return only once both are
    /// done: an abort alone takes effect later, and a delivery made just after it went
    /// through the old connection (the testkit's recovery case saw `Ok` while "down").
    pub(crate) async fn stop(&self) {
        let task = self.task.lock().unwrap().take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
        let mut conns = std::mem::take(&mut *self.conns.lock().unwrap());
        conns.shutdown().await;
    }

    pub(crate) async fn restart(&self) -> std::io::Result<()> {
        self.serve(TcpListener::bind(self.addr).await?);
        Ok(())
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap().take() {
            task.abort();
        }
        self.conns.lock().unwrap().abort_all();
    }
}

/// What the scripted server does with the first `XADD` or `PUBLISH` (it answers `+OK` to
/// every setup command before).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Script {
    /// Take the write and never answer anything again on that connection.
    NeverAnswer,
    /// Answer this RESP error line (without `-` and CRLF).
    Refuse(&'static str),
}

/// A loopback server speaking RESP, for what a real server cannot be made to answer to
/// this sink's commands (`TRYAGAIN` comes only for multi-key commands during resharding)
/// or what must not be done to the shared server.
pub(crate) struct Scripted {
    pub(crate) addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Scripted {
    pub(crate) async fn start(script: Script) -> std::io::Result<Scripted> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((sock, _)) = listener.accept().await {
                conns.spawn(async move {
                    let _ = serve_scripted(sock, script).await;
                });
            }
        });
        Ok(Scripted { addr, task })
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

async fn read_header(r: &mut BufReader<TcpStream>, prefix: char) -> std::io::Result<usize> {
    let mut line = String::new();
    if r.read_line(&mut line).await? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    line.trim_end()
        .strip_prefix(prefix)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "not RESP"))
}

async fn read_command(r: &mut BufReader<TcpStream>) -> std::io::Result<Vec<Vec<u8>>> {
    let n = read_header(r, '*').await?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        let len = read_header(r, '$').await?;
        let mut arg = vec![0u8; len + 2];
        r.read_exact(&mut arg).await?;
        arg.truncate(len);
        args.push(arg);
    }
    Ok(args)
}

async fn serve_scripted(sock: TcpStream, script: Script) -> std::io::Result<()> {
    let mut r = BufReader::new(sock);
    loop {
        let cmd = read_command(&mut r).await?;
        let write = cmd
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case(b"XADD") || c.eq_ignore_ascii_case(b"PUBLISH"));
        let reply = match (write, script) {
            (false, _) => "+OK\r\n".to_owned(),
            (true, Script::Refuse(line)) => format!("-{line}\r\n"),
            (true, Script::NeverAnswer) => {
                let mut sink = Vec::new();
                r.read_to_end(&mut sink).await?;
                return Ok(());
            }
        };
        r.get_mut().write_all(reply.as_bytes()).await?;
    }
}
