//! The whole conformance suite: stream-mode sinks on the shared Redis through a stoppable
//! proxy (for `recovery`), a private `redis-server` over `maxmemory` for the throttle, a
//! channel nobody subscribes to for the missing destination, and a scripted RESP server
//! that never answers the `XADD` (unacknowledged). Warm: a channel whose one subscriber
//! leaves, a proxy that comes back as a server wanting another password, stops, or goes
//! silent, and a private server that reaches `maxmemory`. `durability`: a durable sink on
//! a private `redis-server` that writes every command to its append-only file before it
//! answers (`appendonly yes`, `appendfsync always`), killed and started again on that file
//! (`restart_destination`); the shared server keeps nothing on disk.

use crate::common::{Script, Scripted, Server, admin, del, entries, free_port, shared_addr};
use ankusa_sink_core::{BoxError, Secret, async_trait};
use ankusa_sink_redis::{MESSAGE_FIELD, RedisConfig, RedisSink};
use ankusa_sink_testkit::support::{TcpProxy, unique_name};
use ankusa_sink_testkit::{Case, Fault, Harness, Probe, Received, Setup, WarmFault};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A password planted in every sink. Redis's `default` user is `nopass` on the shared
/// server, so it accepts any password: the sinks really send it.
const PLANTED: &str = "planted-redis-pa55word-7c2e";

/// Reads a stream back with `XRANGE - +`.
struct StreamProbe {
    url: String,
    stream: String,
}

#[async_trait]
impl Probe for StreamProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        entries(&self.url, &self.stream)
            .await?
            .iter()
            .flat_map(|fields| fields.iter().filter(|(f, _)| f == MESSAGE_FIELD))
            .map(|(_, message)| Received::from_message_bytes(message))
            .collect()
    }
}

/// `sink` streaming to `stream` on `url`, read back, deleted afterwards.
fn setup(url: String, stream: String, sink: RedisSink) -> Setup<RedisSink> {
    Setup::new(sink)
        .with_probe(StreamProbe {
            url: url.clone(),
            stream: stream.clone(),
        })
        .with_teardown(move || async move { del(&url, &stream).await })
}

fn stream_sink(addr: &str, stream: &str) -> Result<RedisSink, BoxError> {
    let cfg = RedisConfig::stream(format!("redis://{addr}"), stream)?
        .with_user("default", Secret::new(PLANTED))
        .unwrap()
        .with_timeout(Duration::from_secs(2));
    Ok(RedisSink::new(cfg)?)
}

/// A private server a warm fault started, stopped by the setup's teardown.
type Slot = Arc<Mutex<Option<Server>>>;

/// Builds sinks for fresh streams on the shared Redis, through a proxy it can stop.
pub(crate) struct RedisHarness {
    proxy: tokio::sync::OnceCell<TcpProxy>,
    keep: Mutex<(Vec<Scripted>, Vec<Server>)>,
    /// The `durability` case's private server, which `restart_destination` restarts.
    persistent: tokio::sync::Mutex<Option<Server>>,
}

impl RedisHarness {
    pub(crate) fn new() -> Self {
        RedisHarness {
            proxy: tokio::sync::OnceCell::new(),
            keep: Mutex::new((Vec::new(), Vec::new())),
            persistent: tokio::sync::Mutex::new(None),
        }
    }

    /// A durable stream sink on a private server that persists each write before it
    /// answers; the server is kept for `restart_destination`.
    async fn persistent_setup(&self) -> Result<Setup<RedisSink>, BoxError> {
        let server = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]).await;
        let stream = unique_name("tk-durability");
        let cfg = RedisConfig::stream(server.url(), &stream)?
            .with_user("default", Secret::new(PLANTED))?
            .with_timeout(Duration::from_secs(2))
            .with_durable(true)?;
        let setup = setup(server.url(), stream, RedisSink::new(cfg)?);
        *self.persistent.lock().await = Some(server);
        Ok(setup)
    }

    /// A stream-mode sink on a fresh stream of the shared Redis through a proxy of its own,
    /// read back directly, and a slot for a server the fault starts; the teardown deletes
    /// the stream and stops both.
    async fn proxied(
        &self,
        tag: &str,
    ) -> Result<(Setup<RedisSink>, Arc<TcpProxy>, Slot), BoxError> {
        let proxy = Arc::new(TcpProxy::start(shared_addr()).await?);
        let stream = unique_name(&format!("tk-warm-{tag}"));
        let sink = stream_sink(&proxy.addr().to_string(), &stream)?;
        let url = format!("redis://{}", shared_addr());
        let slot = Slot::default();
        let (keep, started) = (Arc::clone(&proxy), Arc::clone(&slot));
        let setup = Setup::new(sink)
            .with_probe(StreamProbe {
                url: url.clone(),
                stream: stream.clone(),
            })
            .with_teardown(move || async move {
                keep.stop().await;
                let server = started.lock().unwrap().take();
                if let Some(mut server) = server {
                    server.stop().await;
                }
                del(&url, &stream).await
            });
        Ok((setup, proxy, slot))
    }

    async fn proxy(&self) -> Result<&TcpProxy, BoxError> {
        Ok(self
            .proxy
            .get_or_try_init(|| TcpProxy::start(shared_addr()))
            .await?)
    }
}

