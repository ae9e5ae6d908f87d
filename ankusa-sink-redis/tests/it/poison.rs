//! Issue 60 for Redis: no value a hook can hold is refused, because Redis refuses none.
//! RESP sends every key, field and value length-prefixed (binary-safe), and the one limit,
//! `proto-max-bulk-len` per argument, is met by the body first (every value a hook puts in
//! a key or field is also in the Message v1 body, escaped, so never longer) and refused
//! before sending (`TooLarge`). The rows the other adapters refuse are delivered here, to
//! a stream key and as field values, and read back byte for byte: a check that refused
//! them would fail this table.

use crate::common::{del, entries, shared_addr, shared_url};
use ankusa_message::MessageOptions;
use ankusa_message::cloudevents::{CloudEvents, Mode};
use ankusa_sink_redis::{RedisConfig, RedisSink};
use ankusa_sink_testkit::support::poison::{self, Field, Parts, Row, Step, Want};
use ankusa_sink_testkit::support::poison::{content_type, id, replay, source};
use ankusa_sink_testkit::support::unique_name;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The rows: every one is stored but those the envelope builder refuses (control
/// characters in its own text fields), for which no hook exists.
fn rows() -> Vec<Row> {
    use Want::{Delivered, Unbuildable};
    let mut rows = vec![
        source("a\0b", Unbuildable),
        source("a\r\nb", Unbuildable),
        content_type("text/plain\t", Unbuildable),
        replay("r\0", Delivered),
        replay("r\r\nX-Evil: 1", Delivered),
        replay("\u{1}\u{7F}\u{85}", Delivered),
        replay("x".repeat(10_000), Delivered),
        id("i".repeat(10_000), Delivered),
        source("x".repeat(1_000), Delivered),
        content_type("c".repeat(1_000), Delivered),
    ];
    for v in poison::UNICODE.iter().chain(&["a b", "+#*>."]) {
        rows.push(source(format!("src-{v}"), Delivered));
        rows.push(replay(format!("r-{v}"), Delivered));
        rows.push(id(format!("h-{v}-{}", unique_name("h")), Delivered));
        rows.push(content_type(format!("text/plain; x={v}"), Delivered));
    }
    rows
}

fn sink(prefix: &str, cloudevents: bool) -> RedisSink {
    let mut c = RedisConfig::stream(shared_url(), &format!("{prefix}:{{source_id}}")).unwrap();
    if cloudevents {
        c = c
            .with_message(
                MessageOptions::new()
                    .with_cloudevents(Some(CloudEvents::new(Mode::Binary, "t.x").unwrap())),
            )
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

/// Every row to the shared Redis: each is stored, and read back exactly; a healthy hook on
/// the same sink follows each.
#[tokio::test]
async fn values_other_brokers_refuse_are_stored_exactly() {
    ankusa_sink_testkit::require_broker!("Redis", shared_addr());
    let prefix = unique_name("poison");
    let (message, binary) = (sink(&prefix, false), sink(&prefix, true));
    let sink_for = |r: &Row| match r.field {
        Field::ContentType => &binary,
        _ => &message,
    };
    let mut keys = BTreeSet::from([format!("{prefix}:stripe")]);
    let read_back = async |s: Step<'_>| {
        let key = format!("{prefix}:{}", s.env.source_id());
        keys.insert(key.clone());
        let stored = entries(&shared_url(), &key).await.unwrap();
        let last = stored
            .last()
            .unwrap_or_else(|| panic!("{}: nothing in {key:?}", s.row));
        let name = match s.row.field {
            Field::Id => "ankusa_id",
            Field::Source => "ankusa_source_id",
            Field::ContentType => "content_type",
            Field::Replay => "ankusa_replay_id",
            other => unreachable!("{other}"),
        };
        assert_eq!(get(last, name), Some(s.row.value.as_bytes()), "{}", s.row);
    };
    poison::run(&rows(), Parts::new, sink_for, read_back).await;
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
    let hooks = poison::hooks(&prefix, 200, |i, p| {
        if i == 100 {
            p.source = "src\u{FFFF}".to_owned();
            p.replay = Some("r\0\r\n".to_owned());
        }
    });
    assert_eq!(poison::mixed_run(&sink, hooks, None).await.len(), 200);
    let stored = entries(&shared_url(), &prefix).await.unwrap();
    let ids: BTreeSet<&[u8]> = stored.iter().filter_map(|e| get(e, "ankusa_id")).collect();
    assert_eq!(ids.len(), 200);
    let poisoned = stored
        .iter()
        .find(|e| get(e, "ankusa_source_id") == Some("src\u{FFFF}".as_bytes()))
        .expect("the U+FFFF hook is stored");
    assert_eq!(get(poisoned, "ankusa_replay_id"), Some(&b"r\0\r\n"[..]));
    del(&shared_url(), &prefix).await.unwrap();
}
