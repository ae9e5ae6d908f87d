//! Issue 60 for Redis: no value a hook can hold is refused, because Redis refuses none.
//! RESP sends every key, field and value length-prefixed (binary-safe), and the one limit,
//! `proto-max-bulk-len` per argument, is met by the body first (every value a hook puts in
//! a key or field is also in the Message v1 body, escaped, so never longer) and refused
//! before sending (`TooLarge`). The rows the other adapters refuse are delivered here, to
//! a stream key and as field values, and read back byte for byte: a check that refused
//! them would fail this table.

use crate::common::{del, entries, shared_addr, shared_url};
use ankusa_message::cloudevents::{CloudEvents, Mode};
use ankusa_sink_core::{Ctx, Envelope, Sink};
use ankusa_sink_redis::{RedisConfig, RedisSink};
use ankusa_sink_testkit::support::unique_name;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

/// What a row changes in an otherwise healthy hook, and where it lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// The hook's id: the `ankusa_id` field.
    Id,
    /// The source: the stream key (`<prefix>:{source_id}`), `ankusa_source_id`.
    Source,
    /// The content type: a binary-mode CloudEvent's `content_type` field.
    ContentType,
    /// The ctx's replay id (no envelope rule applies): the `ankusa_replay_id` field.
    Replay,
}

/// The rows, each `(field, value, built)`: `false` when the envelope builder refuses the
/// value (control characters in its own text fields), so no such hook exists.
fn rows() -> Vec<(Field, String, bool)> {
    use Field::{ContentType, Id, Replay, Source};
    let mut rows = vec![
        (Source, "a\0b".to_owned(), false),
        (Source, "a\r\nb".to_owned(), false),
        (ContentType, "text/plain\t".to_owned(), false),
        (Replay, "r\0".to_owned(), true),
        (Replay, "r\r\nX-Evil: 1".to_owned(), true),
        (Replay, "\u{1}\u{7F}\u{85}".to_owned(), true),
        (Replay, "x".repeat(10_000), true),
        (Id, "i".repeat(10_000), true),
        (Source, "x".repeat(1_000), true),
        (ContentType, "c".repeat(1_000), true),
    ];
    for v in [
        "é",
        "😀",
        "\u{FFFD}",
        "\u{FFFF}",
        "\u{FFFE}",
        "\u{FDD0}",
        "\u{10FFFF}",
        "a b",
        "+#*>.",
    ] {
        rows.push((Source, format!("src-{v}"), true));
        rows.push((Replay, format!("r-{v}"), true));
        rows.push((Id, format!("h-{v}-{}", unique_name("h")), true));
        rows.push((ContentType, format!("text/plain; x={v}"), true));
    }
    rows
}

fn sink(prefix: &str, cloudevents: bool) -> RedisSink {
    let mut c = RedisConfig::stream(shared_url(), &format!("{prefix}:{{source_id}}")).unwrap();
    if cloudevents {
        c = c
            .with_cloudevents(Some(CloudEvents::new(Mode::Binary, "t.x").unwrap()))
            .unwrap();
    }
    RedisSink::new(c).unwrap()
}

/// The value of `field` in a stream entry.
fn get<'a>(entry: &'a [(String, Vec<u8>)], field: &str) -> Option<&'a [u8]> {
    entry
        .iter()
        .find(|(k, _)| k == field)
        .map(|(_, v)| v.as_slice())
}

