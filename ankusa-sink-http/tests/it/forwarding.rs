//! Forwarded provider headers on the wire: credential, proxy-trust and override headers
//! never reach the destination, signature headers do, and the default caps hold.

use crate::server::{Reply, Server, always};
use crate::{builder, deliver};
use ankusa_sink_core::Envelope;
use ankusa_sink_testkit::support::UNTRUSTED_HEADERS;

/// Provider signature and event headers: not secrets, forwarded.
const PROVIDER: &[&str] = &[
    "Stripe-Signature",
    "X-Hub-Signature-256",
    "X-Slack-Signature",
    "X-Slack-Request-Timestamp",
    "X-GitHub-Event",
    "X-Shopify-Hmac-Sha256",
];

#[tokio::test]
async fn credential_and_trust_headers_never_reach_the_destination() {
    let server = Server::start(always(Reply::status(204))).await;
    let sink = builder(&server).build().unwrap();
    let mut b = Envelope::builder("01J0HOOKID", "stripe", &b"{}"[..])
        .tenant_id("acme")
        .content_type("application/json");
    for (i, name) in UNTRUSTED_HEADERS.iter().enumerate() {
        b = b.header(*name, format!("planted-{i}"));
    }
    for name in PROVIDER {
        b = b.header(*name, "provider-value");
    }
    deliver(&sink, &b.build().unwrap()).await.unwrap();

    let captured = server.captured();
    assert_eq!(captured.len(), 1);
    let req = &captured[0];
    for name in UNTRUSTED_HEADERS {
        let lower = name.to_ascii_lowercase();
        for value in req.all(&lower) {
            assert!(!value.starts_with("planted-"), "{name} forwarded: {value}");
        }
    }
    for (name, value) in &req.headers {
        assert!(!value.contains("planted-"), "{name}: {value}");
    }
    for name in PROVIDER {
        assert_eq!(
            req.header(&name.to_ascii_lowercase()),
            Some("provider-value"),
            "{name}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn forwarded_headers_are_capped_by_default() {
    let server = Server::start(always(Reply::status(204))).await;
    let sink = builder(&server).build().unwrap();

    // 150 names: 100 are forwarded, in arrival order.
    let many = Envelope::builder("01J0HOOKID", "stripe", &b"{}"[..])
        .headers(
            (0..150)
                .map(|i| (format!("x-count-{i:03}"), "v".into()))
                .collect(),
        )
        .build()
        .unwrap();
    deliver(&sink, &many).await.unwrap();
    // 20 headers of 1 KiB: 16 KiB of names plus values holds 15.
    let big = Envelope::builder("01J0HOOKID2", "stripe", &b"{}"[..])
        .headers(
            (0..20)
                .map(|i| (format!("x-size-{i:02}"), "v".repeat(1024)))
                .collect(),
        )
        .build()
        .unwrap();
    deliver(&sink, &big).await.unwrap();

    let captured = server.captured();
    assert_eq!(captured.len(), 2);
    let named = |i: usize, prefix: &str| -> Vec<String> {
        captured[i]
            .headers
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .map(|(n, _)| n.clone())
            .collect()
    };
    let counted = named(0, "x-count-");
    assert_eq!(counted.len(), 100);
    assert_eq!(counted.first().map(String::as_str), Some("x-count-000"));
    assert_eq!(counted.last().map(String::as_str), Some("x-count-099"));
    assert_eq!(named(1, "x-size-").len(), 15);
    server.stop().await;
}

/// In raw mode (the default), a hook's own `ce-*` headers would make the request a
/// binary-mode CloudEvent (the CloudEvents HTTP binding) that nobody made: none arrive,
/// while the body and the other provider headers do.
#[tokio::test]
async fn a_hooks_own_cloudevents_headers_never_reach_a_raw_destination() {
    let server = Server::start(always(Reply::status(204))).await;
    let sink = builder(&server).build().unwrap();
    let env = Envelope::builder("01J0HOOKID", "stripe", &b"{}"[..])
        .content_type("application/json")
        .header("ce-specversion", "1.0")
        .header("CE-Id", "forged-id")
        .header("ce-type", "com.example.forged")
        .header("Ce-Source", "/forged")
        .header("ce-time", "2001-01-01T00:00:00Z")
        .header("ce-ankusatenant", "someone-else")
        .header("Stripe-Signature", "provider-value")
        .build()
        .unwrap();
    deliver(&sink, &env).await.unwrap();

    let captured = server.captured();
    assert_eq!(captured.len(), 1);
    let req = &captured[0];
    let ce: Vec<_> = req
        .headers
        .iter()
        .filter(|(n, _)| n.starts_with("ce-"))
        .collect();
    assert!(ce.is_empty(), "ce-* forwarded in raw mode: {ce:?}");
    assert_eq!(req.header("stripe-signature"), Some("provider-value"));
    assert_eq!(req.body, b"{}");
    server.stop().await;
}
