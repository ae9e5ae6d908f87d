//! Shared fixtures: the shared Mosquitto, private `mosquitto` processes with a generated
//! config (passwords, ACLs, limits), a subscriber that reads messages back, and a scripted
//! MQTT 5 broker for the reason codes Mosquitto does not send on demand.

use ankusa_sink_core::{BoxError, Ctx, Envelope, Failure, Sink};
use bytes::BytesMut;
use rumqttc::v5::mqttbytes::v5::{
    ConnAck, ConnectReturnCode, Disconnect, DisconnectProperties, DisconnectReasonCode, Packet,
    PubAck, PubAckReason, Publish,
};
use rumqttc::v5::mqttbytes::{Error as WireError, QoS};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

pub(crate) use ankusa_sink_testkit::support::{free_port, unique_name};

/// `host:port` of the shared Mosquitto (`ANKUSA_MQTT_ADDR`, default 127.0.0.1:1883).
pub(crate) fn shared_addr() -> String {
    std::env::var("ANKUSA_MQTT_ADDR").unwrap_or_else(|_| "127.0.0.1:1883".into())
}

/// `mqtt://<shared>`.
pub(crate) fn shared_url() -> String {
    format!("mqtt://{}", shared_addr())
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

/// Deliver a fresh hook through `sink`.
pub(crate) async fn deliver(sink: &impl Sink) -> Result<(), Failure> {
    let e = env(&unique_name("h"));
    sink.deliver(&e, &Ctx::for_envelope(&e)).await
}

/// One message as a subscriber received it.
#[derive(Debug, Clone)]
pub(crate) struct Got {
    pub(crate) topic: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) content_type: Option<String>,
    pub(crate) user_properties: Vec<(String, String)>,
    pub(crate) retain: bool,
}

/// An MQTT 5 subscriber (QoS 1) on `addr`, collecting what arrives; subscribed once
/// [`Subscriber::start`] returns. Dropping it ends its connection.
pub(crate) struct Subscriber {
    got: Arc<Mutex<Vec<Got>>>,
    task: Option<tokio::task::JoinHandle<()>>,
    client: AsyncClient,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl Subscriber {
    pub(crate) async fn start(addr: &str, filter: &str) -> Result<Subscriber, BoxError> {
        Self::start_as(addr, filter, None).await
    }

    pub(crate) async fn start_as(
        addr: &str,
        filter: &str,
        login: Option<(&str, &str)>,
    ) -> Result<Subscriber, BoxError> {
        let (host, port) = addr.rsplit_once(':').ok_or("host:port")?;
        let mut opts = MqttOptions::new(unique_name("sub"), host, port.parse()?);
        // rumqttc takes 10 KiB at most by default: a 64 KiB hook's message is larger.
        opts.set_keep_alive(Duration::from_secs(30))
            .set_max_packet_size(Some(16 << 20));
        if let Some((u, p)) = login {
            opts.set_credentials(u, p);
        }
        let (client, mut eventloop) = AsyncClient::new(opts, 64);
        client.subscribe(filter, QoS::AtLeastOnce).await?;
        // Until the SUBACK: a publish before it would reach nobody.
        loop {
            match tokio::time::timeout(Duration::from_secs(10), eventloop.poll()).await?? {
                Event::Incoming(Packet::SubAck(_)) => break,
                _ => continue,
            }
        }
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&got);
        let task = tokio::spawn(async move {
            while let Ok(event) = eventloop.poll().await {
                if let Event::Incoming(Packet::Publish(p)) = event {
                    let props = p.properties.unwrap_or_default();
                    sink.lock().unwrap().push(Got {
                        topic: String::from_utf8_lossy(&p.topic).into_owned(),
                        payload: p.payload.to_vec(),
                        content_type: props.content_type,
                        user_properties: props.user_properties,
                        retain: p.retain,
                    });
                }
            }
        });
        Ok(Subscriber {
            got,
            task: Some(task),
            client,
        })
    }

    /// What arrives, shared (for a probe).
    pub(crate) fn handle(&self) -> Arc<Mutex<Vec<Got>>> {
        Arc::clone(&self.got)
    }

