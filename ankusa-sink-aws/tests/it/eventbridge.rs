//! EventBridge against moto (read back through a rule whose target is an SQS queue), and
//! against the scripted server (the real AWS JSON 1.1 shapes, parsed by
//! aws-sdk-eventbridge) for per-entry failures, throttles, 5xx and hangs.

use crate::common::*;
use crate::scripted::{Req, Resp, Scripted};
use ankusa_sink_aws::{AwsBatch, AwsOptions, EventBridgeConfig, EventBridgeSink};
use ankusa_sink_core::{Check, Class, Sink, Subject};
use std::sync::Arc;
use std::time::Duration;

const SOURCE: &str = "com.example.hooks";

async fn sink(bus: &str, options: AwsOptions) -> EventBridgeSink {
    let cfg = EventBridgeConfig::new(SOURCE, options)
        .unwrap()
        .with_event_bus_name(bus)
        .unwrap();
    EventBridgeSink::new(cfg).await.unwrap()
}

#[tokio::test]
async fn round_trip_detail_source_and_detail_type() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let bus = unique("bus");
    let url = bus_to_queue(&bus, SOURCE).await;
    let cfg = EventBridgeConfig::new(SOURCE, options(&moto()))
        .unwrap()
        .with_event_bus_name(&bus)
        .unwrap()
        .with_detail_type("Hook Received")
        .unwrap();
    let s = EventBridgeSink::new(cfg).await.unwrap();
    let e = env("h-eb1", br#"{"type":"charge.succeeded"}"#);
    let c = ctx(&e);
    s.deliver(&e, &c).await.unwrap();

    let sqs = sqs_admin(&moto()).await;
    let got = receive(&sqs, &url, 1).await;
    assert_eq!(got.len(), 1);
    let event: serde_json::Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(event["source"], SOURCE);
    assert_eq!(event["detail-type"], "Hook Received");
    assert_eq!(event["resources"], serde_json::json!([]));
    // EventBridge re-serializes Detail: the same JSON value, not the same bytes.
    let expected =
        ankusa_message::encode(&e, &c, Some(ankusa_message::DEFAULT_INLINE_MAX_BYTES)).unwrap();
    let expected: serde_json::Value = serde_json::from_slice(&expected).unwrap();
    assert_eq!(event["detail"], expected);
    let m = ankusa_message::decode(&event_detail(&got[0].body)).unwrap();
    assert_eq!(
        (m.id.as_str(), m.tenant_id.as_deref()),
        ("h-eb1", Some("acme"))
    );
    delete_bus(&bus).await;
    delete_queue(&sqs, &url).await;
}

/// A sink on `bus` whose client counts its HTTP requests.
async fn counted(bus: &str, options: AwsOptions) -> (EventBridgeSink, RequestCounter) {
    let cfg = EventBridgeConfig::new(SOURCE, options)
        .unwrap()
        .with_event_bus_name(bus)
        .unwrap();
    sink_counted!(EventBridgeSink, aws_sdk_eventbridge, cfg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_deliveries_share_put_events_and_all_arrive() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let bus = unique("bus");
    let url = bus_to_queue(&bus, SOURCE).await;
    let batch = AwsBatch::default().with_linger(Duration::from_millis(200));
    let (s, counter) = counted(&bus, options(&moto()).with_batch(batch)).await;
    let s = Arc::new(s);
    let results = deliver_batched(&s, (0..25).map(|i| env(&format!("eb{i}"), b"{}"))).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert!(
        (3..=6).contains(&counter.count()),
        "{} PutEvents for 25 (10 a request)",
        counter.count()
    );
    let sqs = sqs_admin(&moto()).await;
    let got = receive(&sqs, &url, 25).await;
    let mut ids: Vec<String> = got
        .iter()
        .map(|m| ankusa_message::decode(&event_detail(&m.body)).unwrap().id)
        .collect();
    ids.sort();
    assert_eq!(ids, numbered_ids("eb", 25));
    delete_bus(&bus).await;
    delete_queue(&sqs, &url).await;
}

#[tokio::test]
async fn missing_bus_is_config_on_delivery_and_check() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let s = sink(&unique("absent"), options(&moto())).await;
    assert_missing_is_config(&s, "ResourceNotFoundException").await;
}

#[tokio::test]
async fn check_passes_and_puts_nothing() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let bus = unique("bus");
    let url = bus_to_queue(&bus, SOURCE).await;
    let s = sink(&bus, options(&moto())).await;
    assert_eq!(s.check().await.unwrap(), Check::Passed);
    let sqs = sqs_admin(&moto()).await;
    assert_eq!(queue_depth(&sqs, &url).await, 0);
    delete_bus(&bus).await;
    delete_queue(&sqs, &url).await;
}

