//! Kinesis against moto (through `serial.rs`: one request at a time, see there why), and
//! against the scripted server (the real AWS JSON 1.1 shapes,
//! parsed by aws-sdk-kinesis) for what moto cannot produce: per-record failures of a
//! `PutRecords`, throttles, KMS errors, 5xx, hangs.

use crate::common::*;
use crate::scripted::{Req, Resp, Scripted};
use ankusa_sink_aws::{AwsBatch, AwsOptions, KinesisConfig, KinesisSink};
use ankusa_sink_core::{Check, Class, Sink, Subject};
use std::sync::Arc;
use std::time::Duration;

async fn sink(stream: &str, options: AwsOptions) -> KinesisSink {
    KinesisSink::new(KinesisConfig::new(stream, options).unwrap())
        .await
        .unwrap()
}

/// A fresh one-shard stream on the shared moto.
async fn moto_stream() -> String {
    let name = unique("ks");
    create_stream(&kinesis_moto(), &name).await;
    name
}

#[tokio::test]
async fn round_trip_data_and_partition_key() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let stream = moto_stream().await;
    let s = sink(&stream, options(&kinesis_moto())).await;
    let e = env("h-k1", br#"{"type":"charge.succeeded"}"#);
    let c = ctx(&e);
    s.deliver(&e, &c).await.unwrap();
    // A partition key template: `{tenant_id}` of a tenantless hook is `default`.
    let keyed = KinesisSink::new(
        KinesisConfig::new(&stream, options(&kinesis_moto()))
            .unwrap()
            .with_partition_key_template("{tenant_id}/{source_id}")
            .unwrap(),
    )
    .await
    .unwrap();
    keyed.deliver(&e, &c).await.unwrap();
    let bare = ankusa_sink_core::Envelope::builder("h-k2", "gh", "{}")
        .build()
        .unwrap();
    keyed.deliver(&bare, &ctx(&bare)).await.unwrap();

    let got = read_stream(&kinesis_admin(&kinesis_moto()).await, &stream).await;
    assert_eq!(got.len(), 3, "{got:?}");
    let expected =
        ankusa_message::encode(&e, &c, Some(ankusa_message::DEFAULT_INLINE_MAX_BYTES)).unwrap();
    assert_eq!(
        got[0].data, expected,
        "the record is the Message v1 body, byte for byte"
    );
    assert_eq!(
        got[0].partition_key, "acme:stripe:evt_h-k1",
        "the idempotency key"
    );
    assert_eq!(got[1].data, expected);
    assert_eq!(got[1].partition_key, "acme/stripe");
    assert_eq!(got[2].partition_key, "default/gh");
    assert_eq!(ankusa_message::decode(&got[2].data).unwrap().id, "h-k2");
    delete_stream(&kinesis_moto(), &stream).await;
}

/// A sink on `stream` whose client counts its HTTP requests.
async fn counted(stream: &str, options: AwsOptions) -> (KinesisSink, RequestCounter) {
    let cfg = KinesisConfig::new(stream, options).unwrap();
    sink_counted!(KinesisSink, aws_sdk_kinesis, cfg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_deliveries_share_put_records_and_all_arrive() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let stream = moto_stream().await;
    let batch = AwsBatch::default().with_linger(Duration::from_millis(200));
    let (s, counter) = counted(&stream, options(&kinesis_moto()).with_batch(batch)).await;
    let s = Arc::new(s);
    assert!(s.capabilities().batched);
    let results = deliver_batched(&s, (0..40).map(|i| env(&format!("kb{i}"), b"{}"))).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert!(counter.count() <= 4, "{} requests for 40", counter.count());
    let got = read_stream(&kinesis_admin(&kinesis_moto()).await, &stream).await;
    let mut ids: Vec<String> = got
        .iter()
        .map(|r| ankusa_message::decode(&r.data).unwrap().id)
        .collect();
    ids.sort();
    assert_eq!(ids, numbered_ids("kb", 40));
    // Without ctx.batch: one PutRecord each.
    let before = counter.count();
    let e = env("kb-single", b"{}");
    s.deliver(&e, &ctx(&e)).await.unwrap();
    assert_eq!(counter.count(), before + 1);
    delete_stream(&kinesis_moto(), &stream).await;
}

#[tokio::test]
async fn missing_stream_is_config_on_delivery_and_check() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let s = sink(&unique("absent"), options(&kinesis_moto())).await;
    let f = assert_missing_is_config(&s, "ResourceNotFoundException").await;
    assert_eq!(f.may_have_landed(), Some(false));
}