    /// What arrived so far.
    pub(crate) fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }

    /// Waits until `n` messages arrived (bounded), and returns them.
    pub(crate) async fn wait_for(&self, n: usize) -> Vec<Got> {
        for _ in 0..1000 {
            if self.got.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.got()
    }

    /// Disconnects (a clean session: the broker drops the subscription) and waits
    /// (bounded) until the connection has ended.
    pub(crate) async fn leave(mut self) {
        let _ = self.client.disconnect().await;
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

/// Waits (bounded) until a QoS 1 publish to `topic` on `addr` is answered "No matching
/// subscribers": the broker has dropped every subscription to it.
pub(crate) async fn wait_without_subscribers(addr: &str, topic: &str) -> Result<(), BoxError> {
    let (host, port) = addr.rsplit_once(':').ok_or("host:port")?;
    let opts = MqttOptions::new(unique_name("nosub"), host, port.parse()?);
    let (client, mut eventloop) = AsyncClient::new(opts, 8);
    for _ in 0..500 {
        client
            .publish(topic, QoS::AtLeastOnce, false, &b"probe"[..])
            .await?;
        let reason = loop {
            match tokio::time::timeout(Duration::from_secs(10), eventloop.poll()).await?? {
                Event::Incoming(Packet::PubAck(ack)) => break ack.reason,
                _ => continue,
            }
        };
        if reason == PubAckReason::NoMatchingSubscribers {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("{topic} kept a subscriber").into())
}

/// Deletes the retained message of `topic` on `addr` (an empty retained publish).
pub(crate) async fn clear_retained(addr: &str, topic: &str) -> Result<(), BoxError> {
    let (host, port) = addr.rsplit_once(':').ok_or("host:port")?;
    let opts = MqttOptions::new(unique_name("clear"), host, port.parse()?);
    let (client, mut eventloop) = AsyncClient::new(opts, 8);
    client
        .publish(topic, QoS::AtLeastOnce, true, Vec::<u8>::new())
        .await?;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), eventloop.poll()).await?? {
            Event::Incoming(Packet::PubAck(_)) => return Ok(()),
            _ => continue,
        }
    }
}

/// A private `mosquitto` on a free loopback port with a generated config, killed on drop.
pub(crate) struct Broker {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    tls: bool,
}

/// What a private broker is made with.
#[derive(Default)]
pub(crate) struct BrokerConfig<'a> {
    /// `(user, password)`: a password file, no anonymous access.
    pub(crate) users: &'a [(&'a str, &'a str)],
    /// ACL file lines (`user hooks`, `topic write allowed/#`).
    pub(crate) acl: &'a [&'a str],
    /// Any other config lines (`max_packet_size 8192`, ...).
    pub(crate) lines: &'a [&'a str],
    /// A TLS-only listener whose certificate (for `127.0.0.1`) a fresh CA signed: its PEM
    /// is [`Broker::ca_file`].
    pub(crate) tls: bool,
}

impl Broker {
    pub(crate) async fn start(config: BrokerConfig<'_>) -> Broker {
        let dir = std::env::temp_dir().join(unique_name("mosquitto"));
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        let mut conf = format!("listener {port} 127.0.0.1\npersistence false\n");
        if config.users.is_empty() {
            conf.push_str("allow_anonymous true\n");
        } else {
            let file = dir.join("passwords");
            for (i, (user, password)) in config.users.iter().enumerate() {
                let mut cmd = std::process::Command::new("mosquitto_passwd");
                if i == 0 {
                    cmd.arg("-c");
                }
                let ok = cmd
                    .args(["-b", file.to_str().unwrap(), user, password])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .expect("mosquitto_passwd is installed (scripts/services/mosquitto.sh)")
                    .success();
                assert!(ok, "mosquitto_passwd");
            }
            conf.push_str(&format!(
                "allow_anonymous false\npassword_file {}\n",
                file.display()
            ));
        }
        if config.tls {
            make_certificates(&dir);
            let file = |f: &str| dir.join(f).display().to_string();
            conf.push_str(&format!(
                "cafile {}\ncertfile {}\nkeyfile {}\n",
                file("ca.crt"),
                file("srv.crt"),
                file("srv.key")
            ));
        }
        if !config.acl.is_empty() {
            let file = dir.join("acl");
            std::fs::write(&file, config.acl.join("\n") + "\n").unwrap();
            conf.push_str(&format!("acl_file {}\n", file.display()));
        }
        for line in config.lines {
            conf.push_str(line);
            conf.push('\n');
        }
        std::fs::write(dir.join("mosquitto.conf"), conf).unwrap();
        let mut b = Broker {
            child: None,
            port,
            dir,
            tls: config.tls,
        };
        b.spawn().await;
        b
    }

