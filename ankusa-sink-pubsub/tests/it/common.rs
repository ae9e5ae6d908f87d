//! Test support: the emulator's address, unique topics and subscriptions made through the
//! emulator's REST admin API, pulling messages back, and a private emulator process the
//! restart tests may stop and start.

use ankusa_sink_core::{BoxError, Envelope};
use ankusa_sink_pubsub::{PubSubConfig, PubSubSink};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) use ankusa_sink_testkit::support::free_port;

/// The project every test uses (the emulator accepts any).
pub(crate) const PROJECT: &str = "ankusa-it";

/// `host:port` of the shared emulator: `ANKUSA_PUBSUB_EMULATOR_HOST`, else
/// `PUBSUB_EMULATOR_HOST`, else `127.0.0.1:8085` (scripts/services/pubsub.sh).
pub(crate) fn emulator_host() -> String {
    std::env::var("ANKUSA_PUBSUB_EMULATOR_HOST")
        .or_else(|_| std::env::var("PUBSUB_EMULATOR_HOST"))
        .ok()
        .filter(|h| !h.trim().is_empty())
        .unwrap_or_else(|| "127.0.0.1:8085".to_owned())
}

/// A configuration for `topic` of [`PROJECT`] on `endpoint` (the emulator's or a scripted
/// server's).
pub(crate) fn config_at(topic: impl Into<String>, endpoint: impl Into<String>) -> PubSubConfig {
    PubSubConfig::new(PROJECT, topic)
        .and_then(|c| c.with_endpoint(endpoint))
        .expect("a valid config")
}

/// A topic or subscription id unique to this run.
pub(crate) use ankusa_sink_testkit::support::unique_name as unique;

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("a reqwest client")
}

/// One message as pulled back.
#[derive(Debug, Clone)]
pub(crate) struct Pulled {
    /// The decoded `data`.
    pub(crate) data: Vec<u8>,
    /// The attributes.
    pub(crate) attributes: HashMap<String, String>,
    /// The ordering key ("" when none).
    pub(crate) ordering_key: String,
    /// The server's message id.
    pub(crate) message_id: String,
}

/// The REST admin and data API of one emulator.
#[derive(Debug, Clone)]
pub(crate) struct Admin {
    host: String,
    http: reqwest::Client,
}

impl Admin {
    /// The admin API of the emulator at `host` (`host:port`).
    pub(crate) fn new(host: impl Into<String>) -> Self {
        Admin {
            host: host.into(),
            http: http(),
        }
    }

    /// The shared emulator's admin API.
    pub(crate) fn shared() -> Self {
        Self::new(emulator_host())
    }

