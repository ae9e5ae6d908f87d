//! The classification table of `error.rs`, row by row, provoked for real: private
//! `redis-server` processes for authentication, ACLs, memory, loading, a busy script, a
//! cluster node, a stopped or paused server; the shared server for a wrong type and a
//! channel without subscribers; a scripted RESP server only for the replies a real server
//! never gives to this sink's commands (`TRYAGAIN`, `MOVED`, a bare `ERR`).

use crate::common::{Script, Scripted, Server, admin, del, entries, env, free_port, shared_url};
use ankusa_message::MessageOptions;
use ankusa_sink_core::{Check, Class, Ctx, Failure, Secret, Sink};
use ankusa_sink_redis::{NoSubscriber, RedisConfig, RedisSink};
use ankusa_sink_testkit::support::unique_name;
use std::num::NonZeroUsize;
use std::time::Duration;

fn stream_sink(url: &str, stream: &str) -> RedisSink {
    RedisSink::new(
        RedisConfig::stream(url, stream)
            .unwrap()
            .with_timeout(Duration::from_secs(2)),
    )
    .unwrap()
}

async fn deliver(sink: &RedisSink) -> Result<(), Failure> {
    let e = env(&ulid_like());
    let ctx = Ctx::for_envelope(&e);
    sink.deliver(&e, &ctx).await
}

fn ulid_like() -> String {
    unique_name("h")
}

async fn class_of(sink: &RedisSink) -> Class {
    deliver(sink)
        .await
        .expect_err("the delivery must fail")
        .class()
}

/// Sends one command to `url`, ignoring the reply.
async fn exec(url: &str, args: &[&str]) {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    let _: redis::Value = c.query_async(&mut admin(url).await.unwrap()).await.unwrap();
}

#[tokio::test]
async fn over_max_message_bytes_is_permanent_and_nothing_is_sent() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    // The server's limit, and the sink told the same.
    let server = Server::start(&["--proto-max-bulk-len", "1mb"]).await;
    let stream = unique_name("too-large");
    let cfg = RedisConfig::stream(server.url(), &stream)
        .unwrap()
        .with_message(
            MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(4 << 20).unwrap()),
        )
        .unwrap()
        .with_max_message_bytes(NonZeroUsize::new(1 << 20).unwrap());
    let sink = RedisSink::new(cfg).unwrap();
    let big = ankusa_sink_core::Envelope::builder(unique_name("h"), "src", vec![b'x'; 1 << 20])
        .build()
        .unwrap();
    let f = sink
        .deliver(&big, &Ctx::for_envelope(&big))
        .await
        .unwrap_err();
    assert_eq!(f.class(), Class::Permanent, "{f}");
    assert!(entries(&server.url(), &stream).await.unwrap().is_empty());
    // A small hook still goes through.
    deliver(&sink).await.unwrap();
}

/// A value over the server's `proto-max-bulk-len` (the sink's `max_message_bytes` set
/// above it). Redis would answer `ERR Protocol error: invalid bulk length` and close the
/// connection mid-write, which this client sees as a reset (transient, every retry the
/// same). The sink asks the server for its limit before a message over 1 MiB: refused
/// before sending, permanent; a small hook still goes through.
#[tokio::test]
async fn over_the_servers_bulk_length_is_permanent_and_nothing_is_sent() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let server = Server::start(&["--proto-max-bulk-len", "1mb"]).await;
    let stream = unique_name("bulk-len");
    let cfg = RedisConfig::stream(server.url(), &stream)
        .unwrap()
        .with_timeout(Duration::from_secs(5))
        .with_message(
            MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(4 << 20).unwrap()),
        )
        .unwrap()
        .with_max_message_bytes(NonZeroUsize::new(4 << 20).unwrap());
    let sink = RedisSink::new(cfg).unwrap();
    let big = ankusa_sink_core::Envelope::builder(unique_name("h"), "src", vec![b'x'; 1 << 20])
        .build()
        .unwrap();
    for _ in 0..2 {
        let f = sink
            .deliver(&big, &Ctx::for_envelope(&big))
            .await
            .unwrap_err();
        assert_eq!(f.class(), Class::Permanent, "{f}");
        assert_eq!(f.may_have_landed(), Some(false), "{f}");
        assert!(
            f.to_string().contains("over the limit of 1048576 bytes"),
            "{f}"
        );
    }
    assert!(entries(&server.url(), &stream).await.unwrap().is_empty());
    deliver(&sink).await.unwrap();
    assert_eq!(entries(&server.url(), &stream).await.unwrap().len(), 1);
    // Under both limits, a message over 1 MiB goes through.
    let fits = ankusa_sink_core::Envelope::builder(unique_name("h"), "src", vec![b'y'; 600 << 10])
        .build()
        .unwrap();
    let server = Server::start(&["--proto-max-bulk-len", "2mb"]).await;
    let cfg = RedisConfig::stream(server.url(), &stream)
        .unwrap()
        .with_message(
            MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(4 << 20).unwrap()),
        )
        .unwrap()
        .with_max_message_bytes(NonZeroUsize::new(4 << 20).unwrap());
    RedisSink::new(cfg)
        .unwrap()
        .deliver(&fits, &Ctx::for_envelope(&fits))
        .await
        .unwrap();
    assert_eq!(entries(&server.url(), &stream).await.unwrap().len(), 1);
}

