//! One poison hook fails alone (issue 60): a subject or header no NATS server takes is
//! refused before it is sent, as permanent, naming the field and never the value, and the
//! shared connection stays up for the next hook. Against the shared JetStream server,
//! which closes the connection for a publish whose control line is over 4,096 bytes.

use crate::common::*;
use ankusa_sink_nats::NatsSink;
use ankusa_sink_testkit::ankusa_message::cloudevents::{CloudEvents, Mode};
use ankusa_sink_testkit::ankusa_sink_core::{Class, Ctx, Envelope, Sink};
use ankusa_sink_testkit::support::unique_name;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

/// What a row changes in an otherwise healthy hook.
#[derive(Debug, Clone, Copy)]
enum Field {
    /// The hook's id: `Nats-Msg-Id`, `ankusa_id`.
    Id,
    /// `ankusa_source_id` (and `ce-source`).
    Source,
    /// The subject (`<subject>.{dedupe_key}`), then `ankusa_dedupe_key`.
    Dedupe,
    /// The content type: a binary-mode CloudEvent's `Content-Type` header.
    ContentType,
    /// The ctx's replay id (no envelope rule applies): `Nats-Msg-Id`, `ankusa_replay_id`.
    Replay,
}

/// What must happen to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Stored in the stream.
    Ok,
    /// Permanent, the reason naming this field.
    Refused(&'static str),
    /// The envelope builder refuses it: no such hook exists.
    NoEnvelope,
}

fn rows() -> Vec<(Field, String, Expect)> {
    use Expect::{NoEnvelope, Ok, Refused};
    use Field::{ContentType, Dedupe, Id, Replay, Source};
    let subject = Refused("subject");
    let header = Refused("header Nats-Msg-Id");
    let mut rows = vec![
        // Subjects: whitespace, empty tokens, wildcards, over the control line.
        (Dedupe, "a b".to_owned(), subject),
        (Dedupe, "a..b".to_owned(), subject),
        (Dedupe, "a.".to_owned(), subject),
        (Dedupe, "*".to_owned(), subject),
        (Dedupe, ">".to_owned(), subject),
        (Dedupe, "x".repeat(4_100), subject),
        // Control characters cannot be in an envelope's text fields at all...
        (Dedupe, "a\tb".to_owned(), NoEnvelope),
        (Source, "a\0b".to_owned(), NoEnvelope),
        (Id, "a\r\nb".to_owned(), NoEnvelope),
        // ...but the ctx's replay id can: a header line break is refused (the replay id is
        // in `Nats-Msg-Id` first), anything else goes.
        (Replay, "r\r".to_owned(), header),
        (Replay, "r\n".to_owned(), header),
        (Replay, "r\r\nX-Evil: 1".to_owned(), header),
        (Replay, "r\0".to_owned(), Ok),
        (Replay, "r\tx".to_owned(), Ok),
        (Replay, "r\u{7F}\u{85}".to_owned(), Ok),
    ];
    // What NATS carries: noncharacters, any Unicode, in subjects and headers alike.
    for ok in [
        "é",
        "😀",
        "\u{FFFD}",
        "\u{FFFF}",
        "\u{FFFE}",
        "\u{FDD0}",
        "\u{10FFFF}",
        "a:b",
    ] {
        rows.push((Source, format!("src-{ok}"), Ok));
        rows.push((Replay, format!("r-{ok}"), Ok));
        rows.push((Dedupe, format!("evt-{ok}"), Ok));
        rows.push((ContentType, format!("text/plain; x={ok}"), Ok));
    }
    rows.push((Dedupe, "é.😀.\u{FFFD}".to_owned(), Ok));
    rows.push((Dedupe, "x".repeat(3_900), Ok));
    rows.push((Id, "i".repeat(10_000), Ok));
    rows
}

/// A healthy hook, with `field` set to `value` when given.
fn hook(field: Field, value: Option<&str>) -> (Result<Envelope, String>, Option<String>) {
    let pick = |f: Field, default: String| match (value, std::mem::discriminant(&f)) {
        (Some(v), d) if d == std::mem::discriminant(&field) => v.to_owned(),
        _ => default,
    };
    let built = Envelope::builder(
        pick(Field::Id, unique_name("h")),
        pick(Field::Source, "stripe".into()),
        &br#"{"type":"ping"}"#[..],
    )
    .tenant_id("acme")
    .content_type(pick(Field::ContentType, "application/json".into()))
    .dedupe_key(pick(Field::Dedupe, unique_name("evt")))
    .build()
    .map_err(|e| e.to_string());
    let replay = matches!(field, Field::Replay)
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

fn sink(subject: &str, cloudevents: bool) -> NatsSink {
    let mut c = sink_config(SHARED_URL, "placeholder")
        .with_subject_template(&format!("{subject}.{{dedupe_key}}"))
        .unwrap();
    if cloudevents {
        c = c.with_cloudevents(Some(CloudEvents::new(Mode::Binary, "t.x").unwrap()));
    }
    NatsSink::new(c)
}

/// Every row against the real server; after each refused one, a healthy hook on the same
/// sink is stored (the connection survived). The stream holds exactly what went.
#[tokio::test]
async fn every_value_nats_refuses_fails_alone_and_the_rest_goes() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, subject) = names("poison");
    create_stream(
        SHARED_URL,
        &stream,
        &format!("{subject}.>"),
        Limits::default(),
    )
    .await;
    let message = sink(&subject, false);
    let binary = sink(&subject, true);
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
        let res = sink.deliver(&env, &ctx(&env, replay)).await;
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
                let (healthy, _) = hook(field, None);
                let healthy = healthy.unwrap();
                sink.deliver(&healthy, &Ctx::for_envelope(&healthy))
                    .await
                    .unwrap_or_else(|f| panic!("after {shown}: {f}"));
                delivered += 1;
            }
            Expect::NoEnvelope => unreachable!(),
        }
    }
    let got = stored_on(SHARED_URL, &stream).await;
    assert_eq!(got.len(), delivered);
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

/// 200 hooks in flight at once on one sink, one whose subject is over the server's control
/// line (the server would close the connection and every publish in flight would fail with
/// it): 199 are stored, the poison one alone is permanent.
#[tokio::test]
async fn one_poison_hook_among_200_fails_alone() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, subject) = names("poison_mixed");
    create_stream(
        SHARED_URL,
        &stream,
        &format!("{subject}.>"),
        Limits::default(),
    )
    .await;
    let sink = Arc::new(sink(&subject, false));
    let poison = 100;
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..200 {
        let dedupe = if i == poison {
            "x".repeat(4_100)
        } else {
            format!("evt-{i}")
        };
        let env = Envelope::builder(format!("{stream}-{i}"), "stripe", &br#"{"n":1}"#[..])
            .dedupe_key(dedupe)
            .build()
            .unwrap();
        let sink = Arc::clone(&sink);
        set.spawn(async move { (i, sink.deliver(&env, &Ctx::for_envelope(&env)).await) });
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
    assert!(f.to_string().contains("subject"), "{f}");
    let ids: BTreeSet<String> = stored_on(SHARED_URL, &stream)
        .await
        .iter()
        .filter_map(|m| {
            m.headers
                .iter()
                .find(|(k, _)| k == "Nats-Msg-Id")
                .map(|(_, v)| v.clone())
        })
        .collect();
    let want: BTreeSet<String> = ok.iter().map(|i| format!("{stream}-{i}")).collect();
    assert_eq!(ids, want);
    eprintln!(
        "200 hooks, one poison: 199 stored, in {:?}",
        started.elapsed()
    );
    delete_stream(SHARED_URL, &stream).await.unwrap();
}
