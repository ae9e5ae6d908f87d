//! Issue 60: one poison hook fails alone. Kafka carries header values and keys as bytes,
//! so most rows prove a value is taken (U+FFFF, NUL, CR/LF, emoji), read back intact; what
//! librdkafka refuses is a record whose headers carry it past `message.max.bytes`: that
//! row is permanent, names the header and never its value, and the healthy hook right
//! after each row on the same sink is produced.

use crate::common::*;
use ankusa_sink_core::{Class, Ctx, Envelope, EnvelopeError, Sink};
use std::time::Duration;

/// What a row expects.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Produced, and read back with the value intact.
    Ok,
    /// Permanent, not sent, the reason naming this field.
    Refused(&'static str),
    /// The envelope builder refuses it first: no sink ever sees such a hook.
    Unbuildable,
}

type Hook = Result<(Envelope, Ctx), EnvelopeError>;

/// One row: its name, the poison value, how the hook is built around it, what must happen.
type Row = (&'static str, String, fn(&str, &str) -> Hook, Want);

fn base(id: &str) -> ankusa_sink_core::EnvelopeBuilder {
    Envelope::builder(id, "stripe", br#"{"ok":true}"#.to_vec())
        .tenant_id("acme")
        .content_type("application/json")
}

fn dedupe(id: &str, v: &str) -> Hook {
    let e = base(id).dedupe_key(v).build()?;
    let c = Ctx::for_envelope(&e);
    Ok((e, c))
}

fn replay(id: &str, v: &str) -> Hook {
    let e = base(id).build()?;
    let c = Ctx::for_envelope(&e).with_replay_id(v);
    Ok((e, c))
}

/// The source id is in the default key, `{tenant_id}/{source_id}`.
fn source(id: &str, v: &str) -> Hook {
    let e = Envelope::builder(id, v, b"{}".to_vec()).build()?;
    let c = Ctx::for_envelope(&e);
    Ok((e, c))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_poison_table() {
    use Want::*;
    ankusa_sink_testkit::require_broker!("Kafka", broker_addr());
    let topic = Topic::new("poison", 1).await;
    let sink = topic.sink();
    let rows: Vec<Row> = vec![
        ("dedupe key U+FFFF", "evt\u{FFFF}x".into(), dedupe, Ok),
        ("dedupe key U+FFFE", "evt\u{FFFE}x".into(), dedupe, Ok),
        ("dedupe key U+FDD0", "evt\u{FDD0}x".into(), dedupe, Ok),
        ("dedupe key é", "evt-é".into(), dedupe, Ok),
        ("dedupe key emoji", "evt-🦀".into(), dedupe, Ok),
        ("dedupe key U+FFFD", "evt\u{FFFD}x".into(), dedupe, Ok),
        ("dedupe key NUL", "evt\u{0}x".into(), dedupe, Unbuildable),
        ("dedupe key CR LF", "evt\r\nx".into(), dedupe, Unbuildable),
        ("replay id NUL CR LF", "r\u{0}\r\nx".into(), replay, Ok),
        ("source id U+FFFF (key)", "src\u{FFFF}".into(), source, Ok),
        ("source id of 100 KB (key)", "s".repeat(100_000), source, Ok),
        // In the value twice (dedupe and idempotency key, 800 KB: under max_record_bytes)
        // and in two headers (800 KB more): past message.max.bytes (1,065,536).
        (
            "dedupe key of 400 KB",
            "k".repeat(400_000),
            dedupe,
            Refused("header \"ankusa_idempotency_key\""),
        ),
    ];
    let mut want: Vec<(String, String)> = Vec::new();
    for (i, (name, poison, build, expect)) in rows.into_iter().enumerate() {
        let id = format!("p{i}");
        match (expect, build(&id, &poison)) {
            (Unbuildable, Err(e)) => {
                assert!(!e.to_string().contains(&poison), "{name}: {e}");
                continue;
            }
            (Unbuildable, Result::Ok(_)) => panic!("{name}: the envelope builder took it"),
            (_, Err(e)) => panic!("{name}: unbuildable: {e}"),
            (Ok, Result::Ok((e, c))) => {
                sink.deliver(&e, &c)
                    .await
                    .unwrap_or_else(|f| panic!("{name}: {f}"));
                want.push((e.id().to_owned(), poison.clone()));
            }
            (Refused(field), Result::Ok((e, c))) => {
                let f = sink.deliver(&e, &c).await.expect_err(name);
                assert_eq!(f.class(), Class::Permanent, "{name}: {f}");
                assert_eq!(f.may_have_landed(), Some(false), "{name}: {f}");
                let text = f.to_string();
                assert!(text.contains(field), "{name}: {text}");
                assert!(!text.contains(&poison), "{name}: the value leaked");
            }
        }
        let healthy = base(&format!("h{i}")).build().unwrap();
        sink.deliver(&healthy, &Ctx::for_envelope(&healthy))
            .await
            .unwrap_or_else(|f| panic!("healthy hook after {name}: {f}"));
        want.push((healthy.id().to_owned(), String::new()));
    }
    let got = read_back(
        &topic.brokers,
        &topic.name,
        want.len(),
        Duration::from_secs(30),
    );
    let ids: Vec<String> = got
        .iter()
        .map(|r| ankusa_message::decode(&r.value).unwrap().id)
        .collect();
    let want_ids: Vec<String> = want.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids, want_ids, "in order, one partition");
    // Each taken value arrived as it was sent, in a header or the key.
    for (r, (_, poison)) in got.iter().zip(&want) {
        if poison.is_empty() {
            continue;
        }
        let in_header = r.headers.iter().any(|(_, v)| v == poison);
        let in_key = r
            .key
            .as_deref()
            .is_some_and(|k| k.ends_with(poison.as_bytes()));
        assert!(in_header || in_key, "{poison:?} in {:?}", r.headers);
    }
    topic.cleanup().await;
}
