//! The log sink's one structured line per hook.
//!
//! A process of its own, with the subscriber installed globally before any event: tracing
//! caches each callsite's interest process-wide, and in the `it` binary the conformance
//! tests' threads, delivering and installing subscribers of their own at the same moments,
//! could leave this test's callsite marked uninterested after its subscriber was set (CI saw
//! the line go missing once, after a warm-up delivery had been logged).

use ankusa_sink_core::Class;
use ankusa_sink_core::{Ctx, Envelope, Sink};
use ankusa_sink_log::LogSink;
use ankusa_sink_log::ReportingWriter;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>, Arc<AtomicBool>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.1.load(Ordering::Relaxed) {
            // What a write to stderr on a full device answers.
            return Err(std::io::Error::from_raw_os_error(28));
        }
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
        .with_writer(move || ReportingWriter(writer.clone()))
        .log_internal_errors(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only test of this binary");
    let sink = LogSink::default();
    assert!(!sink.capabilities().durable);
    assert!(sink.capabilities().inline_max_bytes.is_none());
    for (n, id) in ["h-1", "h-2"].into_iter().enumerate() {
        buf.0.lock().unwrap().clear();
        let env = Envelope::builder(id, "stripe", "secret body")
            .tenant_id("acme")
            .build()
            .unwrap();
        sink.deliver(&env, &Ctx::for_envelope(&env).with_attempt(4))
            .await
            .unwrap();
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "delivery {n}: {text}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        let f = &v["fields"];
        assert_eq!(f["message"], "hook delivered");
        assert_eq!(f["hook_id"], id);
        assert_eq!(f["source_id"], "stripe");
        assert_eq!(f["tenant_id"], "acme");
        assert_eq!(f["attempt"], 4);
        assert_eq!(f["size"], 11);
        assert_eq!(v["target"], "ankusa::sink::log");
        assert!(!text.contains("secret body"), "the body is never logged");
    }
    // The line cannot be written (stderr on a full disk): the delivery fails, transient,
    // naming stderr; nothing panics.
    buf.1.store(true, Ordering::Relaxed);
    let env = Envelope::builder("h-3", "stripe", "x").build().unwrap();
    let f = sink
        .deliver(&env, &Ctx::for_envelope(&env))
        .await
        .unwrap_err();
    assert_eq!(f.class(), Class::Transient);
    assert!(f.to_string().contains("writing stderr"), "{f}");
    // Written again: delivered again, no failure left over from the last one.
    buf.1.store(false, Ordering::Relaxed);
    sink.deliver(&env, &Ctx::for_envelope(&env)).await.unwrap();
}