/// A user the server refuses `CONFIG` to: the sink cannot learn the limit and sends as
/// before (the refusal is not the delivery's failure); a message over 1 MiB that fits
/// is delivered.
#[tokio::test]
async fn a_refused_config_get_leaves_max_message_bytes_alone() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let server = Server::start(&["--proto-max-bulk-len", "2mb"]).await;
    exec(
        &server.url(),
        &[
            "ACL", "SETUSER", "noconfig", "on", ">nc-pa55", "~*", "&*", "+@all", "-config",
        ],
    )
    .await;
    let stream = unique_name("no-config");
    let cfg = RedisConfig::stream(server.url(), &stream)
        .unwrap()
        .with_user("noconfig", Secret::new("nc-pa55"))
        .unwrap()
        .with_message(
            MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(4 << 20).unwrap()),
        )
        .unwrap()
        .with_max_message_bytes(NonZeroUsize::new(4 << 20).unwrap());
    let sink = RedisSink::new(cfg).unwrap();
    let fits = ankusa_sink_core::Envelope::builder(unique_name("h"), "src", vec![b'y'; 900 << 10])
        .build()
        .unwrap();
    sink.deliver(&fits, &Ctx::for_envelope(&fits))
        .await
        .unwrap();
    assert_eq!(entries(&server.url(), &stream).await.unwrap().len(), 1);
}

/// `maxclients` reached: Redis writes `ERR max number of clients reached` to a new
/// connection and closes it. This client reads that line as the (ignored) answer to its
/// `CLIENT SETINFO` (or `AUTH`, `SELECT`) and the next read fails: a reset, transient. Once
/// a client leaves, the sink connects and delivers.
#[tokio::test]
async fn max_clients_reached_is_transient_and_passes() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let server = Server::start(&["--maxclients", "1"]).await;
    let held = admin(&server.url()).await.unwrap();
    let stream = unique_name("max-clients");
    for url in [server.url(), format!("{}/1", server.url())] {
        let sink = stream_sink(&url, &stream);
        let f = deliver(&sink).await.unwrap_err();
        assert_eq!(f.class(), Class::Transient, "{url}: {f}");
        assert_eq!(sink.check().await.unwrap_err().class(), Class::Transient);
    }
    let sink = stream_sink(&server.url(), &stream);
    drop(held);
    // The server frees the slot when it sees the close: bounded retries, each transient,
    // until one is delivered.
    let mut last = None;
    for _ in 0..100 {
        match deliver(&sink).await {
            Ok(()) => {
                last = None;
                break;
            }
            Err(f) => {
                assert_eq!(f.class(), Class::Transient, "{f}");
                last = Some(f);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    assert!(last.is_none(), "never delivered: {last:?}");
}

/// The `ERR` replies Redis gives no code of their own, byte for byte as a real Redis 7
/// sends them, answered to the `XADD` itself (a real server's comes at connect or
/// mid-write, where this client mostly turns it into a reset; see the two tests above).
#[tokio::test]
async fn err_replies_by_the_servers_fixed_text() {
    for (line, want) in [
        ("ERR max number of clients reached", Class::Transient),
        ("ERR Protocol error: invalid bulk length", Class::Permanent),
        (
            "ERR Protocol error: unauthenticated multibulk length",
            Class::Config,
        ),
        ("ERR unknown command 'XADD'", Class::Config),
    ] {
        let s = Scripted::start(Script::Refuse(line)).await.unwrap();
        let f = deliver(&stream_sink(&s.url(), "k")).await.unwrap_err();
        assert_eq!(f.class(), want, "{line}: {f}");
        assert_eq!(f.may_have_landed(), Some(false), "{line}");
    }
}

#[tokio::test]
async fn no_subscriber_is_config_by_default_or_transient_as_configured() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let channel = unique_name("nobody");
    let cfg = RedisConfig::channel(shared_url(), &channel).unwrap();
    let sink = RedisSink::new(cfg.clone()).unwrap();
    assert_eq!(class_of(&sink).await, Class::Config);
    assert_eq!(sink.check().await.unwrap_err().class(), Class::Config);
    assert!(!sink.capabilities().durable);
    let sink = RedisSink::new(cfg.with_no_subscriber(NoSubscriber::Transient).unwrap()).unwrap();
    assert_eq!(class_of(&sink).await, Class::Transient);
}

#[tokio::test]
async fn wrongtype_is_config() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let key = unique_name("string-key");
    exec(&shared_url(), &["SET", &key, "not a stream"]).await;
    let sink = stream_sink(&shared_url(), &key);
    assert_eq!(class_of(&sink).await, Class::Config);
    assert_eq!(sink.check().await.unwrap_err().class(), Class::Config);
    del(&shared_url(), &key).await.unwrap();
}

