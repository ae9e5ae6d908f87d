//! One poison hook fails alone (issue 60): a subject or header no NATS server takes is
//! refused before it is sent, as permanent, naming the field and never the value, and the
//! shared connection stays up for the next hook. Against the shared JetStream server,
//! which closes the connection for a publish whose control line is over 4,096 bytes.

use crate::common::*;
use ankusa_message::MessageOptions;
use ankusa_sink_nats::NatsSink;
use ankusa_sink_testkit::ankusa_message::cloudevents::{CloudEvents, Mode};
use ankusa_sink_testkit::support::poison::{self, Field, Parts, Poison, Row, Want};
use ankusa_sink_testkit::support::poison::{content_type, dedupe, id, replay, source};
use std::collections::BTreeSet;
use std::sync::Arc;

fn rows() -> Vec<Row> {
    use Want::{Delivered, Refused, Unbuildable};
    let subject = Refused("subject");
    let header = Refused("header Nats-Msg-Id");
    let mut rows = vec![
        // Subjects: whitespace, empty tokens, wildcards, over the control line.
        dedupe("a b", subject),
        dedupe("a..b", subject),
        dedupe("a.", subject),
        dedupe("*", subject),
        dedupe(">", subject),
        dedupe("x".repeat(4_100), subject),
        // Control characters cannot be in an envelope's text fields at all...
        dedupe("a\tb", Unbuildable),
        source("a\0b", Unbuildable),
        id("a\r\nb", Unbuildable),
        // ...but the ctx's replay id can: a header line break is refused (the replay id is
        // in `Nats-Msg-Id` first), anything else goes.
        replay("r\r", header),
        replay("r\n", header),
        replay("r\r\nX-Evil: 1", header),
        replay("r\0", Delivered),
        replay("r\tx", Delivered),
        replay("r\u{7F}\u{85}", Delivered),
    ];
    // What NATS carries: noncharacters, any Unicode, in subjects and headers alike.
    for ok in poison::UNICODE.iter().chain(&["a:b"]) {
        rows.push(source(format!("src-{ok}"), Delivered));
        rows.push(replay(format!("r-{ok}"), Delivered));
        rows.push(dedupe(format!("evt-{ok}"), Delivered));
        rows.push(content_type(format!("text/plain; x={ok}"), Delivered));
    }
    // A `.` in the value would add a token (allowed only when the config says so).
    rows.push(dedupe("é.😀", Refused("subject_template")));
    rows.push(dedupe("é-😀-\u{FFFD}", Delivered));
    rows.push(dedupe("x".repeat(3_900), Delivered));
    rows.push(id("i".repeat(10_000), Delivered));
    rows
}

fn sink(subject: &str, cloudevents: bool) -> NatsSink {
    let mut c = sink_config(SHARED_URL, "placeholder")
        .with_subject_template(&format!("{subject}.{{dedupe_key}}"))
        .unwrap();
    if cloudevents {
        let events = CloudEvents::new(Mode::Binary, "t.x").unwrap();
        c = c.with_message(MessageOptions::new().with_cloudevents(Some(events)));
    }
    NatsSink::new(c)
}

/// Every row against the real server; after each one, a healthy hook on the same sink is
/// stored (the connection survived). The stream holds exactly what went.
#[tokio::test]
async fn every_value_nats_refuses_fails_alone_and_the_rest_goes() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, subject) = names("poison");
    let filter = format!("{subject}.>");
    create_stream(SHARED_URL, &stream, &filter, Limits::default()).await;
    let (message, binary) = (sink(&subject, false), sink(&subject, true));
    let sink_for = |r: &Row| match r.field {
        Field::ContentType => &binary,
        _ => &message,
    };
    let sent = poison::run(&rows(), Parts::keyed, sink_for, async |_| ()).await;
    assert_eq!(stored_on(SHARED_URL, &stream).await.len(), sent.len());
    delete_stream(SHARED_URL, &stream).await.unwrap();
}

/// 200 hooks in flight at once on one sink, one whose subject is over the server's control
/// line (the server would close the connection and every publish in flight would fail with
/// it): 199 are stored, the poison one alone is permanent.
#[tokio::test]
async fn one_poison_hook_among_200_fails_alone() {
    ankusa_sink_testkit::require_broker!("NATS", "127.0.0.1:4222");
    let (stream, subject) = names("poison_mixed");
    let filter = format!("{subject}.>");
    create_stream(SHARED_URL, &stream, &filter, Limits::default()).await;
    let sink = Arc::new(sink(&subject, false));
    let value = "x".repeat(4_100);
    let hooks = poison::hooks(&stream, 200, |i, p| {
        if i == 100 {
            p.dedupe = Some(value.clone());
        }
    });
    let (index, field) = (100, "subject");
    let poison = Poison {
        index,
        field,
        value: &value,
    };
    let ok = poison::mixed_run(&sink, hooks, Some(poison)).await;
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
    delete_stream(SHARED_URL, &stream).await.unwrap();
}