/// Every row to the shared Redis: each is stored, and read back exactly.
#[tokio::test]
async fn values_other_brokers_refuse_are_stored_exactly() {
    ankusa_sink_testkit::require_broker!("Redis", shared_addr());
    let prefix = unique_name("poison");
    let message = sink(&prefix, false);
    let binary = sink(&prefix, true);
    let mut keys = BTreeSet::new();
    for (field, value, built) in rows() {
        let shown = format!("{field:?} {:?}", value.chars().take(40).collect::<String>());
        let pick = |f: Field, default: &str| {
            if f == field {
                value.clone()
            } else {
                default.to_owned()
            }
        };
        let env = Envelope::builder(
            pick(Field::Id, &unique_name("h")),
            pick(Field::Source, "stripe"),
            &br#"{"type":"ping"}"#[..],
        )
        .content_type(pick(Field::ContentType, "application/json"))
        .build();
        let env = match (env, built) {
            (Err(_), false) => continue,
            (Err(e), true) => panic!("{shown}: the envelope was refused: {e}"),
            (Ok(_), false) => panic!("{shown}: the envelope builder took it"),
            (Ok(env), true) => env,
        };
        let ctx = match field {
            Field::Replay => Ctx::for_envelope(&env).with_replay_id(value.clone()),
            _ => Ctx::for_envelope(&env),
        };
        let sink = match field {
            Field::ContentType => &binary,
            _ => &message,
        };
        sink.deliver(&env, &ctx)
            .await
            .unwrap_or_else(|f| panic!("{shown}: refused: {f}"));
        let key = format!("{prefix}:{}", env.source_id());
        keys.insert(key.clone());
        let stored = entries(&shared_url(), &key).await.unwrap();
        let last = stored
            .last()
            .unwrap_or_else(|| panic!("{shown}: nothing in {key:?}"));
        let (name, want) = match field {
            Field::Id => ("ankusa_id", env.id()),
            Field::Source => ("ankusa_source_id", env.source_id()),
            Field::ContentType => ("content_type", value.as_str()),
            Field::Replay => ("ankusa_replay_id", value.as_str()),
        };
        assert_eq!(get(last, name), Some(want.as_bytes()), "{shown}");
    }
    for key in keys {
        del(&shared_url(), &key).await.unwrap();
    }
}

/// 200 hooks in flight at once on one sink, one of them the MQTT issue's poison (a
/// `source_id` holding U+FFFF, and a replay id with NUL and CR LF): Redis takes it like
/// the rest, so all 200 are stored.
#[tokio::test]
async fn a_hook_other_brokers_refuse_among_200_is_stored_too() {
    ankusa_sink_testkit::require_broker!("Redis", shared_addr());
    let prefix = unique_name("poison-mixed");
    let sink =
        Arc::new(RedisSink::new(RedisConfig::stream(shared_url(), &prefix).unwrap()).unwrap());
    let poison = 100;
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..200 {
        let source = if i == poison { "src\u{FFFF}" } else { "stripe" };
        let env = Envelope::builder(format!("{prefix}-{i}"), source, &br#"{"n":1}"#[..])
            .build()
            .unwrap();
        let sink = Arc::clone(&sink);
        set.spawn(async move {
            let ctx = if i == poison {
                Ctx::for_envelope(&env).with_replay_id("r\0\r\n")
            } else {
                Ctx::for_envelope(&env)
            };
            (i, sink.deliver(&env, &ctx).await)
        });
    }
    let mut failed = Vec::new();
    while let Some(joined) = set.join_next().await {
        if let (i, Err(f)) = joined.unwrap() {
            failed.push(format!("hook {i}: {f}"));
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
    let stored = entries(&shared_url(), &prefix).await.unwrap();
    let ids: BTreeSet<&[u8]> = stored.iter().filter_map(|e| get(e, "ankusa_id")).collect();
    assert_eq!(ids.len(), 200);
    let poisoned = stored
        .iter()
        .find(|e| get(e, "ankusa_source_id") == Some("src\u{FFFF}".as_bytes()))
        .expect("the U+FFFF hook is stored");
    assert_eq!(get(poisoned, "ankusa_replay_id"), Some(&b"r\0\r\n"[..]));
    eprintln!(
        "200 hooks, one U+FFFF: 200 stored, in {:?}",
        started.elapsed()
    );
    del(&shared_url(), &prefix).await.unwrap();
}
