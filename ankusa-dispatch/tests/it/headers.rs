//! The header policy is a dispatch knob: per sink, over the dispatcher's, on every attempt.

use crate::*;
use ankusa_dispatch::{DispatchConfig, Dispatcher, Hook, SinkDispatch};
use ankusa_message::{ForwardHeaders, HeaderPolicy, forwarded_headers};
use ankusa_sink_core::{Ctx, Failure, Sink, async_trait};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Keeps the names of the headers each attempt would forward.
#[derive(Debug, Default)]
struct Forwarded(Mutex<Vec<Vec<String>>>);

#[async_trait]
impl Sink for Forwarded {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let names = forwarded_headers(env, ctx)
            .into_iter()
            .map(|(n, _)| n.to_ascii_lowercase())
            .collect();
        self.0.lock().unwrap().push(names);
        Ok(())
    }
}

#[tokio::test]
async fn each_sink_forwards_what_its_header_policy_allows() {
    let (open, only_a, only_b) = (
        Arc::new(Forwarded::default()),
        Arc::new(Forwarded::default()),
        Arc::new(Forwarded::default()),
    );
    let only = |names: &[&str]| HeaderPolicy::from(ForwardHeaders::only(names.iter()).unwrap());
    let (d, mut out) = Dispatcher::builder()
        .sink("open", open.clone())
        .sink("only-a", only_a.clone())
        .sink("only-b", only_b.clone())
        .sink_settings(
            "only-a",
            SinkDispatch::default().with_header_policy(only(&["x-a"])),
        )
        .config(DispatchConfig::default().with_header_policy(only(&["x-b"])))
        .build()
        .unwrap();
    let e = Envelope::builder("h1", "stripe", "{}")
        .header("X-A", "1")
        .header("X-B", "2")
        .header("X-C", "3")
        .build()
        .unwrap();
    d.submit(Hook::new(e)).await.unwrap();
    recv_n(&mut out, 3, Duration::from_secs(5)).await;
    assert_eq!(*only_a.0.lock().unwrap(), [vec!["x-a".to_owned()]]);
    // Neither has a policy of its own: the dispatcher's applies.
    assert_eq!(*only_b.0.lock().unwrap(), [vec!["x-b".to_owned()]]);
    assert_eq!(*open.0.lock().unwrap(), [vec!["x-b".to_owned()]]);

    // Without any policy: the default deny-list forwards all three.
    let plain = Arc::new(Forwarded::default());
    let (d, mut out) = Dispatcher::builder()
        .sink("plain", plain.clone())
        .build()
        .unwrap();
    let e = Envelope::builder("h2", "stripe", "{}")
        .header("X-A", "1")
        .header("X-C", "3")
        .build()
        .unwrap();
    d.submit(Hook::new(e)).await.unwrap();
    recv_n(&mut out, 1, Duration::from_secs(5)).await;
    assert_eq!(plain.0.lock().unwrap()[0].len(), 2);
}