#[tokio::test]
async fn noauth_and_wrongpass_are_config() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let server = Server::start(&["--requirepass", "right-pa55"]).await;
    // No password: NOAUTH on PUBLISH and on check's PING; an XADD (more than 10
    // arguments) from an unauthenticated client is answered `ERR Protocol error:
    // unauthenticated multibulk length`: config too.
    let sink = stream_sink(&server.url(), "k");
    assert_eq!(sink.check().await.unwrap_err().class(), Class::Config);
    // (Redis closes the connection after that protocol error.)
    let f = deliver(&sink).await.unwrap_err();
    assert_eq!(f.class(), Class::Config, "{f}");
    let channel = RedisSink::new(RedisConfig::channel(server.url(), "c").unwrap()).unwrap();
    assert_eq!(class_of(&channel).await, Class::Config);
    // A wrong one: WRONGPASS at login.
    let wrong = RedisConfig::stream(server.url(), "k")
        .unwrap()
        .with_password(Secret::new("wrong-pa55"))
        .unwrap();
    let sink = RedisSink::new(wrong).unwrap();
    let f = deliver(&sink).await.unwrap_err();
    assert_eq!(f.class(), Class::Config, "{f}");
    assert!(!f.to_string().contains("wrong-pa55"));
    assert_eq!(sink.check().await.unwrap_err().class(), Class::Config);
    // The right one.
    let ok = RedisConfig::stream(server.url(), "k")
        .unwrap()
        .with_password(Secret::new("right-pa55"))
        .unwrap();
    let sink = RedisSink::new(ok).unwrap();
    assert_eq!(sink.check().await.unwrap(), Check::Passed);
    deliver(&sink).await.unwrap();
}

#[tokio::test]
async fn acl_user_noperm_and_wrongpass_are_config() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let server = Server::start(&[]).await;
    exec(
        &server.url(),
        &[
            "ACL",
            "SETUSER",
            "hooks",
            "on",
            ">hooks-pa55",
            "~allowed:*",
            "&allowed:*",
            "+@all",
        ],
    )
    .await;
    let user = |key: &str, pass: &str| {
        RedisConfig::stream(server.url(), key)
            .unwrap()
            .with_user("hooks", Secret::new(pass))
            .unwrap()
    };
    // Allowed key: Ok.
    let sink = RedisSink::new(user("allowed:s", "hooks-pa55")).unwrap();
    deliver(&sink).await.unwrap();
    assert_eq!(sink.check().await.unwrap(), Check::Passed);
    // Another key: NOPERM.
    let sink = RedisSink::new(user("other:s", "hooks-pa55")).unwrap();
    assert_eq!(class_of(&sink).await, Class::Config);
    // Another channel: NOPERM too.
    let cfg = RedisConfig::channel(server.url(), "other-channel")
        .unwrap()
        .with_user("hooks", Secret::new("hooks-pa55"))
        .unwrap();
    assert_eq!(class_of(&RedisSink::new(cfg).unwrap()).await, Class::Config);
    // The user's wrong password: WRONGPASS at login.
    let sink = RedisSink::new(user("allowed:s", "not-it")).unwrap();
    assert_eq!(class_of(&sink).await, Class::Config);
}