#[async_trait]
impl Harness for RedisHarness {
    fn reports_landing(&self) -> bool {
        true
    }

    type Sink = RedisSink;

    async fn destination(&self, case: Case) -> Result<Setup<RedisSink>, BoxError> {
        if case == Case::Durability {
            return self.persistent_setup().await;
        }
        let stream = unique_name(&format!("tk-{}", case.name()));
        let via = self.proxy().await?.addr().to_string();
        let sink = stream_sink(&via, &stream)?;
        Ok(setup(format!("redis://{}", shared_addr()), stream, sink))
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<RedisSink>>, BoxError> {
        let setup = match fault {
            // A channel nobody subscribes to: the hook would reach nobody.
            Fault::MissingDestination => {
                let cfg = RedisConfig::channel(
                    format!("redis://{}", shared_addr()),
                    &unique_name("tk-nobody"),
                )?
                .with_user("default", Secret::new(PLANTED))
                .unwrap();
                Setup::new(RedisSink::new(cfg)?)
            }
            // An ACL user that does not exist: WRONGPASS at login.
            Fault::RefusedCredential => {
                let stream = unique_name("tk-refused");
                let cfg = RedisConfig::stream(format!("redis://{}", shared_addr()), &stream)?
                    .with_user("tk-no-such-user", Secret::new(PLANTED))
                    .unwrap();
                setup(
                    format!("redis://{}", shared_addr()),
                    stream,
                    RedisSink::new(cfg)?,
                )
            }
            Fault::Unreachable => Setup::new(stream_sink(
                &format!("127.0.0.1:{}", free_port()),
                "tk-unreachable",
            )?),
            // A private server over maxmemory answers every write with OOM.
            Fault::Throttled => {
                let server = Server::start(&["--maxmemory-policy", "noeviction"]).await;
                let _: () = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("maxmemory")
                    .arg("1")
                    .query_async(&mut crate::common::admin(&server.url()).await?)
                    .await?;
                let sink = stream_sink(&server.addr(), "tk-oom")?;
                self.keep.lock().unwrap().1.push(server);
                Setup::new(sink)
            }
            // The sink's proto-max-bulk-len: 8 KiB bodies are under the inline threshold.
            Fault::Oversized => {
                let stream = unique_name("tk-oversized");
                let cfg = RedisConfig::stream(format!("redis://{}", shared_addr()), &stream)?
                    .with_user("default", Secret::new(PLANTED))
                    .unwrap()
                    .with_max_message_bytes(NonZeroUsize::new(4096).unwrap());
                setup(
                    format!("redis://{}", shared_addr()),
                    stream,
                    RedisSink::new(cfg)?,
                )
            }
            Fault::Unacknowledged => {
                let server = Scripted::start(Script::NeverAnswer).await?;
                let sink = stream_sink(&server.addr.to_string(), "tk-silent")?;
                self.keep.lock().unwrap().0.push(server);
                Setup::new(sink)
            }
        };
        Ok(Some(setup))
    }

    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<RedisSink>>, BoxError> {
        let shared = format!("redis://{}", shared_addr());
        let warm = match fault {
            // A channel whose one subscriber leaves: PUBLISH then reaches nobody.
            Fault::MissingDestination => {
                let channel = unique_name("tk-warm-nobody");
                let client = redis::Client::open(shared.as_str())?;
                let mut subscriber = client.get_async_pubsub().await?;
                subscriber.subscribe(&channel).await?;
                let cfg = RedisConfig::channel(shared.clone(), &channel)?
                    .with_user("default", Secret::new(PLANTED))
                    .unwrap()
                    .with_timeout(Duration::from_secs(2));
                let setup = Setup::new(RedisSink::new(cfg)?);
                WarmFault::new(setup, move || async move {
                    drop(subscriber);
                    // The server drops the subscription once it sees the connection close.
                    let mut conn = admin(&shared).await?;
                    loop {
                        let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
                            .arg("NUMSUB")
                            .arg(&channel)
                            .query_async(&mut conn)
                            .await?;
                        if counts.iter().all(|(_, n)| *n == 0) {
                            return Ok(());
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                })
            }
            // The proxy comes back as a server whose default user wants another password:
            // the sink's next login is refused.
            Fault::RefusedCredential => {
                let (setup, proxy, slot) = self.proxied("refused").await?;
                WarmFault::new(setup, move || async move {
                    let server =
                        Server::start(&["--requirepass", "another-password-than-planted"]).await;
                    proxy.redirect(server.addr()).await;
                    *slot.lock().unwrap() = Some(server);
                    Ok(())
                })
            }
            Fault::Unreachable => {
                let (setup, proxy, _) = self.proxied("gone").await?;
                WarmFault::new(setup, move || async move {
                    proxy.stop().await;
                    Ok(())
                })
            }
            // A private server that reaches maxmemory: every write is refused with OOM.
            Fault::Throttled => {
                let server = Server::start(&["--maxmemory-policy", "noeviction"]).await;
                let stream = unique_name("tk-warm-oom");
                let sink = stream_sink(&server.addr(), &stream)?;
                let url = server.url();
                let keep = Arc::new(tokio::sync::Mutex::new(server));
                let setup = Setup::new(sink)
                    .with_probe(StreamProbe {
                        url: url.clone(),
                        stream,
                    })
                    .with_teardown(move || async move {
                        keep.lock().await.stop().await;
                        Ok(())
                    });
                WarmFault::new(setup, move || async move {
                    let _: () = redis::cmd("CONFIG")
                        .arg("SET")
                        .arg("maxmemory")
                        .arg("1")
                        .query_async(&mut admin(&url).await?)
                        .await?;
                    Ok(())
                })
            }
            // The sink's own proto-max-bulk-len, as cold: small hooks pass, the big one not.
            Fault::Oversized => {
                let stream = unique_name("tk-warm-oversized");
                let cfg = RedisConfig::stream(shared.clone(), &stream)?
                    .with_user("default", Secret::new(PLANTED))
                    .unwrap()
                    .with_max_message_bytes(NonZeroUsize::new(4096).unwrap());
                WarmFault::standing(setup(shared, stream, RedisSink::new(cfg)?))
            }
            // Silent on the connection the sink holds: the XADD is taken, never answered.
            Fault::Unacknowledged => {
                let (setup, proxy, _) = self.proxied("silent").await?;
                ankusa_sink_testkit::support::silent_after_warm_up(setup, proxy)
            }
        };
        Ok(Some(warm))
    }

    /// `check()` sends `TYPE` (stream) or `PUBSUB NUMSUB` (channel) after logging in.
    fn check_detects(&self, fault: Fault) -> bool {
        matches!(fault, Fault::MissingDestination | Fault::RefusedCredential)
    }

    fn secrets(&self) -> Vec<String> {
        vec![PLANTED.to_owned()]
    }

    fn can_restart(&self) -> bool {
        true
    }

    async fn stop(&self) -> Result<(), BoxError> {
        self.proxy().await?.stop().await;
        Ok(())
    }

    async fn start(&self) -> Result<(), BoxError> {
        Ok(self.proxy().await?.restart().await?)
    }

    fn can_restart_destination(&self) -> bool {
        true
    }

    /// The `durability` case's private server killed and started again on its
    /// append-only file.
    async fn restart_destination(&self) -> Result<(), BoxError> {
        let mut server = self.persistent.lock().await;
        server
            .as_mut()
            .ok_or("no persistent server: destination(Case::Durability) makes it")?
            .restart()
            .await;
        Ok(())
    }
}

ankusa_sink_testkit::conformance_suite!(broker "Redis", shared_addr(); RedisHarness::new());
