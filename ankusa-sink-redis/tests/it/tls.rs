//! `rediss://` against a private TLS-only `redis-server` whose certificate a fresh CA
//! signed: trusted through `tls_ca_file`, refused without it.

use crate::common::{Server, env};
use ankusa_sink_core::{Check, Ctx, Secret, Sink};
use ankusa_sink_redis::{MESSAGE_FIELD, RedisConfig, RedisSink};

#[tokio::test]
async fn rediss_with_the_ca_file_delivers_and_reads_back() {
    ankusa_sink_testkit::require_broker!("Redis", crate::common::shared_addr());
    let (server, ca) = Server::start_tls().await;
    assert!(server.url().starts_with("rediss://"));
    let cfg = RedisConfig::stream(server.url(), "tls-stream")
        .unwrap()
        .with_user("default", Secret::new("tls-pa55"))
        .unwrap()
        .with_tls_ca_file(&ca)
        .unwrap();
    let sink = RedisSink::new(cfg).unwrap();
    assert_eq!(sink.check().await.unwrap(), Check::Passed);
    let e = env("tls-hook-1");
    sink.deliver(&e, &Ctx::for_envelope(&e)).await.unwrap();

    let admin = redis::Client::build_with_tls(
        server.url(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(&ca).unwrap()),
        },
    )
    .unwrap();
    let entries: Vec<crate::common::Entry> = redis::cmd("XRANGE")
        .arg("tls-stream")
        .arg("-")
        .arg("+")
        .query_async(
            &mut admin
                .get_multiplexed_async_connection_with_config(&crate::common::admin_config())
                .await
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(entries.len(), 1);
    let (field, message) = &entries[0].1[0];
    assert_eq!(field, MESSAGE_FIELD);
    assert_eq!(ankusa_message::decode(message).unwrap().id, "tls-hook-1");

    // The system roots do not know this CA: refused, and the password never shows.
    let cfg = RedisConfig::stream(server.url(), "tls-stream")
        .unwrap()
        .with_user("default", Secret::new("tls-pa55"))
        .unwrap();
    let sink = RedisSink::new(cfg).unwrap();
    let f = sink.deliver(&e, &Ctx::for_envelope(&e)).await.unwrap_err();
    assert!(!f.to_string().contains("tls-pa55"), "{f}");
    assert!(!format!("{sink:?}").contains("tls-pa55"));
}
