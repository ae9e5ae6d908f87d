//! SQS against moto, and against the scripted server for what moto cannot produce.

use crate::common::*;
use crate::scripted::{Req, Resp, Scripted, md5_hex};
use ankusa_sink_aws::{AwsBatch, AwsOptions, SqsConfig, SqsSink};
use ankusa_sink_core::{Check, Class, Sink, Subject};
use aws_sdk_sqs::types::QueueAttributeName;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

async fn moto_queue(
    attrs: &[(QueueAttributeName, &str)],
    fifo: bool,
) -> (aws_sdk_sqs::Client, String) {
    let admin = sqs_admin(&moto()).await;
    let mut name = unique("q");
    if fifo {
        name.push_str(".fifo");
    }
    let url = create_queue(&admin, &name, attrs).await;
    (admin, url)
}

async fn sink(url: &str, options: AwsOptions) -> SqsSink {
    SqsSink::new(SqsConfig::new(url, options).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn round_trip_body_and_attributes() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (admin, url) = moto_queue(&[], false).await;
    let s = sink(&url, options(&moto())).await;
    let e = env("h-rt", br#"{"type":"charge.succeeded"}"#);
    let c = ctx(&e);
    s.deliver(&e, &c).await.unwrap();

    let got = receive(&admin, &url, 1).await;
    assert_eq!(got.len(), 1);
    let expected =
        ankusa_message::encode(&e, &c, Some(ankusa_message::DEFAULT_INLINE_MAX_BYTES)).unwrap();
    assert_eq!(got[0].body.as_bytes(), &expected[..]);
    let msg = ankusa_message::decode(got[0].body.as_bytes()).unwrap();
    assert_eq!(msg.id, "h-rt");
    assert_eq!(msg.tenant_id.as_deref(), Some("acme"));
    assert_eq!(got[0].attributes, env_attributes("h-rt", &[]));
    assert_eq!(got[0].attributes, wire_attributes(&e, &c));
    // A standard queue: no group, no dedup id.
    assert!(
        !got[0].system.contains_key("MessageGroupId"),
        "{:?}",
        got[0].system
    );
    delete_queue(&admin, &url).await;
}

#[tokio::test]
async fn fifo_group_and_dedup_ids() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (admin, url) = moto_queue(&[(QueueAttributeName::FifoQueue, "true")], true).await;
    let s = sink(&url, options(&moto())).await;
    let e = env("h-fifo", b"{}");
    s.deliver(&e, &ctx(&e)).await.unwrap();
    // A retried delivery collapses; a replay is a new message.
    s.deliver(&e, &ctx(&e).with_attempt(2)).await.unwrap();
    s.deliver(&e, &ctx(&e).with_replay_id("r1")).await.unwrap();

    // Two are expected: waiting for a third would run out the receive window every time.
    // A third (the retry not collapsed) comes in the same receive as the other two: one
    // FIFO group's messages are handed out together, in order.
    let got = receive(&admin, &url, 2).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].system["MessageGroupId"], "acme/stripe");
    assert_eq!(
        system_values(&got, "MessageDeduplicationId"),
        ["h-fifo", "h-fifo:replay:r1"]
    );
    assert_eq!(got[1].attributes["ankusa_replay_id"], "r1");

    // No tenant: the group is `/<source>`; a configured group wins.
    let e2 = ankusa_sink_core::Envelope::builder("h-nt", "gh", "{}")
        .build()
        .unwrap();
    s.deliver(&e2, &ctx(&e2)).await.unwrap();
    let fixed = sink(&url, options(&moto()).with_message_group_id("g1")).await;
    let e3 = env("h-fixed", b"{}");
    fixed.deliver(&e3, &ctx(&e3)).await.unwrap();
    let got = receive(&admin, &url, 2).await;
    assert_eq!(system_values(&got, "MessageGroupId"), ["/gh", "g1"]);
    delete_queue(&admin, &url).await;
}

#[tokio::test]
async fn missing_queue_is_config() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let url = format!("{}/{ACCOUNT}/{}", moto(), unique("missing"));
    let s = sink(&url, options(&moto())).await;
    let e = env("h-missing", b"{}");
    let res = s.deliver(&e, &ctx(&e)).await;
    assert_class(&res, Class::Config);
    let text = res.unwrap_err().to_string();
    assert!(
        text.contains("NonExistentQueue") || text.contains("QueueDoesNotExist"),
        "{text}"
    );
}

