//! The whole conformance suite against the real Redis on 127.0.0.1:6379 (`ANKUSA_REDIS_URL`
//! to change it), with a stoppable proxy in front of it for `recovery` and a scripted
//! loopback server speaking RESP for the faults a shared Redis cannot show safely. Warm
//! faults: the stream deleted, and a proxy of each setup's own that stops, goes silent, or
//! comes back as the scripted server refusing the login or throttling.

use ankusa_sink_testkit::ankusa_sink_core::{BoxError, async_trait};
use ankusa_sink_testkit::support::{TcpProxy, free_port};
use ankusa_sink_testkit::{Case, Fault, Harness, Probe, Received, Setup, WarmFault};
use redis_stream_sink::{FIELD, RedisStreamConfig, RedisStreamSink};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// A password planted in every sink's URL. Redis's `default` user is `nopass` here, so
/// it accepts any password: the sinks really send it.
const PLANTED: &str = "planted-redis-pa55word-3f9a";

/// `host:port` of the real Redis.
fn redis_addr() -> String {
    std::env::var("ANKUSA_REDIS_ADDR").unwrap_or_else(|_| "127.0.0.1:6379".into())
}

fn url_via(addr: &str) -> String {
    format!("redis://default:{PLANTED}@{addr}")
}

/// A stream name unique to this process and call.
fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "tk-{tag}-{}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A plain connection to the real Redis, for creating, reading and deleting streams.
async fn admin() -> Result<redis::aio::MultiplexedConnection, BoxError> {
    let client = redis::Client::open(format!("redis://{}", redis_addr()))?;
    // The client's default response timeout (500 ms) is shorter than a loaded CI machine
    // sometimes needs for the test's own setup and cleanup.
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(10)))
        .set_response_timeout(Some(Duration::from_secs(10)));
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// Create an empty stream (a consumer group with `MKSTREAM`).
async fn create_stream(stream: &str) -> Result<(), BoxError> {
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg("tk")
        .arg("$")
        .arg("MKSTREAM")
        .query_async(&mut admin().await?)
        .await?;
    Ok(())
}

/// Reads a stream back with `XRANGE - +`.
struct StreamProbe(String);

#[async_trait]
impl Probe for StreamProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        let entries: Vec<(String, Vec<(String, Vec<u8>)>)> = redis::cmd("XRANGE")
            .arg(&self.0)
            .arg("-")
            .arg("+")
            .query_async(&mut admin().await?)
            .await?;
        entries
            .iter()
            .flat_map(|(_, fields)| fields.iter().filter(|(f, _)| f == FIELD))
            .map(|(_, message)| Received::from_message_bytes(message))
            .collect()
    }
}

/// `sink`, reading `stream` back, with a teardown deleting it.
fn setup(stream: String, sink: RedisStreamSink) -> Setup<RedisStreamSink> {
    Setup::new(sink)
        .with_probe(StreamProbe(stream.clone()))
        .with_teardown(move || async move {
            let _: () = redis::cmd("DEL")
                .arg(&stream)
                .query_async(&mut admin().await?)
                .await?;
            Ok(())
        })
}

/// What the scripted server does with `XADD` (it answers `+OK` to everything before).
#[derive(Debug, Clone, Copy)]
enum Script {
    /// Take the `XADD` and never answer anything again on that connection.
    NeverAnswer,
    /// Answer this RESP error line.
    Refuse(&'static str),
    /// Refuse the login: `AUTH` (and `HELLO`) answered `WRONGPASS`.
    RefuseLogin,
}

/// A loopback server speaking RESP: it answers the connection's setup commands (`AUTH`,
/// `CLIENT SETINFO`, ...) with `+OK` and `XADD` per its script.
struct Scripted {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Scripted {
    async fn start(script: Script) -> std::io::Result<Scripted> {
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
}

/// One RESP header line: `prefix` and a count (`*3`, `$5`).
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

/// One RESP command: an array of bulk strings.
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
        let is_xadd = cmd.first().is_some_and(|c| c.eq_ignore_ascii_case(b"XADD"));
        let is_login = cmd
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case(b"AUTH") || c.eq_ignore_ascii_case(b"HELLO"));
        let reply = match (is_xadd, script) {
            (false, Script::RefuseLogin) if is_login => {
                "-WRONGPASS invalid username-password pair or user is disabled.\r\n".to_owned()
            }
            (false, _) => "+OK\r\n".to_owned(),
            (true, Script::RefuseLogin) => "-NOAUTH Authentication required.\r\n".to_owned(),
            (true, Script::Refuse(line)) => format!("-{line}\r\n"),
            (true, Script::NeverAnswer) => {
                // Taken; read (and drop) whatever comes next, answer nothing.
                let mut sink = Vec::new();
                r.read_to_end(&mut sink).await?;
                return Ok(());
            }
        };
        r.get_mut().write_all(reply.as_bytes()).await?;
    }
}

