//! Options: validation at build time, secrets from the environment, and no secret in
//! Debug, errors or describe.

use crate::server::{Reply, Server, always, sequence};
use crate::{class_of, deliver, envelope, reason};
use ankusa_message::signing::Signer;
use ankusa_sink_core::{Check, Class, Payload, Secret, Sink, Subject};
use ankusa_sink_http::{ConfigError, HttpConfig, HttpError, HttpMethod, HttpSink, TransportKind};
use ankusa_sink_kit::redacted_path;
use ankusa_sink_testkit::support::LogCapture;
use std::time::Duration;

const WHSEC: &str = "whsec_c2VrcmV0LXNpZ25pbmcta2V5LWZvci10ZXN0cw==";
/// A Slack-style webhook token in the URL path, and one in a 301's Location path.
const PATH_TOKEN: &str = "p4th-t0ken-XXXXXXXXXXXX";
const MOVED_PATH_TOKEN: &str = "m0ved-p4th-t0ken-YYYYYYY";
const PLANTED: [&str; 8] = [
    "pa55word",
    "t0ken-in-query",
    "bearer-sekrit",
    "c2VrcmV0LXNpZ25pbmcta2V5LWZvci10ZXN0cw",
    "sekret-signing-key-for-tests",
    PATH_TOKEN,
    MOVED_PATH_TOKEN,
    // The path's other segments too: the whole path is hidden, not just its last part.
    "services/T0",
];

pub(crate) fn assert_clean(what: &str, text: &str) {
    for secret in PLANTED {
        assert!(!text.contains(secret), "{what} leaks {secret:?}: {text}");
    }
}

