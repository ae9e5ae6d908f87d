//! Issue 60: one poison hook fails alone. Each row is a hook carrying a value Pub/Sub
//! refuses (or one it must take), published to the emulator: a refused row is permanent,
//! names the field and never its value, and the healthy hook right after it on the same
//! sink is published. The mixed run sends 200 hooks with one poison hook among them
//! through the batching publisher.

use crate::common::Admin;
use ankusa_sink_core::{Class, Ctx, Envelope, EnvelopeError, Failure, Sink};
use ankusa_sink_pubsub::PubSubSink;
use futures_util::future::join_all;
use std::collections::HashSet;

/// What a row expects.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Published, and pulled back.
    Ok,
    /// Permanent, not sent, the reason naming this field.
    Refused(&'static str),
    /// The envelope builder refuses it first: no sink ever sees such a hook.
    Unbuildable,
}

type Build = fn(&str, &str) -> Result<(Envelope, Ctx), EnvelopeError>;

fn base(id: &str) -> ankusa_sink_core::EnvelopeBuilder {
    Envelope::builder(id, "stripe", br#"{"ok":true}"#.to_vec())
        .tenant_id("acme")
        .content_type("application/json")
}

fn plain(env: Result<Envelope, EnvelopeError>) -> Result<(Envelope, Ctx), EnvelopeError> {
    env.map(|e| {
        let c = Ctx::for_envelope(&e);
        (e, c)
    })
}

fn dedupe(id: &str, v: &str) -> Result<(Envelope, Ctx), EnvelopeError> {
    plain(base(id).dedupe_key(v).build())
}

fn replay(id: &str, v: &str) -> Result<(Envelope, Ctx), EnvelopeError> {
    let e = base(id).build()?;
    let c = Ctx::for_envelope(&e).with_replay_id(v);
    Ok((e, c))
}

/// `<source id>/<hook id>` as the ordering key: each part under the attribute limit, the
/// two together over the key's.
fn long_key(id: &str, v: &str) -> Result<(Envelope, Ctx), EnvelopeError> {
    plain(Envelope::builder(format!("{id}-{v}"), v, b"{}".to_vec()).build())
}

fn rows() -> Vec<(&'static str, String, Build, Want)> {
    use Want::*;
    // `acme:stripe:` is 12 bytes: a dedupe key of 1,012 makes a 1,024-byte idempotency key.
    let idem = Refused("attribute \"ankusa_idempotency_key\"");
    vec![
        ("dedupe key of 1,012 bytes", "k".repeat(1012), dedupe, Ok),
        ("dedupe key of 1,013 bytes", "k".repeat(1013), dedupe, idem),
        ("dedupe key of 600 é", "é".repeat(600), dedupe, idem),
        ("dedupe key U+FFFF", "evt\u{FFFF}x".into(), dedupe, Ok),
        ("dedupe key U+FFFE", "evt\u{FFFE}x".into(), dedupe, Ok),
        ("dedupe key é", "evt-é".into(), dedupe, Ok),
        ("dedupe key emoji", "evt-🦀".into(), dedupe, Ok),
        ("dedupe key U+FFFD", "evt\u{FFFD}x".into(), dedupe, Ok),
        ("dedupe key NUL", "evt\u{0}x".into(), dedupe, Unbuildable),
        ("dedupe key CR LF", "evt\r\nx".into(), dedupe, Unbuildable),
        // A replay id is not checked by the envelope: attribute values are protobuf
        // strings, and the emulator takes control characters in them.
        ("replay id NUL CR LF", "r\u{0}\r\nx".into(), replay, Ok),
        (
            "replay id of 1,025 bytes",
            "r".repeat(1025),
            replay,
            Refused("attribute \"ankusa_replay_id\""),
        ),
        (
            "ordering key of 1,100 bytes",
            "s".repeat(540),
            long_key,
            Refused("ordering key"),
        ),
    ]
}

fn assert_refused(name: &str, f: &Failure, field: &str, poison: &str) {
    assert_eq!(f.class(), Class::Permanent, "{name}: {f}");
    assert_eq!(f.may_have_landed(), Some(false), "{name}: {f}");
    let text = f.to_string();
    assert!(text.contains(field), "{name}: {text}");
    assert!(!text.contains(poison), "{name}: the value leaked: {text}");
}

#[tokio::test]
async fn pubsub_poison_table() {
    ankusa_sink_testkit::require_broker!("Pub/Sub emulator", crate::common::emulator_host());
    let t = Admin::shared().topic_with_subscription().await.unwrap();
    let sink = PubSubSink::new(t.config().with_ordering_key("{source_id}/{id}").unwrap())
        .await
        .unwrap();
    let mut want = HashSet::new();
    for (i, (name, poison, build, expect)) in rows().into_iter().enumerate() {
        let id = format!("p{i}");
        match (expect, build(&id, &poison)) {
            (Want::Unbuildable, Err(e)) => {
                assert!(!e.to_string().contains(&poison), "{name}: {e}");
                continue;
            }
            (Want::Unbuildable, Ok(_)) => panic!("{name}: the envelope builder took it"),
            (_, Err(e)) => panic!("{name}: unbuildable: {e}"),
            (Want::Ok, Ok((e, c))) => {
                sink.deliver(&e, &c)
                    .await
                    .unwrap_or_else(|f| panic!("{name}: {f}"));
                want.insert(e.id().to_owned());
            }
            (Want::Refused(field), Ok((e, c))) => {
                let f = sink.deliver(&e, &c).await.expect_err(name);
                assert_refused(name, &f, field, &poison);
            }
        }
        let healthy = base(&format!("h{i}")).build().unwrap();
        sink.deliver(&healthy, &Ctx::for_envelope(&healthy))
            .await
            .unwrap_or_else(|f| panic!("healthy hook after {name}: {f}"));
        want.insert(healthy.id().to_owned());
    }
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
    let sink = t.sink().await;
    let poison = "k".repeat(1100);
    let envs: Vec<Envelope> = (0..200)
        .map(|i| {
            let d = if i == 100 {
                poison.clone()
            } else {
                format!("evt_{i}")
            };
            base(&format!("m{i}")).dedupe_key(d).build().unwrap()
        })
        .collect();
    let results = join_all(envs.iter().map(|e| {
        let ctx = Ctx::for_envelope(e).with_batch(true);
        let sink = &sink;
        async move { sink.deliver(e, &ctx).await }
    }))
    .await;
    for (e, r) in envs.iter().zip(&results) {
        if e.id() == "m100" {
            let f = r.as_ref().expect_err("the poison hook");
            assert_refused("poison", f, "attribute \"ankusa_idempotency_key\"", &poison);
        } else {
            assert!(r.is_ok(), "{}: {r:?}", e.id());
        }
    }
    let got: HashSet<String> = t
        .pull(199)
        .await
        .into_iter()
        .map(|m| m.attributes["ankusa_id"].clone())
        .collect();
    let want: HashSet<String> = envs
        .iter()
        .map(|e| e.id().to_owned())
        .filter(|id| id != "m100")
        .collect();
    assert_eq!(got, want);
    t.delete().await;
}