#[tokio::test]
async fn check_passes_and_writes_nothing() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let stream = moto_stream().await;
    let s = sink(&stream, options(&kinesis_moto())).await;
    assert_eq!(s.check().await.unwrap(), Check::Passed);
    assert!(
        read_stream(&kinesis_admin(&kinesis_moto()).await, &stream)
            .await
            .is_empty()
    );
    delete_stream(&kinesis_moto(), &stream).await;
}

#[tokio::test]
async fn over_max_message_bytes_is_permanent_and_not_sent() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let stream = moto_stream().await;
    let s = sink(&stream, capped_at_8192(options(&kinesis_moto()))).await;
    // Forwarded headers travel in the body: they can make a record too large.
    small_sent_big_refused(&s, "(data + partition key) exceeds max_message_bytes 8192").await;
    let got = read_stream(&kinesis_admin(&kinesis_moto()).await, &stream).await;
    assert_eq!(got.len(), 1, "only the small record was written");
    delete_stream(&kinesis_moto(), &stream).await;
}

#[tokio::test]
async fn describe_and_capabilities_name_the_stream_never_credentials() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let planted = planted_credentials();
    let s = sink("orders", options(&kinesis_moto()).with_credentials(planted)).await;
    let d = s.describe(&Subject::new("stripe", None)).unwrap();
    assert_eq!(d.protocol, "kinesis");
    assert_eq!(d.address.as_deref(), Some("orders"));
    assert_eq!(d.host.as_deref(), kinesis_moto().strip_prefix("http://"));
    let caps = s.capabilities();
    let max = caps.max_message.as_ref().unwrap();
    assert_eq!((max.bytes, max.counts), (1_048_576, "data + partition key"));
    let batch = caps.batch.as_ref().unwrap();
    assert_eq!((batch.max_messages, batch.max_bytes), (500, 5 * 1_048_576));
    assert_eq!(caps.auth, ["static_credentials"]);
    assert_printed_without(&d, &s, &PLANTED);
    // Unbatched with a key template: ordered per key; batched (PutRecords) promises none.
    let ordered = KinesisSink::new(
        KinesisConfig::new("orders", options(&kinesis_moto()).with_batching(false))
            .unwrap()
            .with_partition_key_template("{tenant_id}")
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(
        ordered.capabilities().ordering,
        ankusa_sink_core::Ordering::PerKey {
            key: "{tenant_id}".into()
        }
    );
    assert_eq!(caps.ordering, ankusa_sink_core::Ordering::None);
    assert!(ordered.capabilities().in_flight.is_none());
    assert_eq!(s.capabilities().in_flight.unwrap().deliveries.get(), 1024);
}

// ---- scripted server: what moto cannot produce ----

/// The Message v1 hook ids of a `PutRecords` request, in order.
fn request_hooks(req: &Req) -> Vec<String> {
    req.json()["Records"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let data = aws_smithy_types::base64::decode(r["Data"].as_str().unwrap()).unwrap();
            ankusa_message::decode(&data).unwrap().id
        })
        .collect()
}

/// A `PutRecord` answer.
fn put_ok() -> Resp {
    Resp::json11_ok(serde_json::json!({"SequenceNumber": "1", "ShardId": "shardId-000000000000"}))
}

