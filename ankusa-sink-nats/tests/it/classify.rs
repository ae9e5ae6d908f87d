//! The classification table of `error.rs`, row by row, provoked for real: the shared
//! server for streams, private `nats-server` processes for auth, a small `max_payload`
//! and a lost connection.

use crate::common::*;
use ankusa_sink_nats::{NatsConfig, NatsSink};
use ankusa_sink_testkit::ankusa_sink_core::{Check, Class, Ctx, Envelope, Failure, Secret, Sink};
use ankusa_sink_testkit::support::unique_name;
use futures_util::StreamExt as _;
use std::time::Duration;

fn env(id: &str, body: usize) -> Envelope {
    Envelope::builder(id, "src", vec![b'x'; body])
        .build()
        .unwrap()
}

async fn deliver(sink: &NatsSink, env: &Envelope) -> Result<(), Failure> {
    sink.deliver(env, &Ctx::for_envelope(env)).await
}

/// Delivers `env`, which must fail as `class`; the failure, for further checks.
async fn fails_as(sink: &NatsSink, env: &Envelope, class: Class) -> Failure {
    let f = deliver(sink, env).await.unwrap_err();
    assert_eq!(f.class(), class, "{f}");
    f
}

fn no_secret(f: &Failure, secret: &str) {
    let text = format!("{f} {f:?} {}", f.reason_chain());
    assert!(!text.contains(secret), "secret in failure: {text}");
}

fn config(url: &str, subject: &str) -> NatsConfig {
    NatsConfig::new(url, subject)
        .unwrap()
        .with_timeout(Duration::from_secs(2))
        .with_connect_timeout(Duration::from_secs(2))
}

/// A fresh stream on `url` limited by `limits`, and a sink for its subject: (stream, sink).
async fn stream_and_sink(url: &str, prefix: &str, limits: Limits) -> (String, NatsSink) {
    let (stream, subject) = names(prefix);
    create_stream(url, &stream, &subject, limits).await;
    (stream, sink(url, &subject))
}

#[tokio::test]
async fn wrong_password_is_config_and_right_one_delivers() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let server = private("authorization { user: ankusa, password: good-pass-1 }").await;
    let (stream, subject) = names("auth");
    let admin = format!("nats://ankusa:good-pass-1@127.0.0.1:{}", server.port);
    create_stream(&admin, &stream, &subject, Limits::default()).await;

    let bad = NatsSink::new(
        config(&server.url(), &subject)
            .with_user_password("ankusa", Secret::new("bad-pass-9"))
            .unwrap(),
    );
    let f = fails_as(&bad, &env("a1", 10), Class::Config).await;
    no_secret(&f, "bad-pass-9");
    assert_eq!(bad.check().await.unwrap_err().class(), Class::Config);
    assert!(!format!("{bad:?}").contains("bad-pass-9"));

    let good = NatsSink::new(config(&admin, &subject));
    deliver(&good, &env("a2", 10)).await.unwrap();
    assert_eq!(good.check().await.unwrap(), Check::Passed);
    assert!(!format!("{good:?}").contains("good-pass-1"));
}

#[tokio::test]
async fn wrong_token_is_config_and_right_one_delivers() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let server = private("authorization { token: good-token-1 }").await;
    let (stream, subject) = names("token");
    let admin = format!("nats://good-token-1@127.0.0.1:{}", server.port);
    create_stream(&admin, &stream, &subject, Limits::default()).await;
    let with_token = |token: &str| {
        NatsSink::new(
            config(&server.url(), &subject)
                .with_token(Secret::new(token))
                .unwrap(),
        )
    };
    let bad = with_token("bad-token-9");
    let f = fails_as(&bad, &env("t1", 10), Class::Config).await;
    no_secret(&f, "bad-token-9");
    let good = with_token("good-token-1");
    deliver(&good, &env("t2", 10)).await.unwrap();
}

#[tokio::test]
async fn nkey_seed_signs_in_and_an_unknown_key_is_config() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let user = nkeys::KeyPair::new_user();
    let server = private(format!(
        "authorization {{ users: [ {{ nkey: {} }} ] }}",
        user.public_key()
    ))
    .await;
    let (stream, subject) = names("nkey");
    let with_seed = |seed: &str| {
        NatsSink::new(
            config(&server.url(), &subject)
                .with_nkey_seed(Secret::new(seed))
                .unwrap(),
        )
    };
    let seed = user.seed().unwrap();
    let good = with_seed(&seed);
    // The stream is made through the sink's own credentials: an admin client with the seed.
    let admin = async_nats::ConnectOptions::with_nkey(seed.clone())
        .connect(server.url())
        .await
        .unwrap();
    create_stream_with(admin, &stream, &subject, Limits::default()).await;
    deliver(&good, &env("n1", 10)).await.unwrap();
    assert_eq!(good.check().await.unwrap(), Check::Passed);
    assert!(!format!("{good:?}").contains(&seed));

    let stranger = nkeys::KeyPair::new_user().seed().unwrap();
    let bad = with_seed(&stranger);
    let f = fails_as(&bad, &env("n2", 10), Class::Config).await;
    no_secret(&f, &stranger);
}

