//! The whole conformance suite: stream-mode sinks on the shared Redis through a stoppable
//! proxy (for `recovery`), a private `redis-server` over `maxmemory` for the throttle, a
//! channel nobody subscribes to for the missing destination, and a scripted RESP server
//! that never answers the `XADD` (unacknowledged).

use crate::common::{Script, Scripted, Server, del, entries, free_port, shared_addr};
use ankusa_sink_core::{BoxError, Secret, async_trait};
use ankusa_sink_redis::{MESSAGE_FIELD, RedisConfig, RedisSink};
use ankusa_sink_testkit::support::{TcpProxy, unique_name};
use ankusa_sink_testkit::{Case, Fault, Harness, Probe, Received, Setup};
use std::num::NonZeroUsize;
use std::sync::Mutex;
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
        .with_timeout(Duration::from_secs(2));
    Ok(RedisSink::new(cfg)?)
}

/// Builds sinks for fresh streams on the shared Redis, through a proxy it can stop.
pub(crate) struct RedisHarness {
    proxy: tokio::sync::OnceCell<TcpProxy>,
    keep: Mutex<(Vec<Scripted>, Vec<Server>)>,
}

impl RedisHarness {
    pub(crate) fn new() -> Self {
        RedisHarness {
            proxy: tokio::sync::OnceCell::new(),
            keep: Mutex::new((Vec::new(), Vec::new())),
        }
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
                .with_user("default", Secret::new(PLANTED));
                Setup::new(RedisSink::new(cfg)?)
            }
            // An ACL user that does not exist: WRONGPASS at login.
            Fault::RefusedCredential => {
                let stream = unique_name("tk-refused");
                let cfg = RedisConfig::stream(format!("redis://{}", shared_addr()), &stream)?
                    .with_user("tk-no-such-user", Secret::new(PLANTED));
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
}

ankusa_sink_testkit::conformance_suite!(RedisHarness::new());