#[tokio::test]
async fn oom_is_throttled() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let server = Server::start(&["--maxmemory-policy", "noeviction"]).await;
    let sink = stream_sink(&server.url(), "k");
    deliver(&sink).await.unwrap();
    exec(&server.url(), &["CONFIG", "SET", "maxmemory", "1"]).await;
    assert_eq!(class_of(&sink).await, Class::Throttled);
    exec(&server.url(), &["CONFIG", "SET", "maxmemory", "0"]).await;
    deliver(&sink).await.unwrap();
}

#[tokio::test]
async fn loading_is_transient() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    // 300 keys of 2 KB loaded at 10 ms each, events served after every key: a 3 s window
    // in which commands are answered LOADING.
    let server = Server::start(&[
        "--enable-debug-command",
        "yes",
        "--key-load-delay",
        "10000",
        "--loading-process-events-interval-bytes",
        "1024",
    ])
    .await;
    exec(&server.url(), &["DEBUG", "POPULATE", "300", "key", "2048"]).await;
    let sink = stream_sink(&server.url(), "k");
    assert_eq!(sink.check().await.unwrap(), Check::Passed);
    let mut info = admin(&server.url()).await.unwrap();
    let reload = tokio::spawn({
        let url = server.url();
        async move {
            let mut c = admin(&url).await.unwrap();
            let _: Result<redis::Value, _> =
                redis::cmd("DEBUG").arg("RELOAD").query_async(&mut c).await;
        }
    });
    loop {
        let text: String = redis::cmd("INFO")
            .arg("persistence")
            .query_async(&mut info)
            .await
            .unwrap();
        if text.lines().any(|l| l.trim() == "loading:1") {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(class_of(&sink).await, Class::Transient);
    reload.abort();
}

#[tokio::test]
async fn busy_script_is_transient() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let server = Server::start(&["--busy-reply-threshold", "50"]).await;
    let sink = stream_sink(&server.url(), "k");
    assert_eq!(sink.check().await.unwrap(), Check::Passed);
    let mut probe = admin(&server.url()).await.unwrap();
    let script = tokio::spawn({
        let url = server.url();
        async move {
            let mut c = admin(&url).await.unwrap();
            let _: Result<redis::Value, _> = redis::cmd("EVAL")
                .arg("while true do end")
                .arg(0)
                .query_async(&mut c)
                .await;
        }
    });
    // Wait until the server answers BUSY.
    loop {
        let r: Result<redis::Value, redis::RedisError> =
            redis::cmd("PING").query_async(&mut probe).await;
        if r.as_ref().err().and_then(|e| e.code()) == Some("BUSY") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(class_of(&sink).await, Class::Transient);
    let _: redis::Value = redis::cmd("SCRIPT")
        .arg("KILL")
        .query_async(&mut probe)
        .await
        .unwrap();
    let _ = script.await;
    deliver(&sink).await.unwrap();
}

#[tokio::test]
async fn clusterdown_is_transient() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let server = Server::start(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
    ])
    .await;
    // No slot is served: every keyed command is answered CLUSTERDOWN.
    assert_eq!(
        class_of(&stream_sink(&server.url(), "k")).await,
        Class::Transient
    );
}

#[tokio::test]
async fn tryagain_is_transient_and_moved_is_config() {
    let s = Scripted::start(Script::Refuse(
        "TRYAGAIN Multiple keys request during rehashing of slot",
    ))
    .await
    .unwrap();
    assert_eq!(
        class_of(&stream_sink(&s.url(), "k")).await,
        Class::Transient
    );
    let s = Scripted::start(Script::Refuse("MOVED 3999 127.0.0.1:6381"))
        .await
        .unwrap();
    assert_eq!(class_of(&stream_sink(&s.url(), "k")).await, Class::Config);
}

#[tokio::test]
async fn connection_refused_is_transient() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let sink = stream_sink(&url, "k");
    assert_eq!(class_of(&sink).await, Class::Transient);
    assert_eq!(sink.check().await.unwrap_err().class(), Class::Transient);
}