#[tokio::test]
async fn a_missing_credentials_file_is_config() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (_, subject) = names("creds");
    let sink = NatsSink::new(
        config(SHARED_URL, &subject)
            .with_credentials_file("/nonexistent/ankusa.creds")
            .unwrap(),
    );
    fails_as(&sink, &env("c1", 10), Class::Config).await;
}

#[tokio::test]
async fn tls_to_a_plain_server_is_config() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (_, subject) = names("tls");
    let sink = NatsSink::new(config("tls://127.0.0.1:4222", &subject));
    fails_as(&sink, &env("tls1", 10), Class::Config).await;
}

#[tokio::test]
async fn no_stream_on_the_subject_is_config_and_check_says_so() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (_, subject) = names("nostream");
    let sink = sink(SHARED_URL, &subject);
    fails_as(&sink, &env("ns1", 10), Class::Config).await;
    assert_eq!(sink.check().await.unwrap_err().class(), Class::Config);
}

#[tokio::test]
async fn check_passes_and_publishes_nothing() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, subject) = names("check");
    create_stream(SHARED_URL, &stream, &subject, Limits::default()).await;
    let s = sink(SHARED_URL, &subject);
    assert_eq!(s.check().await.unwrap(), Check::Passed);
    let t = NatsSink::new(
        sink_config(SHARED_URL, &subject)
            .with_subject_template("ankusa.{source_id}")
            .unwrap(),
    );
    assert_eq!(t.check().await.unwrap(), Check::Reachable);
    assert!(stored_on(SHARED_URL, &stream).await.is_empty());
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

/// The sink declares itself durable: a stream on memory storage acks what a server
/// restart loses, so `check()` fails it as config; the same subject on a file stream
/// passes. Nothing is published either way.
#[tokio::test]
async fn check_fails_a_memory_stream_as_config_and_passes_a_file_stream() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    use async_nats::jetstream::{self, stream};
    let (name, subject) = names("memory");
    let js = jetstream::new(raw(SHARED_URL).await);
    js.create_stream(stream::Config {
        name: name.clone(),
        subjects: vec![subject.clone()],
        storage: stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .expect("create the memory stream");
    let sink = sink(SHARED_URL, &subject);
    assert!(sink.capabilities().durable);
    let err = sink.check().await.unwrap_err();
    assert_eq!(err.class(), Class::Config);
    assert_eq!(err.may_have_landed(), Some(false));
    let reason = err.reason_chain();
    assert!(
        reason.contains("memory storage") && reason.contains(&name),
        "{reason}"
    );
    assert!(!reason.contains(PLANTED_TOKEN), "{reason}");
    assert!(stored_on(SHARED_URL, &name).await.is_empty());
    delete_stream(SHARED_URL, &name).await.unwrap();

    create_stream(SHARED_URL, &name, &subject, Limits::default()).await;
    assert_eq!(sink.check().await.unwrap(), Check::Passed);
    delete_stream(SHARED_URL, &name).await.unwrap();
}

#[tokio::test]
async fn over_the_servers_max_payload_is_permanent_and_nothing_is_sent() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let server = private("max_payload: 2048").await;
    let (stream, sink) = stream_and_sink(&server.url(), "maxpayload", Limits::default()).await;
    // 2,000 bytes of body are over 2 KiB once base64 and Message v1; inline_max_bytes stays
    // at its 64 KiB default (never clamped to max_payload).
    fails_as(&sink, &env("mp1", 2000), Class::Permanent).await;
    deliver(&sink, &env("mp2", 10)).await.unwrap();
    assert_eq!(stored_on(&server.url(), &stream).await.len(), 1);
}

#[tokio::test]
async fn over_the_streams_max_msg_size_is_permanent() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let limits = Limits {
        max_msg_size: Some(1024),
        ..Limits::default()
    };
    let (stream, sink) = stream_and_sink(SHARED_URL, "maxmsg", limits).await;
    fails_as(&sink, &env("mm1", 900), Class::Permanent).await;
    assert!(stored_on(SHARED_URL, &stream).await.is_empty());
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

