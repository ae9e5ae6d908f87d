//! One delivery attempt inside the `ankusa.dispatch.attempt` tracing span.

use ankusa_message::TraceContext;
use ankusa_sink_core::{Class, Ctx, Envelope, Failure};
use futures_util::FutureExt as _;
use std::future::Future;
use tracing::Instrument as _;

/// The span name every attempt runs in.
pub const ATTEMPT_SPAN: &str = "ankusa.dispatch.attempt";

/// Run one delivery attempt of `env` for the sink named `sink` inside an
/// `ankusa.dispatch.attempt` span.
///
/// # Behavior
/// - The span carries `hook_id`, `source_id`, `tenant_id`, `sink`, `attempt`, `trace_id`
///   (see [`attempt_in_trace`]) and `replay_id`, so whatever the sink logs while it
///   delivers names the hook.
/// - A failure records `class` (`permanent`, `retry_after`, `transient`, as the
///   specification names them: a config failure is `permanent`, with `config = true`) and
///   `otel.status_code = "ERROR"` on the span, never the reason (reasons can be long and
///   are the sink's to log). Success records `otel.status_code = "OK"`.
/// - The `otel.*` fields follow `tracing-opentelemetry`'s conventions: add its layer to your
///   subscriber to export attempts as OpenTelemetry spans with the right status and kind.
/// - With no subscriber interested, the span is disabled and costs a branch.
pub fn attempt<T, F>(
    sink: &str,
    env: &Envelope,
    ctx: &Ctx,
    fut: F,
) -> impl Future<Output = Result<T, Failure>>
where
    F: Future<Output = Result<T, Failure>>,
{
    run(attempt_span(sink, env, ctx, None), fut)
}

/// The 32 lowercase hex digits of a W3C `traceparent`'s trace id, if it is well formed.
pub fn trace_id_of(traceparent: &str) -> Option<&str> {
    traceparent_parts(traceparent).map(|(trace, _, _)| trace)
}

/// A well-formed version-00 `traceparent`'s trace id, span id and flags (lowercase hex of
/// 32, 16 and 2 digits; neither id all zeros).
fn traceparent_parts(s: &str) -> Option<(&str, &str, &str)> {
    let mut parts = s.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |p: &str, n: usize| {
        p.len() == n
            && p.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let zero = |p: &str| p.bytes().all(|b| b == b'0');
    (version == "00"
        && parts.next().is_none()
        && hex(trace, 32)
        && hex(span, 16)
        && hex(flags, 2)
        && !zero(trace)
        && !zero(span))
    .then_some((trace, span, flags))
}

fn attempt_span(sink: &str, env: &Envelope, ctx: &Ctx, trace_id: Option<&str>) -> tracing::Span {
    tracing::info_span!(
        "ankusa.dispatch.attempt",
        otel.name = ATTEMPT_SPAN,
        otel.kind = "producer",
        otel.status_code = tracing::field::Empty,
        hook_id = env.id(),
        source_id = env.source_id(),
        tenant_id = env.tenant_id(),
        sink = sink,
        attempt = ctx.attempt.get(),
        trace_id = trace_id,
        span_id = tracing::field::Empty,
        replay_id = ctx.replay_id.as_deref(),
        class = tracing::field::Empty,
        config = tracing::field::Empty,
    )
}

/// `fut` in `span`, its outcome recorded on the span. Not an `async fn`: that would keep
/// `fut` once as its argument and again as the future it awaits, and `attempt_in_trace`
/// around it a third time; every attempt in flight holds this future (with a sink's
/// `safe_deliver` inside, 760 bytes as `async fn`s).
pub(crate) fn run<T, F>(span: tracing::Span, fut: F) -> impl Future<Output = Result<T, Failure>>
where
    F: Future<Output = Result<T, Failure>>,
{
    let record = span.clone();
    fut.instrument(span).map(move |res| {
        record_outcome(&record, &res);
        res
    })
}

/// The outcome's `otel.status_code`, `class` and `config` on the attempt's span.
fn record_outcome<T>(span: &tracing::Span, res: &Result<T, Failure>) {
    if !span.is_disabled() {
        match res {
            Ok(_) => {
                span.record("otel.status_code", "OK");
            }
            Err(f) => {
                let class = match f.class() {
                    Class::Config => {
                        span.record("config", true);
                        Class::Permanent.as_str()
                    }
                    other => other.as_str(),
                };
                span.record("class", class);
                span.record("otel.status_code", "ERROR");
            }
        }
    }
}

/// [`attempt`], in the hook's stored W3C trace context: the span's `trace_id` is the
/// trace id of `traceparent`, and with the `otel` feature the attempt span is a child of
/// `traceparent` and linked to it, so every attempt of a hook, however late, is in its
/// trace. A missing or malformed `traceparent` gives a root span (never an error: tracing
/// must not fail a delivery).
pub fn attempt_in_trace<T, F>(
    sink: &str,
    env: &Envelope,
    ctx: &Ctx,
    traceparent: Option<&str>,
    fut: F,
) -> impl Future<Output = Result<T, Failure>>
where
    F: Future<Output = Result<T, Failure>>,
{
    let span = attempt_span(sink, env, ctx, traceparent.and_then(trace_id_of));
    #[cfg(feature = "otel")]
    if let Some(sc) = traceparent.and_then(parse_traceparent) {
        join(&span, sc);
    }
    run(span, fut)
}

/// The span of an attempt dispatch runs, and its context carrying the attempt's W3C
/// trace context ([`Ctx::trace`]): the same trace id and span id as the span, a child of
/// the hook's stored `parent` (its `tracestate` kept), or a new trace without one. The
/// span records them as `trace_id` and `span_id`. With the `otel` feature and an
/// OpenTelemetry layer installed, the ids are the exported span's own.
pub(crate) fn traced(
    sink: &str,
    env: &Envelope,
    ctx: Ctx,
    parent: Option<&TraceContext>,
) -> (tracing::Span, Ctx) {
    let span = attempt_span(sink, env, &ctx, None);
    let trace = span_trace(&span, parent);
    if !span.is_disabled() {
        span.record("trace_id", trace.trace_id_hex());
        span.record("span_id", trace.span_id_hex());
    }
    (span, ctx.with_extension(trace))
}

/// The trace context of `span`: the OpenTelemetry span's ids when one is recording it,
/// else ids of our own in the same shape.
fn span_trace(span: &tracing::Span, parent: Option<&TraceContext>) -> TraceContext {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        if let Some(sc) = parent.map(span_context) {
            join(span, sc);
        }
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        let own = sc.is_valid().then(|| {
            TraceContext::new(
                sc.trace_id().to_bytes(),
                sc.span_id().to_bytes(),
                sc.trace_flags().to_u8(),
            )
        });
        if let Some(t) = own.flatten() {
            return match parent.and_then(TraceContext::tracestate) {
                Some(state) => t.with_tracestate(state),
                None => t,
            };
        }
    }
    #[cfg(not(feature = "otel"))]
    let _ = span;
    match parent {
        Some(p) => TraceContext::child_of(p),
        None => TraceContext::root(),
    }
}

