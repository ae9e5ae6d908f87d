//! One poison hook fails alone (issue 60): a value no MQTT string may carry is refused
//! before it is sent, as permanent, naming the field and never the value, and the shared
//! connection stays up for the next hook. Against the shared Mosquitto, which closes the
//! connection for a control character or noncharacter in any string of a PUBLISH.

use crate::common::{Subscriber, shared_addr, shared_url, unique_name};
use ankusa_message::MessageOptions;
use ankusa_message::cloudevents::{CloudEvents, Mode};
use ankusa_sink_mqtt::{MqttConfig, MqttSink, NoSubscriber};
use ankusa_sink_testkit::support::poison::{self, Field, Parts, Poison, Row, Want};
use ankusa_sink_testkit::support::poison::{content_type, dedupe, id, replay, source};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

fn rows() -> Vec<Row> {
    use Want::{Delivered, Refused, Unbuildable};
    let source_prop = Refused("user property \"ankusa_source_id\"");
    let replay_prop = Refused("user property \"ankusa_replay_id\"");
    let mut rows = vec![
        // The issue's case, and the other noncharacters.
        source("src\u{FFFF}", source_prop),
        source("\u{FFFE}", source_prop),
        source("a\u{FDD0}b", source_prop),
        source("a\u{FDEF}", source_prop),
        source("\u{1FFFF}", source_prop),
        source("\u{10FFFE}", source_prop),
        // Control characters cannot be in an envelope's text fields at all...
        source("a\0b", Unbuildable),
        source("a\rb", Unbuildable),
        dedupe("a\nb", Unbuildable),
        content_type("text/plain\t", Unbuildable),
        // ...but a replay id is the ctx's, and Mosquitto refuses every one of them.
        replay("r\0", replay_prop),
        replay("r\r", replay_prop),
        replay("r\n", replay_prop),
        replay("r\tx", replay_prop),
        replay("\u{1F}", replay_prop),
        replay("\u{7F}", replay_prop),
        replay("\u{85}", replay_prop),
        replay("\u{9F}", replay_prop),
        replay("r\u{FFFF}", replay_prop),
        // The topic: a noncharacter, the wildcards, over 65,535 bytes.
        dedupe("evt\u{FFFF}", Refused("topic")),
        dedupe("a+b", Refused("topic")),
        dedupe("a#", Refused("topic")),
        dedupe("x".repeat(65_536), Refused("topic")),
        // A user property over 65,535 bytes (rumqttc would cut its length to 16 bits).
        id("i".repeat(65_536), Refused("user property \"ankusa_id\"")),
        // The Content Type property (binary-mode CloudEvents carry the hook's).
        content_type("text/plain; x=\u{FFFF}", Refused("Content Type")),
        content_type("x".repeat(65_536), Refused("Content Type")),
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
        rows.push(source(format!("src-{ok}"), Delivered));
        rows.push(replay(format!("r-{ok}"), Delivered));
        rows.push(content_type(format!("text/plain; x=\"{ok}\""), Delivered));
    }
    // A `/` in the value would add a topic level (allowed only when the config says so).
    rows.push(dedupe("évt/😀", Refused("topic_template")));
    rows.push(dedupe("évt-😀-\u{FFFD}", Delivered));
    rows.push(id("i".repeat(60_000), Delivered));
    rows.push(content_type("x".repeat(60_000), Delivered));
    rows
}

fn sink(topic: &str, cloudevents: bool) -> MqttSink {
    let mut c = MqttConfig::with_template(&shared_url(), &format!("{topic}/{{dedupe_key}}"))
        .unwrap()
        .with_no_subscriber(NoSubscriber::Transient)
        .with_timeout(Duration::from_secs(5));
    if cloudevents {
        let events = CloudEvents::new(Mode::Binary, "t.x").unwrap();
        c = c.with_message(MessageOptions::new().with_cloudevents(Some(events)));
    }
    MqttSink::new(c).unwrap()
}

/// Every row against the real broker; after each one, a healthy hook on the same sink goes
/// through (the connection survived). What went is read back.
#[tokio::test]
async fn every_value_mosquitto_refuses_fails_alone_and_the_rest_goes() {
    ankusa_sink_testkit::require_broker!("Mosquitto", shared_addr());
    let topic = format!("poison/{}", unique_name("t"));
    let sub = Subscriber::start(&shared_addr(), &format!("{topic}/#"))
        .await
        .unwrap();
    let (message, binary) = (sink(&topic, false), sink(&topic, true));
    let sink_for = |r: &Row| match r.field {
        Field::ContentType => &binary,
        _ => &message,
    };
    let sent = poison::run(&rows(), Parts::keyed, sink_for, async |_| ()).await;
    assert_eq!(sub.wait_for(sent.len()).await.len(), sent.len());
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
    let value = "src\u{FFFF}";
    let hooks = poison::hooks(&topic, 1000, |i, p| {
        if i == 500 {
            p.source = value.to_owned();
        }
    });
    let field = "user property \"ankusa_source_id\"";
    let index = 500;
    let ok = poison::mixed_run(
        &sink,
        hooks,
        Some(Poison {
            index,
            field,
            value,
        }),
    )
    .await;
    let got = sub.wait_for(999).await;
    let read: BTreeSet<String> = got.iter().map(|g| g.topic.clone()).collect();
    let want: BTreeSet<String> = ok.iter().map(|i| format!("{topic}/evt-{i}")).collect();
    assert_eq!(read, want);
}
