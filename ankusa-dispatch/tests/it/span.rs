//! Every attempt runs in the attempt span, trace id included, class never reason.

use crate::*;
use ankusa_dispatch::{ATTEMPT_SPAN, Dispatcher, Hook};
use std::collections::BTreeMap;
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

type Fields = BTreeMap<String, String>;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<HashMap<u64, Fields>>>);

struct V<'a>(&'a mut Fields);
impl Visit for V<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attrs.metadata().name() != ATTEMPT_SPAN {
            return;
        }
        let mut m = Fields::new();
        attrs.record(&mut V(&mut m));
        self.0.lock().unwrap().insert(id.into_u64(), m);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(m) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut V(m));
        }
    }
}

// A current-thread runtime: the scheduler and its attempt tasks run on this thread, under
// this thread's subscriber.
#[tokio::test(start_paused = true)]
async fn attempts_carry_the_trace_id_and_the_class_with_a_config_flag() {
    let cap = Capture::default();
    let _g = tracing::subscriber::set_default(tracing_subscriber::registry().with(cap.clone()));
    tracing::callsite::rebuild_interest_cache();
    let (d, mut out) = Dispatcher::builder()
        .sink("amqp", Script::new(Step::Config).arc())
        .sink("http", Script::new(Step::Ok).arc())
        .build()
        .unwrap();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let e = Envelope::builder("h1", "stripe", "secret-body")
        .tenant_id("acme")
        .build()
        .unwrap();
    d.submit(Hook::new(e).traceparent(tp).replay_id("r1"))
        .await
        .unwrap();
    recv_n(&mut out, 2, Duration::from_secs(1)).await;
    let spans: Vec<Fields> = cap.0.lock().unwrap().values().cloned().collect();
    assert_eq!(spans.len(), 2);
    for m in &spans {
        assert_eq!(m["hook_id"], "h1");
        assert_eq!(m["source_id"], "stripe");
        assert_eq!(m["tenant_id"], "acme");
        assert_eq!(m["attempt"], "1");
        assert_eq!(m["replay_id"], "r1");
        assert_eq!(m["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(
            m.values()
                .all(|v| !v.contains("scripted") && !v.contains("secret-body"))
        );
    }
    let amqp = spans.iter().find(|m| m["sink"] == "amqp").unwrap();
    assert_eq!(amqp["class"], "permanent");
    assert_eq!(amqp["config"], "true");
    assert_eq!(amqp["otel.status_code"], "ERROR");
    let http = spans.iter().find(|m| m["sink"] == "http").unwrap();
    assert_eq!(http["otel.status_code"], "OK");
    assert!(!http.contains_key("class"));
}
