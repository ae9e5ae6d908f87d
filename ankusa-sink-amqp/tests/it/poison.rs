//! One poison hook fails alone (issue 60): a short string over 255 bytes (routing key,
//! `message_id`, `content_type`) cannot be encoded, and is refused before it is sent, as
//! permanent, naming the field and never the value; the shared connection and channel stay
//! up for the next hook. Everything else RabbitMQ takes, and the table proves it.

use crate::common::*;
use ankusa_message::cloudevents::{CloudEvents, Mode};
use ankusa_sink_amqp::AmqpSink;
use ankusa_sink_core::{Class, Ctx, Envelope, Sink};
use ankusa_sink_testkit::support::unique_name;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

/// What a row changes in an otherwise healthy hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// The hook's id: `message_id`.
    Id,
    /// The source: in the body (and `ce-source`).
    Source,
    /// The dedupe key: the routing key (`p-{dedupe_key}`), `ankusa_dedupe_key`.
    Dedupe,
    /// The content type: a binary-mode CloudEvent's `content_type` property.
    ContentType,
    /// The ctx's replay id (no envelope rule applies): the `ankusa_replay_id` header.
    Replay,
}

/// What must happen to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Confirmed, and read back.
    Ok,
    /// Permanent, the reason naming this field.
    Refused(&'static str),
    /// The envelope builder refuses it: no such hook exists.
    NoEnvelope,
}

fn rows() -> Vec<(Field, String, Expect)> {
    use Expect::{NoEnvelope, Ok, Refused};
    use Field::{ContentType, Dedupe, Id, Replay, Source};
    let mut rows = vec![
        // Short strings: 255 bytes at most.
        (Dedupe, "x".repeat(254), Refused("routing key")),
        (Id, "i".repeat(256), Refused("message_id")),
        (ContentType, "c".repeat(256), Refused("content_type")),
        (ContentType, "é".repeat(128), Refused("content_type")),
        // A topic exchange: a hook's value must not add words or wildcards (the rule
        // before this issue, kept).
        (Dedupe, "a.b".to_owned(), Refused("routing key")),
        (Dedupe, "#".to_owned(), Refused("routing key")),
        // Control characters cannot be in an envelope's text fields at all.
        (Source, "a\0b".to_owned(), NoEnvelope),
        (Dedupe, "a\rb".to_owned(), NoEnvelope),
        (ContentType, "text/plain\n".to_owned(), NoEnvelope),
        // What RabbitMQ takes: any bytes in a long-string header value (the ctx's replay
        // id), any UTF-8 in the short strings.
        (Replay, "r\0".to_owned(), Ok),
        (Replay, "r\r\nX-Evil: 1".to_owned(), Ok),
        (Replay, "r\t\u{7F}\u{85}".to_owned(), Ok),
        (Replay, "x".repeat(10_000), Ok),
        (Dedupe, "x".repeat(253), Ok),
        (Id, "i".repeat(255), Ok),
        (ContentType, "c".repeat(255), Ok),
    ];
    for ok in [
        "é",
        "😀",
        "\u{FFFD}",
        "\u{FFFF}",
        "\u{FFFE}",
        "\u{FDD0}",
        "\u{10FFFF}",
    ] {
        rows.push((Source, format!("src-{ok}"), Ok));
        rows.push((Replay, format!("r-{ok}"), Ok));
        rows.push((Dedupe, format!("evt-{ok}"), Ok));
        rows.push((Id, format!("h-{ok}-{}", unique_name("h")), Ok));
        rows.push((ContentType, format!("text/plain; x={ok}"), Ok));
    }
    rows
}

/// A healthy hook, with `field` set to `value` when given; the replay id for the ctx.
fn hook(field: Field, value: Option<&str>) -> (Result<Envelope, String>, Option<String>) {
    let pick = |f: Field, default: String| match value {
        Some(v) if f == field => v.to_owned(),
        _ => default,
    };
    let built = Envelope::builder(
        pick(Field::Id, unique_name("h")),
        pick(Field::Source, "stripe".into()),
        &br#"{"type":"ping"}"#[..],
    )
    .tenant_id("acme")
    .content_type(pick(Field::ContentType, "application/json".into()))
    .dedupe_key(pick(Field::Dedupe, "evt".into()))
    .build()
    .map_err(|e| e.to_string());
    let replay = (field == Field::Replay)
        .then(|| value.map(str::to_owned))
        .flatten();
    (built, replay)
}

fn ctx(env: &Envelope, replay: Option<String>) -> Ctx {
    match replay {
        Some(r) => Ctx::for_envelope(env).with_replay_id(r),
        None => Ctx::for_envelope(env),
    }
}