    async fn spawn(&mut self) {
        let bin = if std::path::Path::new("/usr/sbin/mosquitto").exists() {
            "/usr/sbin/mosquitto"
        } else {
            "mosquitto"
        };
        let child = Command::new(bin)
            .arg("-c")
            .arg(self.dir.join("mosquitto.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("mosquitto is installed (scripts/services/mosquitto.sh)");
        self.child = Some(child);
        let port = self.port;
        ankusa_sink_testkit::support::wait_ready(
            &format!("mosquitto on port {port} did not listen"),
            || async move { TcpStream::connect(("127.0.0.1", port)).await.is_ok() },
        )
        .await;
    }

    /// `host:port`.
    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `mqtt://host:port` (`mqtts://` for a TLS broker).
    pub(crate) fn url(&self) -> String {
        let scheme = if self.tls { "mqtts" } else { "mqtt" };
        format!("{scheme}://{}", self.addr())
    }

    /// The PEM file of the CA that signed a TLS broker's certificate.
    pub(crate) fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// Kills the broker (every connection drops).
    pub(crate) async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts it again on the same port, with the same config.
    pub(crate) async fn restart(&mut self) {
        self.stop().await;
        self.spawn().await;
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A CA and a server certificate for `127.0.0.1` it signed, in `dir` (`ca.crt`, `srv.crt`,
/// `srv.key`), readable by the broker after it drops root.
fn make_certificates(dir: &std::path::Path) {
    let sh = r#"set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=ankusa test CA"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout srv.key -out srv.csr -subj "/CN=127.0.0.1"
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' > ext
openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt -days 2 -extfile ext
chmod 644 ca.crt srv.crt srv.key
"#;
    let ok = std::process::Command::new("sh")
        .args(["-c", sh])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "openssl made the test certificates");
}

/// What the scripted broker answers a QoS 1 PUBLISH.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reply {
    /// A PUBACK with this reason.
    Ack(PubAckReason),
    /// Nothing, ever (the publish was taken).
    Silent,
    /// A DISCONNECT with this reason, then the connection closes.
    Disconnect(DisconnectReasonCode),
}

/// How the scripted broker behaves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Script {
    /// The CONNACK's reason (`Success` to accept).
    pub(crate) connack: ConnectReturnCode,
    /// The answer to each PUBLISH until [`Scripted::switch`] is called.
    pub(crate) before: Reply,
    /// The answer after it.
    pub(crate) after: Reply,
}

impl Script {
    /// Accepts the connection and answers every PUBLISH with `reply`.
    pub(crate) fn always(reply: Reply) -> Script {
        Script {
            connack: ConnectReturnCode::Success,
            before: reply,
            after: reply,
        }
    }

    /// Refuses the connection with `code`.
    pub(crate) fn refuse(code: ConnectReturnCode) -> Script {
        Script {
            connack: code,
            before: Reply::Silent,
            after: Reply::Silent,
        }
    }
}

/// A loopback MQTT 5 broker answering by a script, for what Mosquitto cannot be made to
/// answer (CONNACK 0x86 and 0x89, PUBACK 0x97, a DISCONNECT with Server busy, a PUBACK that
/// never comes). It reads the client's packets with rumqttc's own MQTT 5 parser and
/// writes real packets; the sink's client parses them. Dropping it stops accepting.
pub(crate) struct Scripted {
    pub(crate) addr: SocketAddr,
    switched: Arc<AtomicBool>,
    publishes: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
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
        let switched = Arc::new(AtomicBool::new(false));
        let publishes = Arc::new(AtomicUsize::new(0));
        let (flag, count) = (Arc::clone(&switched), Arc::clone(&publishes));
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve(sock, script, Arc::clone(&flag), Arc::clone(&count)));
            }
        });
        Ok(Scripted {
            addr,
            switched,
            publishes,
            task,
        })
    }

    /// `mqtt://addr`.
    pub(crate) fn url(&self) -> String {
        format!("mqtt://{}", self.addr)
    }

    /// Waits (bounded) until `n` PUBLISH packets arrived.
    pub(crate) async fn wait_for_publishes(&self, n: usize) {
        for _ in 0..1000 {
            if self.publishes.load(Ordering::SeqCst) >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the scripted broker never got {n} publishes");
    }

    /// From now on, answer by the script's `after`.
    pub(crate) fn switch(&self) {
        self.switched.store(true, Ordering::SeqCst);
    }
}

async fn serve(
    mut sock: TcpStream,
    script: Script,
    switched: Arc<AtomicBool>,
    publishes: Arc<AtomicUsize>,
) {
    let mut buf = BytesMut::new();
    loop {
        let packet = match Packet::read(&mut buf, None) {
            Ok(p) => p,
            Err(WireError::InsufficientBytes(_)) => match sock.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            },
            Err(_) => return,
        };
        let reply = match packet {
            Packet::Connect(..) => Some(Packet::ConnAck(ConnAck {
                session_present: false,
                code: script.connack,
                properties: None,
            })),
            Packet::Publish(Publish { pkid, .. }) => {
                publishes.fetch_add(1, Ordering::SeqCst);
                let answer = if switched.load(Ordering::SeqCst) {
                    script.after
                } else {
                    script.before
                };
                match answer {
                    Reply::Ack(reason) => Some(Packet::PubAck(PubAck {
                        pkid,
                        reason,
                        properties: None,
                    })),
                    Reply::Silent => None,
                    Reply::Disconnect(reason_code) => {
                        let mut out = BytesMut::new();
                        // With a reason string: rumqttc 0.25 parses no DISCONNECT whose
                        // reason code comes without properties (remaining length 1).
                        let d = Packet::Disconnect(Disconnect {
                            reason_code,
                            properties: Some(DisconnectProperties {
                                session_expiry_interval: None,
                                reason_string: Some("scripted".into()),
                                user_properties: Vec::new(),
                                server_reference: None,
                            }),
                        });
                        d.write(&mut out, None).unwrap();
                        let _ = sock.write_all(&out).await;
                        return;
                    }
                }
            }
            Packet::PingReq(_) => Some(Packet::PingResp(rumqttc::v5::mqttbytes::v5::PingResp)),
            Packet::Disconnect(_) => return,
            _ => None,
        };
        if let Some(reply) = reply {
            let mut out = BytesMut::new();
            reply.write(&mut out, None).unwrap();
            if sock.write_all(&out).await.is_err() {
                return;
            }
            if script.connack != ConnectReturnCode::Success {
                // A refused CONNACK ends the connection.
                return;
            }
        }
    }
}
