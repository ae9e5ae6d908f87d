//! `deny_private`: destinations on private addresses are refused (config, nothing sent),
//! by name on every connect and by literal address at build; `allow_cidrs` lets ranges
//! through.

use crate::server::{Reply, Server, always};
use crate::{class_of, deliver, envelope};
use ankusa_sink_core::{Check, Class, Sink};
use ankusa_sink_http::{ConfigError, HttpSink};

/// The server's URL, by name (`localhost` resolves to loopback).
fn by_name(server: &Server) -> String {
    server.url("/hooks").replace("127.0.0.1", "localhost")
}

#[tokio::test]
async fn a_name_that_resolves_to_loopback_is_refused_as_config_and_nothing_is_sent() {
    let server = Server::start(always(Reply::status(200))).await;
    let sink = HttpSink::builder(by_name(&server))
        .deny_private(true)
        .build()
        .unwrap();
    let r = deliver(&sink, &envelope(b"{}")).await;
    assert_eq!(class_of(&r), Class::Config);
    let f = r.unwrap_err();
    assert_eq!(f.may_have_landed(), Some(false));
    assert!(f.to_string().contains("deny_private"), "{f}");
    // The host is named; the addresses it resolved to are not (they map a private network).
    assert!(
        f.to_string()
            .contains("localhost resolves only to refused addresses"),
        "{f}"
    );
    assert!(
        !f.to_string().contains("127.0.0.1") && !f.to_string().contains("::1"),
        "{f}"
    );
    assert_eq!(server.captured().len(), 0, "nothing reached it");
    // The preflight says the same, never "reachable".
    let c = sink.check().await.unwrap_err();
    assert_eq!(c.class(), Class::Config, "{c}");
    assert!(
        c.to_string()
            .contains("localhost resolves only to refused addresses"),
        "{c}"
    );
    assert_eq!(server.captured().len(), 0);
}

#[tokio::test]
async fn allow_cidrs_let_a_chosen_range_through() {
    let server = Server::start(always(Reply::status(200))).await;
    let sink = HttpSink::builder(by_name(&server))
        .deny_private(true)
        .allow_cidrs(["127.0.0.0/8", "::1"])
        .build()
        .unwrap();
    deliver(&sink, &envelope(b"{}")).await.unwrap();
    assert_eq!(server.captured().len(), 1);
    assert!(matches!(sink.check().await, Ok(Check::Reachable)));
}

#[test]
fn literal_private_addresses_and_impossible_settings_are_refused_at_build() {
    for url in [
        "http://127.0.0.1:9/h",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.8/h",
        "http://[::1]:9/h",
        "http://[fd00::5]/h",
        "http://100.64.1.1/h",
        "http://168.63.129.16/machine",
        "http://198.18.0.1/h",
        "http://[64:ff9b:1::a00:1]/h",
        "http://[::127.0.0.1]/h",
        "http://[fec0::1]/h",
    ] {
        let e = HttpSink::builder(url)
            .deny_private(true)
            .build()
            .unwrap_err();
        assert!(
            matches!(e, ConfigError::PrivateDestination(_)),
            "{url}: {e}"
        );
    }
    // A public literal address is fine.
    HttpSink::builder("https://203.0.113.9/h")
        .deny_private(true)
        .build()
        .unwrap();
    let e = HttpSink::builder("https://hooks.example/h")
        .deny_private(true)
        .allow_cidrs(["10.0.0.0/33"])
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, ConfigError::Cidr(c) if c == "10.0.0.0/33"),
        "{e}"
    );
    let e = HttpSink::builder("https://hooks.example/h")
        .allow_cidrs(["10.0.0.0/8"])
        .build()
        .unwrap_err();
    assert!(matches!(e, ConfigError::AllowWithoutDeny), "{e}");
    let config: Result<ankusa_sink_http::HttpConfig, _> =
        serde_json::from_value(serde_json::json!({
            "url": "https://hooks.example/h",
            "proxy": "http://127.0.0.1:3128",
            "deny_private": true,
        }));
    let e = config.unwrap_err().to_string();
    assert!(e.contains("proxy"), "{e}");
}
