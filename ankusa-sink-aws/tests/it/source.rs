//! `SqsSource` against moto: records read, acked (deleted), released (visible again at
//! once), the window, the lag, a missing queue, and close making pending acks final.

use crate::common::*;
use ankusa_sink_aws::{SqsSource, SqsSourceConfig};
use ankusa_source::{Record, Source, SourceError, SourceOptions};
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::time::Duration;

/// How long one `next` may take against moto before a test fails.
const NEXT: Duration = Duration::from_secs(20);

async fn new_queue(fifo: bool) -> (aws_sdk_sqs::Client, String) {
    let admin = sqs_admin(&moto()).await;
    let mut name = unique("src");
    let attrs: &[_] = if fifo {
        name.push_str(".fifo");
        &[(QueueAttributeName::FifoQueue, "true")]
    } else {
        &[]
    };
    let url = create_queue(&admin, &name, attrs).await;
    (admin, url)
}

/// Send `bodies` with the raw SDK, 10 a call (one FIFO group, in order, when `fifo`).
async fn send(admin: &aws_sdk_sqs::Client, url: &str, bodies: &[String], fifo: bool) {
    for (n, chunk) in bodies.chunks(10).enumerate() {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let mut e = SendMessageBatchRequestEntry::builder()
                    .id(format!("m{i}"))
                    .message_body(b);
                if fifo {
                    e = e
                        .message_group_id("g")
                        .message_deduplication_id(format!("d{n}-{i}"));
                }
                e.build().unwrap()
            })
            .collect();
        let out = admin
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .unwrap();
        assert!(out.failed().is_empty(), "{:?}", out.failed());
    }
}

fn bodies(prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!(r#"{{"{prefix}":{i:03}}}"#))
        .collect()
}

fn source_options(max_unacked: usize) -> SourceOptions {
    SourceOptions::new(
        NonZeroUsize::new(max_unacked).unwrap(),
        Duration::from_secs(30),
        NonZeroUsize::new(8).unwrap(),
    )
}

async fn open(url: &str, max_unacked: usize) -> SqsSource {
    let config = SqsSourceConfig::new(url, options(&moto()))
        .unwrap()
        .with_wait_seconds(1)
        .unwrap();
    SqsSource::open(&config, &source_options(max_unacked))
        .await
        .unwrap()
}

async fn next(source: &mut SqsSource) -> Record {
    tokio::time::timeout(NEXT, source.next())
        .await
        .expect("a record within the time allowed")
        .expect("the source is not stopped")
        .expect("no source error")
}

/// Nothing can be received from the queue now (nothing visible, nothing in flight).
async fn assert_empty(admin: &aws_sdk_sqs::Client, url: &str) {
    assert_eq!(queue_depth(admin, url).await, 0, "queue depth");
    let got = admin
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    assert!(got.messages().is_empty(), "{:?}", got.messages());
}

#[tokio::test]
async fn fifty_messages_are_read_acked_and_gone() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (admin, url) = new_queue(false).await;
    let sent = bodies("n", 50);
    send(&admin, &url, &sent, false).await;
    let mut source = open(&url, 1024).await;
    assert!(
        source.describe().contains("sqs queue"),
        "{}",
        source.describe()
    );
    let queue_name = url.rsplit('/').next().unwrap().to_owned();
    let mut got = BTreeSet::new();
    for _ in 0..sent.len() {
        let r = next(&mut source).await;
        assert!(
            r.position.starts_with(&format!("{queue_name}#")),
            "{}",
            r.position
        );
        assert!(
            got.insert(String::from_utf8(r.payload).unwrap()),
            "a duplicate"
        );
        r.ack.ack();
    }
    assert_eq!(got, sent.iter().cloned().collect::<BTreeSet<_>>());
    source.stop();
    assert!(source.next().await.is_none(), "stopped");
    Box::new(source).close(Duration::from_secs(10)).await;
    assert_empty(&admin, &url).await;
    delete_queue(&admin, &url).await;
}

