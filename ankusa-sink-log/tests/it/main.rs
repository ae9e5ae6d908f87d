//! The log sink against the conformance suite, and its one structured line per hook.

mod conformance;

use ankusa_sink_core::{Ctx, Envelope, Sink};
use ankusa_sink_log::{LogConfig, LogSink};
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn one_structured_line_per_hook() {
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let sink = LogSink::default();
    assert!(!sink.durable());
    assert!(sink.inline_max_bytes().is_none());
    // A callsite another thread (a conformance test delivering at the same moment)
    // registered while this subscriber was being set up can keep an interest computed
    // without it, and tracing then skips the event here for good (10,000 deliveries in a
    // row once saw nothing). Rebuilding the interest cache after each silent delivery asks
    // every subscriber again, this one included.
    let warm = Envelope::builder("h-0", "stripe", "{}").build().unwrap();
    for _ in 0..100 {
        sink.deliver(&warm, &Ctx::for_envelope(&warm))
            .await
            .unwrap();
        if !buf.0.lock().unwrap().is_empty() {
            break;
        }
        tracing::callsite::rebuild_interest_cache();
    }
    assert!(
        !buf.0.lock().unwrap().is_empty(),
        "the callsite never registered"
    );
    buf.0.lock().unwrap().clear();
    let env = Envelope::builder("h-1", "stripe", "secret body")
        .tenant_id("acme")
        .build()
        .unwrap();
    sink.deliver(&env, &Ctx::for_envelope(&env).with_attempt(4))
        .await
        .unwrap();
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let f = &v["fields"];
    assert_eq!(f["message"], "hook delivered");
    assert_eq!(f["hook_id"], "h-1");
    assert_eq!(f["source_id"], "stripe");
    assert_eq!(f["tenant_id"], "acme");
    assert_eq!(f["attempt"], 4);
    assert_eq!(f["size"], 11);
    assert_eq!(v["target"], "ankusa::sink::log");
    assert!(!text.contains("secret body"), "the body is never logged");
}

#[test]
fn config_is_strict() {
    let c: LogConfig = serde_json::from_str(r#"{"messages":true}"#).unwrap();
    assert!(c.messages());
    let err = serde_json::from_str::<LogConfig>(r#"{"mesages":true}"#).unwrap_err();
    assert!(err.to_string().contains("mesages"), "{err}");
}
