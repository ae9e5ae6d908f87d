//! W3C trace context through the binary: every attempt's request carries a `traceparent`
//! (a child of the hook's, or a new trace) and the hook's valid `tracestate`, and with
//! `--otlp-endpoint` the attempt span goes to an OTLP/HTTP collector on 127.0.0.1, decoded
//! here from its protobuf, with the same ids as the request carried.

use super::dispatch_http::{Server, server_on};
use super::http::{OK, UNAVAILABLE};
use super::{free_addr, run, run_with, temp_file, text};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind, status::StatusCode};
use prost::Message as _;
use std::net::TcpListener;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
const STATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

fn server(response: &'static str) -> Server {
    server_on(TcpListener::bind("127.0.0.1:0").unwrap(), response)
}

/// `deliver --json` of hook `id` to an HTTP sink at `dest`, with `extra` arguments; its
/// output must be exit 0 (or 3 when `failed`).
fn deliver(dest: &Server, id: &str, extra: &[&str], failed: bool) -> String {
    deliver_env(dest, id, extra, failed, &[])
}

/// [`deliver`] with `env` for the child.
fn deliver_env(
    dest: &Server,
    id: &str,
    extra: &[&str],
    failed: bool,
    env: &[(&str, &str)],
) -> String {
    let sink = temp_file(
        "traced.toml",
        &format!("type = \"http\"\nurl = \"{}\"\n", dest.url),
    );
    let mut args = vec![
        "deliver",
        "--sink",
        sink.to_str().unwrap(),
        "--id",
        id,
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = run_with(&args, env);
    let want = if failed { 3 } else { 0 };
    assert_eq!(
        out.status.code(),
        Some(want),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

/// The `traceparent` parts of every request `dest` received: (trace id, span id, flags),
/// and the `tracestate`.
fn received(dest: &Server) -> Vec<((String, String, String), Option<String>)> {
    dest.requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| {
            let tp = r
                .header("traceparent")
                .expect("a traceparent on every request");
            let parts: Vec<&str> = tp.split('-').collect();
            assert_eq!(parts.len(), 4, "{tp}");
            assert_eq!(parts[0], "00", "{tp}");
            assert!(parts[1].len() == 32 && parts[2].len() == 16, "{tp}");
            (
                (
                    parts[1].to_owned(),
                    parts[2].to_owned(),
                    parts[3].to_owned(),
                ),
                r.header("tracestate").map(str::to_owned),
            )
        })
        .collect()
}

#[test]
fn every_attempt_is_a_child_of_the_hooks_trace_or_a_new_one() {
    let dest = server(OK);
    let tp = format!("traceparent: 00-{TRACE}-{PARENT}-01");
    let ts = format!("tracestate: {STATE}");
    deliver(&dest, "t-child", &["--header", &tp, "--header", &ts], false);
    let got = received(&dest);
    assert_eq!(got.len(), 1);
    let ((trace, span, flags), state) = &got[0];
    assert_eq!((trace.as_str(), flags.as_str()), (TRACE, "01"));
    assert_ne!(span, PARENT, "the attempt is a span of its own");
    assert_eq!(state.as_deref(), Some(STATE));

    // Without one, or with one that is not W3C (and a state that is not either): a new
    // trace, and neither malformed header reaches the destination.
    for headers in [
        vec![],
        vec![
            "--header".to_owned(),
            format!("traceparent: 00-{}-{PARENT}-01", "0".repeat(32)),
            "--header".to_owned(),
            "tracestate: a=1\tINJECTED=2".to_owned(),
        ],
    ] {
        let dest = server(OK);
        let args: Vec<&str> = headers.iter().map(String::as_str).collect();
        deliver(&dest, "t-root", &args, false);
        let got = received(&dest);
        let ((trace, _, flags), state) = &got[0];
        assert_ne!(trace, TRACE);
        assert_ne!(trace, &"0".repeat(32));
        assert_eq!(flags, "01");
        assert_eq!(state, &None);
    }
}

/// Every attempt span the collector received, decoded.
fn exported(collector: &Server) -> Vec<Span> {
    let requests = collector.requests.lock().unwrap();
    requests
        .iter()
        .flat_map(|r| {
            assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
            let req = ExportTraceServiceRequest::decode(&r.body[..]).expect("OTLP protobuf");
            req.resource_spans
                .into_iter()
                .flat_map(|rs| rs.scope_spans)
                .flat_map(|ss| ss.spans)
                .collect::<Vec<_>>()
        })
        .filter(|s| s.name == "ankusa.dispatch.attempt")
        .collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .map(|v| match v {
            AnyValue::StringValue(s) => s.clone(),
            AnyValue::IntValue(i) => i.to_string(),
            AnyValue::BoolValue(b) => b.to_string(),
            other => format!("{other:?}"),
        })
}

#[test]
fn otlp_exports_each_attempt_span_with_the_ids_the_destination_got() {
    let collector = server(OK);
    let endpoint = collector.url.trim_end_matches("/hook").to_owned();
    let dest = server(OK);
    let tp = format!("traceparent: 00-{TRACE}-{PARENT}-01");
    let args = [
        "--header",
        &tp,
        "--otlp-endpoint",
        &endpoint,
        "--tenant",
        "acme",
    ];
    deliver(&dest, "t-otlp", &args, false);
    let got = received(&dest);
    let spans = exported(&collector);
    assert_eq!(spans.len(), 1, "{spans:?}");
    let span = &spans[0];
    let ((_, span_id, _), _) = &got[0];
    assert_eq!(hex::encode(&span.trace_id), TRACE);
    assert_eq!(
        &hex::encode(&span.span_id),
        span_id,
        "the id the request carried"
    );
    assert_eq!(hex::encode(&span.parent_span_id), PARENT);
    assert_eq!(span.kind, SpanKind::Producer as i32);
    assert_eq!(
        span.status.as_ref().map(|s| s.code),
        Some(StatusCode::Ok as i32)
    );
    assert_eq!(attribute(span, "hook_id").as_deref(), Some("t-otlp"));
    assert_eq!(attribute(span, "tenant_id").as_deref(), Some("acme"));
    assert_eq!(attribute(span, "sink").as_deref(), Some("traced"));
    assert_eq!(attribute(span, "attempt").as_deref(), Some("1"));
    assert_eq!(
        attribute(span, "span_id").as_deref(),
        Some(span_id.as_str())
    );

    // A failed attempt: its span is an error, with the class and without the reason; a
    // hook without a traceparent is a root span.
    let collector = server(OK);
    let endpoint = collector.url.trim_end_matches("/hook").to_owned();
    let dest = server(UNAVAILABLE);
    deliver(&dest, "t-otlp-fail", &["--otlp-endpoint", &endpoint], true);
    let spans = exported(&collector);
    assert_eq!(spans.len(), 1, "{spans:?}");
    let ((trace, span_id, _), _) = &received(&dest)[0];
    assert_eq!(&hex::encode(&spans[0].trace_id), trace);
    assert_eq!(&hex::encode(&spans[0].span_id), span_id);
    assert!(spans[0].parent_span_id.is_empty());
    assert_eq!(
        spans[0].status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );
    assert_eq!(attribute(&spans[0], "class").as_deref(), Some("transient"));
}

#[test]
fn a_collector_that_is_down_costs_spans_not_deliveries() {
    let dest = server(OK);
    let endpoint = format!("http://{}", free_addr());
    let stderr = deliver(&dest, "t-otlp-down", &["--otlp-endpoint", &endpoint], false);
    assert_eq!(received(&dest).len(), 1);
    assert!(stderr.contains("OTLP: spans not exported"), "{stderr}");
}

#[test]
fn a_bad_otlp_endpoint_is_a_usage_error_that_hides_credentials() {
    let dest = server(OK);
    let sink = temp_file(
        "traced.toml",
        &format!("type = \"http\"\nurl = \"{}\"\n", dest.url),
    );
    for bad in [
        "grpc://127.0.0.1:4317",
        "http://user:hunter2@127.0.0.1:4318",
        "nonsense",
    ] {
        let out = run(&[
            "deliver",
            "--sink",
            sink.to_str().unwrap(),
            "--otlp-endpoint",
            bad,
        ]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("--otlp-endpoint"), "{stderr}");
        assert!(!stderr.contains("hunter2"), "{stderr}");
    }
    assert_eq!(
        dest.requests.lock().unwrap().len(),
        0,
        "nothing was delivered"
    );
}

/// The collector's endpoint (its URL without the path the server names).
fn endpoint_of(collector: &Server) -> String {
    collector.url.trim_end_matches("/hook").to_owned()
}

/// A fixed answer of the test servers, made once.
fn leaked(answer: String) -> &'static str {
    Box::leak(answer.into_boxed_str())
}

#[test]
fn otlp_takes_no_proxy_from_the_environment() {
    // A proxy in the environment is not the collector's way: the spans go direct.
    let proxy = server(OK);
    let collector = server(OK);
    let dest = server(OK);
    let proxy_url = endpoint_of(&proxy);
    let env = [
        ("HTTP_PROXY", proxy_url.as_str()),
        ("http_proxy", proxy_url.as_str()),
        ("ALL_PROXY", proxy_url.as_str()),
    ];
    let args = ["--otlp-endpoint", &endpoint_of(&collector)];
    deliver_env(&dest, "t-otlp-proxy", &args, false, &env);
    assert_eq!(exported(&collector).len(), 1);
    assert_eq!(proxy.requests.lock().unwrap().len(), 0, "no proxy");
}

#[test]
fn otlp_follows_no_redirect() {
    // A collector that redirects is not followed: the export fails (counted, logged).
    let elsewhere = server(OK);
    let redirect = leaked(format!(
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: {}/v1/traces\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        endpoint_of(&elsewhere)
    ));
    let redirector = server(redirect);
    let dest = server(OK);
    let args = ["--otlp-endpoint", &endpoint_of(&redirector)];
    let stderr = deliver(&dest, "t-otlp-redirect", &args, false);
    assert_eq!(redirector.requests.lock().unwrap().len(), 1);
    assert_eq!(elsewhere.requests.lock().unwrap().len(), 0, "not followed");
    assert!(stderr.contains("OTLP: spans not exported"), "{stderr}");
}

#[test]
fn a_collector_answer_over_64_kib_fails_the_export() {
    let big = leaked(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
        100 * 1024,
        "\0".repeat(100 * 1024)
    ));
    let collector = server(big);
    let dest = server(OK);
    let args = ["--otlp-endpoint", &endpoint_of(&collector)];
    let stderr = deliver(&dest, "t-otlp-big", &args, false);
    assert_eq!(received(&dest).len(), 1, "the delivery is not held up");
    assert!(stderr.contains("OTLP: spans not exported"), "{stderr}");
}

