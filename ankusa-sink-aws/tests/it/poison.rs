//! Issue 60: one poison hook fails alone. Each row is a hook carrying a value SQS, SNS or
//! Kinesis refuses (or one they must take), delivered to moto: a refused row is permanent,
//! names the field and never its value, and the healthy hook right after it on the same
//! sink is delivered. moto may take what AWS refuses; the refusal is the sink's own either
//! way, and the healthy hook proves nothing else broke. The mixed runs send 200 hooks with
//! one poison hook among them through one batching sink.

use crate::common::*;
use ankusa_message::MessageOptions;
use ankusa_sink_aws::{AwsBatch, KinesisConfig, KinesisSink, SnsConfig, SnsSink};
use ankusa_sink_aws::{SqsConfig, SqsSink};
use ankusa_sink_testkit::support::poison::{self, Poison, Row, Sent, Want};
use ankusa_sink_testkit::support::poison::{content_type, dedupe, header, id, replay, source};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// The rows every SQS/SNS destination shares (standard queue or topic).
fn attribute_rows() -> Vec<Row> {
    use Want::{Delivered, Refused, Unbuildable};
    // The dedupe key is part of the idempotency key, the attribute checked first.
    let dedupe_attr = Refused("message attribute \"ankusa_idempotency_key\"");
    let replay_attr = Refused("message attribute \"ankusa_replay_id\"");
    vec![
        dedupe("evt\u{FFFF}x", dedupe_attr),
        dedupe("evt\u{FFFE}x", dedupe_attr),
        dedupe("evt\u{0}x", Unbuildable),
        dedupe("evt\r\nx", Unbuildable),
        dedupe("evt-é", Delivered),
        dedupe("evt-🦀", Delivered),
        dedupe("evt\u{FFFD}x", Delivered),
        // Noncharacters XML allows (#xE000-#xFFFD, #x10000-#x10FFFF): SQS takes them.
        dedupe("evt\u{FDD0}x", Delivered),
        dedupe("evt\u{1FFFF}x", Delivered),
        source(
            "src\u{FFFF}x",
            Refused("message attribute \"ankusa_source_id\""),
        ),
        id("hid\u{FFFF}x", Refused("message attribute \"ankusa_id\"")),
        // The `content_type` attribute is the message's (`application/json`); the hook's is
        // in the body.
        content_type("text/x\u{FFFF}y", Refused("message body")),
        replay("r\u{0}x", replay_attr),
        replay("r\u{1}x", replay_attr),
        // Tab, CR and LF are XML characters: an attribute may carry them.
        replay("r\r\n\tx", Delivered),
        header(
            "x-poison",
            "hv\u{FFFF}x",
            Refused("header \"x-poison\" in the message body"),
        ),
        header("x-poison", "hv\u{0}x", Unbuildable),
        header("x-poison", "hv\nx", Unbuildable),
        header("x-poison", "hv-é", Delivered),
        // Over the message limit: the sink's size check, the value only counted.
        dedupe("k".repeat(300 * 1024), Refused("max_message_bytes")),
    ]
}

/// Rows of a FIFO queue: the group id is the source id, the deduplication id the replay id.
fn fifo_rows() -> Vec<Row> {
    use Want::{Delivered, Refused};
    vec![
        source("stripé", Refused("message group id")),
        source("s".repeat(130), Refused("message group id")),
        replay("r".repeat(130), Refused("message deduplication id")),
        replay("r 1", Refused("message deduplication id")),
        replay("r!~{}[]", Delivered),
        // Not an id.
        dedupe("evt-é", Delivered),
    ]
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn ids(sent: Vec<Sent>) -> Vec<String> {
    sorted(sent.into_iter().map(|s| s.id).collect())
}

/// The hook ids of Kinesis `records`, sorted.
fn record_ids(records: &[StreamRecord]) -> Vec<String> {
    sorted(
        records
            .iter()
            .map(|r| ankusa_message::decode(&r.data).unwrap().id)
            .collect(),
    )
}

/// `rows` through an SQS sink to a new queue (`name`, `attrs`): every hook that went is
/// received, and what was received is returned.
async fn sqs_table(
    name: &str,
    attrs: &[(aws_sdk_sqs::types::QueueAttributeName, &str)],
    rows: &[Row],
) -> Vec<Received> {
    let admin = sqs_admin(&moto()).await;
    let url = create_queue(&admin, name, attrs).await;
    let s = SqsSink::new(SqsConfig::new(&url, options(&moto())).unwrap())
        .await
        .unwrap();
    let want = ids(poison::run_on(rows, &s).await);
    let got = receive(&admin, &url, want.len()).await;
    assert_eq!(hook_ids(&got), want);
    delete_queue(&admin, &url).await;
    got
}

#[tokio::test]
async fn sqs_poison_table() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let got = sqs_table(&unique("poison"), &[], &attribute_rows()).await;
    // What was taken arrived intact.
    let values: Vec<&str> = got
        .iter()
        .filter_map(|m| m.attributes.get("ankusa_dedupe_key").map(String::as_str))
        .collect();
    for v in [
        "evt-é",
        "evt-🦀",
        "evt\u{FFFD}x",
        "evt\u{FDD0}x",
        "evt\u{1FFFF}x",
    ] {
        assert!(values.contains(&v), "{v:?} in {values:?}");
    }
}