#[tokio::test]
async fn a_server_that_stops_answering_is_a_transient_timeout() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let server = Server::start(&[]).await;
    let sink = RedisSink::new(
        RedisConfig::stream(server.url(), "k")
            .unwrap()
            .with_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    deliver(&sink).await.unwrap();
    server.pause();
    let f = deliver(&sink).await.unwrap_err();
    server.resume();
    assert_eq!(f.class(), Class::Transient, "{f}");
}

#[tokio::test]
async fn a_lost_connection_is_transient_and_the_sink_reconnects() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let mut server = Server::start(&[]).await;
    let stream = unique_name("reconnect");
    let sink = stream_sink(&server.url(), &stream);
    deliver(&sink).await.unwrap();
    server.stop().await;
    assert_eq!(class_of(&sink).await, Class::Transient);
    server.restart().await;
    // The same sink delivers again once it has reconnected.
    ankusa_sink_testkit::support::delivers_again(|| deliver(&sink)).await;
    assert_eq!(entries(&server.url(), &stream).await.unwrap().len(), 1);
}

/// A durable stream sink's `check()` asks the server whether it persists: `appendonly no`
/// is `NotPersistent` (config, nothing written), with or without RDB snapshots; `appendonly
/// yes` with `appendfsync always` passes without a word; another `appendfsync` passes with
/// a warning; a server that will not answer `CONFIG GET` (an ACL user without `CONFIG`,
/// `CONFIG` renamed away) passes with a warning that it could not be asked. A sink not
/// configured durable never asks.
#[tokio::test]
async fn a_durable_stream_sink_checks_that_the_server_persists() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let logs = ankusa_sink_testkit::support::LogCapture::for_targets(&["ankusa_sink_redis"]);
    let _attached = logs.attach_global();
    let durable = |url: &str, stream: &str| {
        let cfg = RedisConfig::stream(url, stream)
            .unwrap()
            .with_timeout(Duration::from_secs(2))
            .with_durable(true)
            .unwrap();
        RedisSink::new(cfg).unwrap()
    };
    let stream = unique_name("durable-check");

    for (snapshots, args) in [(false, &[][..]), (true, &["--save", "3600 1"][..])] {
        let server = Server::start(args).await;
        let err = durable(&server.url(), &stream).check().await.unwrap_err();
        assert_eq!(err.class(), Class::Config, "{err}");
        assert_eq!(err.may_have_landed(), Some(false));
        let reason = err.reason_chain();
        assert!(reason.contains("appendonly no"), "{reason}");
        let said = reason.contains("RDB snapshots only");
        assert_eq!(said, snapshots, "{reason}");
        assert_eq!(
            stream_sink(&server.url(), &stream).check().await.unwrap(),
            Check::Passed,
            "not durable: not asked"
        );
        assert!(entries(&server.url(), &stream).await.unwrap().is_empty());
    }

    let always = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]).await;
    let sink = durable(&always.url(), &stream);
    assert_eq!(sink.check().await.unwrap(), Check::Passed);
    assert!(
        logs.lines_with(&always.addr()).is_empty(),
        "{}",
        logs.text()
    );

    let everysec = Server::start(&["--appendonly", "yes", "--appendfsync", "everysec"]).await;
    let sink = durable(&everysec.url(), &stream);
    assert_eq!(sink.check().await.unwrap(), Check::Passed);
    let warned = logs.lines_with(&everysec.addr());
    assert!(
        warned.len() == 1 && warned[0].to_string().contains("appendfsync=everysec"),
        "{warned:?}"
    );

    let renamed = Server::start(&["--rename-command", "CONFIG", ""]).await;
    let acl = Server::start(&[]).await;
    exec(
        &acl.url(),
        &[
            "ACL", "SETUSER", "noconfig", "on", ">nc-pa55", "~*", "&*", "+@all", "-config",
        ],
    )
    .await;
    let acl_sink = RedisSink::new(
        RedisConfig::stream(acl.url(), &stream)
            .unwrap()
            .with_durable(true)
            .unwrap()
            .with_user("noconfig", Secret::new("nc-pa55"))
            .unwrap(),
    )
    .unwrap();
    for (server, sink) in [
        (&renamed, durable(&renamed.url(), &stream)),
        (&acl, acl_sink),
    ] {
        assert_eq!(sink.check().await.unwrap(), Check::Passed);
        let warned = logs.lines_with(&server.addr());
        assert!(
            warned.len() == 1 && warned[0].to_string().contains("could not ask"),
            "{warned:?}"
        );
    }
    assert!(!logs.text().contains("nc-pa55"));
}
