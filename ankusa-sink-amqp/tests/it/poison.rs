//! One poison hook fails alone (issue 60): a short string over 255 bytes (routing key,
//! `message_id`, `content_type`) cannot be encoded, and is refused before it is sent, as
//! permanent, naming the field and never the value; the shared connection and channel stay
//! up for the next hook. Everything else RabbitMQ takes, and the table proves it.

use crate::common::*;
use ankusa_message::MessageOptions;
use ankusa_message::cloudevents::{CloudEvents, Mode};
use ankusa_sink_amqp::AmqpSink;
use ankusa_sink_testkit::support::poison::{self, Field, Parts, Poison, Row, Want};
use ankusa_sink_testkit::support::poison::{content_type, dedupe, id, replay, source};
use ankusa_sink_testkit::support::unique_name;
use std::collections::BTreeSet;
use std::sync::Arc;

fn rows() -> Vec<Row> {
    use Want::{Delivered, Refused, Unbuildable};
    let mut rows = vec![
        // Short strings: 255 bytes at most.
        dedupe("x".repeat(254), Refused("routing key")),
        id("i".repeat(256), Refused("message_id")),
        content_type("c".repeat(256), Refused("content_type")),
        content_type("é".repeat(128), Refused("content_type")),
        // A topic exchange: a hook's value must not add words or wildcards (the rule
        // before this issue, kept).
        dedupe("a.b", Refused("routing key")),
        dedupe("#", Refused("routing key")),
        // Control characters cannot be in an envelope's text fields at all.
        source("a\0b", Unbuildable),
        dedupe("a\rb", Unbuildable),
        content_type("text/plain\n", Unbuildable),
        // What RabbitMQ takes: any bytes in a long-string header value (the ctx's replay
        // id), any UTF-8 in the short strings.
        replay("r\0", Delivered),
        replay("r\r\nX-Evil: 1", Delivered),
        replay("r\t\u{7F}\u{85}", Delivered),
        replay("x".repeat(10_000), Delivered),
        dedupe("x".repeat(253), Delivered),
        id("i".repeat(255), Delivered),
        content_type("c".repeat(255), Delivered),
    ];
    for ok in poison::UNICODE {
        rows.push(source(format!("src-{ok}"), Delivered));
        rows.push(replay(format!("r-{ok}"), Delivered));
        rows.push(dedupe(format!("evt-{ok}"), Delivered));
        rows.push(id(format!("h-{ok}-{}", unique_name("h")), Delivered));
        rows.push(content_type(format!("text/plain; x={ok}"), Delivered));
    }
    rows
}

fn poison_sink(exchange: &str, cloudevents: bool) -> AmqpSink {
    let mut c = config(exchange)
        .with_routing_key_template("p-{dedupe_key}")
        .unwrap();
    if cloudevents {
        let events = CloudEvents::new(Mode::Binary, "t.x").unwrap();
        c = c.with_message(MessageOptions::new().with_cloudevents(Some(events)));
    }
    AmqpSink::new(c)
}

/// Every row against RabbitMQ; after each one, a healthy hook on the same sink is confirmed
/// (connection and channel survived). The queue holds exactly what went.
#[tokio::test]
async fn every_value_rabbitmq_cannot_take_fails_alone_and_the_rest_goes() {
    ankusa_sink_testkit::require_broker!("RabbitMQ", broker_addr());
    let _g = shared().await;
    let mut admin = Admin::new().await;
    let (x, q) = admin.topic_with_queue("#").await;
    let (message, binary) = (poison_sink(&x, false), poison_sink(&x, true));
    let sink_for = |r: &Row| match r.field {
        Field::ContentType => &binary,
        _ => &message,
    };
    let sent = poison::run(&rows(), Parts::keyed, sink_for, async |_| ()).await;
    assert_eq!(admin.count(&q).await as usize, sent.len());
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
    let value = format!("text/plain; x={}", "y".repeat(300));
    let hooks = poison::hooks(&run, 200, |i, p| {
        p.content_type = Some(if i == 100 { &value } else { "text/plain" }.to_owned());
    });
    let (index, field) = (100, "content_type");
    let poison = Poison {
        index,
        field,
        value: &value,
    };
    let ok = poison::mixed_run(&sink, hooks, Some(poison)).await;
    let mut ids = BTreeSet::new();
    for _ in 0..199 {
        let got = admin.get(&q).await;
        let id = got.delivery.properties.message_id().clone().unwrap();
        ids.insert(id.as_str().to_owned());
    }
    let want: BTreeSet<String> = ok.iter().map(|i| format!("{run}-{i}")).collect();
    assert_eq!(ids, want);
    assert_eq!(admin.count(&q).await, 0);
    admin.cleanup().await;
}