async fn scripted_sink(server: &Scripted, options: AwsOptions) -> Arc<KinesisSink> {
    Arc::new(sink("scripted", options.with_endpoint(server.endpoint())).await)
}

/// A sink on `server` that batches (300 ms linger).
async fn batching(server: &Scripted) -> Arc<KinesisSink> {
    let batch = AwsBatch::default().with_linger(Duration::from_millis(300));
    scripted_sink(server, options(&server.endpoint()).with_batch(batch)).await
}

/// One unbatched delivery answered with `resp`.
async fn scripted_result(resp: Resp) -> Result<(), ankusa_sink_core::Failure> {
    let server = Scripted::start(move |_| resp.clone()).await;
    let s = scripted_sink(&server, options(&server.endpoint())).await;
    delivered_once(&server, &*s, Some("PutRecord")).await
}

#[tokio::test]
async fn a_partial_put_records_fails_only_the_records_with_an_error_code() {
    // Each record is answered by its hook id, one row of the table each.
    let rows: [(&str, Option<&str>, Option<Class>); 10] = [
        ("r0", None, None),
        (
            "r1",
            Some("ProvisionedThroughputExceededException"),
            Some(Class::Throttled),
        ),
        ("r2", Some("KMSThrottlingException"), Some(Class::Throttled)),
        ("r3", Some("InternalFailure"), Some(Class::Transient)),
        ("r4", Some("AccessDeniedException"), Some(Class::Config)),
        ("r5", Some("KMSAccessDeniedException"), Some(Class::Config)),
        ("r6", Some("ResourceNotFoundException"), Some(Class::Config)),
        (
            "r7",
            Some("InvalidArgumentException"),
            Some(Class::Permanent),
        ),
        // No sequence number and no error: not confirmed.
        ("r8", Some(""), Some(Class::Transient)),
        ("r9", None, None),
    ];
    let server = Scripted::start(move |req| {
        let mut failed = 0;
        let records: Vec<_> = request_hooks(req)
            .iter()
            .map(|hook| {
                let code = rows.iter().find(|r| r.0 == hook).and_then(|r| r.1);
                match code {
                    None => serde_json::json!({"SequenceNumber": "49", "ShardId": "shardId-000000000000"}),
                    Some("") => serde_json::json!({}),
                    Some(code) => {
                        failed += 1;
                        serde_json::json!({"ErrorCode": code, "ErrorMessage": "scripted"})
                    }
                }
            })
            .collect();
        Resp::json11_ok(serde_json::json!({"FailedRecordCount": failed, "Records": records}))
    })
    .await;
    let s = batching(&server).await;
    let results = deliver_batched(&s, rows.iter().map(|r| env(r.0, b"{}"))).await;
    assert_eq!(server.count(), 1, "one PutRecords, nothing re-sent");
    assert_eq!(server.requests.lock().unwrap()[0].operation(), "PutRecords");
    for ((hook, code, want), res) in rows.iter().zip(&results) {
        match want {
            None => assert!(res.is_ok(), "{hook}: {res:?}"),
            Some(class) => {
                assert_class(res, *class);
                let f = res.as_ref().unwrap_err();
                assert_eq!(f.may_have_landed(), Some(*code == Some("")), "{hook}: {f}");
            }
        }
    }
}

#[tokio::test]
async fn a_failed_put_records_request_fails_every_record_with_its_class() {
    for (status, code, class) in [
        (
            400,
            "ProvisionedThroughputExceededException",
            Class::Throttled,
        ),
        (400, "ResourceNotFoundException", Class::Config),
        (500, "InternalFailure", Class::Transient),
    ] {
        let server = Scripted::start(move |_| Resp::json11_error(status, code)).await;
        assert_batch_fails_as(&server, &batching(&server).await, class).await;
    }
    // An answer with another number of results than records: none is known.
    let server = Scripted::start(|_| {
        Resp::json11_ok(serde_json::json!({"FailedRecordCount": 0, "Records": [
            {"SequenceNumber": "1", "ShardId": "shardId-000000000000"}
        ]}))
    })
    .await;
    let s = batching(&server).await;
    for res in deliver_batched(&s, (0..3).map(|i| env(&format!("n{i}"), b"{}"))).await {
        assert_class(&res, Class::Transient);
        assert_eq!(res.unwrap_err().may_have_landed(), Some(true));
    }
}

