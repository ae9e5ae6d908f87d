//! W3C trace context through the binary: every attempt's request carries a `traceparent`
//! (a child of the hook's, or a new trace) and the hook's valid `tracestate`, and with
//! `--otlp-endpoint` the attempt span goes to an OTLP/HTTP collector on 127.0.0.1, decoded
//! here from its protobuf, with the same ids as the request carried.

use super::dispatch_http::{Server, server_on};
use super::http::{OK, UNAVAILABLE};
use super::{free_addr, run, temp_file, text};
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
    let out = run(&args);
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