#[tokio::test]
async fn over_max_message_bytes_is_permanent_and_not_sent() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let bus = unique("bus");
    let url = bus_to_queue(&bus, SOURCE).await;
    let s = sink(&bus, capped_at_8192(options(&moto()))).await;
    small_sent_big_refused(
        &s,
        "(Detail + Source + DetailType) exceeds max_message_bytes 8192",
    )
    .await;
    let sqs = sqs_admin(&moto()).await;
    let got = receive(&sqs, &url, 1).await;
    assert_eq!(hook_ids_of_events(&got), ["h-small"]);
    delete_bus(&bus).await;
    delete_queue(&sqs, &url).await;
}

fn hook_ids_of_events(got: &[Received]) -> Vec<String> {
    got.iter()
        .map(|m| ankusa_message::decode(&event_detail(&m.body)).unwrap().id)
        .collect()
}

#[tokio::test]
async fn describe_and_capabilities_name_the_bus_never_credentials() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let planted =
        ankusa_sink_aws::StaticCredentials::new("AKIAPLANTEDKEYID0000", "planted-secret-value");
    let s = sink("orders", options(&moto()).with_credentials(planted)).await;
    let d = s.describe(&Subject::new("stripe", None)).unwrap();
    assert_eq!(d.protocol, "eventbridge");
    assert_eq!(d.address.as_deref(), Some("orders"));
    assert_eq!(d.host.as_deref(), moto().strip_prefix("http://"));
    let caps = s.capabilities();
    let max = caps.max_message.as_ref().unwrap();
    assert_eq!(
        (max.bytes, max.counts),
        (262_144, "Detail + Source + DetailType")
    );
    let batch = caps.batch.as_ref().unwrap();
    assert_eq!((batch.max_messages, batch.max_bytes), (10, 262_144));
    assert_eq!(caps.ordering, ankusa_sink_core::Ordering::None);
    assert_eq!(s.capabilities().in_flight.unwrap().deliveries.get(), 320);
    assert_printed_without(&d, &s, &["AKIAPLANTEDKEYID0000", "planted-secret-value"]);
    // Without an endpoint the host is the region's.
    let aws = EventBridgeSink::new(
        EventBridgeConfig::new(SOURCE, AwsOptions::default())
            .unwrap()
            .with_event_bus_name("arn:aws:events:eu-west-1:123456789012:event-bus/b")
            .unwrap(),
    )
    .await
    .unwrap();
    let d = aws.describe(&Subject::new("stripe", None)).unwrap();
    assert_eq!(d.host.as_deref(), Some("events.eu-west-1.amazonaws.com"));
}

// ---- scripted server: what moto cannot produce ----

/// The Message v1 hook ids of a `PutEvents` request, in order.
fn request_hooks(req: &Req) -> Vec<String> {
    req.json()["Entries"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            assert_eq!(e["Source"], SOURCE);
            assert_eq!(e["DetailType"], "ankusa.message.v1");
            assert_eq!(e["EventBusName"], "scripted");
            ankusa_message::decode(e["Detail"].as_str().unwrap().as_bytes())
                .unwrap()
                .id
        })
        .collect()
}

/// Accepts every entry of a `PutEvents`.
fn put_ok(req: &Req) -> Resp {
    let entries: Vec<_> = request_hooks(req)
        .iter()
        .map(|h| serde_json::json!({"EventId": format!("ev-{h}")}))
        .collect();
    Resp::json11_ok(serde_json::json!({"FailedEntryCount": 0, "Entries": entries}))
}

async fn scripted_sink(server: &Scripted, options: AwsOptions) -> Arc<EventBridgeSink> {
    Arc::new(sink("scripted", options.with_endpoint(server.endpoint())).await)
}

/// A sink on `server` that batches (300 ms linger).
async fn batching(server: &Scripted) -> Arc<EventBridgeSink> {
    let batch = AwsBatch::default().with_linger(Duration::from_millis(300));
    scripted_sink(server, options(&server.endpoint()).with_batch(batch)).await
}

/// One unbatched delivery answered with `resp`.
async fn scripted_result(resp: Resp) -> Result<(), ankusa_sink_core::Failure> {
    let server = Scripted::start(move |_| resp.clone()).await;
    let s = scripted_sink(&server, options(&server.endpoint())).await;
    delivered_once(&server, &*s, Some("PutEvents")).await
}

/// One unbatched delivery whose one entry is answered with `code`.
async fn entry_result(code: &str) -> Result<(), ankusa_sink_core::Failure> {
    scripted_result(Resp::json11_ok(serde_json::json!({
        "FailedEntryCount": 1,
        "Entries": [{"ErrorCode": code, "ErrorMessage": "scripted"}]
    })))
    .await
}