    /// `http://host:port`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.host)
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}/v1/projects/{PROJECT}/{path}", self.host)
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), BoxError> {
        let mut req = self.http.request(method, self.url(path));
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&b)?);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await?;
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)?
        };
        Ok((status, value))
    }

    /// Create a topic.
    pub(crate) async fn create_topic(&self, topic: &str) -> Result<(), BoxError> {
        let (status, body) = self
            .call(reqwest::Method::PUT, &format!("topics/{topic}"), None)
            .await?;
        if status != 200 {
            return Err(format!("create topic {topic}: {status} {body}").into());
        }
        Ok(())
    }

    /// Whether a topic exists.
    pub(crate) async fn topic_exists(&self, topic: &str) -> Result<bool, BoxError> {
        let (status, body) = self
            .call(reqwest::Method::GET, &format!("topics/{topic}"), None)
            .await?;
        match status {
            200 => Ok(true),
            404 => Ok(false),
            _ => Err(format!("get topic {topic}: {status} {body}").into()),
        }
    }

    /// Create a subscription on `topic`, with message ordering enabled.
    pub(crate) async fn create_subscription(&self, topic: &str, sub: &str) -> Result<(), BoxError> {
        let body = json!({
            "topic": format!("projects/{PROJECT}/topics/{topic}"),
            "enableMessageOrdering": true,
            "ackDeadlineSeconds": 60,
        });
        let (status, resp) = self
            .call(
                reqwest::Method::PUT,
                &format!("subscriptions/{sub}"),
                Some(body),
            )
            .await?;
        if status != 200 {
            return Err(format!("create subscription {sub}: {status} {resp}").into());
        }
        Ok(())
    }

    /// A fresh topic with one ordering-enabled subscription; both unique to this call.
    pub(crate) async fn topic_with_subscription(&self) -> Result<TestTopic, BoxError> {
        let topic = unique("hooks");
        let sub = format!("{topic}-sub");
        self.create_topic(&topic).await?;
        self.create_subscription(&topic, &sub).await?;
        Ok(TestTopic {
            admin: self.clone(),
            topic,
            sub,
        })
    }

    /// Delete a subscription (a missing one is fine).
    pub(crate) async fn delete_subscription(&self, sub: &str) {
        let _ = self
            .call(
                reqwest::Method::DELETE,
                &format!("subscriptions/{sub}"),
                None,
            )
            .await;
    }

    /// Delete a topic and a subscription (missing ones are fine).
    pub(crate) async fn delete(&self, topic: &str, sub: &str) {
        self.delete_subscription(sub).await;
        let _ = self
            .call(reqwest::Method::DELETE, &format!("topics/{topic}"), None)
            .await;
    }

    /// Pull what is waiting on `sub` (without waiting) and acknowledge it.
    pub(crate) async fn pull_once(&self, sub: &str) -> Result<Vec<Pulled>, BoxError> {
        let (status, body) = self
            .call(
                reqwest::Method::POST,
                &format!("subscriptions/{sub}:pull"),
                Some(json!({"maxMessages": 1000, "returnImmediately": true})),
            )
            .await?;
        if status != 200 {
            return Err(format!("pull {sub}: {status} {body}").into());
        }
        let mut out = Vec::new();
        let mut ack_ids = Vec::new();
        for rm in body["receivedMessages"].as_array().into_iter().flatten() {
            ack_ids.push(rm["ackId"].as_str().unwrap_or_default().to_owned());
            let m = &rm["message"];
            let data = STANDARD.decode(m["data"].as_str().unwrap_or_default())?;
            let attributes = m["attributes"]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                        .collect()
                })
                .unwrap_or_default();
            out.push(Pulled {
                data,
                attributes,
                ordering_key: m["orderingKey"].as_str().unwrap_or_default().to_owned(),
                message_id: m["messageId"].as_str().unwrap_or_default().to_owned(),
            });
        }
        if !ack_ids.is_empty() {
            let (status, body) = self
                .call(
                    reqwest::Method::POST,
                    &format!("subscriptions/{sub}:acknowledge"),
                    Some(json!({ "ackIds": ack_ids })),
                )
                .await?;
            if status != 200 {
                return Err(format!("ack {sub}: {status} {body}").into());
            }
        }
        Ok(out)
    }

    /// Pull until at least `n` messages arrived or `within` passed; everything pulled.
    pub(crate) async fn pull_at_least(
        &self,
        sub: &str,
        n: usize,
        within: Duration,
    ) -> Result<Vec<Pulled>, BoxError> {
        let deadline = Instant::now() + within;
        let mut all = Vec::new();
        let mut pause = Duration::from_millis(20);
        loop {
            all.extend(self.pull_once(sub).await?);
            if all.len() >= n || Instant::now() >= deadline {
                return Ok(all);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
    }
}

/// A topic and its subscription, made for one test.
#[derive(Debug, Clone)]
pub(crate) struct TestTopic {
    /// The admin API it lives on.
    pub(crate) admin: Admin,
    /// The short topic id.
    pub(crate) topic: String,
    /// The short subscription id.
    pub(crate) sub: String,
}

impl TestTopic {
    /// A configuration for this topic on its emulator.
    pub(crate) fn config(&self) -> PubSubConfig {
        config_at(&self.topic, self.admin.endpoint())
    }

    /// A sink for this topic with default options.
    pub(crate) async fn sink(&self) -> PubSubSink {
        PubSubSink::new(self.config())
            .await
            .expect("a valid config")
    }

    /// Pull until `n` messages arrived (bounded: 15 s).
    pub(crate) async fn pull(&self, n: usize) -> Vec<Pulled> {
        self.admin
            .pull_at_least(&self.sub, n, Duration::from_secs(15))
            .await
            .expect("pull")
    }

    /// Whatever is waiting now, after a short grace for stragglers.
    pub(crate) async fn pull_nothing_expected(&self) -> Vec<Pulled> {
        self.admin
            .pull_at_least(&self.sub, 1, Duration::from_millis(500))
            .await
            .expect("pull")
    }

    /// Delete the topic and subscription.
    pub(crate) async fn delete(&self) {
        self.admin.delete(&self.topic, &self.sub).await;
    }
}

/// An envelope with a tenant.
pub(crate) fn envelope(id: &str, body: &[u8]) -> Envelope {
    Envelope::builder(id, "stripe", body.to_vec())
        .tenant_id("acme")
        .content_type("application/json")
        .build()
        .expect("a valid envelope")
}

/// The emulator launcher: `ANKUSA_PUBSUB_EMULATOR`, else the machine image's path.
fn emulator_bin() -> String {
    std::env::var("ANKUSA_PUBSUB_EMULATOR").unwrap_or_else(|_| {
        "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator".to_owned()
    })
}

/// A private emulator on its own loopback port, for tests that stop and restart it (so
/// the shared one on 8085 is never disturbed). Dropping it kills the process.
#[derive(Debug)]
pub(crate) struct PrivateEmulator {
    port: u16,
    child: Option<Child>,
}

impl PrivateEmulator {
    /// Start one on a free port and wait until it answers.
    pub(crate) async fn start() -> Result<Self, BoxError> {
        let mut emu = PrivateEmulator {
            port: free_port(),
            child: None,
        };
        emu.restart().await?;
        Ok(emu)
    }

    /// `host:port`.
    pub(crate) fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Its admin API.
    pub(crate) fn admin(&self) -> Admin {
        Admin::new(self.host())
    }

    /// Kill the process (its state is in memory: topics are gone afterwards) and wait until
    /// the port refuses connections.
    pub(crate) async fn stop(&mut self) -> Result<(), BoxError> {
        if let Some(mut child) = self.child.take() {
            // The launcher execs java, so this is the JVM itself.
            let _ = child.kill();
            let _ = child.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(self.host()).await.is_ok() {
            if Instant::now() >= deadline {
                return Err("the emulator still accepts connections after being killed".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Start (again) on the same port and wait (bounded) until it answers.
    pub(crate) async fn restart(&mut self) -> Result<(), BoxError> {
        self.stop().await?;
        let log_dir = std::env::temp_dir().join("ankusa-sinks");
        let _ = std::fs::create_dir_all(&log_dir);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_dir.join("pubsub-emulator-private.log"));
        let (out, err) = match log {
            Ok(f) => (Stdio::from(f.try_clone()?), Stdio::from(f)),
            Err(_) => (Stdio::null(), Stdio::null()),
        };
        let bin = emulator_bin();
        let child = Command::new(&bin)
            .arg("--host=127.0.0.1")
            .arg(format!("--port={}", self.port))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start the Pub/Sub emulator {bin}: {e}"))?;
        self.child = Some(child);
        let http = http();
        let url = format!("http://{}/", self.host());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if http.get(&url).send().await.is_ok() {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!("the emulator exited early: {status}").into());
            }
            if Instant::now() >= deadline {
                return Err("the emulator did not answer within 60 s".into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for PrivateEmulator {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
