//! A private RabbitMQ node for the `durability` case's restart: its own node name, port and
//! data directory, so killing it disturbs no other test; and a probe that reads a queue
//! without taking anything from it, so the hooks can be read again after the restart.

use ankusa_sink_core::{BoxError, async_trait};
use ankusa_sink_testkit::support::{free_port, unique_name};
use ankusa_sink_testkit::{Probe, Received};
use lapin::options::{BasicGetOptions, BasicRejectOptions};
use lapin::{Connection, ConnectionProperties};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A `rabbitmq-server` of its own, in a session of its own (killed as a group); its data
/// directory is kept across [`restart`](Self::restart) and removed on drop.
pub(crate) struct PrivateNode {
    port: u16,
    node: String,
    dir: PathBuf,
    /// The running node's session leader (its id is the session's and process group's).
    session: Mutex<Option<Child>>,
}

impl PrivateNode {
    /// Start a node and wait until it takes AMQP connections (blocking: at most 180 s; it
    /// takes about 30 s on a loaded 2-core machine).
    pub(crate) fn start() -> PrivateNode {
        let port = free_port();
        let node = format!("{}@localhost", unique_name("tk-rmq").replace('-', "_"));
        let dir = std::env::temp_dir().join(unique_name("ankusa-rmq-private"));
        std::fs::create_dir_all(dir.join("mnesia")).unwrap();
        std::fs::create_dir_all(dir.join("log")).unwrap();
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!("listeners.tcp.default = 127.0.0.1:{port}\n"),
        )
        .unwrap();
        std::fs::write(dir.join("enabled_plugins"), "[].\n").unwrap();
        std::fs::write(dir.join("env.conf"), "NODE_IP_ADDRESS=127.0.0.1\n").unwrap();
        // The server script runs the node as the rabbitmq user, which writes here.
        let owned = Command::new("chown")
            .args(["-R", "rabbitmq:rabbitmq"])
            .arg(&dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(owned, "chown the private node's directory to rabbitmq");
        let n = PrivateNode {
            port,
            node,
            dir,
            session: Mutex::new(None),
        };
        n.spawn();
        n
    }

    fn spawn(&self) {
        let d = &self.dir;
        let child = Command::new("setsid")
            .arg("rabbitmq-server")
            .env("RABBITMQ_CONF_ENV_FILE", d.join("env.conf"))
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", free_port().to_string())
            .env("RABBITMQ_MNESIA_BASE", d.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", d.join("log"))
            .env("RABBITMQ_CONFIG_FILE", d.join("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d.join("enabled_plugins"))
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .current_dir(d)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("rabbitmq-server is installed (scripts/services/rabbitmq.sh)");
        *self.session.lock().unwrap() = Some(child);
        let until = Instant::now() + Duration::from_secs(180);
        while !self.listens() {
            assert!(
                Instant::now() < until,
                "private RabbitMQ node {} did not listen on {}",
                self.node,
                self.port
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn listens(&self) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }

    /// Kill the node (`SIGKILL` to its whole session): what a crash does.
    fn kill(&self) {
        if let Some(mut leader) = self.session.lock().unwrap().take() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", leader.id())])
                .status();
            let _ = leader.wait();
            let until = Instant::now() + Duration::from_secs(30);
            while self.listens() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Kill it and start it again on the same node name, port and data (blocking).
    pub(crate) fn restart(&self) {
        self.kill();
        self.spawn();
    }

    /// `amqp://guest:guest@127.0.0.1:<port>/%2f` (guest logs in from loopback).
    pub(crate) fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }
}

impl Drop for PrivateNode {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads every message of a queue and rejects each back onto it (`requeue`), so the
/// queue keeps them: what the broker holds, read again after a restart. Connects per call.
pub(crate) struct PeekProbe {
    pub(crate) url: String,
    pub(crate) queue: String,
}

#[async_trait]
impl Probe for PeekProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        let conn = Connection::connect(&self.url, ConnectionProperties::default()).await?;
        let ch = conn.create_channel().await?;
        let mut got = Vec::new();
        let mut tags = Vec::new();
        // Each get holds its message (unacked) until the reject below, so none is read twice.
        while let Some(msg) = ch
            .basic_get(
                self.queue.as_str().into(),
                BasicGetOptions { no_ack: false },
            )
            .await?
        {
            got.push(Received::from_message_bytes(&msg.delivery.data)?);
            tags.push(msg.delivery.delivery_tag);
        }
        for tag in tags {
            ch.basic_reject(tag, BasicRejectOptions { requeue: true })
                .await?;
        }
        let _ = conn.close(200, "OK".into()).await;
        Ok(got)
    }
}