/// Builds sinks for fresh streams on the real Redis, through a proxy it can stop.
struct RedisHarness {
    proxy: tokio::sync::OnceCell<TcpProxy>,
    scripted: Mutex<Vec<Scripted>>,
}

impl RedisHarness {
    fn new() -> Self {
        RedisHarness {
            proxy: tokio::sync::OnceCell::new(),
            scripted: Mutex::new(Vec::new()),
        }
    }

    /// The stoppable proxy to the real Redis every `destination` sink goes through.
    async fn proxy(&self) -> Result<&TcpProxy, BoxError> {
        Ok(self
            .proxy
            .get_or_try_init(|| TcpProxy::start(redis_addr()))
            .await?)
    }

    /// A sink on a fresh stream of the real Redis through a proxy of its own, read back
    /// directly; the teardown deletes the stream and stops the proxy.
    async fn proxied(
        &self,
        tag: &str,
    ) -> Result<(Setup<RedisStreamSink>, Arc<TcpProxy>, String), BoxError> {
        let stream = unique(tag);
        create_stream(&stream).await?;
        let proxy = Arc::new(TcpProxy::start(redis_addr()).await?);
        let cfg = RedisStreamConfig::new(url_via(&proxy.addr().to_string()), &stream)
            .with_timeout(Duration::from_secs(2));
        let (keep, gone) = (Arc::clone(&proxy), stream.clone());
        let setup = Setup::new(RedisStreamSink::new(cfg))
            .with_probe(StreamProbe(stream.clone()))
            .with_teardown(move || async move {
                keep.stop().await;
                let _: () = redis::cmd("DEL")
                    .arg(&gone)
                    .query_async(&mut admin().await?)
                    .await?;
                Ok(())
            });
        Ok((setup, proxy, stream))
    }

    /// A scripted server kept alive as long as the harness: its address.
    async fn scripted_addr(&self, script: Script) -> Result<String, BoxError> {
        let server = Scripted::start(script).await?;
        let addr = server.addr.to_string();
        self.scripted.lock().unwrap().push(server);
        Ok(addr)
    }

    /// A sink on a scripted server, kept alive as long as the harness.
    async fn scripted(&self, script: Script) -> Result<RedisStreamSink, BoxError> {
        let server = Scripted::start(script).await?;
        let cfg = RedisStreamConfig::new(url_via(&server.addr.to_string()), "tk-scripted")
            .with_timeout(Duration::from_secs(1));
        self.scripted.lock().unwrap().push(server);
        Ok(RedisStreamSink::new(cfg))
    }
}

#[async_trait]
impl Harness for RedisHarness {
    type Sink = RedisStreamSink;

    async fn destination(&self, case: Case) -> Result<Setup<RedisStreamSink>, BoxError> {
        let stream = unique(case.name());
        create_stream(&stream).await?;
        let via = self.proxy().await?.addr().to_string();
        let cfg =
            RedisStreamConfig::new(url_via(&via), &stream).with_timeout(Duration::from_secs(2));
        Ok(setup(stream, RedisStreamSink::new(cfg)))
    }

    async fn fault(&self, fault: Fault) -> Result<Option<Setup<RedisStreamSink>>, BoxError> {
        let setup = match fault {
            Fault::MissingDestination => {
                let cfg = RedisStreamConfig::new(url_via(&redis_addr()), unique("absent"));
                Setup::new(RedisStreamSink::new(cfg))
            }
            Fault::RefusedCredential => {
                let url = format!("redis://tk-no-such-user:{PLANTED}@{}", redis_addr());
                let stream = unique("refused");
                create_stream(&stream).await?;
                setup(
                    stream.clone(),
                    RedisStreamSink::new(RedisStreamConfig::new(url, stream)),
                )
            }
            Fault::Unreachable => {
                let cfg =
                    RedisStreamConfig::new(url_via(&format!("127.0.0.1:{}", free_port())), "tk")
                        .with_timeout(Duration::from_secs(2));
                Setup::new(RedisStreamSink::new(cfg))
            }
            // Redis has no per-client throttle; a server over maxmemory refuses writes
            // with OOM, which a shared Redis must not be pushed into: the scripted server
            // answers it.
            Fault::Throttled => Setup::new(
                self.scripted(Script::Refuse(
                    "OOM command not allowed when used memory > 'maxmemory'.",
                ))
                .await?,
            ),
            Fault::Oversized => {
                // The sink's own limit: 8 KiB bodies are under the 64 KiB inline threshold.
                let stream = unique("oversized");
                create_stream(&stream).await?;
                let cfg = RedisStreamConfig::new(url_via(&redis_addr()), &stream)
                    .with_max_message_bytes(NonZeroUsize::new(4096).unwrap());
                setup(stream, RedisStreamSink::new(cfg)).with_body_size(8192)
            }
            Fault::Unacknowledged => Setup::new(self.scripted(Script::NeverAnswer).await?),
        };
        Ok(Some(setup))
    }