#[tokio::test]
async fn oversize_is_permanent_from_the_queue_and_before_sending() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (admin, url) = moto_queue(&[(QueueAttributeName::MaximumMessageSize, "1024")], false).await;
    let s = sink(&url, options(&moto())).await;
    let e = env("h-big", &[b'x'; 2000]);
    let res = s.deliver(&e, &ctx(&e)).await;
    assert_class(&res, Class::Permanent);
    assert!(
        res.unwrap_err()
            .to_string()
            .contains("InvalidParameterValue")
    );

    // Over max_message_bytes: refused here, nothing sent.
    let tiny = sink(&url, capped_at_8192(options(&moto()))).await;
    let e = env("h-over", &[b'y'; 100]);
    let big_header = header_heavy("h-over");
    assert!(tiny.deliver(&e, &ctx(&e)).await.is_ok());
    let res = tiny.deliver(&big_header, &ctx(&big_header)).await;
    assert_class(&res, Class::Permanent);
    assert!(
        res.unwrap_err()
            .to_string()
            .contains("exceeds max_message_bytes 8192")
    );
    assert_eq!(
        queue_depth(&admin, &url).await,
        1,
        "only the small message was sent"
    );
    delete_queue(&admin, &url).await;
}

#[tokio::test]
async fn check_passes_or_is_config_and_sends_nothing() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (admin, url) = moto_queue(&[], false).await;
    let s = sink(&url, options(&moto())).await;
    assert_eq!(s.check().await.unwrap(), Check::Passed);
    assert_eq!(queue_depth(&admin, &url).await, 0);
    let missing = sink(
        &format!("{}/{ACCOUNT}/{}", moto(), unique("nope")),
        options(&moto()),
    )
    .await;
    let err = missing.check().await.unwrap_err();
    assert_eq!(err.class(), Class::Config, "{err}");
    delete_queue(&admin, &url).await;
}

#[tokio::test]
async fn describe_names_the_queue_never_credentials() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let url = format!("{}/{ACCOUNT}/orders.fifo", moto());
    let planted = planted_credentials();
    let s = sink(&url, options(&moto()).with_credentials(planted)).await;
    let d = s.describe(&Subject::new("stripe", None)).unwrap();
    assert_eq!(d.protocol, "sqs");
    assert_eq!(d.address.as_deref(), Some("orders.fifo"));
    assert_eq!(d.host.as_deref(), moto().strip_prefix("http://"));
    assert_eq!(d.bindings["sqs"]["queue"]["fifoQueue"], true);
    assert_printed_without(&d, &s, &PLANTED);
}

/// A sink on `url` whose client counts its HTTP requests into `counter`.
async fn counted_by(url: &str, options: AwsOptions, counter: &RequestCounter) -> SqsSink {
    sink_counted_by!(
        SqsSink,
        aws_sdk_sqs,
        SqsConfig::new(url, options).unwrap(),
        counter
    )
}

