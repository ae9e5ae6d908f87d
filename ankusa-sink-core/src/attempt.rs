//! One delivery attempt inside the `ankusa.dispatch.attempt` tracing span.

use crate::ctx::Ctx;
use crate::envelope::Envelope;
use crate::failure::Failure;
use std::future::Future;
use tracing::Instrument as _;

/// The span name every attempt runs in.
pub const ATTEMPT_SPAN: &str = "ankusa.dispatch.attempt";

/// Run one delivery attempt of `env` for the sink named `sink` inside an
/// `ankusa.dispatch.attempt` span.
///
/// # Behavior
/// - The span carries `hook_id`, `source_id`, `tenant_id`, `sink`, `attempt` and
///   `replay_id`, so whatever the sink logs while it delivers names the hook.
/// - A failure records `class` (`permanent`, `config`, `retry_after`, `transient`) and
///   `otel.status_code = "ERROR"` on the span, never the reason (reasons can be long and
///   are the sink's to log). Success records `otel.status_code = "OK"`.
/// - The `otel.*` fields follow `tracing-opentelemetry`'s conventions: add its layer to your
///   subscriber to export attempts as OpenTelemetry spans with the right status and kind.
/// - With no subscriber interested, the span is disabled and costs a branch.
pub async fn attempt<T, F>(sink: &str, env: &Envelope, ctx: &Ctx, fut: F) -> Result<T, Failure>
where
    F: Future<Output = Result<T, Failure>>,
{
    let span = tracing::info_span!(
        "ankusa.dispatch.attempt",
        otel.name = ATTEMPT_SPAN,
        otel.kind = "producer",
        otel.status_code = tracing::field::Empty,
        hook_id = env.id(),
        source_id = env.source_id(),
        tenant_id = env.tenant_id(),
        sink = sink,
        attempt = ctx.attempt.get(),
        replay_id = ctx.replay_id.as_deref(),
        class = tracing::field::Empty,
    );
    let res = fut.instrument(span.clone()).await;
    if !span.is_disabled() {
        match &res {
            Ok(_) => {
                span.record("otel.status_code", "OK");
            }
            Err(f) => {
                span.record("class", f.class().as_str());
                span.record("otel.status_code", "ERROR");
            }
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::Reason;
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::{Context, SubscriberExt};

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<BTreeMap<String, String>>>);

    struct V<'a>(&'a mut BTreeMap<String, String>);
    impl Visit for V<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.insert(field.name().into(), format!("{value:?}"));
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().into(), value.into());
        }
    }

    impl<S: tracing::Subscriber> Layer<S> for Capture {
        fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
            let mut m = self.0.lock().unwrap();
            m.insert("name".into(), attrs.metadata().name().into());
            attrs.record(&mut V(&mut m));
        }
        fn on_record(&self, _: &Id, values: &Record<'_>, _: Context<'_, S>) {
            values.record(&mut V(&mut self.0.lock().unwrap()));
        }
    }

    fn env() -> Envelope {
        Envelope::builder("h1", "src", "secret-body")
            .tenant_id("acme")
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn failure_marks_class_never_reason() {
        let cap = Capture::default();
        let sub = tracing_subscriber::registry().with(cap.clone());
        let _g = tracing::subscriber::set_default(sub);
        let e = env();
        let ctx = Ctx::for_envelope(&e).with_attempt(3).with_replay_id("r9");
        let res: Result<(), _> = attempt("amqp", &e, &ctx, async {
            Err(Failure::config(Reason("queue q missing".into())))
        })
        .await;
        assert!(res.is_err());
        let m = cap.0.lock().unwrap().clone();
        assert_eq!(m["name"], ATTEMPT_SPAN);
        assert_eq!(m["hook_id"], "h1");
        assert_eq!(m["source_id"], "src");
        assert_eq!(m["tenant_id"], "acme");
        assert_eq!(m["sink"], "amqp");
        assert_eq!(m["attempt"], "3");
        assert_eq!(m["replay_id"], "r9");
        assert_eq!(m["class"], "config");
        assert_eq!(m["otel.status_code"], "ERROR");
        assert!(m.values().all(|v| !v.contains("queue q missing")));
    }

    #[tokio::test]
    async fn success_without_subscriber_passes_through() {
        let e = env();
        let ctx = Ctx::for_envelope(&e);
        assert_eq!(attempt("log", &e, &ctx, async { Ok(5) }).await.unwrap(), 5);
    }
}
