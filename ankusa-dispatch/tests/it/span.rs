//! Every attempt runs in the attempt span, trace id included, class never reason.

use crate::*;
use ankusa_dispatch::{ATTEMPT_SPAN, Dispatcher, Hook};
use ankusa_sink_testkit::support::LogCapture;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

/// A capture on the process's global subscriber, installed once. A capture on this
/// thread alone (`LogCapture::set_default`) could miss the spans: other tests of this
/// binary install and drop thread subscribers, and `tracing` caches callsite interest for
/// the whole process (one run in four saw no span at all). A global subscriber that wants
/// every span keeps that cache from ever saying "never"; this test then keeps its own
/// spans by their unique hook id.
pub(crate) fn global_capture() -> &'static LogCapture {
    static CAPTURE: OnceLock<LogCapture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt as _;
        let cap = LogCapture::for_targets(&["ankusa"]);
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(cap.clone()))
            .expect("the only global subscriber of this test binary");
        cap
    })
}

// A current-thread runtime: the scheduler and its attempt tasks run on this thread, which
// has no subscriber of its own: the global one sees them.
#[tokio::test(start_paused = true)]
async fn attempts_carry_the_trace_id_and_the_class_with_a_config_flag() {
    let cap = global_capture();
    let (d, mut out) = Dispatcher::builder()
        .sink("amqp", Script::new(Step::Config).arc())
        .sink("http", Script::new(Step::Ok).arc())
        .build()
        .unwrap();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    // An id no other test of this binary uses: the global capture sees them all.
    let id = "span-test-h1";
    let e = Envelope::builder(id, "stripe", "secret-body")
        .tenant_id("acme")
        .build()
        .unwrap();
    d.submit(Hook::new(e).traceparent(tp).replay_id("r1"))
        .await
        .unwrap();
    recv_n(&mut out, 2, Duration::from_secs(1)).await;
    let spans: Vec<BTreeMap<String, String>> = cap
        .spans()
        .into_iter()
        .filter(|s| s.name == ATTEMPT_SPAN && s.fields.get("hook_id").is_some_and(|h| h == id))
        .map(|s| s.fields)
        .collect();
    assert_eq!(spans.len(), 2);
    for m in &spans {
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
