//! Issue 60: one poison hook fails alone. Each row is a hook carrying a value SQS, SNS or
//! Kinesis refuses (or one they must take), delivered to moto: a refused row is permanent,
//! names the field and never its value, and the healthy hook right after it on the same
//! sink is delivered. moto may take what AWS refuses; the refusal is the sink's own either
//! way, and the healthy hook proves nothing else broke. The mixed runs send 200 hooks with
//! one poison hook among them through one batching sink.

use crate::common::*;
use ankusa_sink_aws::{AwsBatch, KinesisConfig, KinesisSink, SnsConfig, SnsSink};
use ankusa_sink_aws::{SqsConfig, SqsSink};
use ankusa_sink_core::{Class, Ctx, Envelope, EnvelopeError, Failure, Sink};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// What a row expects.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Delivered, and read back where the test reads back.
    Ok,
    /// Permanent, not sent, the reason naming this field.
    Refused(&'static str),
    /// The envelope builder refuses it first: no sink ever sees such a hook.
    Unbuildable,
}

/// A hook built around a poison value, given a fresh hook id.
type Hook = Result<(Envelope, Ctx), EnvelopeError>;

/// How a row builds its hook: `(hook id, poison value)`.
type Build = Box<dyn Fn(&str, &str) -> Hook + Send + Sync>;

/// One row: a name, the poison value, the hook built around it (given a fresh hook id),
/// and what the sink must do with it.
struct Row {
    name: &'static str,
    poison: String,
    build: Build,
    want: Want,
}

fn base(id: &str) -> ankusa_sink_core::EnvelopeBuilder {
    Envelope::builder(id, "stripe", br#"{"ok":true}"#.to_vec())
        .tenant_id("acme")
        .content_type("application/json")
}

fn plain(env: Result<Envelope, EnvelopeError>) -> Hook {
    env.map(|e| {
        let c = Ctx::for_envelope(&e);
        (e, c)
    })
}

fn row(
    name: &'static str,
    poison: impl Into<String>,
    want: Want,
    build: impl Fn(&str, &str) -> Hook + Send + Sync + 'static,
) -> Row {
    Row {
        name,
        poison: poison.into(),
        build: Box::new(build),
        want,
    }
}

fn dedupe(name: &'static str, poison: impl Into<String>, want: Want) -> Row {
    row(name, poison, want, |id, v| {
        plain(base(id).dedupe_key(v).build())
    })
}

fn replay(name: &'static str, poison: impl Into<String>, want: Want) -> Row {
    row(name, poison, want, |id, v| {
        let e = base(id).build()?;
        let c = Ctx::for_envelope(&e).with_replay_id(v);
        Ok((e, c))
    })
}

fn header(name: &'static str, poison: impl Into<String>, want: Want) -> Row {
    row(name, poison, want, |id, v| {
        plain(base(id).header("x-poison", v).build())
    })
}

/// The rows every SQS/SNS destination shares (standard queue or topic).
fn attribute_rows() -> Vec<Row> {
    use Want::*;
    // The dedupe key is part of the idempotency key, the attribute checked first.
    let dedupe_attr = Refused("message attribute \"ankusa_idempotency_key\"");
    vec![
        dedupe("dedupe key U+FFFF", "evt\u{FFFF}x", dedupe_attr),
        dedupe("dedupe key U+FFFE", "evt\u{FFFE}x", dedupe_attr),
        dedupe("dedupe key NUL", "evt\u{0}x", Unbuildable),
        dedupe("dedupe key CR LF", "evt\r\nx", Unbuildable),
        dedupe("dedupe key é", "evt-é", Ok),
        dedupe("dedupe key emoji", "evt-🦀", Ok),
        dedupe("dedupe key U+FFFD", "evt\u{FFFD}x", Ok),
        // Noncharacters XML allows (#xE000-#xFFFD, #x10000-#x10FFFF): SQS takes them.
        dedupe("dedupe key U+FDD0", "evt\u{FDD0}x", Ok),
        dedupe("dedupe key U+1FFFF", "evt\u{1FFFF}x", Ok),
        row(
            "source id U+FFFF",
            "src\u{FFFF}x",
            Refused("message attribute \"ankusa_source_id\""),
            |id, v| plain(Envelope::builder(id, v, b"{}".to_vec()).build()),
        ),
        row(
            "hook id U+FFFF",
            "hid\u{FFFF}x",
            Refused("message attribute \"ankusa_id\""),
            |id, v| plain(base(&format!("{id}{v}")).build()),
        ),
        row(
            // The `content_type` attribute is the message's (`application/json`); the
            // hook's is in the body.
            "content type U+FFFF",
            "text/x\u{FFFF}y",
            Refused("message body"),
            |id, v| plain(base(id).content_type(v).build()),
        ),
        replay(
            "replay id NUL",
            "r\u{0}x",
            Refused("message attribute \"ankusa_replay_id\""),
        ),
        replay(
            "replay id U+0001",
            "r\u{1}x",
            Refused("message attribute \"ankusa_replay_id\""),
        ),
        // Tab, CR and LF are XML characters: an attribute may carry them.
        replay("replay id CR LF tab", "r\r\n\tx", Ok),
        header(
            "forwarded header U+FFFF",
            "hv\u{FFFF}x",
            Refused("header \"x-poison\" in the message body"),
        ),
        header("forwarded header NUL", "hv\u{0}x", Unbuildable),
        header("forwarded header LF", "hv\nx", Unbuildable),
        header("forwarded header é", "hv-é", Ok),
        // Over the message limit: the sink's size check, the value only counted.
        dedupe(
            "dedupe key of 300 KB",
            "k".repeat(300 * 1024),
            Refused("max_message_bytes"),
        ),
    ]
}

/// Rows of a FIFO queue: the group and deduplication ids come from the hook.
fn fifo_rows() -> Vec<Row> {
    use Want::*;
    vec![
        row(
            "source id é (group id)",
            "stripé",
            Refused("message group id"),
            |id, v| plain(Envelope::builder(id, v, b"{}".to_vec()).build()),
        ),
        row(
            "source id of 130 (group id)",
            "s".repeat(130),
            Refused("message group id"),
            |id, v| plain(Envelope::builder(id, v, b"{}".to_vec()).build()),
        ),
        replay(
            "replay id of 130 (dedup id)",
            "r".repeat(130),
            Refused("message deduplication id"),
        ),
        replay(
            "replay id with a space (dedup id)",
            "r 1",
            Refused("message deduplication id"),
        ),
        replay("replay id punctuation (dedup id)", "r!~{}[]", Ok),
        dedupe("dedupe key é (not an id)", "evt-é", Ok),
    ]
}

/// Runs `rows` through `sink`, each followed by a healthy hook: the ids that must arrive.
async fn run_table<S: Sink>(label: &str, sink: &S, rows: &[Row]) -> Vec<String> {
    let mut arrived = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let id = format!("{label}-p{i}");
        let built = (r.build)(&id, &r.poison);
        match (r.want, built) {
            (Want::Unbuildable, Err(e)) => {
                assert!(!e.to_string().contains(&r.poison), "{}: {e}", r.name);
                continue;
            }
            (Want::Unbuildable, Ok(_)) => panic!("{}: the envelope builder took it", r.name),
            (_, Err(e)) => panic!("{}: unbuildable: {e}", r.name),
            (Want::Ok, Ok((e, c))) => {
                sink.deliver(&e, &c)
                    .await
                    .unwrap_or_else(|f| panic!("{}: {f}", r.name));
                arrived.push(e.id().to_owned());
            }
            (Want::Refused(field), Ok((e, c))) => {
                let f = sink.deliver(&e, &c).await.expect_err(r.name);
                assert_refused(r.name, &f, field, &r.poison);
            }
        }
        let healthy = format!("{label}-h{i}");
        let e = base(&healthy)
            .dedupe_key(format!("evt_{i}"))
            .build()
            .unwrap();
        sink.deliver(&e, &ctx(&e))
            .await
            .unwrap_or_else(|f| panic!("healthy hook after {}: {f}", r.name));
        arrived.push(healthy);
    }
    arrived
}