/// A sink on `url` whose client counts its HTTP requests.
async fn counted_sink(url: &str, options: AwsOptions) -> (SqsSink, RequestCounter) {
    let counter = RequestCounter::default();
    (counted_by(url, options, &counter).await, counter)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_batched_deliveries_none_lost() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    const N: usize = 5_000;
    // moto's SendMessage and ReceiveMessage slow down as one queue grows (quadratic
    // overall), so the 5,000 deliveries go to 100 queues of 50, one sink each; every
    // sink's client counts into one counter.
    const QUEUES: usize = 100;
    let admin = sqs_admin(&moto()).await;
    let counter = RequestCounter::default();
    let mut sinks = Vec::new();
    let mut urls = Vec::new();
    for _ in 0..QUEUES {
        let url = create_queue(&admin, &unique("bulk"), &[]).await;
        let batch = AwsBatch::default()
            .with_linger(Duration::from_millis(20))
            .with_max_requests(NonZeroUsize::new(2).unwrap());
        let opts = options(&moto())
            .with_batch(batch)
            .with_timeout(Duration::from_secs(30));
        sinks.push(Arc::new(counted_by(&url, opts, &counter).await));
        urls.push(url);
    }
    let mut tasks = Vec::new();
    for i in 0..N {
        let s = Arc::clone(&sinks[i % QUEUES]);
        tasks.push(tokio::spawn(async move {
            let e = ankusa_sink_core::Envelope::builder(
                format!("h{i}"),
                "stripe",
                format!("{{\"n\":{i}}}"),
            )
            .tenant_id(format!("t{}", i % 7))
            .build()
            .unwrap();
            s.deliver(&e, &ctx(&e).with_batch(true)).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let requests = counter.count();
    assert!(requests >= N / 10, "{requests} requests for {N} messages");
    assert!(
        requests <= N / 4,
        "batching should cut requests: {requests} for {N}"
    );

    let mut ids = Vec::new();
    for url in &urls {
        for m in receive(&admin, url, N / QUEUES).await {
            ids.push(ankusa_message::decode(m.body.as_bytes()).unwrap().id);
        }
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), N, "every delivery arrived exactly once");
    for url in &urls {
        delete_queue(&admin, url).await;
    }
}

#[tokio::test]
async fn unbatched_without_ctx_batch() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (admin, url) = moto_queue(&[], false).await;
    let (s, counter) = counted_sink(&url, options(&moto())).await;
    for i in 0..3 {
        let e = env(&format!("h-ub{i}"), b"{}");
        s.deliver(&e, &ctx(&e)).await.unwrap();
    }
    assert_eq!(counter.count(), 3, "one SendMessage per delivery");
    assert_eq!(receive(&admin, &url, 3).await.len(), 3);
    delete_queue(&admin, &url).await;
}

// ---- scripted server: shapes moto cannot produce ----

fn scripted_url(server: &Scripted) -> String {
    format!("{}/{ACCOUNT}/scripted", server.endpoint())
}

/// A sink on `server` that batches (300 ms linger).
async fn batching_scripted(server: &Scripted) -> Arc<SqsSink> {
    let batch = AwsBatch::default().with_linger(Duration::from_millis(300));
    let opts = options(&server.endpoint()).with_batch(batch);
    Arc::new(sink(&scripted_url(server), opts).await)
}

/// A SendMessage answer with an id and the right MD5 of the request's body.
fn sent_ok(req: &Req) -> Resp {
    let body = req.json()["MessageBody"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Resp::sqs_ok(serde_json::json!({"MessageId": "m-1", "MD5OfMessageBody": md5_hex(&body)}))
}

/// The `x-amz-target` of the first request `server` received.
fn first_target(server: &Scripted) -> String {
    server.requests.lock().unwrap()[0]
        .header("x-amz-target")
        .unwrap()
        .to_owned()
}

async fn scripted_result(resp: Resp) -> Result<(), ankusa_sink_core::Failure> {
    let server = Scripted::start(move |_| resp.clone()).await;
    let s = sink(&scripted_url(&server), options(&server.endpoint())).await;
    delivered_once(&server, &s, None).await
}

#[tokio::test]
async fn config_codes_from_the_wire() {
    for (code, query) in [
        (
            "QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
        ),
        ("KmsAccessDenied", "KMS.AccessDeniedException"),
        ("KmsDisabled", "KMS.DisabledException"),
        ("KmsNotFound", "KMS.NotFoundException"),
        ("InvalidAddress", "InvalidAddress"),
        ("AccessDenied", "AccessDenied"),
        ("UnrecognizedClientException", "UnrecognizedClientException"),
    ] {
        let res = scripted_result(Resp::sqs_error(400, code, query)).await;
        assert_class(&res, Class::Config);
    }
    // Not JSON: config by status.
    assert_class(
        &scripted_result(Resp::xml_access_denied()).await,
        Class::Config,
    );
}

#[tokio::test]
async fn permanent_codes_from_the_wire() {
    for (code, query) in [
        ("InvalidMessageContents", "InvalidMessageContents"),
        ("InvalidParameterValue", "InvalidParameterValue"),
        ("InvalidParameterValueException", "InvalidParameterValue"),
        ("InvalidAttributeValue", "InvalidAttributeValue"),
    ] {
        let res = scripted_result(Resp::sqs_error(400, code, query)).await;
        assert_class(&res, Class::Permanent);
    }
}

#[tokio::test]
async fn throttles_are_retry_after() {
    for (code, query) in [
        ("RequestThrottled", "RequestThrottled"),
        ("ThrottlingException", "Throttling"),
        ("KmsThrottled", "KMS.ThrottlingException"),
    ] {
        // No server delay: dispatch draws the pause.
        let res = scripted_result(Resp::sqs_error(400, code, query)).await;
        assert_class(&res, Class::Throttled);
    }
    // The server's delay wins.
    let resp = Resp::sqs_error(400, "ThrottlingException", "Throttling").header("retry-after", "7");
    assert_eq!(assert_retry_after(&scripted_result(resp).await), 7_000);
    let resp = Resp::sqs_error(400, "RequestThrottled", "RequestThrottled")
        .header("x-amz-retry-after", "1500");
    assert_eq!(assert_retry_after(&scripted_result(resp).await), 1_500);
}

#[tokio::test]
async fn server_errors_timeouts_and_connection_errors_are_transient() {
    for resp in [
        Resp::sqs_error(500, "InternalError", "InternalError"),
        Resp::sqs_error(500, "InternalFailure", "InternalFailure"),
        Resp::sqs_error(503, "ServiceUnavailable", "ServiceUnavailable"),
        Resp::new(502, "bad gateway"),
        Resp::sqs_error(400, "ExpiredToken", "ExpiredToken"),
    ] {
        assert_class(&scripted_result(resp).await, Class::Transient);
    }

    // A server that never answers: bounded by timeout_ms.
    let server = Scripted::start(|_| Resp::hang()).await;
    let s = sink(
        &scripted_url(&server),
        options(&server.endpoint()).with_timeout(Duration::from_millis(300)),
    )
    .await;
    let e = env("h-hang", b"{}");
    let res = tokio::time::timeout(Duration::from_secs(10), s.deliver(&e, &ctx(&e)))
        .await
        .expect("bounded by the sink's timeout");
    assert_class(&res, Class::Transient);
    assert_eq!(
        res.unwrap_err().reason_chain(),
        "sqs SendMessage: timed out"
    );

    // Nothing listening.
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let s = sink(&format!("{endpoint}/{ACCOUNT}/q"), options(&endpoint)).await;
    let res = s.deliver(&e, &ctx(&e)).await;
    assert_class(&res, Class::Transient);
    // In words, without the SDK's Debug dump (DispatchFailure { source: ConnectorError ..).
    assert_eq!(
        res.unwrap_err().reason_chain(),
        "sqs SendMessage: connection refused"
    );
}

#[tokio::test]
async fn the_servers_text_is_escaped_and_bounded() {
    let body = serde_json::json!({
        "__type": "com.amazonaws.sqs#InvalidMessageContents",
        "message": format!("bad\u{1b}]0;owned\u{7}\nINFO forged line {}", "x".repeat(10_000)),
    });
    let resp = Resp::new(400, body.to_string())
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amzn-query-error", "InvalidMessageContents;Sender");
    let res = scripted_result(resp).await;
    assert_class(&res, Class::Permanent);
    let text = res.unwrap_err().to_string();
    assert!(!text.chars().any(char::is_control), "{text:?}");
    assert!(
        text.contains(r"bad\u{1b}]0;owned\u{7}\nINFO forged line x"),
        "{text}"
    );
    assert!(text.len() < 400, "{} bytes", text.len());
}

#[tokio::test]
async fn ok_needs_a_message_id_and_the_right_md5() {
    // Right MD5: Ok.
    let server = Scripted::start(sent_ok).await;
    let s = sink(&scripted_url(&server), options(&server.endpoint())).await;
    let e = env("h-md5", b"{}");
    s.deliver(&e, &ctx(&e)).await.unwrap();

    let wrong =
        Resp::sqs_ok(serde_json::json!({"MessageId": "m-1", "MD5OfMessageBody": md5_hex("other")}));
    let res = scripted_result(wrong).await;
    assert_class(&res, Class::Transient);
    assert!(res.unwrap_err().to_string().contains("MD5"));
    let no_id = Resp::sqs_ok(serde_json::json!({"MD5OfMessageBody": md5_hex("x")}));
    assert_class(&scripted_result(no_id).await, Class::Transient);
}

#[tokio::test]
async fn a_batch_gives_each_delivery_its_own_entry_result() {
    // Entries are answered by hook id: h0 ok, h1 refused, h2 throttled, h3 wrong MD5,
    // h4 internal error, h5 not mentioned, h6 ok.
    let server = Scripted::start(|req| {
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        for entry in req.json()["Entries"].as_array().cloned().unwrap_or_default() {
            let id = entry["Id"].as_str().unwrap().to_owned();
            let body = entry["MessageBody"].as_str().unwrap().to_owned();
            let hook = ankusa_message::decode(body.as_bytes()).unwrap().id;
            let fail = |code: &str, sender: bool| {
                serde_json::json!({"Id": id, "Code": code, "SenderFault": sender, "Message": "scripted"})
            };
            match hook.as_str() {
                "h1" => failed.push(fail("InvalidMessageContents", true)),
                "h2" => failed.push(fail("RequestThrottled", true)),
                "h4" => failed.push(fail("InternalError", false)),
                "h5" => {}
                "h3" => ok.push(serde_json::json!({"Id": id, "MessageId": "m", "MD5OfMessageBody": md5_hex("not it")})),
                _ => ok.push(serde_json::json!({"Id": id, "MessageId": format!("m-{hook}"), "MD5OfMessageBody": md5_hex(&body)})),
            }
        }
        Resp::sqs_ok(serde_json::json!({"Successful": ok, "Failed": failed}))
    })
    .await;
    let s = batching_scripted(&server).await;
    let results = deliver_batched(&s, (0..7).map(|i| env(&format!("h{i}"), b"{}"))).await;
    assert_eq!(server.count(), 1, "one SendMessageBatch, nothing re-sent");
    assert!(first_target(&server).ends_with("SendMessageBatch"));
    assert!(results[0].is_ok());
    assert_class(&results[1], Class::Permanent);
    assert_class(&results[2], Class::Throttled);
    assert_class(&results[3], Class::Transient);
    assert_class(&results[4], Class::Transient);
    assert_class(&results[5], Class::Transient);
    assert!(results[6].is_ok());

    // A failed batch request fails every entry, each with the request's class.
    let server = Scripted::start(|_| {
        Resp::sqs_error(
            400,
            "QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
        )
    })
    .await;
    let s = batching_scripted(&server).await;
    for res in deliver_batched(&s, (0..3).map(|i| env(&format!("q{i}"), b"{}"))).await {
        assert_class(&res, Class::Config);
    }
    assert_eq!(server.count(), 1);
}

/// A SendMessageBatch answer accepting every entry, with the right MD5s.
fn batch_ok(req: &Req) -> Resp {
    let entries = req.json()["Entries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ok: Vec<_> = entries
        .iter()
        .map(|e| {
            let body = e["MessageBody"].as_str().unwrap_or_default();
            serde_json::json!({"Id": e["Id"], "MessageId": "m", "MD5OfMessageBody": md5_hex(body)})
        })
        .collect();
    Resp::sqs_ok(serde_json::json!({"Successful": ok, "Failed": []}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queueing_destination_gets_only_the_requests_it_answers_in_time() {
    // One request at a time, 100 ms each, and a 1 s call timeout. At the fixed 16
    // requests of `batch.max_requests` the later ones would wait up to 1.6 s and time
    // out; the batcher keeps round trips near a quarter of the timeout instead (250 ms:
    // two requests, about five at slow start's overshoot, half the timeout to spare).
    let server = Scripted::start_queueing(Duration::from_millis(100), batch_ok).await;
    let batch = AwsBatch::default().with_linger(Duration::from_millis(5));
    let opts = options(&server.endpoint())
        .with_batch(batch)
        .with_timeout(Duration::from_secs(1));
    let s = Arc::new(sink(&scripted_url(&server), opts).await);
    let results = deliver_batched(&s, (0..300).map(|i| env(&format!("q{i}"), b"{}"))).await;
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} failed, first: {}",
        failed.len(),
        failed[0]
    );
    // Full batches: the entries wait in the batcher, not at the server.
    assert!(server.count() <= 40, "{} requests", server.count());
}

#[tokio::test]
async fn batching_off_never_batches() {
    let server = Scripted::start(sent_ok).await;
    let s = sink(
        &scripted_url(&server),
        options(&server.endpoint()).with_batching(false),
    )
    .await;
    assert!(!s.capabilities().batched);
    let e = env("h-nb", b"{}");
    s.deliver(&e, &ctx(&e).with_batch(true)).await.unwrap();
    assert!(first_target(&server).ends_with(".SendMessage"));
}
