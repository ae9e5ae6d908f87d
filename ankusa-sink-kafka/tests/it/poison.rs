//! Issue 60: one poison hook fails alone. Kafka carries header values and keys as bytes,
//! so most rows prove a value is taken (U+FFFF, NUL, CR/LF, emoji), read back intact; what
//! librdkafka refuses is a record whose headers carry it past `message.max.bytes`: that
//! row is permanent, names the header and never its value, and the healthy hook right
//! after each row on the same sink is produced.

use crate::common::*;
use ankusa_sink_testkit::support::poison::{self, Row, Want, dedupe, replay, source};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_poison_table() {
    use Want::{Delivered, Refused, Unbuildable};
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    let topic = Topic::new("poison", 1).await;
    let rows: Vec<Row> = vec![
        dedupe("evt\u{FFFF}x", Delivered),
        dedupe("evt\u{FFFE}x", Delivered),
        dedupe("evt\u{FDD0}x", Delivered),
        dedupe("evt-é", Delivered),
        dedupe("evt-🦀", Delivered),
        dedupe("evt\u{FFFD}x", Delivered),
        dedupe("evt\u{0}x", Unbuildable),
        dedupe("evt\r\nx", Unbuildable),
        replay("r\u{0}\r\nx", Delivered),
        // The source id is in the default key, `{tenant_id}/{source_id}`.
        source("src\u{FFFF}", Delivered),
        source("s".repeat(100_000), Delivered),
        // In the value twice (dedupe and idempotency key, 800 KB: under max_record_bytes)
        // and in two headers (800 KB more): past message.max.bytes (1,065,536).
        dedupe(
            "k".repeat(400_000),
            Refused("header \"ankusa_idempotency_key\""),
        ),
    ];
    let sent = poison::run_on(&rows, &topic.sink()).await;
    let got = read_back(
        &topic.brokers,
        &topic.name,
        sent.len(),
        Duration::from_secs(30),
    );
    let ids: Vec<String> = got
        .iter()
        .map(|r| ankusa_message::decode(&r.value).unwrap().id)
        .collect();
    let want_ids: Vec<String> = sent.iter().map(|s| s.id.clone()).collect();
    assert_eq!(ids, want_ids, "in order, one partition");
    // Each taken value arrived as it was sent, in a header or the key.
    for (r, value) in got
        .iter()
        .zip(&sent)
        .filter_map(|(r, s)| Some((r, s.value.as_ref()?)))
    {
        let in_header = r.headers.iter().any(|(_, v)| v == value);
        let in_key = r
            .key
            .as_deref()
            .is_some_and(|k| k.ends_with(value.as_bytes()));
        assert!(in_header || in_key, "{value:?} in {:?}", r.headers);
    }
    topic.cleanup().await;
}
