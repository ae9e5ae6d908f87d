//! One poison hook fails alone (issue 60): a value no MQTT string may carry is refused
//! before it is sent, as permanent, naming the field and never the value, and the shared
//! connection stays up for the next hook. Against the shared Mosquitto, which closes the
//! connection for a control character or noncharacter in any string of a PUBLISH.

use crate::common::{Subscriber, shared_addr, shared_url, unique_name};
use ankusa_message::cloudevents::{CloudEvents, Mode};
use ankusa_sink_core::{Class, Ctx, Envelope, Sink};
use ankusa_sink_mqtt::{MqttConfig, MqttSink, NoSubscriber};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a row changes in an otherwise healthy hook.
#[derive(Clone, Copy)]
enum Field {
    /// The hook's id: `ankusa_id`.
    Id,
    /// The source: `ankusa_source_id`.
    Source,
    /// The dedupe key: the topic (`.../{dedupe_key}`), then `ankusa_dedupe_key`.
    Dedupe,
    /// The content type: the Content Type property of a binary-mode CloudEvent.
    ContentType,
    /// The replay id of the ctx (no envelope rule applies to it): `ankusa_replay_id`.
    Replay,
}

/// What must happen to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Delivered, and read back.
    Ok,
    /// Permanent, the reason naming this field.
    Refused(&'static str),
    /// The envelope builder refuses it: no such hook exists.
    NoEnvelope,
}

fn rows() -> Vec<(Field, String, Expect)> {
    use Expect::{NoEnvelope, Ok, Refused};
    use Field::{ContentType, Dedupe, Id, Replay, Source};
    let source = Refused("user property \"ankusa_source_id\"");
    let replay = Refused("user property \"ankusa_replay_id\"");
    let mut rows = vec![
        // The issue's case, and the other noncharacters.
        (Source, "src\u{FFFF}".to_owned(), source),
        (Source, "\u{FFFE}".to_owned(), source),
        (Source, "a\u{FDD0}b".to_owned(), source),
        (Source, "a\u{FDEF}".to_owned(), source),
        (Source, "\u{1FFFF}".to_owned(), source),
        (Source, "\u{10FFFE}".to_owned(), source),
        // Control characters cannot be in an envelope's text fields at all...
        (Source, "a\0b".to_owned(), NoEnvelope),
        (Source, "a\rb".to_owned(), NoEnvelope),
        (Dedupe, "a\nb".to_owned(), NoEnvelope),
        (ContentType, "text/plain\t".to_owned(), NoEnvelope),
        // ...but a replay id is the ctx's, and Mosquitto refuses every one of them.
        (Replay, "r\0".to_owned(), replay),
        (Replay, "r\r".to_owned(), replay),
        (Replay, "r\n".to_owned(), replay),
        (Replay, "r\tx".to_owned(), replay),
        (Replay, "\u{1F}".to_owned(), replay),
        (Replay, "\u{7F}".to_owned(), replay),
        (Replay, "\u{85}".to_owned(), replay),
        (Replay, "\u{9F}".to_owned(), replay),
        (Replay, "r\u{FFFF}".to_owned(), replay),
        // The topic: a noncharacter, the wildcards, over 65,535 bytes.
        (Dedupe, "evt\u{FFFF}".to_owned(), Refused("topic")),
        (Dedupe, "a+b".to_owned(), Refused("topic")),
        (Dedupe, "a#".to_owned(), Refused("topic")),
        (Dedupe, "x".repeat(65_536), Refused("topic")),
        // A user property over 65,535 bytes (rumqttc would cut its length to 16 bits).
        (
            Id,
            "i".repeat(65_536),
            Refused("user property \"ankusa_id\""),
        ),
        // The Content Type property (binary-mode CloudEvents carry the hook's).
        (
            ContentType,
            "text/plain; x=\u{FFFF}".to_owned(),
            Refused("Content Type"),
        ),
        (ContentType, "x".repeat(65_536), Refused("Content Type")),
    ];
    // What must still go: no over-refusal.
    for ok in [
        "é",
        "😀",
        "\u{FFFD}",
        "\u{FEFF}",
        "\u{2028}",
        "\u{FDCF}",
        "\u{FDF0}",
        "\u{10FFFD}",
        "a b",
    ] {
        rows.push((Source, format!("src-{ok}"), Ok));
        rows.push((Replay, format!("r-{ok}"), Ok));
        rows.push((ContentType, format!("text/plain; x=\"{ok}\""), Ok));
    }
    rows.push((Dedupe, "évt/😀/\u{FFFD}".to_owned(), Ok));
    rows.push((Id, "i".repeat(60_000), Ok));
    rows.push((ContentType, "x".repeat(60_000), Ok));
    rows
}