fn poison_sink(exchange: &str, cloudevents: bool) -> AmqpSink {
    let mut c = config(exchange)
        .with_routing_key_template("p-{dedupe_key}")
        .unwrap();
    if cloudevents {
        c = c.with_cloudevents(Some(CloudEvents::new(Mode::Binary, "t.x").unwrap()));
    }
    AmqpSink::new(c)
}

/// Every row against RabbitMQ; after each refused one, a healthy hook on the same sink is
/// confirmed (connection and channel survived). The queue holds exactly what went.
#[tokio::test]
async fn every_value_rabbitmq_cannot_take_fails_alone_and_the_rest_goes() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let message = poison_sink(&x, false);
    let binary = poison_sink(&x, true);
    let mut delivered = 0;
    for (field, value, expect) in rows() {
        let sink = match field {
            Field::ContentType => &binary,
            _ => &message,
        };
        let shown = format!("{field:?} {:?}", value.chars().take(40).collect::<String>());
        let (env, replay) = hook(field, Some(&value));
        let env = match (env, expect) {
            (Err(_), Expect::NoEnvelope) => continue,
            (Err(e), _) => panic!("{shown}: the envelope was refused: {e}"),
            (Ok(_), Expect::NoEnvelope) => panic!("{shown}: the envelope builder took it"),
            (Ok(env), _) => env,
        };
        let res = bounded(sink.deliver(&env, &ctx(&env, replay))).await;
        match expect {
            Expect::Ok => {
                res.unwrap_or_else(|f| panic!("{shown}: refused: {f}"));
                delivered += 1;
            }
            Expect::Refused(field_name) => {
                let f = res.expect_err(&shown);
                assert_eq!(f.class(), Class::Permanent, "{shown}: {f}");
                assert_eq!(f.may_have_landed(), Some(false), "{shown}: {f}");
                let reason = f.to_string();
                assert!(reason.contains(field_name), "{shown}: {reason}");
                let head: String = value.chars().take(8).collect();
                assert!(
                    head.chars().count() < 3 || !reason.contains(&head),
                    "{shown}: the value shows: {reason}"
                );
                let (healthy, _) = hook(field, None);
                let healthy = healthy.unwrap();
                bounded(sink.deliver(&healthy, &Ctx::for_envelope(&healthy)))
                    .await
                    .unwrap_or_else(|f| panic!("after {shown}: {f}"));
                delivered += 1;
            }
            Expect::NoEnvelope => unreachable!(),
        }
    }
    assert_eq!(admin.count(&q).await as usize, delivered);
    admin.cleanup().await;
}

/// 200 hooks in flight at once on one sink (binary-mode CloudEvents), one whose content
/// type is over 255 bytes: 199 are confirmed and read back, the poison one alone is
/// permanent.
#[tokio::test]
async fn one_poison_hook_among_200_fails_alone() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let sink = Arc::new(poison_sink(&x, true));
    let run = unique_name("mixed");
    let poison = 100;
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..200 {
        let content_type = if i == poison {
            format!("text/plain; x={}", "y".repeat(300))
        } else {
            "text/plain".to_owned()
        };
        let env = Envelope::builder(format!("{run}-{i}"), "stripe", &b"ping"[..])
            .content_type(content_type)
            .dedupe_key("evt")
            .build()
            .unwrap();
        let sink = Arc::clone(&sink);
        set.spawn(async move {
            let res = bounded(sink.deliver(&env, &Ctx::for_envelope(&env))).await;
            (i, res)
        });
    }
    let mut ok = BTreeSet::new();
    let mut failed = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined.unwrap() {
            (i, Ok(())) => assert!(ok.insert(i)),
            (i, Err(f)) => failed.push((i, f)),
        }
    }
    // All of them first: without the check, the count shows what one poison hook cost.
    assert!(
        ok.len() == 199 && failed.len() == 1 && failed[0].0 == poison,
        "{} ok, {} failed, the first: {:?}",
        ok.len(),
        failed.len(),
        failed.first().map(|(i, f)| format!("hook {i}: {f}"))
    );
    let f = &failed[0].1;
    assert_eq!(f.class(), Class::Permanent, "{f}");
    assert!(f.to_string().contains("content_type"), "{f}");
    let mut ids = BTreeSet::new();
    for _ in 0..199 {
        let got = admin.get(&q).await;
        let id = got.delivery.properties.message_id().clone().unwrap();
        ids.insert(id.as_str().to_owned());
    }
    let want: BTreeSet<String> = ok.iter().map(|i| format!("{run}-{i}")).collect();
    assert_eq!(ids, want);
    assert_eq!(admin.count(&q).await, 0);
    eprintln!(
        "200 hooks, one poison: 199 confirmed and read back, in {:?}",
        started.elapsed()
    );
    admin.cleanup().await;
}
