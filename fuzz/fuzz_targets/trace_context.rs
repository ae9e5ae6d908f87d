//! W3C trace context from a hook's headers: `traceparent` (`TraceContext::parse`, and the
//! dispatcher's `trace_id_of`) and `tracestate` (`TraceContext::with_tracestate`).
//!
//! Invariants: no panic; a parsed context writes a version-00 `traceparent` that parses
//! to the same context; the two parsers agree on the trace id of a version-00 value; a
//! kept `tracestate` is at most `MAX_TRACESTATE_BYTES`.
#![no_main]

use ankusa_message::{MAX_TRACESTATE_BYTES, TraceContext};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (tp, ts) = text.split_once('\n').unwrap_or((&text, ""));
    let dispatch_trace = ankusa_dispatch::trace_id_of(tp);
    let Some(ctx) = TraceContext::parse(tp) else {
        return;
    };
    let again = TraceContext::parse(ctx.traceparent()).expect("an own traceparent parses");
    assert_eq!(
        ctx.traceparent(),
        again.traceparent(),
        "a traceparent changed"
    );
    assert_eq!(
        (ctx.trace_id(), ctx.span_id(), ctx.flags()),
        (again.trace_id(), again.span_id(), again.flags())
    );
    if let Some(id) = dispatch_trace {
        assert_eq!(
            id,
            ctx.trace_id_hex(),
            "the two traceparent parsers disagree"
        );
    }
    assert_eq!(
        ankusa_dispatch::trace_id_of(ctx.traceparent()),
        Some(ctx.trace_id_hex()),
        "the dispatcher refuses an own traceparent"
    );
    let with = ctx.with_tracestate(ts);
    if let Some(state) = with.tracestate() {
        assert!(
            state.len() <= MAX_TRACESTATE_BYTES,
            "a tracestate over the limit kept"
        );
        let kept = with.clone().with_tracestate(state);
        assert_eq!(
            kept.tracestate(),
            Some(state),
            "a kept tracestate refused again"
        );
    }
});