fn assert_refused(name: &str, f: &Failure, field: &str, poison: &str) {
    assert_eq!(f.class(), Class::Permanent, "{name}: {f}");
    assert_eq!(f.may_have_landed(), Some(false), "{name}: {f}");
    let text = f.to_string();
    assert!(text.contains(field), "{name}: {text}");
    assert!(!text.contains(poison), "{name}: the value leaked: {text}");
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test]
async fn sqs_poison_table() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let admin = sqs_admin(&moto()).await;
    let url = create_queue(&admin, &unique("poison"), &[]).await;
    let s = SqsSink::new(SqsConfig::new(&url, options(&moto())).unwrap())
        .await
        .unwrap();
    let want = run_table("sqs", &s, &attribute_rows()).await;
    let got = receive(&admin, &url, want.len()).await;
    assert_eq!(hook_ids(&got), sorted(want));
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
    delete_queue(&admin, &url).await;
}

#[tokio::test]
async fn sqs_fifo_poison_table() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let admin = sqs_admin(&moto()).await;
    let name = format!("{}.fifo", unique("poison"));
    let fifo = [(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")];
    let url = create_queue(&admin, &name, &fifo).await;
    let s = SqsSink::new(SqsConfig::new(&url, options(&moto())).unwrap())
        .await
        .unwrap();
    let want = run_table("fifo", &s, &fifo_rows()).await;
    let got = receive(&admin, &url, want.len()).await;
    assert_eq!(hook_ids(&got), sorted(want));
    delete_queue(&admin, &url).await;
}

#[tokio::test]
async fn sns_poison_table() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (arn, url) = subscribed_topic(&unique("poison"), false).await;
    let s = SnsSink::new(SnsConfig::new(&arn, options(&moto())).unwrap())
        .await
        .unwrap();
    let want = run_table("sns", &s, &attribute_rows()).await;
    let admin = sqs_admin(&moto()).await;
    let got = receive(&admin, &url, want.len()).await;
    assert_eq!(hook_ids(&got), sorted(want));
    delete_queue(&admin, &url).await;
    delete_topic(&sns_admin(&moto()).await, &arn).await;
}