/// A healthy hook, with `field` set to `value` when given.
fn hook(field: Field, value: Option<&str>) -> (Result<Envelope, String>, Ctx) {
    let id = match (field, value) {
        (Field::Id, Some(v)) => v.to_owned(),
        _ => unique_name("h"),
    };
    let source = match (field, value) {
        (Field::Source, Some(v)) => v,
        _ => "stripe",
    };
    let dedupe = match (field, value) {
        (Field::Dedupe, Some(v)) => v.to_owned(),
        _ => unique_name("evt"),
    };
    let content_type = match (field, value) {
        (Field::ContentType, Some(v)) => v,
        _ => "application/json",
    };
    let built = Envelope::builder(id, source, &br#"{"type":"ping"}"#[..])
        .tenant_id("acme")
        .content_type(content_type)
        .dedupe_key(dedupe)
        .build()
        .map_err(|e| e.to_string());
    let ctx = match (&built, field, value) {
        (Ok(e), Field::Replay, Some(v)) => Ctx::for_envelope(e).with_replay_id(v),
        (Ok(e), _, _) => Ctx::for_envelope(e),
        (Err(_), _, _) => Ctx::for_envelope(
            &Envelope::builder("x", "x", &b""[..])
                .build()
                .expect("a plain envelope"),
        ),
    };
    (built, ctx)
}

fn sink(topic: &str, cloudevents: bool) -> MqttSink {
    let mut c = MqttConfig::with_template(&shared_url(), &format!("{topic}/{{dedupe_key}}"))
        .unwrap()
        .with_no_subscriber(NoSubscriber::Transient)
        .with_timeout(Duration::from_secs(5));
    if cloudevents {
        c = c.with_cloudevents(Some(CloudEvents::new(Mode::Binary, "t.x").unwrap()));
    }
    MqttSink::new(c).unwrap()
}

/// Every row against the real broker; after each refused one, a healthy hook on the same
/// sink goes through (the connection survived). The accepted rows are read back.
#[tokio::test]
async fn every_value_mosquitto_refuses_fails_alone_and_the_rest_goes() {
    ankusa_sink_testkit::require_broker!("Mosquitto", shared_addr());
    let topic = format!("poison/{}", unique_name("t"));
    let sub = Subscriber::start(&shared_addr(), &format!("{topic}/#"))
        .await
        .unwrap();
    let message = sink(&topic, false);
    let binary = sink(&topic, true);
    let mut delivered = 0;
    for (field, value, expect) in rows() {
        let sink = match field {
            Field::ContentType => &binary,
            _ => &message,
        };
        let shown = format!("{field:?} {:?}", value.chars().take(40).collect::<String>());
        let (env, ctx) = hook(field, Some(&value));
        let env = match (env, expect) {
            (Err(_), Expect::NoEnvelope) => continue,
            (Err(e), _) => panic!("{shown}: the envelope was refused: {e}"),
            (Ok(_), Expect::NoEnvelope) => panic!("{shown}: the envelope builder took it"),
            (Ok(env), _) => env,
        };
        let res = sink.deliver(&env, &ctx).await;
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
                // Never the value: the reason is printable ASCII, and a value of three
                // characters or more is not in it.
                assert!(
                    reason.chars().all(|c| c == ' ' || c.is_ascii_graphic()),
                    "{shown}: {reason}"
                );
                let head: String = value.chars().take(8).collect();
                assert!(
                    head.chars().count() < 3 || !reason.contains(&head),
                    "{shown}: the value shows: {reason}"
                );
                // The same sink, the same connection: the next hook goes.
                let (healthy, ctx) = hook(field, None);
                sink.deliver(&healthy.unwrap(), &ctx)
                    .await
                    .unwrap_or_else(|f| panic!("after {shown}: {f}"));
                delivered += 1;
            }
            Expect::NoEnvelope => unreachable!(),
        }
    }
    let got = sub.wait_for(delivered).await;
    assert_eq!(got.len(), delivered);
}

impl std::fmt::Debug for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Field::Id => "id",
            Field::Source => "source_id",
            Field::Dedupe => "dedupe_key",
            Field::ContentType => "content_type",
            Field::Replay => "replay_id",
        })
    }
}

/// The issue's run: 1,000 hooks in flight at once on one sink, one of them with a
/// `source_id` holding U+FFFF. Before the check Mosquitto dropped the connection and every
/// publish in flight failed with it; now 999 are delivered and read back, and the poison
/// one alone is permanent.
#[tokio::test]
async fn one_poison_hook_among_1000_fails_alone() {
    ankusa_sink_testkit::require_broker!("Mosquitto", shared_addr());
    let topic = format!("poison/{}", unique_name("mixed"));
    let sub = Subscriber::start(&shared_addr(), &format!("{topic}/#"))
        .await
        .unwrap();
    let sink = Arc::new(sink(&topic, false));
    let poison = 500;
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..1000 {
        let source = if i == poison { "src\u{FFFF}" } else { "stripe" };
        let env = Envelope::builder(format!("{topic}-{i}"), source, &br#"{"n":1}"#[..])
            .dedupe_key(format!("evt-{i}"))
            .build()
            .unwrap();
        let sink = Arc::clone(&sink);
        set.spawn(async move {
            let res = sink.deliver(&env, &Ctx::for_envelope(&env)).await;
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
        ok.len() == 999 && failed.len() == 1 && failed[0].0 == poison,
        "{} ok, {} failed, the first: {:?}",
        ok.len(),
        failed.len(),
        failed.first().map(|(i, f)| format!("hook {i}: {f}"))
    );
    let f = &failed[0].1;
    assert_eq!(f.class(), Class::Permanent, "{f}");
    assert!(
        f.to_string().contains("user property \"ankusa_source_id\""),
        "{f}"
    );
    let got = sub.wait_for(999).await;
    let read: BTreeSet<String> = got.iter().map(|g| g.topic.clone()).collect();
    let want: BTreeSet<String> = ok.iter().map(|i| format!("{topic}/evt-{i}")).collect();
    assert_eq!(read, want);
    eprintln!(
        "1,000 hooks, one poison: 999 ok, read back, in {:?}",
        started.elapsed()
    );
}
