//! Shared fixtures: the shared Redis, private `redis-server` processes and a scripted RESP
//! server.

use ankusa_sink_core::{BoxError, Envelope};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

pub(crate) use ankusa_sink_testkit::support::free_port;

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
    Ok(client
        .get_multiplexed_async_connection_with_config(&admin_config())
        .await?)
}

/// The test's own connections wait up to 10 s: the client's default response timeout
/// (500 ms) is shorter than reading back the `volume` case's 5,000 entries (about 5 MB in
/// one `XRANGE` answer) takes on a loaded machine; it failed CI twice with "timed out".
pub(crate) fn admin_config() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(10)))
        .set_response_timeout(Some(Duration::from_secs(10)))
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
        let (port, tls) = (self.port, self.tls);
        ankusa_sink_testkit::support::wait_ready(
            &format!("redis-server on port {port} did not answer"),
            || answers(port, tls),
        )
        .await;
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
/// or what must not be done to the shared server. It reads each command with the `redis`
/// crate's own parser, on a thread per connection; dropping it stops accepting.
pub(crate) struct Scripted {
    pub(crate) addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

impl Scripted {
    pub(crate) async fn start(script: Script) -> std::io::Result<Scripted> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        std::thread::spawn(move || {
            for sock in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(sock) = sock {
                    std::thread::spawn(move || serve_scripted(sock, script));
                }
            }
        });
        Ok(Scripted { addr, stop })
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

fn serve_scripted(mut sock: std::net::TcpStream, script: Script) -> redis::RedisResult<()> {
    use std::io::{Read as _, Write as _};
    let mut parser = redis::Parser::new();
    loop {
        let cmd = parser.parse_value(&mut sock)?;
        let write = match &cmd {
            redis::Value::Array(args) => matches!(
                args.first(),
                Some(redis::Value::BulkString(c))
                    if c.eq_ignore_ascii_case(b"XADD") || c.eq_ignore_ascii_case(b"PUBLISH")
            ),
            _ => false,
        };
        let reply = match (write, script) {
            (false, _) => "+OK\r\n".to_owned(),
            (true, Script::Refuse(line)) => format!("-{line}\r\n"),
            (true, Script::NeverAnswer) => {
                // Taken; read (and drop) whatever comes next, answer nothing.
                let _ = sock.read_to_end(&mut Vec::new());
                return Ok(());
            }
        };
        sock.write_all(reply.as_bytes())?;
    }
}
