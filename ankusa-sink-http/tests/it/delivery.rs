//! What goes on the wire: method, body bytes, headers, signatures; connection reuse.

use crate::server::{Captured, Reply, Server, always};
use crate::{builder, deliver, envelope};
use ankusa_message::signing::Signer;
use ankusa_message::{ForwardHeaders, HeaderPolicy};
use ankusa_sink_core::{Ctx, Envelope, Sink};
use ankusa_sink_http::HttpMethod;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

const SECRET_A: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SECRET_B: &str = "whsec_dGhlIG90aGVyIHNlY3JldCBmb3Igcm90YXRpb24=";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn every_byte() -> Vec<u8> {
    (0..=255u8).chain(b"\r\n\r\nend".iter().copied()).collect()
}

fn rich_envelope(body: Vec<u8>) -> Envelope {
    Envelope::builder("01J0HOOKID", "stripe", body)
        .tenant_id("acme")
        .content_type("application/json; charset=utf-8")
        .dedupe_key("evt_1")
        .header("Stripe-Signature", "t=1,v1=abc")
        .header("X-Repeated", "one")
        .header("x-repeated", "two")
        .header("Authorization", "Bearer provider-token")
        .header("X-Ankusa-Id", "spoofed")
        .header("X-Team", "provider-team")
        .header("User-Agent", "Stripe/1.0")
        .header("Webhook-Signature", "v1,provider-signature")
        .header("Webhook-Id", "provider-id")
        .build()
        .unwrap()
}

async fn one(server: &Server) -> Captured {
    let captured = server.captured();
    assert_eq!(captured.len(), 1, "{captured:?}");
    captured.into_iter().next().unwrap()
}