#[tokio::test]
async fn a_released_record_comes_back_at_once() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (admin, url) = new_queue(false).await;
    send(&admin, &url, &bodies("r", 1), false).await;
    let mut source = open(&url, 16).await;
    let first = next(&mut source).await;
    let body = first.payload.clone();
    let position = first.position.clone();
    first.ack.release();
    // The visibility timeout is 300 s: only the release brings it back this soon.
    let again = tokio::time::timeout(Duration::from_secs(10), source.next())
        .await
        .expect("released: visible again at once")
        .unwrap()
        .unwrap();
    assert_eq!(again.payload, body);
    assert_eq!(again.position, position, "the same message id");
    again.ack.ack();
    Box::new(source).close(Duration::from_secs(10)).await;
    assert_empty(&admin, &url).await;
    delete_queue(&admin, &url).await;
}

#[tokio::test]
async fn lag_counts_the_messages_waiting() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (admin, url) = new_queue(false).await;
    send(&admin, &url, &bodies("l", 7), false).await;
    let source = open(&url, 16).await;
    let lag = source.lag().expect("the source reports its lag");
    assert_eq!(lag.lag().await, Some(7));
    Box::new(source).close(Duration::from_secs(5)).await;
    delete_queue(&admin, &url).await;
}

#[tokio::test]
async fn a_missing_queue_is_a_config_error_naming_it() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let name = unique("missing");
    let url = format!("{}/{ACCOUNT}/{name}", moto());
    let mut source = open(&url, 16).await;
    let lag = source.lag().unwrap();
    let res = tokio::time::timeout(NEXT, source.next())
        .await
        .expect("answered within the time allowed")
        .expect("not stopped");
    let Err(SourceError::Config(text)) = res else {
        panic!("expected a config error, got {res:?}");
    };
    assert!(text.contains(&name), "{text}");
    assert!(text.contains("does not exist"), "{text}");
    for secret in ["AKIAIOSFODNN7EXAMPLE", "moto-secret-not-checked"] {
        assert!(!text.contains(secret), "{text}");
    }
    assert_eq!(lag.lag().await, None, "no figure for a missing queue");
    Box::new(source).close(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn the_window_bounds_the_records_handed_out() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (admin, url) = new_queue(false).await;
    send(&admin, &url, &bodies("w", 5), false).await;
    let mut source = open(&url, 3).await;
    let window = source.window().expect("the source has a window");
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(next(&mut source).await);
    }
    assert_eq!(window.unsettled(), 3);
    // Two more are waiting in the queue: only the window holds the fourth back.
    let fourth = tokio::time::timeout(Duration::from_secs(2), source.next()).await;
    assert!(fourth.is_err(), "the fourth record waits for a place");
    held.pop().unwrap().ack.ack();
    let fourth = next(&mut source).await;
    assert_eq!(window.unsettled(), 3);
    held.push(fourth);
    for r in held {
        r.ack.ack();
    }
    let fifth = next(&mut source).await;
    fifth.ack.ack();
    Box::new(source).close(Duration::from_secs(10)).await;
    assert_empty(&admin, &url).await;
    delete_queue(&admin, &url).await;
}

#[tokio::test]
async fn close_makes_pending_acks_final() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (admin, url) = new_queue(false).await;
    send(&admin, &url, &bodies("c", 10), false).await;
    let mut source = open(&url, 64).await;
    let mut records = Vec::new();
    for _ in 0..10 {
        records.push(next(&mut source).await);
    }
    // Eight acked just before the stop; two acked while `close` waits for them.
    let late: Vec<Record> = records.split_off(8);
    for r in records {
        r.ack.ack();
    }
    source.stop();
    let acker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for r in late {
            r.ack.ack();
        }
    });
    Box::new(source).close(Duration::from_secs(10)).await;
    acker.await.unwrap();
    assert_empty(&admin, &url).await;
    delete_queue(&admin, &url).await;
}

#[tokio::test]
async fn a_fifo_queue_is_read_in_group_order() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (admin, url) = new_queue(true).await;
    let sent = bodies("f", 12);
    send(&admin, &url, &sent, true).await;
    let mut source = open(&url, 64).await;
    let mut got = Vec::new();
    for _ in 0..sent.len() {
        let r = next(&mut source).await;
        got.push(String::from_utf8(r.payload).unwrap());
        r.ack.ack();
    }
    assert_eq!(got, sent);
    Box::new(source).close(Duration::from_secs(10)).await;
    assert_empty(&admin, &url).await;
    delete_queue(&admin, &url).await;
}
