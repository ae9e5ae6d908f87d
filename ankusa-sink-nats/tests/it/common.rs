//! Shared helpers: the shared server, private `nats-server` processes, streams, a probe.

use ankusa_sink_nats::{NatsConfig, NatsSink};
use ankusa_sink_testkit::ankusa_sink_core::async_trait;
use ankusa_sink_testkit::ankusa_sink_core::{BoxError, Secret};
use ankusa_sink_testkit::support::unique_name;
use ankusa_sink_testkit::{Probe, Received};
use async_nats::jetstream::{self, stream};
use std::io::Read as _;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) use ankusa_sink_testkit::support::free_port;

/// The pre-started server (scripts/services/nats.sh).
pub(crate) const SHARED_URL: &str = "nats://127.0.0.1:4222";

/// A token planted in every sink the tests build (a server without auth ignores it).
pub(crate) const PLANTED_TOKEN: &str = "planted-nats-token-7f3a9c";

/// A fresh stream and subject names: `ankusa_<prefix>_<unique>`, `ankusa.<prefix>.<unique>`.
pub(crate) fn names(prefix: &str) -> (String, String) {
    let u = unique_name(prefix).replace(['-', '.'], "_");
    (format!("ankusa_{u}"), format!("ankusa.{u}"))
}

/// A raw client on `url`, logging in with its userinfo (`user:password`, or a token).
pub(crate) async fn raw(url: &str) -> async_nats::Client {
    connect(url).await.expect("connect the raw client")
}

async fn connect(url: &str) -> Result<async_nats::Client, async_nats::ConnectError> {
    let mut u = url::Url::parse(url).unwrap();
    let opts = match (u.username().to_owned(), u.password().map(str::to_owned)) {
        (user, Some(p)) => async_nats::ConnectOptions::with_user_and_password(user, p),
        (user, None) if !user.is_empty() => async_nats::ConnectOptions::with_token(user),
        _ => async_nats::ConnectOptions::new(),
    };
    let _ = u.set_username("");
    let _ = u.set_password(None);
    opts.connect(u.as_str()).await
}

/// How a test stream is limited.
#[derive(Debug, Clone, Default)]
pub(crate) struct Limits {
    /// `max_msg_size`, when set.
    pub(crate) max_msg_size: Option<i32>,
    /// `max_messages` with `discard = new`, when set.
    pub(crate) max_messages_discard_new: Option<i64>,
}

/// Create stream `name` bound to `subject` on `url`.
pub(crate) async fn create_stream(url: &str, name: &str, subject: &str, limits: Limits) {
    create_stream_with(raw(url).await, name, subject, limits).await;
}

/// Create stream `name` bound to `subject` through `client`: for servers `raw` cannot log
/// in to (nkeys, TLS).
pub(crate) async fn create_stream_with(
    client: async_nats::Client,
    name: &str,
    subject: &str,
    limits: Limits,
) {
    let js = jetstream::new(client);
    let mut cfg = stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.to_owned()],
        storage: stream::StorageType::File,
        ..Default::default()
    };
    if let Some(n) = limits.max_msg_size {
        cfg.max_message_size = n;
    }
    if let Some(n) = limits.max_messages_discard_new {
        cfg.max_messages = n;
        cfg.discard = stream::DiscardPolicy::New;
    }
    js.create_stream(cfg).await.expect("create the stream");
}

/// Every message of stream `name` on `url`, in sequence order.
pub(crate) async fn stored_on(url: &str, name: &str) -> Vec<Stored> {
    stored(&raw(url).await, name).await.unwrap()
}

/// Delete stream `name` on `url`.
pub(crate) async fn delete_stream(url: &str, name: &str) -> Result<(), BoxError> {
    let js = jetstream::new(connect(url).await?);
    js.delete_stream(name).await?;
    Ok(())
}

/// The sink tests use: `subject` on `url`, a planted token, short timeouts.
pub(crate) fn sink_config(url: &str, subject: &str) -> NatsConfig {
    NatsConfig::new(url, subject)
        .unwrap()
        .with_token(Secret::new(PLANTED_TOKEN))
        .unwrap()
        .with_timeout(Duration::from_secs(2))
        .with_connect_timeout(Duration::from_secs(2))
}