#[tokio::test]
async fn kinesis_poison_table() {
    use Want::*;
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let stream = unique("poison");
    create_stream(&kinesis_moto(), &stream).await;
    // A limit small enough for a row to cross it with a long dedupe key.
    let opts = options(&kinesis_moto())
        .with_inline_max_bytes(NonZeroUsize::new(2048).unwrap())
        .with_max_message_bytes(NonZeroUsize::new(8192).unwrap());
    let s = KinesisSink::new(KinesisConfig::new(&stream, opts).unwrap())
        .await
        .unwrap();
    // The partition key is the idempotency key, `acme:stripe:<dedupe key>`: Kinesis takes
    // any Unicode in it (1-256 characters; a longer key is sent hashed).
    let rows = vec![
        dedupe("key U+FFFF", "evt\u{FFFF}x", Ok),
        dedupe("key é", "evt-é", Ok),
        dedupe("key emoji", "evt-🦀", Ok),
        dedupe("key U+FFFD", "evt\u{FFFD}x", Ok),
        dedupe("key of 300 characters", "k".repeat(300), Ok),
        dedupe("key NUL", "evt\u{0}", Unbuildable),
        dedupe(
            "record over max_message_bytes",
            "k".repeat(8192),
            Refused("max_message_bytes"),
        ),
    ];
    let want = run_table("kin", &s, &rows).await;
    let got = read_stream(&kinesis_admin(&kinesis_moto()).await, &stream).await;
    let mut ids: Vec<String> = got
        .iter()
        .map(|r| ankusa_message::decode(&r.data).unwrap().id)
        .collect();
    ids.sort();
    assert_eq!(ids, sorted(want));
    let keys: Vec<&str> = got.iter().map(|r| r.partition_key.as_str()).collect();
    assert!(keys.contains(&"acme:stripe:evt\u{FFFF}x"), "{keys:?}");
    delete_stream(&kinesis_moto(), &stream).await;
}

/// 200 hooks, the 100th poison, each delivered on its own task through one batching sink.
fn mixed(label: &str, poison: impl Fn(&str) -> Envelope) -> (Vec<Envelope>, String) {
    let mut envs: Vec<Envelope> = (0..200)
        .map(|i| {
            base(&format!("{label}-{i}"))
                .dedupe_key(format!("evt_{i}"))
                .build()
                .unwrap()
        })
        .collect();
    let id = format!("{label}-poison");
    envs[100] = poison(&id);
    (envs, id)
}

fn check_mixed(envs: &[Envelope], results: &[Result<(), Failure>], poison: &str, field: &str) {
    for (e, r) in envs.iter().zip(results) {
        if e.id() == poison {
            let f = r.as_ref().expect_err("the poison hook");
            assert_refused("poison", f, field, "\u{FFFF}");
        } else {
            assert!(r.is_ok(), "{}: {r:?}", e.id());
        }
    }
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
    let (envs, poison) = mixed("mix", |id| {
        base(id).dedupe_key("evt\u{FFFF}").build().unwrap()
    });
    let results = deliver_batched(&s, envs.clone()).await;
    check_mixed(
        &envs,
        &results,
        &poison,
        "message attribute \"ankusa_idempotency_key\"",
    );
    let got = receive(&admin, &url, 199).await;
    let want: Vec<String> = envs
        .iter()
        .map(|e| e.id().to_owned())
        .filter(|id| *id != poison)
        .collect();
    assert_eq!(hook_ids(&got), sorted(want));
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
        .with_inline_max_bytes(NonZeroUsize::new(2048).unwrap())
        .with_max_message_bytes(NonZeroUsize::new(8192).unwrap());
    let s = Arc::new(
        KinesisSink::new(KinesisConfig::new(&stream, opts).unwrap())
            .await
            .unwrap(),
    );
    // Nothing of a hook can make a partition key Kinesis refuses (the config refuses a
    // template that renders empty; a long key is hashed): the poison here is a record
    // over the limit, with a U+FFFF beside it that Kinesis takes.
    let (envs, poison) = mixed("kmix", |id| {
        base(id)
            .dedupe_key(format!("\u{FFFF}{}", "k".repeat(8192)))
            .build()
            .unwrap()
    });
    let results = deliver_batched(&s, envs.clone()).await;
    check_mixed(&envs, &results, &poison, "max_message_bytes");
    let got = read_stream(&kinesis_admin(&kinesis_moto()).await, &stream).await;
    let mut ids: Vec<String> = got
        .iter()
        .map(|r| ankusa_message::decode(&r.data).unwrap().id)
        .collect();
    ids.sort();
    let want: Vec<String> = envs
        .iter()
        .map(|e| e.id().to_owned())
        .filter(|id| *id != poison)
        .collect();
    assert_eq!(ids, sorted(want));
    delete_stream(&kinesis_moto(), &stream).await;
}