    async fn warm_fault(
        &self,
        fault: Fault,
    ) -> Result<Option<WarmFault<RedisStreamSink>>, BoxError> {
        if fault == Fault::Oversized {
            // The sink's own limit, as cold: the warm-up's small hooks pass.
            let stream = unique("warm-oversized");
            create_stream(&stream).await?;
            let cfg = RedisStreamConfig::new(url_via(&redis_addr()), &stream)
                .with_max_message_bytes(NonZeroUsize::new(4096).unwrap());
            let warm = setup(stream, RedisStreamSink::new(cfg)).with_body_size(8192);
            return Ok(Some(WarmFault::standing(warm)));
        }
        let (warm, proxy, stream) = self.proxied(&format!("warm-{fault:?}")).await?;
        Ok(Some(match fault {
            // The stream is deleted: `XADD ... NOMKSTREAM` answers nil.
            Fault::MissingDestination => WarmFault::new(warm, move || async move {
                let _: () = redis::cmd("DEL")
                    .arg(&stream)
                    .query_async(&mut admin().await?)
                    .await?;
                Ok(())
            }),
            // The proxy comes back as a server refusing the login.
            Fault::RefusedCredential => {
                let refusing = self.scripted_addr(Script::RefuseLogin).await?;
                WarmFault::new(warm, move || async move {
                    proxy.redirect(refusing).await;
                    Ok(())
                })
            }
            Fault::Unreachable => WarmFault::new(warm, move || async move {
                proxy.stop().await;
                Ok(())
            }),
            // The proxy comes back as a server over its memory limit.
            Fault::Throttled => {
                let full = self
                    .scripted_addr(Script::Refuse(
                        "OOM command not allowed when used memory > 'maxmemory'.",
                    ))
                    .await?;
                WarmFault::new(warm, move || async move {
                    proxy.redirect(full).await;
                    Ok(())
                })
            }
            // Silent on the connection the sink holds (2 s timeout).
            Fault::Unacknowledged => WarmFault::new(warm, move || async move {
                proxy.blackhole();
                Ok(())
            }),
            Fault::Oversized => unreachable!("returned above"),
        }))
    }

    /// `check()` is `EXISTS` on the stream after logging in.
    fn check_detects(&self, fault: Fault) -> bool {
        matches!(fault, Fault::MissingDestination | Fault::RefusedCredential)
    }

    fn secrets(&self) -> Vec<String> {
        vec![PLANTED.to_owned()]
    }

    /// The sink sets `may_have_landed` (`redis_stream_sink::landed`): the suite requires
    /// the right claim for the refused connection, the oversized message and the unanswered
    /// `XADD`.
    fn reports_landing(&self) -> bool {
        true
    }

    fn can_restart(&self) -> bool {
        true
    }

    /// `durability` reads every acked hook back, but cannot restart the destination: the
    /// shared Redis is other tests' too, and keeps nothing on disk. A harness that offers
    /// `restart_destination` runs a private `redis-server --appendonly yes --appendfsync
    /// always` for that case and kills and starts it again (the workspace's Redis adapter
    /// does).
    fn restart_destination_skip_reason(&self) -> Option<String> {
        Some(
            "the shared Redis is other tests' too and keeps nothing on disk (no \
             appendfsync always server of the harness's own)"
                .into(),
        )
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

#[tokio::test]
async fn whole_suite_on_the_default_test_runtime() {
    let report =
        ankusa_sink_testkit::run_all_with(&RedisHarness::new(), ankusa_sink_testkit::Output::Quiet)
            .await;
    // Every fault, cold and warm, and the restart are provided: certified.
    report.assert_certified();
    // The sink does not batch: an impossible skip. The destination is not restarted for
    // `durability`: a not provided one, with its reason.
    let skips = report.skips();
    assert_eq!(skips.len(), 2, "{report}");
    assert_eq!(skips[0].0, Case::Durability);
    assert!(skips[0].1.contains("keeps nothing on disk"), "{report}");
    assert_eq!(skips[1].0, Case::Batching);
}
