//! Issue 60: one poison hook fails alone. Each row is a hook carrying a value Pub/Sub
//! refuses (or one it must take), published to the emulator: a refused row is permanent,
//! names the field and never its value, and the healthy hook right after it on the same
//! sink is published. The mixed run sends 200 hooks with one poison hook among them
//! through the batching publisher.

use crate::common::Admin;
use ankusa_sink_pubsub::PubSubSink;
use ankusa_sink_testkit::support::poison::{self, Poison, Row, Want, dedupe, replay};
use std::collections::HashSet;
use std::sync::Arc;

fn rows() -> Vec<Row> {
    use Want::{Delivered, Refused, Unbuildable};
    // `acme:stripe:` is 12 bytes: a dedupe key of 1,012 makes a 1,024-byte idempotency key.
    let idem = Refused("attribute \"ankusa_idempotency_key\"");
    vec![
        dedupe("k".repeat(1012), Delivered),
        dedupe("k".repeat(1013), idem),
        dedupe("é".repeat(600), idem),
        dedupe("evt\u{FFFF}x", Delivered),
        dedupe("evt\u{FFFE}x", Delivered),
        dedupe("evt-é", Delivered),
        dedupe("evt-🦀", Delivered),
        dedupe("evt\u{FFFD}x", Delivered),
        dedupe("evt\u{0}x", Unbuildable),
        dedupe("evt\r\nx", Unbuildable),
        // A replay id is not checked by the envelope: attribute values are protobuf
        // strings, and the emulator takes control characters in them.
        replay("r\u{0}\r\nx", Delivered),
        replay("r".repeat(1025), Refused("attribute \"ankusa_replay_id\"")),
        // The ordering key `<source id>/<hook id>`, 1,100 bytes and more: each part under
        // the attribute limit, the two together over the key's.
        Row::custom(
            "ordering key",
            "s".repeat(540),
            Refused("ordering key"),
            |p, v| {
                p.id = format!("{}-{v}", p.id);
                p.source = v.to_owned();
            },
        ),
    ]
}

#[tokio::test]
async fn pubsub_poison_table() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    let t = Admin::shared().topic_with_subscription().await.unwrap();
    let sink = PubSubSink::new(t.config().with_ordering_key("{source_id}/{id}").unwrap())
        .await
        .unwrap();
    let sent = poison::run_on(&rows(), &sink).await;
    let want: HashSet<String> = sent.into_iter().map(|s| s.id).collect();
    let got: HashSet<String> = t
        .pull(want.len())
        .await
        .into_iter()
        .map(|m| m.attributes["ankusa_id"].clone())
        .collect();
    assert_eq!(got, want);
    t.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_batch_mixed_run_fails_only_the_poison_hook() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    let t = Admin::shared().topic_with_subscription().await.unwrap();
    let sink = Arc::new(t.sink().await);
    let value = "k".repeat(1100);
    let hooks = poison::hooks("m", 200, |i, p| {
        p.batch = true;
        if i == 100 {
            p.dedupe = Some(value.clone());
        }
    });
    let field = "attribute \"ankusa_idempotency_key\"";
    let poison = Poison {
        index: 100,
        field,
        value: &value,
    };
    let ok = poison::mixed_run(&sink, hooks, Some(poison)).await;
    let got: HashSet<String> = t
        .pull(199)
        .await
        .into_iter()
        .map(|m| m.attributes["ankusa_id"].clone())
        .collect();
    let want: HashSet<String> = ok.iter().map(|i| format!("m-{i}")).collect();
    assert_eq!(got, want);
    t.delete().await;
}