/// Make `span` a child of the remote span `sc`, and link it: every attempt of a hook, however
/// late, is in the hook's trace.
#[cfg(feature = "otel")]
fn join(span: &tracing::Span, sc: opentelemetry::trace::SpanContext) {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(sc.clone()));
    span.add_link(sc);
}

/// A trace context as OpenTelemetry's remote span context.
#[cfg(feature = "otel")]
fn span_context(t: &TraceContext) -> opentelemetry::trace::SpanContext {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let state = t
        .tracestate()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    SpanContext::new(
        TraceId::from_bytes(t.trace_id()),
        SpanId::from_bytes(t.span_id()),
        TraceFlags::new(t.flags()),
        true,
        state,
    )
}

/// Parse a W3C `traceparent` (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`).
#[cfg(feature = "otel")]
pub fn parse_traceparent(s: &str) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let (trace, span, flags) = traceparent_parts(s)?;
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    Some(SpanContext::new(
        trace_id,
        span_id,
        flags,
        true,
        TraceState::default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::Reason;
    use ankusa_sink_testkit::support::LogCapture;

    /// Every attempt in flight holds this future: the span and the sink's future once,
    /// not once per layer (760 bytes as nested `async fn`s).
    #[test]
    fn the_attempt_future_holds_the_delivery_once() {
        #[derive(Debug)]
        struct Noop;
        #[ankusa_sink_core::async_trait]
        impl ankusa_sink_core::Sink for Noop {
            async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
                Ok(())
            }
        }
        let (env, sink) = (env(), Noop);
        let ctx = Ctx::for_envelope(&env);
        let deliver = || {
            let timeout = Some(std::time::Duration::from_secs(1));
            ankusa_sink_core::safe_deliver(&sink, &env, &ctx, timeout)
        };
        let inner = std::mem::size_of_val(&deliver());
        let whole = std::mem::size_of_val(&attempt_in_trace("s", &env, &ctx, None, deliver()));
        assert!(
            whole <= inner + 128,
            "{whole} bytes around a {inner}-byte delivery"
        );
    }

    fn env() -> Envelope {
        Envelope::builder("h1", "src", "secret-body")
            .tenant_id("acme")
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn failure_marks_class_never_reason() {
        let cap = LogCapture::new();
        let _g = cap.set_default();
        let e = env();
        let ctx = Ctx::for_envelope(&e).with_attempt(3).with_replay_id("r9");
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let res: Result<(), _> = attempt_in_trace("amqp", &e, &ctx, Some(tp), async {
            Err(Failure::config(Reason("queue q missing".into())))
        })
        .await;
        assert!(res.is_err());
        let spans = cap.spans();
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].name, ATTEMPT_SPAN);
        let m = &spans[0].fields;
        assert_eq!(m["hook_id"], "h1");
        assert_eq!(m["source_id"], "src");
        assert_eq!(m["tenant_id"], "acme");
        assert_eq!(m["sink"], "amqp");
        assert_eq!(m["attempt"], "3");
        assert_eq!(m["replay_id"], "r9");
        assert_eq!(m["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        // The specification's classes: a config failure is permanent, flagged config.
        assert_eq!(m["class"], "permanent");
        assert_eq!(m["config"], "true");
        assert_eq!(m["otel.status_code"], "ERROR");
        assert!(m.values().all(|v| !v.contains("queue q missing")));
    }

    #[test]
    fn trace_ids_are_read_from_well_formed_traceparents_only() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(trace_id_of(tp), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "garbage",
        ] {
            assert_eq!(trace_id_of(bad), None, "{bad}");
        }
    }

    #[tokio::test]
    async fn success_without_subscriber_passes_through() {
        let e = env();
        let ctx = Ctx::for_envelope(&e);
        assert_eq!(attempt("log", &e, &ctx, async { Ok(5) }).await.unwrap(), 5);
    }

    #[cfg(feature = "otel")]
    #[tokio::test]
    async fn otel_export_joins_the_stored_trace() {
        use opentelemetry::trace::{Status, TracerProvider as _};
        use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
        use tracing_subscriber::layer::SubscriberExt;
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        let sub = tracing_subscriber::registry().with(layer);
        let _g = tracing::subscriber::set_default(sub);
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let e = env();
        let ctx = Ctx::for_envelope(&e);
        let _: Result<(), _> = super::attempt_in_trace("http", &e, &ctx, Some(tp), async {
            Err(Failure::transient(Reason("reset".into())))
        })
        .await;
        provider.force_flush().unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        let s = spans
            .iter()
            .find(|s| s.name == ATTEMPT_SPAN)
            .expect("exported");
        assert_eq!(
            s.span_context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(s.parent_span_id.to_string(), "00f067aa0ba902b7");
        assert_eq!(s.links.links.len(), 1);
        assert!(matches!(s.status, Status::Error { .. }));
        assert!(s.attributes.iter().any(|kv| kv.key.as_str() == "hook_id"));
        assert!(
            super::parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
                .is_none()
        );
        assert!(
            super::parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
                .is_none()
        );
        assert!(super::parse_traceparent("garbage").is_none());
    }

    /// What a sink sends is the exported span's own ids: a child of the stored trace with
    /// its state, or a root when the hook has none.
    #[cfg(feature = "otel")]
    #[tokio::test]
    async fn the_context_a_sink_sends_names_the_exported_span() {
        use opentelemetry::trace::TracerProvider as _;
        use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
        use tracing_subscriber::layer::SubscriberExt;
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        let _g = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
        let parent = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .unwrap()
            .with_tracestate("congo=t61rcWkgMzE");
        let e = env();
        let mut sent = Vec::new();
        for p in [Some(&parent), None] {
            let (span, ctx) = super::traced("http", &e, Ctx::for_envelope(&e), p);
            let trace = TraceContext::of(&ctx).cloned().expect("set");
            let _: Result<(), Failure> = super::run(span, async { Ok(()) }).await;
            sent.push(trace);
        }
        provider.force_flush().unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        assert_eq!(spans.len(), 2);
        for (s, t) in spans.iter().zip(&sent) {
            assert_eq!(s.span_context.trace_id().to_string(), t.trace_id_hex());
            assert_eq!(s.span_context.span_id().to_string(), t.span_id_hex());
        }
        assert_eq!(sent[0].trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(spans[0].parent_span_id.to_string(), "00f067aa0ba902b7");
        assert_eq!(sent[0].tracestate(), Some("congo=t61rcWkgMzE"));
        assert_ne!(sent[1].trace_id(), parent.trace_id());
        assert_eq!(sent[1].tracestate(), None);
    }

    /// Without an OpenTelemetry layer the ids are ours, recorded on the span.
    #[tokio::test]
    async fn without_otel_the_span_records_the_ids_it_sends() {
        let cap = LogCapture::new();
        let _g = cap.set_default();
        let e = env();
        let parent =
            TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        let (span, ctx) = super::traced("kafka", &e, Ctx::for_envelope(&e), Some(&parent));
        let _: Result<(), Failure> = super::run(span, async { Ok(()) }).await;
        let trace = TraceContext::of(&ctx).unwrap();
        assert_eq!(trace.trace_id(), parent.trace_id());
        assert_ne!(trace.span_id(), parent.span_id());
        assert_eq!(trace.flags(), 0);
        let spans = cap.spans();
        assert_eq!(spans[0].fields["trace_id"], trace.trace_id_hex());
        assert_eq!(spans[0].fields["span_id"], trace.span_id_hex());
    }
}