#[tokio::test]
async fn config_codes_from_the_wire() {
    for code in [
        "ResourceNotFoundException",
        "AccessDeniedException",
        "KMSAccessDeniedException",
        "KMSDisabledException",
        "KMSNotFoundException",
        "KMSInvalidStateException",
        "KMSOptInRequired",
        "UnrecognizedClientException",
    ] {
        assert_class(
            &scripted_result(Resp::json11_error(400, code)).await,
            Class::Config,
        );
    }
    // Not JSON: config by status.
    assert_class(
        &scripted_result(Resp::xml_access_denied()).await,
        Class::Config,
    );
}

#[tokio::test]
async fn permanent_codes_from_the_wire() {
    for code in ["InvalidArgumentException", "ValidationException"] {
        let res = scripted_result(Resp::json11_error(400, code)).await;
        assert_class(&res, Class::Permanent);
        assert_eq!(res.unwrap_err().may_have_landed(), Some(false));
    }
}

#[tokio::test]
async fn throttles_from_the_wire_with_and_without_a_pause() {
    for code in [
        "ProvisionedThroughputExceededException",
        "KMSThrottlingException",
        "LimitExceededException",
    ] {
        assert_class(
            &scripted_result(Resp::json11_error(400, code)).await,
            Class::Throttled,
        );
    }
    let resp = Resp::json11_error(400, "ProvisionedThroughputExceededException")
        .header("retry-after", "3");
    assert_eq!(assert_retry_after(&scripted_result(resp).await), 3_000);
}

#[tokio::test]
async fn server_errors_unconfirmed_answers_timeouts_and_refusals_are_transient() {
    for resp in [
        Resp::json11_error(500, "InternalFailure"),
        Resp::json11_error(503, "ServiceUnavailable"),
        Resp::new(502, "bad gateway"),
        Resp::json11_ok(
            serde_json::json!({"SequenceNumber": "", "ShardId": "shardId-000000000000"}),
        ),
    ] {
        assert_class(&scripted_result(resp).await, Class::Transient);
    }
    assert!(scripted_result(put_ok()).await.is_ok());

    let server = Scripted::start(|_| Resp::hang()).await;
    let s = scripted_sink(
        &server,
        options(&server.endpoint()).with_timeout(Duration::from_millis(300)),
    )
    .await;
    let e = env("h-hang", b"{}");
    let f = s.deliver(&e, &ctx(&e)).await.unwrap_err();
    assert_eq!(f.class(), Class::Transient);
    assert_eq!(f.reason_chain(), "kinesis PutRecord: timed out");
    assert_eq!(f.may_have_landed(), Some(true));

    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let s = sink("q", options(&endpoint)).await;
    let f = s.deliver(&e, &ctx(&e)).await.unwrap_err();
    assert_eq!(f.class(), Class::Transient);
    assert_eq!(f.reason_chain(), "kinesis PutRecord: connection refused");
    assert_eq!(f.may_have_landed(), Some(false));
}

#[tokio::test]
async fn batching_off_never_batches() {
    let server = Scripted::start(|_| put_ok()).await;
    let s = scripted_sink(&server, options(&server.endpoint()).with_batching(false)).await;
    assert!(!s.capabilities().batched);
    let e = env("h-nb", b"{}");
    s.deliver(&e, &ctx(&e).with_batch(true)).await.unwrap();
    assert_eq!(server.requests.lock().unwrap()[0].operation(), "PutRecord");
}