/// A sink for `subject` on `url`.
pub(crate) fn sink(url: &str, subject: &str) -> NatsSink {
    NatsSink::new(sink_config(url, subject))
}

/// One stored message: subject, headers (name, value) in wire order, payload.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) payload: Vec<u8>,
}

/// Every message of stream `name`, in sequence order.
pub(crate) async fn stored(
    client: &async_nats::Client,
    name: &str,
) -> Result<Vec<Stored>, BoxError> {
    let js = jetstream::new(client.clone());
    let mut s = js.get_stream(name).await?;
    let state = s.info().await?.state.clone();
    let mut out = Vec::new();
    if state.messages == 0 {
        return Ok(out);
    }
    for seq in state.first_sequence..=state.last_sequence {
        let m = s.get_raw_message(seq).await?;
        let mut headers = Vec::new();
        for (k, vs) in m.headers.iter() {
            for v in vs {
                headers.push((k.to_string(), v.to_string()));
            }
        }
        out.push(Stored {
            headers,
            payload: m.payload.to_vec(),
        });
    }
    Ok(out)
}

/// Reads a stream back with direct gets.
pub(crate) struct StreamProbe {
    pub(crate) client: async_nats::Client,
    pub(crate) stream: String,
}

#[async_trait]
impl Probe for StreamProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        stored(&self.client, &self.stream)
            .await?
            .iter()
            .map(|m| Received::from_message_bytes(&m.payload))
            .collect()
    }
}

/// A private `nats-server` with JetStream on a free loopback port, its own store and
/// config; killed (and its directory removed) on drop.
#[derive(Debug)]
pub(crate) struct PrivateServer {
    pub(crate) port: u16,
    dir: PathBuf,
    child: Mutex<Option<Child>>,
}

/// [`PrivateServer::start`] off the async runtime (it blocks until the server is up).
pub(crate) async fn private(extra: impl Into<String>) -> PrivateServer {
    let extra = extra.into();
    tokio::task::spawn_blocking(move || PrivateServer::start(&extra))
        .await
        .unwrap()
}

/// `nats-server` from PATH or the Debian package's place.
fn binary() -> String {
    for p in ["/usr/sbin/nats-server", "/usr/bin/nats-server"] {
        if std::path::Path::new(p).exists() {
            return p.into();
        }
    }
    "nats-server".into()
}

impl PrivateServer {
    /// Start a server whose config adds `extra` (e.g. `max_payload: 2048`,
    /// `authorization { ... }`) to the listener and JetStream store.
    pub(crate) fn start(extra: &str) -> PrivateServer {
        let port = free_port();
        let dir = std::env::temp_dir().join(unique_name("ankusa-nats-private"));
        std::fs::create_dir_all(dir.join("store")).unwrap();
        let conf = format!(
            "listen: \"127.0.0.1:{port}\"\njetstream {{ store_dir: \"{}\" }}\n{extra}\n",
            dir.join("store").display()
        );
        std::fs::write(dir.join("server.conf"), conf).unwrap();
        let s = PrivateServer {
            port,
            dir,
            child: Mutex::new(None),
        };
        s.spawn();
        s
    }

    fn spawn(&self) {
        let log = std::fs::File::create(self.dir.join("server.log")).unwrap();
        let child = Command::new(binary())
            .arg("-c")
            .arg(self.dir.join("server.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        *self.child.lock().unwrap() = Some(child);
        self.wait_ready();
    }

    /// Wait until the server greets with INFO (at most 30 s).
    fn wait_ready(&self) {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 4];
                if s.read_exact(&mut buf).is_ok() && &buf == b"INFO" {
                    return;
                }
            }
            assert!(
                Instant::now() < until,
                "private nats-server on {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `nats://127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kill the server (its store stays).
    pub(crate) fn stop(&self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start it again on the same port and store.
    pub(crate) fn restart(&self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