#[tokio::test]
async fn a_full_discard_new_stream_is_throttled() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let limits = Limits {
        max_messages_discard_new: Some(1),
        ..Limits::default()
    };
    let (stream, sink) = stream_and_sink(SHARED_URL, "full", limits).await;
    deliver(&sink, &env("f1", 10)).await.unwrap();
    fails_as(&sink, &env("f2", 10), Class::Throttled).await;
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

#[tokio::test]
async fn connection_refused_is_transient() {
    let url = format!("nats://127.0.0.1:{}", free_port());
    let sink = sink(&url, "ankusa.refused");
    fails_as(&sink, &env("r1", 10), Class::Transient).await;
    assert_eq!(sink.check().await.unwrap_err().class(), Class::Transient);
}

#[tokio::test]
async fn an_ack_that_never_comes_is_transient() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (_, subject) = names("noack");
    let client = raw(SHARED_URL).await;
    let mut sub = client.subscribe(subject.clone()).await.unwrap();
    client.flush().await.unwrap();
    let sink =
        NatsSink::new(sink_config(SHARED_URL, &subject).with_timeout(Duration::from_millis(300)));
    fails_as(&sink, &env("na1", 10), Class::Transient).await;
    // The message was sent: it may have landed.
    assert!(sub.next().await.is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_connection_is_transient_then_recovers() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let server = private("").await;
    let (_, sink) = stream_and_sink(&server.url(), "lost", Limits::default()).await;
    deliver(&sink, &env("l1", 10)).await.unwrap();
    server.stop();
    fails_as(&sink, &env("l2", 10), Class::Transient).await;
    server.restart();
    let mut attempts = 0;
    loop {
        match deliver(&sink, &env("l3", 10)).await {
            Ok(()) => break,
            Err(f) => {
                assert_eq!(f.class(), Class::Transient, "{f}");
                attempts += 1;
                assert!(attempts < 120, "no recovery: {f}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// A connected sink whose server comes back wanting another token (rotated): once the
/// cut connection's transient answers are past, deliveries and `check()` are config, not a
/// reconnect to wait for forever.
#[tokio::test(flavor = "multi_thread")]
async fn credentials_refused_after_a_reconnect_are_config() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (_, subject) = names("rotated");
    let (stream, _) = names("rotated_stream");
    create_stream(SHARED_URL, &stream, &subject, Limits::default()).await;
    let proxy = ankusa_sink_testkit::support::TcpProxy::start("127.0.0.1:4222")
        .await
        .unwrap();
    let sink = sink(&format!("nats://{}", proxy.addr()), &subject);
    deliver(&sink, &env("rot1", 10)).await.unwrap();
    let rotated = private("authorization { token: rotated-token-2 }").await;
    proxy.redirect(format!("127.0.0.1:{}", rotated.port)).await;
    let mut transient = 0;
    let f = loop {
        let f = deliver(&sink, &env("rot2", 10)).await.unwrap_err();
        if f.class() != Class::Transient {
            break f;
        }
        transient += 1;
        assert!(
            transient < 100,
            "still transient while the server refuses: {f}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(f.class(), Class::Config, "{f}");
    assert_eq!(f.may_have_landed(), Some(false));
    no_secret(&f, PLANTED_TOKEN);
    assert_eq!(sink.check().await.unwrap_err().class(), Class::Config);
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

#[tokio::test]
async fn a_hooks_value_that_breaks_the_subject_is_permanent() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, subject) = names("tmpl");
    create_stream(
        SHARED_URL,
        &stream,
        &format!("{subject}.>"),
        Limits::default(),
    )
    .await;
    let sink = NatsSink::new(
        sink_config(SHARED_URL, &subject)
            .with_subject_template(&format!("{subject}.{{dedupe_key}}"))
            .unwrap(),
    );
    let e = Envelope::builder("d1", "src", &b"{}"[..])
        .dedupe_key("a b")
        .build()
        .unwrap();
    fails_as(&sink, &e, Class::Permanent).await;
    let e = Envelope::builder("d2", "src", &b"{}"[..])
        .dedupe_key("ok")
        .build()
        .unwrap();
    deliver(&sink, &e).await.unwrap();
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

/// A template that starts with a placeholder renders whatever the hook says: a hook whose
/// `source_id` is `$JS.API.STREAM.PURGE.<stream>` must not purge that stream. Refused,
/// permanent, nothing published; the stream keeps its messages.
/// A `.` in a value the template inserts would add a token: refused (permanent, nothing
/// stored, the placeholder named) unless the config says values may add tokens.
#[tokio::test]
async fn a_dot_in_an_inserted_value_is_permanent_unless_the_config_allows_tokens() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, subject) = names("tokens");
    // The stream takes exactly the subject the value's tokens make.
    let want = format!("{subject}.acme.evt.other");
    create_stream(SHARED_URL, &stream, &want, Limits::default()).await;
    let template = format!("{subject}.{{tenant_id}}.{{dedupe_key}}");
    let strict = NatsSink::new(
        sink_config(SHARED_URL, &subject)
            .with_subject_template(&template)
            .unwrap(),
    );
    let e = Envelope::builder(unique_name("h"), "src", &b"{}"[..])
        .tenant_id("acme")
        .dedupe_key("evt.other")
        .build()
        .unwrap();
    let f = fails_as(&strict, &e, Class::Permanent).await;
    assert_eq!(f.may_have_landed(), Some(false), "{f}");
    assert!(f.to_string().contains("dedupe_key"), "{f}");
    assert!(!f.to_string().contains("evt.other"), "{f}");
    assert!(stored_on(SHARED_URL, &stream).await.is_empty());
    let loose = NatsSink::new(
        sink_config(SHARED_URL, &subject)
            .with_subject_template(&template)
            .unwrap()
            .with_subject_values_may_add_tokens(true),
    );
    deliver(&loose, &e).await.unwrap();
    assert_eq!(stored_on(SHARED_URL, &stream).await.len(), 1);
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

#[tokio::test]
async fn a_rendered_subject_under_dollar_is_permanent_and_reaches_no_api() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, subject) = names("dollar");
    create_stream(SHARED_URL, &stream, &subject, Limits::default()).await;
    let keep = sink(SHARED_URL, &subject);
    for id in ["k1", "k2"] {
        deliver(&keep, &env(id, 8)).await.unwrap();
    }
    // Even where values may add tokens, a `$` start is refused.
    let sink = NatsSink::new(
        sink_config(SHARED_URL, &subject)
            .with_subject_template("{source_id}")
            .unwrap()
            .with_subject_values_may_add_tokens(true),
    );
    for api in [
        format!("$JS.API.STREAM.PURGE.{stream}"),
        format!("$JS.API.STREAM.DELETE.{stream}"),
        "$SYS.REQ.SERVER.PING".to_owned(),
    ] {
        let e = Envelope::builder(unique_name("h"), api.as_str(), &b"{}"[..])
            .build()
            .unwrap();
        let f = fails_as(&sink, &e, Class::Permanent).await;
        assert_eq!(f.may_have_landed(), Some(false), "{api}: {f}");
        assert!(f.to_string().contains("starts with `$`"), "{api}: {f}");
    }
    let left = stored_on(SHARED_URL, &stream).await;
    assert_eq!(left.len(), 2, "the stream kept its messages");
    // The same template still delivers an ordinary source's hooks.
    let e = Envelope::builder(unique_name("h"), subject.as_str(), &b"{}"[..])
        .build()
        .unwrap();
    deliver(&sink, &e).await.unwrap();
    assert_eq!(stored_on(SHARED_URL, &stream).await.len(), 3);
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

/// A CA and a server certificate for 127.0.0.1, made with the `openssl` command in `dir`.
fn make_certs(dir: &std::path::Path) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=ankusa-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        "-out",
        "server.pem",
    ]);
}

#[tokio::test]
async fn tls_delivers_with_the_trusted_ca_and_an_untrusted_one_is_config() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let dir =
        std::env::temp_dir().join(ankusa_sink_testkit::support::unique_name("ankusa-nats-tls"));
    std::fs::create_dir_all(&dir).unwrap();
    make_certs(&dir);
    let server = private(format!(
        "tls {{ cert_file: \"{}\", key_file: \"{}\" }}",
        dir.join("server.pem").display(),
        dir.join("server.key").display()
    ))
    .await;
    let url = format!("tls://127.0.0.1:{}", server.port);
    let (stream, subject) = names("tls");
    let admin = async_nats::ConnectOptions::new()
        .require_tls(true)
        .add_root_certificates(dir.join("ca.pem"))
        .connect(url.as_str())
        .await
        .unwrap();
    create_stream_with(admin, &stream, &subject, Limits::default()).await;
    let good = NatsSink::new(config(&url, &subject).with_tls_ca_file(dir.join("ca.pem")));
    deliver(&good, &env("tls-ok", 10)).await.unwrap();
    assert_eq!(good.check().await.unwrap(), Check::Passed);
    // Without the CA the server's certificate is not trusted.
    let bad = NatsSink::new(config(&url, &subject));
    fails_as(&bad, &env("tls-bad", 10), Class::Config).await;
    let _ = std::fs::remove_dir_all(&dir);
}