#[tokio::test]
async fn each_entry_error_code_of_the_table_fails_its_delivery() {
    for (code, class) in [
        ("ThrottlingException", Class::Throttled),
        ("InternalException", Class::Transient),
        ("InternalFailure", Class::Transient),
        ("AccessDeniedException", Class::Config),
        ("ResourceNotFoundException", Class::Config),
        ("NotAuthorizedForSourceException", Class::Config),
        ("ValidationException", Class::Permanent),
        ("MalformedDetail", Class::Permanent),
        ("InvalidArgument", Class::Permanent),
        ("SomethingNew", Class::Transient),
    ] {
        let res = entry_result(code).await;
        assert_class(&res, class);
        let f = res.unwrap_err();
        assert_eq!(f.may_have_landed(), Some(false), "{code}: {f}");
        assert!(
            f.reason_chain()
                .starts_with(&format!("eventbridge PutEvents: {code}")),
            "{f}"
        );
    }
}

#[tokio::test]
async fn a_partial_put_events_fails_only_the_entries_with_an_error_code() {
    let server = Scripted::start(|req| {
        let mut failed = 0;
        let entries: Vec<_> = request_hooks(req)
            .iter()
            .map(|h| match h.as_str() {
                "e1" => {
                    failed += 1;
                    serde_json::json!({"ErrorCode": "ThrottlingException", "ErrorMessage": "slow"})
                }
                "e2" => {
                    failed += 1;
                    serde_json::json!({"ErrorCode": "InternalException"})
                }
                "e3" => serde_json::json!({}),
                _ => serde_json::json!({"EventId": format!("ev-{h}")}),
            })
            .collect();
        Resp::json11_ok(serde_json::json!({"FailedEntryCount": failed, "Entries": entries}))
    })
    .await;
    let s = batching(&server).await;
    let results = deliver_batched(&s, (0..5).map(|i| env(&format!("e{i}"), b"{}"))).await;
    assert_eq!(server.count(), 1, "one PutEvents, nothing re-sent");
    assert!(results[0].is_ok() && results[4].is_ok(), "{results:?}");
    assert_class(&results[1], Class::Throttled);
    assert_class(&results[2], Class::Transient);
    // No event id and no error: not confirmed, and it may have been put.
    assert_class(&results[3], Class::Transient);
    assert_eq!(
        results[3].as_ref().unwrap_err().may_have_landed(),
        Some(true)
    );
}

#[tokio::test]
async fn request_level_errors_classify_every_entry() {
    for (status, code, class) in [
        (400, "ThrottlingException", Class::Throttled),
        (400, "AccessDeniedException", Class::Config),
        (400, "ResourceNotFoundException", Class::Config),
        (400, "ValidationException", Class::Permanent),
        (500, "InternalException", Class::Transient),
    ] {
        let server = Scripted::start(move |_| Resp::json11_error(status, code)).await;
        assert_batch_fails_as(&server, &batching(&server).await, class).await;
    }
    let resp = Resp::json11_error(400, "ThrottlingException").header("x-amz-retry-after", "1500");
    assert_eq!(assert_retry_after(&scripted_result(resp).await), 1_500);
    // Not JSON: config by status.
    assert_class(
        &scripted_result(Resp::xml_access_denied()).await,
        Class::Config,
    );
}

#[tokio::test]
async fn hangs_refusals_and_short_answers_are_transient() {
    let server = Scripted::start(put_ok).await;
    let s = scripted_sink(&server, options(&server.endpoint())).await;
    let e = env("h-ok", b"{}");
    s.deliver(&e, &ctx(&e)).await.unwrap();

    let short = Resp::json11_ok(serde_json::json!({"FailedEntryCount": 0, "Entries": []}));
    let res = scripted_result(short).await;
    assert_class(&res, Class::Transient);
    assert_eq!(res.unwrap_err().may_have_landed(), Some(true));

    let server = Scripted::start(|_| Resp::hang()).await;
    let s = scripted_sink(
        &server,
        options(&server.endpoint()).with_timeout(Duration::from_millis(300)),
    )
    .await;
    let f = s.deliver(&e, &ctx(&e)).await.unwrap_err();
    assert_eq!(f.class(), Class::Transient);
    assert_eq!(f.reason_chain(), "eventbridge PutEvents: timed out");

    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let s = sink("b", options(&endpoint)).await;
    let f = s.deliver(&e, &ctx(&e)).await.unwrap_err();
    assert_eq!(f.class(), Class::Transient);
    assert_eq!(
        f.reason_chain(),
        "eventbridge PutEvents: connection refused"
    );
}