#[tokio::test]
async fn sqs_fifo_poison_table() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let name = format!("{}.fifo", unique("poison"));
    let fifo = [(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")];
    sqs_table(&name, &fifo, &fifo_rows()).await;
}

#[tokio::test]
async fn sns_poison_table() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (arn, url) = subscribed_topic(&unique("poison"), false).await;
    let s = SnsSink::new(SnsConfig::new(&arn, options(&moto())).unwrap())
        .await
        .unwrap();
    let want = ids(poison::run_on(&attribute_rows(), &s).await);
    let admin = sqs_admin(&moto()).await;
    let got = receive(&admin, &url, want.len()).await;
    assert_eq!(hook_ids(&got), want);
    delete_queue(&admin, &url).await;
    delete_topic(&sns_admin(&moto()).await, &arn).await;
}

#[tokio::test]
async fn kinesis_poison_table() {
    use Want::{Delivered, Refused, Unbuildable};
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let stream = unique("poison");
    create_stream(&kinesis_moto(), &stream).await;
    // A limit small enough for a row to cross it with a long dedupe key.
    let opts = options(&kinesis_moto())
        .with_message(MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(2048).unwrap()))
        .with_max_message_bytes(NonZeroUsize::new(8192).unwrap());
    let s = KinesisSink::new(KinesisConfig::new(&stream, opts).unwrap())
        .await
        .unwrap();
    // The partition key is the idempotency key, `acme:stripe:<dedupe key>`: Kinesis takes
    // any Unicode in it (1-256 characters; a longer key is sent hashed).
    let rows = vec![
        dedupe("evt\u{FFFF}x", Delivered),
        dedupe("evt-é", Delivered),
        dedupe("evt-🦀", Delivered),
        dedupe("evt\u{FFFD}x", Delivered),
        dedupe("k".repeat(300), Delivered),
        dedupe("evt\u{0}", Unbuildable),
        // A record over max_message_bytes.
        dedupe("k".repeat(8192), Refused("max_message_bytes")),
    ];
    let want = ids(poison::run_on(&rows, &s).await);
    let got = read_stream(&kinesis_admin(&kinesis_moto()).await, &stream).await;
    assert_eq!(record_ids(&got), want);
    let keys: Vec<&str> = got.iter().map(|r| r.partition_key.as_str()).collect();
    assert!(keys.contains(&"acme:stripe:evt\u{FFFF}x"), "{keys:?}");
    delete_stream(&kinesis_moto(), &stream).await;
}

/// 200 batched hooks `<label>-<i>`, the 100th with `value` as its dedupe key, through one
/// batching sink: only the poison hook fails, naming `field`. The ids delivered, sorted.
async fn mixed<S: ankusa_sink_core::Sink + 'static>(
    sink: &Arc<S>,
    label: &str,
    value: &str,
    field: &str,
) -> Vec<String> {
    let hooks = poison::hooks(label, 200, |i, p| {
        p.batch = true;
        if i == 100 {
            p.dedupe = Some(value.to_owned());
        }
    });
    let poison = Poison {
        index: 100,
        field,
        value,
    };
    let ok = poison::mixed_run(sink, hooks, Some(poison)).await;
    sorted(ok.iter().map(|i| format!("{label}-{i}")).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_batch_mixed_run_fails_only_the_poison_hook() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let admin = sqs_admin(&moto()).await;
    let url = create_queue(&admin, &unique("poison-mix"), &[]).await;
    let batch = AwsBatch::default().with_linger(Duration::from_millis(20));
    let opts = options(&moto()).with_batch(batch);
    let s = Arc::new(
        SqsSink::new(SqsConfig::new(&url, opts).unwrap())
            .await
            .unwrap(),
    );
    let field = "message attribute \"ankusa_idempotency_key\"";
    let want = mixed(&s, "mix", "evt\u{FFFF}", field).await;
    let got = receive(&admin, &url, 199).await;
    assert_eq!(hook_ids(&got), want);
    delete_queue(&admin, &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_batch_mixed_run_fails_only_the_poison_hook() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let stream = unique("poison-mix");
    create_stream(&kinesis_moto(), &stream).await;
    let batch = AwsBatch::default().with_linger(Duration::from_millis(20));
    let opts = options(&kinesis_moto())
        .with_batch(batch)
        .with_message(MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(2048).unwrap()))
        .with_max_message_bytes(NonZeroUsize::new(8192).unwrap());
    let s = Arc::new(
        KinesisSink::new(KinesisConfig::new(&stream, opts).unwrap())
            .await
            .unwrap(),
    );
    // Nothing of a hook can make a partition key Kinesis refuses (the config refuses a
    // template that renders empty; a long key is hashed): the poison here is a record
    // over the limit, with a U+FFFF beside it that Kinesis takes.
    let value = format!("\u{FFFF}{}", "k".repeat(8192));
    let want = mixed(&s, "kmix", &value, "max_message_bytes").await;
    let got = read_stream(&kinesis_admin(&kinesis_moto()).await, &stream).await;
    assert_eq!(record_ids(&got), want);
    delete_stream(&kinesis_moto(), &stream).await;
}
