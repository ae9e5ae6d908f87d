//! Options: validation at build time, secrets from the environment, and no secret in
//! Debug, errors or describe.

use crate::server::{Reply, Server, always, sequence};
use crate::{deliver, envelope};
use ankusa_sink_core::{Payload, Sink, Subject};
use ankusa_sink_http::{ConfigError, HttpConfig, HttpMethod, HttpSink, SecretValue, Signer};
use std::time::Duration;

const WHSEC: &str = "whsec_c2VrcmV0LXNpZ25pbmcta2V5LWZvci10ZXN0cw==";
const PLANTED: [&str; 5] = [
    "pa55word",
    "t0ken-in-query",
    "bearer-sekrit",
    "c2VrcmV0LXNpZ25pbmcta2V5LWZvci10ZXN0cw",
    "sekret-signing-key-for-tests",
];

fn assert_clean(what: &str, text: &str) {
    for secret in PLANTED {
        assert!(!text.contains(secret), "{what} leaks {secret:?}: {text}");
    }
}

#[tokio::test]
async fn no_secret_in_debug_errors_or_describe() {
    let server = Server::start(sequence(
        vec![
            Reply::with_header(503, "retry-after", "2"),
            Reply::with_header(301, "location", "/moved?token=t0ken-in-query"),
            Reply::status(401),
            Reply::status(429),
            Reply::status(410),
        ],
        Reply::Slow(Duration::from_secs(30), Box::new(Reply::status(200))),
    ))
    .await;
    let url = format!(
        "http://hook:pa55word@{}/in?token=t0ken-in-query",
        server.addr()
    );
    let config = {
        let mut c = HttpConfig::new(url.as_str());
        c.headers.insert(
            "authorization".into(),
            SecretValue::literal("Bearer bearer-sekrit"),
        );
        c.secrets.push(WHSEC.into());
        c.timeout_ms = 300;
        c
    };
    assert_clean("config Debug", &format!("{config:?}"));
    let sink = HttpSink::from_config(config.clone()).unwrap();
    assert_clean("sink Debug", &format!("{sink:?}"));
    assert_clean("redacted_url", sink.redacted_url());
    let d = sink.describe(&Subject::new("stripe", None)).unwrap();
    assert_clean("describe", &serde_json::to_string(&d).unwrap());

    let env = envelope(b"{}");
    for _ in 0..6 {
        let f = deliver(&sink, &env).await.unwrap_err();
        assert_clean("failure Display", &f.to_string());
        assert_clean("failure Debug", &format!("{f:?}"));
        assert_clean("failure chain", &f.reason_chain());
    }
    // The secrets did go where they belong.
    let req = &server.captured()[0];
    assert_eq!(
        req.header("authorization"),
        Some("Bearer bearer-sekrit"),
        "operator header replaces URL userinfo"
    );
    assert_eq!(req.target, "/in?token=t0ken-in-query");

    // Refused connections carry no URL either.
    server.stop().await;
    let f = deliver(&sink, &env).await.unwrap_err();
    assert_clean("refused", &format!("{f} {f:?}"));
    // A URL from the environment variable shows as its name only.
    let from_env = HttpConfig::new(SecretValue::env("ANKUSA_HTTP_TEST_URL"));
    assert!(format!("{from_env:?}").contains("$ANKUSA_HTTP_TEST_URL"));
}

#[tokio::test]
async fn secrets_and_header_values_come_from_the_environment() {
    // PATH is set in every test environment; tests cannot set variables (no unsafe).
    let path = std::env::var("PATH").expect("PATH is set");
    let server = Server::start(always(Reply::status(200))).await;
    let sink = HttpSink::builder(server.url("/hooks"))
        .secret(SecretValue::env("PATH"))
        .header("x-from-env", SecretValue::env("PATH"))
        .build()
        .unwrap();
    let shown = format!("{sink:?}");
    assert!(!shown.contains(&path), "{shown}");
    deliver(&sink, &envelope(b"{}")).await.unwrap();
    let req = &server.captured()[0];
    assert_eq!(req.header("x-from-env"), Some(path.as_str()));
    // The variable's value is the signing key.
    let ts: u64 = req.header("webhook-timestamp").unwrap().parse().unwrap();
    let expected = Signer::new([path.as_str()])
        .unwrap()
        .signature("01J0HOOKID", ts, b"{}");
    assert_eq!(req.header("webhook-signature"), Some(expected.as_str()));

    let missing = "ANKUSA_HTTP_TEST_SURELY_UNSET_3F9A";
    let err = HttpSink::builder("http://127.0.0.1:9/")
        .secret(SecretValue::env(missing))
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::MissingEnv { .. }));
    assert_eq!(
        err.to_string(),
        format!("signing secret #0: environment variable {missing} is not set")
    );
}