#[tokio::test]
async fn body_and_headers_are_exactly_as_sent() {
    let server = Server::start(always(Reply::status(204))).await;
    let sink = ankusa_sink_http::HttpSink::builder(server.url("/in/hooks?v=2"))
        .method(HttpMethod::Put)
        .header("X-Team", "ops")
        .secret(SECRET_A)
        .build()
        .unwrap();
    let body = every_byte();
    let env = rich_envelope(body.clone());
    let ctx = Ctx::for_envelope(&env).with_replay_id("replay-7");
    let before = now();
    sink.deliver(&env, &ctx).await.unwrap();
    let req = one(&server).await;

    assert_eq!(req.method, "PUT");
    assert_eq!(req.target, "/in/hooks?v=2");
    assert_eq!(req.body, body, "body bytes differ");
    assert_eq!(req.header("content-length"), Some(&*body.len().to_string()));
    assert_eq!(req.header("x-ankusa-id"), Some("01J0HOOKID"));
    assert_eq!(req.header("x-ankusa-source"), Some("stripe"));
    assert_eq!(req.header("x-ankusa-tenant"), Some("acme"));
    assert_eq!(
        req.header("x-ankusa-idempotency-key"),
        Some("acme:stripe:evt_1")
    );
    assert_eq!(req.header("x-ankusa-dedupe-key"), Some("evt_1"));
    assert_eq!(req.header("x-ankusa-replay-id"), Some("replay-7"));
    assert_eq!(
        req.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    // Operator and sink win over forwarded names; never-forwarded names stay out.
    assert_eq!(req.header("x-team"), Some("ops"));
    assert_eq!(req.header("user-agent"), Some(ankusa_sink_http::USER_AGENT));
    assert_eq!(req.header("authorization"), None);
    // Forwarded provider headers, lowercased, repeats joined.
    assert_eq!(req.header("stripe-signature"), Some("t=1,v1=abc"));
    assert_eq!(req.header("x-repeated"), Some("one, two"));

    // Standard Webhooks: our headers, once, over id.timestamp.body.
    assert_eq!(req.header("webhook-id"), Some("01J0HOOKID"));
    let ts: u64 = req.header("webhook-timestamp").unwrap().parse().unwrap();
    assert!(ts >= before && ts <= now(), "{ts} not in {before}..");
    let expected = Signer::new([SECRET_A])
        .unwrap()
        .signature("01J0HOOKID", ts, &body);
    assert_eq!(req.header("webhook-signature"), Some(&*expected));

    // Nothing else: every header is accounted for.
    let mut names: Vec<&str> = req.headers.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    let mut want = vec![
        "accept",
        "content-length",
        "content-type",
        "host",
        "stripe-signature",
        "user-agent",
        "webhook-id",
        "webhook-signature",
        "webhook-timestamp",
        "x-ankusa-dedupe-key",
        "x-ankusa-id",
        "x-ankusa-idempotency-key",
        "x-ankusa-replay-id",
        "x-ankusa-source",
        "x-ankusa-tenant",
        "x-repeated",
        "x-team",
    ];
    if req.header("accept").is_none() {
        want.retain(|n| *n != "accept");
    }
    assert_eq!(names, want);
}

#[tokio::test]
async fn unsigned_plain_hook_defaults() {
    let server = Server::start(always(Reply::status(200))).await;
    let sink = builder(&server).build().unwrap();
    let env = Envelope::builder("h2", "github", "raw".as_bytes().to_vec())
        .header("Webhook-Signature", "v1,provider-signature")
        .build()
        .unwrap();
    deliver(&sink, &env).await.unwrap();
    let req = one(&server).await;
    assert_eq!(req.method, "POST");
    assert_eq!(req.header("content-type"), Some("application/octet-stream"));
    assert_eq!(req.header("x-ankusa-idempotency-key"), Some("h2"));
    for absent in [
        "x-ankusa-tenant",
        "x-ankusa-dedupe-key",
        "x-ankusa-replay-id",
        "webhook-id",
        "webhook-timestamp",
    ] {
        assert_eq!(req.header(absent), None, "{absent}");
    }
    // Not signing: the provider's own webhook-signature is just a forwarded header.
    assert_eq!(
        req.header("webhook-signature"),
        Some("v1,provider-signature")
    );
}

#[tokio::test]
async fn operator_content_type_wins_and_allow_list_forwards_only_named_headers() {
    let server = Server::start(always(Reply::status(200))).await;
    let sink = builder(&server)
        .method(HttpMethod::Patch)
        .header("Content-Type", "application/vnd.ops+json")
        .build()
        .unwrap();
    let env = rich_envelope(b"{}".to_vec());
    let ctx = Ctx::for_envelope(&env).with_extension(HeaderPolicy::from(
        ForwardHeaders::only(["X-Repeated", "authorization"]).unwrap(),
    ));
    sink.deliver(&env, &ctx).await.unwrap();
    let req = one(&server).await;
    assert_eq!(req.method, "PATCH");
    assert_eq!(req.header("content-type"), Some("application/vnd.ops+json"));
    assert_eq!(req.header("x-repeated"), Some("one, two"));
    assert_eq!(req.header("stripe-signature"), None);
    assert_eq!(req.header("authorization"), None);
}

#[tokio::test]
async fn userinfo_becomes_basic_auth_and_never_the_path() {
    let server = Server::start(always(Reply::status(200))).await;
    let url = format!("http://hook-user:pa55@{}/h", server.addr());
    let sink = ankusa_sink_http::HttpSink::builder(url).build().unwrap();
    deliver(&sink, &envelope(b"{}")).await.unwrap();
    let req = one(&server).await;
    // base64("hook-user:pa55")
    assert_eq!(
        req.header("authorization"),
        Some("Basic aG9vay11c2VyOnBhNTU=")
    );
    assert_eq!(req.target, "/h");
}

#[tokio::test]
async fn connections_are_pooled_and_reused() {
    let server = Server::start(always(Reply::Answer {
        status: 200,
        headers: vec![],
        body: b"thanks".to_vec(),
    }))
    .await;
    let sink = builder(&server).build().unwrap();
    let env = envelope(b"{}");
    for _ in 0..5 {
        deliver(&sink, &env).await.unwrap();
    }
    assert_eq!(server.captured().len(), 5);
    assert_eq!(server.connections(), 1, "each delivery opened a connection");
    assert!(server.captured().iter().all(|c| c.connection == 0));
}

#[tokio::test]
async fn rotation_signs_with_both_secrets_and_re_signs_every_attempt() {
    let server = Server::start(always(Reply::status(200))).await;
    let sink = builder(&server)
        .secret(SECRET_A)
        .secret(SECRET_B)
        .build()
        .unwrap();
    let env = envelope(br#"{"test": 2432232314}"#);
    deliver(&sink, &env).await.unwrap();
    // Wait (bounded) for the wall clock's second to tick, then deliver again.
    let first_second = now();
    tokio::time::timeout(std::time::Duration::from_secs(3), async {
        while now() == first_second {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    deliver(&sink, &env).await.unwrap();

    let reqs = server.captured();
    assert_eq!(reqs.len(), 2);
    let (a, b) = (&reqs[0], &reqs[1]);
    assert_eq!(a.header("webhook-id"), b.header("webhook-id"));
    assert_ne!(a.header("webhook-timestamp"), b.header("webhook-timestamp"));
    for req in [a, b] {
        let ts: u64 = req.header("webhook-timestamp").unwrap().parse().unwrap();
        let sig = req.header("webhook-signature").unwrap();
        let parts: Vec<&str> = sig.split(' ').collect();
        assert_eq!(parts.len(), 2, "{sig}");
        let one = |s| {
            Signer::new([s])
                .unwrap()
                .signature("01J0HOOKID", ts, &req.body)
        };
        assert_eq!(parts, [one(SECRET_A), one(SECRET_B)]);
    }
    assert_ne!(a.header("webhook-signature"), b.header("webhook-signature"));
    verify_independently(a, &[SECRET_A, SECRET_B]);
}

#[tokio::test]
async fn binary_body_signature_matches_an_independent_hmac() {
    let server = Server::start(always(Reply::status(200))).await;
    let sink = builder(&server).secret(SECRET_A).build().unwrap();
    deliver(&sink, &envelope(&every_byte())).await.unwrap();
    let req = one(&server).await;
    let Some(python) = python() else { return };
    // Python's own hmac/base64 over id.timestamp.body, with the whsec_ key decoded.
    let script = r#"
import base64, hashlib, hmac, sys
key = base64.b64decode(sys.argv[1][len("whsec_"):])
msg = sys.argv[2].encode() + b"." + sys.argv[3].encode() + b"." + sys.stdin.buffer.read()
print("v1," + base64.b64encode(hmac.new(key, msg, hashlib.sha256).digest()).decode())
"#;
    let out = run_python(
        &python,
        &[
            "-c",
            script,
            SECRET_A,
            req.header("webhook-id").unwrap(),
            req.header("webhook-timestamp").unwrap(),
        ],
        &req.body,
    );
    assert_eq!(out.trim(), req.header("webhook-signature").unwrap());
}

/// The interpreter with `standardwebhooks` (installed by scripts/services/http.sh), or
/// `None` (printing why) when there is no python at all.
fn python() -> Option<PathBuf> {
    let venv = std::env::var_os("ANKUSA_HTTP_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|home| PathBuf::from(home).join(".cache/ankusa-sinks/http-venv"))
        })
        .expect("ANKUSA_HTTP_VENV or HOME is set");
    let python = venv.join("bin/python");
    if python.exists() {
        return Some(python);
    }
    let system = Command::new("python3").arg("--version").output();
    if system.is_err() {
        eprintln!("SKIP independent signature check: python3 is not installed");
        return None;
    }
    panic!(
        "{} is missing: run scripts/services/http.sh to install standardwebhooks",
        python.display()
    );
}

fn run_python(python: &PathBuf, args: &[&str], stdin: &[u8]) -> String {
    use std::io::Write as _;
    let mut child = Command::new(python)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn python");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Each secret alone must verify the request with the PyPI `standardwebhooks` library
/// (`raw:<text>` passes the text's bytes, the library's form for a raw key).
fn verify_independently(req: &Captured, secrets: &[&str]) {
    let Some(python) = python() else { return };
    let script = r#"
import sys
from standardwebhooks.webhooks import Webhook
headers = {"webhook-id": sys.argv[1], "webhook-timestamp": sys.argv[2], "webhook-signature": sys.argv[3]}
body = sys.stdin.buffer.read()
for secret in sys.argv[4:]:
    # "raw:<text>": the library's bytes form, the key being the text's UTF-8 bytes.
    key = secret[4:].encode() if secret.startswith("raw:") else secret
    Webhook(key).verify(body, headers, json_parse=False)
    print("verified")
"#;
    let mut args = vec![
        "-c",
        script,
        req.header("webhook-id").unwrap(),
        req.header("webhook-timestamp").unwrap(),
        req.header("webhook-signature").unwrap(),
    ];
    args.extend_from_slice(secrets);
    let out = run_python(&python, &args, &req.body);
    assert_eq!(
        out.lines().filter(|l| *l == "verified").count(),
        secrets.len()
    );

    // And a secret that is not ours does not verify.
    let wrong = ["whsec_bm90IHRoZSByaWdodCBzZWNyZXQ="];
    let mut args = args[..5].to_vec();
    args.extend_from_slice(&wrong);
    let mut child = Command::new(&python)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(&req.body).unwrap();
    }
    assert!(!child.wait().unwrap().success(), "a wrong secret verified");
}

#[tokio::test]
async fn raw_mode_secret_verifies_with_standardwebhooks_given_its_bytes() {
    use base64::Engine as _;
    // Raw mode: a secret without whsec_ is used as its UTF-8 bytes (32 here).
    const RAW: &str = "raw-mode-secret-of-32-bytes-long";
    let server = Server::start(always(Reply::status(200))).await;
    let sink = builder(&server).secret(RAW).build().unwrap();
    // JSON: the library decodes the body as UTF-8 before it verifies.
    deliver(&sink, &envelope(br#"{"raw": "mode"}"#))
        .await
        .unwrap();
    let req = one(&server).await;
    let wrapped = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(RAW)
    );
    verify_independently(&req, &[&format!("raw:{RAW}"), &wrapped]);
}

#[tokio::test]
async fn a_replay_id_that_cannot_be_a_header_is_permanent_and_not_sent() {
    let server = Server::start(always(Reply::status(200))).await;
    let sink = builder(&server).build().unwrap();
    let env = envelope(b"{}");
    let ctx = Ctx::for_envelope(&env).with_replay_id("replay\r\nx-injected: 1");
    let r = sink.deliver(&env, &ctx).await;
    assert_eq!(crate::class_of(&r), ankusa_sink_core::Class::Permanent);
    // Refused before the request is built (issue 60): the header named, the value not.
    let f = r.unwrap_err();
    assert_eq!(f.may_have_landed(), Some(false));
    let text = f.to_string();
    assert!(text.contains("header \"x-ankusa-replay-id\""), "{text}");
    assert!(!text.contains("x-injected"), "{text}");
    assert_eq!(server.requests(), 0);
}

#[tokio::test]
async fn cloudevents_binary_and_structured_requests() {
    use ankusa_message::cloudevents::Format;
    let server = Server::start(always(Reply::status(204))).await;
    let binary = ankusa_sink_http::HttpSink::builder(server.url("/ce"))
        .cloudevents(Format::CloudEvents, Some("com.example.hook"))
        .secret(SECRET_A)
        .build()
        .unwrap();
    let env = Envelope::builder("h 1", "stripe", &b"{\"a\":1}"[..])
        .tenant_id("acme")
        .content_type("application/json")
        .header("Ce-Type", "spoofed.by.the.provider")
        .header("ce-extra", "provider")
        .build()
        .unwrap();
    let ctx = Ctx::for_envelope(&env);
    binary.deliver(&env, &ctx).await.unwrap();
    let req = one(&server).await;
    assert_eq!(req.body, b"{\"a\":1}", "binary mode: the raw body");
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("ce-specversion"), Some("1.0"));
    assert_eq!(
        req.header("ce-type"),
        Some("com.example.hook"),
        "ours, not the provider's"
    );
    assert_eq!(
        req.header("ce-extra"),
        None,
        "no provider ce-* header reads as ours"
    );
    assert_eq!(
        req.header("ce-id"),
        Some("h%201"),
        "percent-encoded as the binding says"
    );
    assert_eq!(req.header("ce-source"), Some("/sources/stripe"));
    assert_eq!(req.header("ce-ankusatenant"), Some("acme"));
    assert_eq!(
        req.header("x-ankusa-id"),
        Some("h 1"),
        "our headers still go"
    );
    assert!(
        req.header("webhook-signature").is_some(),
        "and the signature"
    );

    let server = Server::start(always(Reply::status(204))).await;
    let structured = ankusa_sink_http::HttpSink::builder(server.url("/ce"))
        .cloudevents(Format::CloudEventsStructured, None)
        .build()
        .unwrap();
    structured.deliver(&env, &ctx).await.unwrap();
    let req = one(&server).await;
    assert_eq!(
        req.header("content-type"),
        Some("application/cloudevents+json")
    );
    assert!(
        !req.headers.iter().any(|(n, _)| n.starts_with("ce-")),
        "{:?}",
        req.headers
    );
    let event: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(event["data"], serde_json::json!({"a": 1}));
    assert_eq!(event["type"], "ankusa.hook.received");
    assert_eq!(event["id"], "h 1");

    let refused = ankusa_sink_http::HttpSink::builder(server.url("/ce"))
        .cloudevents(Format::MessageV1, None)
        .build()
        .unwrap_err();
    assert!(
        refused.to_string().contains("never Message v1"),
        "{refused}"
    );
}
