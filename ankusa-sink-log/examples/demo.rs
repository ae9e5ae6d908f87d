//! Deliver a few generated hooks to the log sink: the embedded default, no broker needed.
//!
//! `cargo run -q -p ankusa-sink-log --example demo -- [COUNT]`: one log line per hook on
//! stderr and its Message v1 JSON on stdout.

use ankusa_sink_core::{Ctx, Envelope, safe_deliver};
use ankusa_sink_log::{LogConfig, LogSink};
use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let count: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    let sink = LogSink::new(LogConfig::default().with_messages(true));
    for i in 0..count {
        let env = Envelope::builder(format!("demo-{i}"), "github", format!("{{\"n\":{i}}}"))
            .tenant_id("acme")
            .content_type("application/json")
            .header("X-GitHub-Event", "push")
            .build()
            .expect("a valid envelope");
        let ctx = Ctx::for_envelope(&env);
        let res = safe_deliver(&sink, &env, &ctx, Some(Duration::from_secs(5))).await;
        if let Err(f) = res {
            eprintln!("delivery failed: {f}");
            std::process::exit(3);
        }
    }
}
