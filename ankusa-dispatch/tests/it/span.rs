//! Every attempt runs in the attempt span, trace id included, class never reason.

use crate::*;
use ankusa_dispatch::{ATTEMPT_SPAN, Dispatcher, Hook};
use ankusa_sink_testkit::support::LogCapture;
use std::collections::BTreeMap;
use std::time::Duration;

// A current-thread runtime: the scheduler and its attempt tasks run on this thread, under
// this thread's subscriber.
#[tokio::test(start_paused = true)]
async fn attempts_carry_the_trace_id_and_the_class_with_a_config_flag() {
    let cap = LogCapture::new();
    let _g = cap.set_default();
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
    let spans: Vec<BTreeMap<String, String>> = cap
        .spans()
        .into_iter()
        .filter(|s| s.name == ATTEMPT_SPAN)
        .map(|s| s.fields)
        .collect();
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