#[tokio::test]
async fn no_secret_in_debug_errors_describe_or_logs() {
    let logs = LogCapture::new();
    let _capturing = logs.set_default();
    let server = Server::start(sequence(
        vec![
            Reply::with_header(503, "retry-after", "2"),
            Reply::with_header(
                301,
                "location",
                &format!("/services/T1/B1/{MOVED_PATH_TOKEN}?token=t0ken-in-query"),
            ),
            Reply::status(401),
            Reply::status(429),
            Reply::status(410),
        ],
        Reply::Slow(Duration::from_secs(30), Box::new(Reply::status(200))),
    ))
    .await;
    let url = format!(
        "http://hook:pa55word@{}/services/T0/B0/{PATH_TOKEN}?token=t0ken-in-query",
        server.addr()
    );
    let config = HttpSink::builder(url.as_str())
        .header("authorization", "Bearer bearer-sekrit")
        .secret(WHSEC)
        .timeout(Duration::from_millis(300))
        .build_config()
        .unwrap();
    assert_clean("config Debug", &format!("{config:?}"));
    let sink = HttpSink::new(config.clone()).unwrap();
    assert_clean("sink Debug", &format!("{sink:?}"));
    assert_clean("redacted_url", sink.redacted_url());
    let d = sink.describe(&Subject::new("stripe", None)).unwrap();
    assert_clean("describe", &serde_json::to_string(&d).unwrap());

    let env = envelope(b"{}");
    for i in 0..6 {
        let r = deliver(&sink, &env).await;
        if i == 1 {
            assert!(
                matches!(reason(&r), HttpError::Moved { .. }),
                "the 301 row: {r:?}"
            );
        }
        let f = r.unwrap_err();
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
    assert_eq!(
        req.target,
        format!("/services/T0/B0/{PATH_TOKEN}?token=t0ken-in-query")
    );

    // Refused connections carry no URL either, nor does a failed check.
    server.stop().await;
    let f = deliver(&sink, &env).await.unwrap_err();
    assert_clean("refused", &format!("{f} {f:?}"));
    let f = sink.check().await.unwrap_err();
    assert_clean("check", &format!("{f} {f:?} {}", f.reason_chain()));

    // The per-delivery debug log ran (so the capture works) and names no secret.
    let logged = logs.text();
    assert!(logged.contains("http sink answer"), "{logged}");
    assert!(logged.contains("REDACTED-PATH-"), "{logged}");
    assert_clean("logs", &logged);
}

#[tokio::test]
async fn secrets_and_header_values_come_from_the_environment() {
    // PATH is set in every test environment; tests cannot set variables (no unsafe).
    let path = std::env::var("PATH").expect("PATH is set");
    let server = Server::start(always(Reply::status(200))).await;
    // A sink file's `{ env = "VAR" }` and plain strings, side by side.
    let from_file: HttpConfig = serde_json::from_value(serde_json::json!({
        "url": server.url("/hooks"),
        "secrets": [{ "env": "PATH" }],
        "headers": { "x-from-env": { "env": "PATH" }, "x-plain": "ops" },
    }))
    .unwrap();
    // In code: core `Secret`s.
    let in_code = HttpSink::builder(server.url("/hooks"))
        .secret(Secret::from_env("PATH").unwrap())
        .secret_header("x-from-env", Secret::from_env("PATH").unwrap())
        .header("x-plain", "ops")
        .build_config()
        .unwrap();
    assert_eq!(from_file, in_code);
    for config in [from_file, in_code] {
        assert!(!format!("{config:?}").contains(&path), "{config:?}");
        let sink = HttpSink::new(config).unwrap();
        let shown = format!("{sink:?}");
        assert!(!shown.contains(&path), "{shown}");
        deliver(&sink, &envelope(b"{}")).await.unwrap();
    }
    for req in server.captured() {
        assert_eq!(req.header("x-from-env"), Some(path.as_str()));
        assert_eq!(req.header("x-plain"), Some("ops"));
        // The variable's value is the signing key.
        let ts: u64 = req.header("webhook-timestamp").unwrap().parse().unwrap();
        let expected = Signer::new([path.as_str()])
            .unwrap()
            .signature("01J0HOOKID", ts, b"{}");
        assert_eq!(req.header("webhook-signature"), Some(expected.as_str()));
    }
    assert_eq!(server.requests(), 2);

    let missing = "ANKUSA_HTTP_TEST_SURELY_UNSET_3F9A";
    let err = serde_json::from_value::<HttpConfig>(serde_json::json!({
        "url": "http://127.0.0.1:9/",
        "secrets": [{ "env": missing }],
    }))
    .unwrap_err();
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
    // Shorter than 24 bytes (raw, or after decoding whsec_): named by index, never shown.
    let e = build(base().secret(WHSEC).secret("short-sekret-key"));
    assert!(
        e.starts_with("signing secret #1 is shorter than 24 bytes"),
        "{e}"
    );
    assert!(!e.contains("short-sekret-key"), "{e}");
    let e = build(base().secret("whsec_c2hvcnQtc2VrcmV0LWtleQ=="));
    assert!(
        e.starts_with("signing secret #0 is shorter than 24 bytes"),
        "{e}"
    );
    assert!(!e.contains("c2hvcnQtc2VrcmV0LWtleQ"), "{e}");
    let e = build(base().proxy("not a url pa55word"));
    assert!(e.starts_with("proxy is not a valid absolute URL"), "{e}");
    assert_clean("invalid proxy", &e);
    assert_eq!(
        build(base().proxy("socks5://u:pa55word@127.0.0.1:1080")),
        "proxy scheme \"socks5\" is not http or https"
    );
    let missing = "ANKUSA_HTTP_TEST_SURELY_UNSET_PROXY";
    let e = serde_json::from_value::<HttpConfig>(serde_json::json!({
        "url": "http://127.0.0.1:9/hooks",
        "proxy": { "env": missing },
    }))
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("proxy: environment variable {missing} is not set")
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
    let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/fixtures/ca.pem");
    let json = serde_json::json!({
        "url": "https://hooks.example/in",
        "method": "patch",
        "headers": { "authorization": { "env": "PATH" }, "x-team": "ops" },
        "secrets": [WHSEC, { "env": "PATH" }],
        "tls": { "ca_files": [ca], "only": true }
    });
    let c: HttpConfig = serde_json::from_value(json).unwrap();
    let shown = format!("{c:?}");
    for part in [
        "method: Patch",
        "\"authorization\", \"x-team\"",
        "secrets: 2",
        "timeout_ms: 5000",
        "connect_timeout_ms: 5000",
        "max_response_bytes: 65536",
        "ca_sources: 1",
        "tls_only: true",
        // Paths are hidden, cleartext credentials refused and no proxy, by default.
        "show_path: false",
        "allow_insecure: false",
        "proxy: None",
    ] {
        assert!(shown.contains(part), "{part}: {shown}");
    }
    assert_clean("config Debug", &shown);
    assert!(!shown.contains(&std::env::var("PATH").unwrap()), "{shown}");
    let defaults = HttpConfig::new("https://hooks.example/in").unwrap();
    assert_eq!(
        defaults,
        serde_json::from_value(serde_json::json!({ "url": "https://hooks.example/in" })).unwrap()
    );

    let json = serde_json::json!({
        "url": format!("https://hooks.example/services/T0/B0/{PATH_TOKEN}"),
        "show_path": true,
        "allow_insecure": true,
        "proxy": "http://proxy-user:pa55word@127.0.0.1:3128",
    });
    let c: HttpConfig = serde_json::from_value(json).unwrap();
    let shown = format!("{c:?}");
    assert!(shown.contains("show_path: true") && shown.contains("allow_insecure: true"));
    assert!(shown.contains(PATH_TOKEN), "show_path: {shown}");
    assert!(shown.contains("http://127.0.0.1:3128/"), "{shown}");
    assert!(
        !shown.contains("pa55word") && !shown.contains("proxy-user"),
        "{shown}"
    );

    let unknown = serde_json::json!({ "url": "http://x/", "follow_redirects": true });
    let e = serde_json::from_value::<HttpConfig>(unknown).unwrap_err();
    assert!(e.to_string().contains("unknown field"), "{e}");
    let bad_method = serde_json::json!({ "url": "http://x/", "method": "get" });
    assert!(serde_json::from_value::<HttpConfig>(bad_method).is_err());
    // Invalid values are refused when the config is read, not later.
    let zero = serde_json::json!({ "url": "http://x/", "timeout_ms": 0 });
    let e = serde_json::from_value::<HttpConfig>(zero).unwrap_err();
    assert_eq!(e.to_string(), "timeout_ms must be greater than zero");
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
    // The path may be a token: only its short hash is published.
    assert_eq!(
        d.address.as_deref(),
        Some(format!("/{}?token=REDACTED", redacted_path("/in/stripe")).as_str())
    );
    assert_eq!(d.pathname, None);
    assert_eq!(d.operation_bindings["http"]["method"], "PUT");
    assert!(d.bindings.is_empty());
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
    assert!(sink.capabilities().durable);
    assert_eq!(sink.capabilities().inline_max_bytes, None);

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

#[test]
fn show_path_publishes_the_path_everywhere_it_was_hidden() {
    let url = format!(
        "https://u:pa55word@hooks.example/services/T0/B0/{PATH_TOKEN}?token=t0ken-in-query"
    );
    let config = HttpConfig::new(url.as_str()).unwrap().with_show_path(true);
    let shown = format!("{config:?}");
    assert!(
        shown.contains(&format!("/services/T0/B0/{PATH_TOKEN}?token=REDACTED")),
        "{shown}"
    );
    let sink = HttpSink::new(config).unwrap();
    let path = format!("/services/T0/B0/{PATH_TOKEN}");
    assert!(format!("{sink:?}").contains(&path));
    assert_eq!(
        sink.redacted_url(),
        format!("https://hooks.example{path}?token=REDACTED")
    );
    let d = sink.describe(&Subject::new("s", None)).unwrap();
    assert_eq!(d.address, Some(format!("{path}?token=REDACTED")));
    // Userinfo and query values stay hidden.
    for secret in ["pa55word", "t0ken-in-query"] {
        assert!(!format!("{sink:?} {d:?}").contains(secret));
    }

    // Off (the default): hidden, but two endpoints are still told apart.
    let hidden = HttpSink::builder(url.as_str()).build().unwrap();
    let other = HttpSink::builder("https://hooks.example/services/T0/B0/other")
        .build()
        .unwrap();
    assert!(!format!("{hidden:?}").contains("services"));
    assert_ne!(hidden.redacted_url(), other.redacted_url());
}

#[tokio::test]
async fn check_connects_and_sends_nothing() {
    let server = Server::start(always(Reply::status(200))).await;
    let sink = HttpSink::builder(server.url("/hooks")).build().unwrap();
    // Reachable: not `Passed`, which would claim the URL and credentials were accepted.
    assert_eq!(sink.check().await.unwrap(), Check::Reachable);
    // It did connect (a TCP connection was accepted), but sent no request.
    tokio::time::timeout(Duration::from_secs(5), async {
        while server.connections() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("check opened no connection");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.requests(), 0, "check must not send anything");
}

#[tokio::test]
async fn check_against_a_closed_port_fails_like_a_delivery() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let sink = HttpSink::builder(format!("http://{addr}/hooks"))
        .build()
        .unwrap();
    let checked = sink.check().await.unwrap_err();
    let delivered = deliver(&sink, &envelope(b"{}")).await;
    assert_eq!(checked.class(), class_of(&delivered));
    assert_eq!(checked.class(), Class::Transient);
    assert!(
        matches!(
            checked.reason().downcast_ref::<HttpError>(),
            Some(HttpError::Unreachable {
                kind: TransportKind::Refused,
                to: "endpoint",
                ..
            })
        ),
        "{checked:?}"
    );
}

#[tokio::test]
async fn check_a_connect_that_never_completes_times_out() {
    let (listener, fillers) = crate::transport::full_listener().await;
    let addr = listener.local_addr().unwrap();
    let sink = HttpSink::builder(format!("http://{addr}/hooks"))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let f = sink.check().await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(f.class(), Class::Transient);
    assert!(matches!(
        f.reason().downcast_ref::<HttpError>(),
        Some(HttpError::Unreachable {
            kind: TransportKind::Timeout,
            ..
        })
    ));
    drop((listener, fillers));
}

#[test]
fn credentials_over_cleartext_to_a_remote_host_are_refused() {
    // 192.0.2.0/24 (TEST-NET-1): not loopback; nothing is dialled at build time.
    let remote = "http://192.0.2.1/hooks";
    let insecure = |b: ankusa_sink_http::HttpSinkBuilder| match b.build() {
        Err(ConfigError::Insecure(what)) => {
            let e = ConfigError::Insecure(what.clone()).to_string();
            assert!(e.contains("allow_insecure = true"), "{e}");
            assert_clean("insecure error", &e);
            what
        }
        other => panic!("expected Insecure, got {other:?}"),
    };
    let what = insecure(HttpSink::builder("http://hook:pa55word@192.0.2.1/hooks"));
    assert!(what.contains("userinfo"), "{what}");
    for name in [
        "Authorization",
        "x-auth-token",
        "X-Api-Key",
        "x-webhook-secret",
        "cookie",
    ] {
        let what = insecure(HttpSink::builder(remote).header(name, "bearer-sekrit"));
        assert!(what.contains(name), "{what}");
    }
    // A value from the environment is marked secret, whatever the header's name.
    let what = insecure(
        HttpSink::builder(remote).secret_header("x-team", Secret::from_env("PATH").unwrap()),
    );
    assert!(what.contains("x-team"), "{what}");
    let what = insecure(HttpSink::builder(remote).secret(WHSEC));
    assert!(what.contains("signature"), "{what}");
    // A plain-http proxy that is not loopback: its userinfo, and the endpoint's
    // credentials even when the endpoint itself is loopback.
    let what = insecure(
        HttpSink::builder("https://hooks.example/in").proxy("http://u:pa55word@192.0.2.2:3128"),
    );
    assert!(what.contains("proxy"), "{what}");
    let what = insecure(
        HttpSink::builder("http://127.0.0.1:9/in")
            .secret(WHSEC)
            .proxy("http://192.0.2.2:3128"),
    );
    assert!(what.contains("signature"), "{what}");

    // Allowed: https, loopback (any spelling), no credentials, or allow_insecure.
    for ok in [
        HttpSink::builder("https://hook:pa55word@hooks.example/in").secret(WHSEC),
        HttpSink::builder("http://hook:pa55word@127.0.0.1:9/in").secret(WHSEC),
        HttpSink::builder("http://hook:pa55word@localhost:9/in").header("authorization", "x"),
        HttpSink::builder("http://hook:pa55word@[::1]:9/in"),
        HttpSink::builder(remote).header("x-team", "ops"),
        HttpSink::builder("https://hooks.example/in").proxy("https://u:pa55word@192.0.2.2:3128"),
        HttpSink::builder("https://hooks.example/in").proxy("http://u:pa55word@127.0.0.1:3128"),
        HttpSink::builder("http://hook:pa55word@192.0.2.1/in")
            .header("authorization", "x")
            .secret(WHSEC)
            .allow_insecure(true),
    ] {
        ok.build().unwrap();
    }
}

#[test]
fn allow_insecure_warns_once_at_build_without_secrets() {
    let logs = LogCapture::new();
    let _capturing = logs.set_default();
    let sink = HttpSink::builder(format!(
        "http://hook:pa55word@192.0.2.1/services/T0/B0/{PATH_TOKEN}?token=t0ken-in-query"
    ))
    .header("authorization", "Bearer bearer-sekrit")
    .secret(WHSEC)
    .allow_insecure(true)
    .build()
    .unwrap();
    let warnings = logs.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    for part in [
        "cleartext",
        "userinfo",
        "authorization",
        "signature",
        "192.0.2.1",
    ] {
        assert!(warnings[0].contains(part), "{part}: {}", warnings[0]);
    }
    assert_clean("warning", &warnings[0]);
    drop(sink);
    // Nothing to warn about: no warning.
    HttpSink::builder("http://192.0.2.1/in")
        .allow_insecure(true)
        .build()
        .unwrap();
    assert_eq!(logs.warnings().len(), 1);
}