#[test]
fn every_attempt_is_exported_whatever_the_hooks_sampled_flag() {
    // The hook's sender chose `00` (not sampled); the operator asked for every attempt.
    let collector = server(OK);
    let dest = server(OK);
    let tp = format!("traceparent: 00-{TRACE}-{PARENT}-00");
    let args = ["--header", &tp, "--otlp-endpoint", &endpoint_of(&collector)];
    deliver(&dest, "t-otlp-unsampled", &args, false);
    let spans = exported(&collector);
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(
        hex::encode(&spans[0].trace_id),
        TRACE,
        "in the hook's trace"
    );
    assert_eq!(hex::encode(&spans[0].parent_span_id), PARENT);
    // The attempt was recorded: the destination is told so.
    let ((_, _, flags), _) = &received(&dest)[0];
    assert_eq!(flags, "01");
}

#[test]
fn a_long_hook_id_is_cut_in_the_span_not_refused_with_its_batch() {
    let collector = server(OK);
    let dest = server(OK);
    let id = format!("long-{}", "é".repeat(4000));
    let args = ["--otlp-endpoint", &endpoint_of(&collector)];
    deliver(&dest, &id, &args, false);
    let spans = exported(&collector);
    assert_eq!(spans.len(), 1, "{spans:?}");
    let hook_id = attribute(&spans[0], "hook_id").unwrap();
    assert!(hook_id.len() <= 256, "{}", hook_id.len());
    assert!(
        hook_id.starts_with("long-é") && hook_id.ends_with('…'),
        "{hook_id}"
    );
}

#[test]
fn collector_headers_are_not_sent_in_cleartext_beyond_loopback() {
    let dest = server(OK);
    let sink = temp_file(
        "traced.toml",
        &format!("type = \"http\"\nurl = \"{}\"\n", dest.url),
    );
    for var in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ] {
        let out = run_with(
            &[
                "deliver",
                "--sink",
                sink.to_str().unwrap(),
                "--otlp-endpoint",
                "http://192.0.2.10:4318",
            ],
            &[(var, "authorization=Bearer%20hunter2")],
        );
        assert_eq!(out.status.code(), Some(2), "{var}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("--otlp-allow-insecure"), "{stderr}");
        assert!(!stderr.contains("hunter2"), "{stderr}");
    }
    assert_eq!(dest.requests.lock().unwrap().len(), 0);
    // To loopback, or without headers, the same URL shape is fine (tested in-file too).
    let collector = server(OK);
    let env = [(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "authorization=Bearer%20hunter2",
    )];
    let args = ["--otlp-endpoint", &endpoint_of(&collector)];
    deliver_env(&dest, "t-otlp-headers", &args, false, &env);
    let requests = collector.requests.lock().unwrap();
    assert_eq!(requests[0].header("authorization"), Some("Bearer hunter2"));
}