#[test]
fn invalid_options_are_clear_build_errors() {
    let build = |b: ankusa_sink_http::HttpSinkBuilder| b.build().unwrap_err().to_string();
    let base = || HttpSink::builder("http://127.0.0.1:9/hooks");
    assert_eq!(
        build(HttpSink::builder("ftp://127.0.0.1/x")),
        "url scheme \"ftp\" is not http or https"
    );
    let e = build(HttpSink::builder("not a url pa55word"));
    assert!(e.starts_with("url is not a valid absolute URL"), "{e}");
    assert_clean("invalid url", &e);
    assert_eq!(
        build(base().header("X-Ankusa-Id", "x")),
        "header \"X-Ankusa-Id\" is set by the sink or by HTTP framing and cannot be configured"
    );
    for reserved in [
        "webhook-signature",
        "content-length",
        "host",
        "transfer-encoding",
    ] {
        assert!(build(base().header(reserved, "x")).contains("cannot be configured"));
    }
    assert!(build(base().header("bad name", "x")).contains("not a valid HTTP header name"));
    let e = build(base().header("x-token", "bearer-sekrit\n"));
    assert!(e.contains("not a valid HTTP header value"), "{e}");
    assert_clean("bad header value", &e);
    assert_eq!(
        build(base().timeout(Duration::ZERO)),
        "timeout_ms must be greater than zero"
    );
    assert_eq!(
        build(base().connect_timeout(Duration::ZERO)),
        "connect_timeout_ms must be greater than zero"
    );
    assert_eq!(
        build(base().max_response_bytes(0)),
        "max_response_bytes must be greater than zero"
    );
    let e = build(base().secret("whsec_!!sekret-signing-key-for-tests"));
    assert_eq!(
        e,
        "signing secret #0 starts with whsec_ but is not valid base64"
    );
    assert_eq!(
        build(base().secret(WHSEC).secret("")),
        "signing secret #1 is empty"
    );
    assert_eq!(
        build(base().tls_roots_only(true)),
        "tls.only is set but no ca_files or ca_pem are configured"
    );
    assert!(build(base().ca_pem("not pem")).contains("no valid PEM certificate"));
    assert!(build(base().ca_file("/nonexistent/ca.pem")).contains("could not be read"));
}

#[test]
fn config_deserializes_with_defaults_and_env_values() {
    let json = serde_json::json!({
        "url": { "env": "ANKUSA_HTTP_TEST_URL" },
        "method": "patch",
        "headers": { "authorization": { "env": "TOKEN" }, "x-team": "ops" },
        "secrets": [WHSEC, { "env": "OLD_SECRET" }],
        "tls": { "ca_files": ["/etc/ca.pem"], "only": true }
    });
    let c: HttpConfig = serde_json::from_value(json).unwrap();
    assert_eq!(c.url, SecretValue::env("ANKUSA_HTTP_TEST_URL"));
    assert_eq!(c.method, HttpMethod::Patch);
    assert_eq!(c.headers["authorization"], SecretValue::env("TOKEN"));
    assert_eq!(c.secrets.len(), 2);
    assert_eq!(c.timeout_ms, 5_000);
    assert_eq!(c.connect_timeout_ms, 5_000);
    assert_eq!(c.max_response_bytes, 65_536);
    assert!(c.tls.only);
    assert_clean("config Debug", &format!("{c:?}"));

    let unknown = serde_json::json!({ "url": "http://x/", "follow_redirects": true });
    let e = serde_json::from_value::<HttpConfig>(unknown).unwrap_err();
    assert!(e.to_string().contains("unknown field"), "{e}");
    let bad_method = serde_json::json!({ "url": "http://x/", "method": "get" });
    assert!(serde_json::from_value::<HttpConfig>(bad_method).is_err());
}

#[test]
fn describe_names_the_destination_and_computed_options() {
    let sink =
        HttpSink::builder("https://u:pa55word@hooks.example:8443/in/stripe?token=t0ken-in-query")
            .secret(WHSEC)
            .method(HttpMethod::Put)
            .build()
            .unwrap();
    let d = sink
        .describe(&Subject::new("stripe", Some("acme".into())))
        .unwrap();
    assert_eq!(d.payload, Payload::Body);
    assert_eq!(d.protocol, "https");
    assert_eq!(d.host.as_deref(), Some("hooks.example:8443"));
    assert_eq!(d.address.as_deref(), Some("/in/stripe?token=REDACTED"));
    assert_eq!(d.bindings["http"]["method"], "PUT");
    for computed in [
        "headers.x-ankusa-id",
        "headers.content-type",
        "headers.forwarded",
        "headers.webhook-signature",
        "headers.webhook-timestamp",
    ] {
        assert!(
            d.computed.iter().any(|c| c == computed),
            "{computed}: {d:?}"
        );
    }
    assert!(sink.durable());
    assert_eq!(sink.inline_max_bytes(), None);

    let plain = HttpSink::builder("http://127.0.0.1/")
        .header("content-type", "application/json")
        .build()
        .unwrap();
    let d = plain.describe(&Subject::new("s", None)).unwrap();
    assert_eq!(d.protocol, "http");
    assert_eq!(d.host.as_deref(), Some("127.0.0.1"));
    assert_eq!(d.address.as_deref(), Some("/"));
    assert!(!d.computed.iter().any(|c| c.starts_with("headers.webhook-")));
    assert!(!d.computed.iter().any(|c| c == "headers.content-type"));
}

#[tokio::test]
async fn check_is_unsupported() {
    let server = Server::start(always(Reply::status(200))).await;
    let sink = HttpSink::builder(server.url("/")).build().unwrap();
    assert_eq!(
        sink.check().await.unwrap(),
        ankusa_sink_core::Check::Unsupported
    );
    assert_eq!(server.requests(), 0, "check must not send anything");
}
