//! SNS against moto (read back through an SQS subscription with raw delivery), and against
//! the scripted server speaking the SNS query/XML protocol.

use crate::common::*;
use crate::scripted::{Req, Resp, Scripted};
use ankusa_message::MessageOptions;
use ankusa_sink_aws::{AwsBatch, AwsOptions, SnsConfig, SnsSink};
use ankusa_sink_core::{Check, Class, Sink, Subject};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// A fresh topic with a raw-delivery SQS subscription: (sqs admin, queue url, topic arn).
async fn topic(fifo: bool) -> (aws_sdk_sqs::Client, String, String) {
    let mut name = unique("t");
    if fifo {
        name.push_str(".fifo");
    }
    let (arn, url) = subscribed_topic(&name, fifo).await;
    (sqs_admin(&moto()).await, url, arn)
}

async fn drop_topic(sqs: &aws_sdk_sqs::Client, url: &str, arn: &str) {
    delete_queue(sqs, url).await;
    delete_topic(&sns_admin(&moto()).await, arn).await;
}

async fn sink(arn: &str, options: AwsOptions) -> SnsSink {
    SnsSink::new(SnsConfig::new(arn, options).unwrap())
        .await
        .unwrap()
}

async fn counted_sink(arn: &str, options: AwsOptions) -> (SnsSink, RequestCounter) {
    counted(SnsConfig::new(arn, options).unwrap()).await
}

/// A sink for `cfg` whose client counts the requests it sends.
async fn counted(cfg: SnsConfig) -> (SnsSink, RequestCounter) {
    let counter = RequestCounter::default();
    (
        sink_counted_by!(SnsSink, aws_sdk_sns, cfg, counter),
        counter,
    )
}

#[tokio::test]
async fn round_trip_through_a_raw_sqs_subscription() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (sqs, url, arn) = topic(false).await;
    let s = sink(&arn, options(&moto())).await;
    let e = env("h-sns", br#"{"type":"push"}"#);
    let c = ctx(&e).with_replay_id("r9");
    s.deliver(&e, &c).await.unwrap();
    let got = receive(&sqs, &url, 1).await;
    assert_eq!(got.len(), 1);
    let expected =
        ankusa_message::encode(&e, &c, Some(ankusa_message::DEFAULT_INLINE_MAX_BYTES)).unwrap();
    assert_eq!(got[0].body.as_bytes(), &expected[..]);
    assert_eq!(
        ankusa_message::decode(got[0].body.as_bytes())
            .unwrap()
            .replay_id
            .as_deref(),
        Some("r9")
    );
    assert_eq!(
        got[0].attributes,
        env_attributes("h-sns", &[("ankusa_replay_id", "r9")])
    );
    assert_eq!(got[0].attributes, wire_attributes(&e, &c));
    drop_topic(&sqs, &url, &arn).await;
}

#[tokio::test]
async fn fifo_topic_gets_group_and_dedup_ids() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (sqs, url, arn) = topic(true).await;
    let s = sink(&arn, options(&moto())).await;
    let e = env("h-snsfifo", b"{}");
    s.deliver(&e, &ctx(&e)).await.unwrap();
    s.deliver(&e, &ctx(&e).with_replay_id("r2")).await.unwrap();
    let got = receive(&sqs, &url, 2).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].system["MessageGroupId"], "acme/stripe");
    assert_eq!(
        system_values(&got, "MessageDeduplicationId"),
        ["h-snsfifo", "h-snsfifo:replay:r2"]
    );
    drop_topic(&sqs, &url, &arn).await;
}

#[tokio::test]
async fn missing_topic_is_config() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let arn = format!("arn:aws:sns:{REGION}:{ACCOUNT}:{}", unique("missing"));
    let s = sink(&arn, options(&moto())).await;
    let e = env("h-nt", b"{}");
    let res = s.deliver(&e, &ctx(&e)).await;
    assert_class(&res, Class::Config);
    assert!(res.unwrap_err().to_string().contains("NotFound"));
    assert_eq!(s.check().await.unwrap_err().class(), Class::Config);
}

#[tokio::test]
async fn check_passes_and_publishes_nothing() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (sqs, url, arn) = topic(false).await;
    let s = sink(&arn, options(&moto())).await;
    assert_eq!(s.check().await.unwrap(), Check::Passed);
    assert_eq!(queue_depth(&sqs, &url).await, 0);
    drop_topic(&sqs, &url, &arn).await;
}

#[tokio::test]
async fn oversize_is_permanent_from_sns_and_before_sending() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (sqs, url, arn) = topic(false).await;
    // Over SNS's 256 KiB (moto's limit) with the pre-check raised to 1 MiB: SNS refuses it.
    let big_opts = options(&moto())
        .with_max_message_bytes(NonZeroUsize::new(1 << 20).unwrap())
        .with_message(
            MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(400_000).unwrap()),
        );
    let s = sink(&arn, big_opts).await;
    let e = env("h-huge", &vec![b'x'; 300_000]);
    let res = s.deliver(&e, &ctx(&e)).await;
    assert_class(&res, Class::Permanent);

    // The default 256 KiB pre-check: refused here.
    let s = sink(
        &arn,
        options(&moto()).with_message(
            MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(190_000).unwrap()),
        ),
    )
    .await;
    let e = ankusa_sink_core::Envelope::builder("h-pre", "stripe", vec![b'y'; 190_000])
        .header("x-big", "z".repeat(20_000))
        .build()
        .unwrap();
    // The 20 KB header rides in the message only with the forwarding cap raised above its
    // 16 KiB default.
    let wide = ctx(&e).with_extension(ankusa_message::HeaderPolicy {
        max_bytes: NonZeroUsize::new(64 * 1024),
        ..ankusa_message::HeaderPolicy::default()
    });
    let res = s.deliver(&e, &wide).await;
    assert_class(&res, Class::Permanent);
    assert!(
        res.unwrap_err()
            .to_string()
            .contains("exceeds max_message_bytes 262144")
    );
    assert_eq!(queue_depth(&sqs, &url).await, 0, "nothing was published");
    drop_topic(&sqs, &url, &arn).await;
}

#[tokio::test]
async fn a_batch_with_a_refused_entry_answers_each_delivery() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (sqs, url, arn) = topic(false).await;
    let opts = options(&moto())
        .with_max_message_bytes(NonZeroUsize::new(1 << 20).unwrap())
        .with_message(
            MessageOptions::new().with_inline_max_bytes(NonZeroUsize::new(400_000).unwrap()),
        )
        .with_batch(AwsBatch::default().with_linger(Duration::from_millis(300)));
    let (s, counter) = counted_sink(&arn, opts).await;
    let envs = [10usize, 300_000, 10]
        .into_iter()
        .enumerate()
        .map(|(i, size)| env(&format!("b{i}"), &vec![b'x'; size]));
    let results = deliver_batched(&Arc::new(s), envs).await;
    assert_eq!(counter.count(), 1, "one PublishBatch");
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert_class(&results[1], Class::Permanent);
    assert!(results[2].is_ok(), "{:?}", results[2]);
    assert_eq!(hook_ids(&receive(&sqs, &url, 2).await), ["b0", "b2"]);
    drop_topic(&sqs, &url, &arn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_deliveries_none_lost() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    const N: usize = 500;
    let (sqs, url, arn) = topic(false).await;
    let opts =
        options(&moto()).with_batch(AwsBatch::default().with_linger(Duration::from_millis(20)));
    let (s, counter) = counted_sink(&arn, opts).await;
    let envs = (0..N).map(|i| env(&format!("n{i}"), b"{}"));
    for res in deliver_batched(&Arc::new(s), envs).await {
        res.unwrap();
    }
    let requests = counter.count();
    assert!(
        (N / 10..=N / 4).contains(&requests),
        "{requests} requests for {N}"
    );
    let mut ids = hook_ids(&receive(&sqs, &url, N).await);
    ids.dedup();
    assert_eq!(ids.len(), N);
    drop_topic(&sqs, &url, &arn).await;
}

#[tokio::test]
async fn describe_names_the_topic_never_credentials() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let planted =
        ankusa_sink_aws::StaticCredentials::new("AKIAPLANTEDKEYID0000", "planted-secret-value");
    let s = sink(
        &format!("arn:aws:sns:{REGION}:{ACCOUNT}:events.fifo"),
        options(&moto()).with_credentials(planted),
    )
    .await;
    let d = s
        .describe(&Subject::new("stripe", Some("acme".into())))
        .unwrap();
    assert_eq!(d.protocol, "sns");
    assert_eq!(d.address.as_deref(), Some("events.fifo"));
    assert_eq!(d.bindings["sns"]["ordering"]["type"], "FIFO");
    assert_eq!(d.bindings["sns"]["name"], "events.fifo");
    let printed = format!("{d:?} {} {s:?}", serde_json::to_string(&d).unwrap());
    assert!(
        !printed.contains("AKIAPLANTEDKEYID0000") && !printed.contains("planted-secret-value"),
        "{printed}"
    );
}

// ---- scripted server: the SNS query/XML protocol ----

async fn scripted_result(resp: Resp) -> Result<(), ankusa_sink_core::Failure> {
    let server = Scripted::start(move |_| resp.clone()).await;
    let s = sink(
        &format!("arn:aws:sns:{REGION}:{ACCOUNT}:scripted"),
        options(&server.endpoint()),
    )
    .await;
    delivered_once(&server, &s, None).await
}

#[tokio::test]
async fn sns_codes_from_the_wire() {
    for (status, code) in [
        (403, "AuthorizationError"),
        (404, "NotFound"),
        (403, "InvalidClientTokenId"),
        (403, "SignatureDoesNotMatch"),
        (400, "KMSAccessDenied"),
        (403, "AccessDenied"),
    ] {
        let res = scripted_result(Resp::sns_error(status, code)).await;
        assert_class(&res, Class::Config);
    }
    for code in [
        "InvalidParameter",
        "InvalidParameterValue",
        "MessageTooLong",
    ] {
        assert_class(
            &scripted_result(Resp::sns_error(400, code)).await,
            Class::Permanent,
        );
    }
    // No server delay: dispatch draws the pause.
    for code in ["Throttled", "Throttling", "KMSThrottling"] {
        let res = scripted_result(Resp::sns_error(400, code)).await;
        assert_class(&res, Class::Throttled);
    }
    let resp = Resp::sns_error(400, "Throttled").header("retry-after", "3");
    assert_eq!(assert_retry_after(&scripted_result(resp).await), 3_000);
    for (status, code) in [(500, "InternalError"), (503, "ServiceUnavailable")] {
        assert_class(
            &scripted_result(Resp::sns_error(status, code)).await,
            Class::Transient,
        );
    }
    assert_class(
        &scripted_result(Resp::new(502, "bad gateway")).await,
        Class::Transient,
    );
}

// ---- reached nobody: a topic without a confirmed subscription ----

/// A topic without subscriptions: (sns admin, topic arn).
async fn bare_topic() -> (aws_sdk_sns::Client, String) {
    let sns = sns_admin(&moto()).await;
    let arn = create_topic(&sns, &unique("bare"), &[]).await;
    (sns, arn)
}

fn no_subscription(res: &Result<(), ankusa_sink_core::Failure>) -> bool {
    matches!(res, Err(f) if f.class() == Class::Config
        && f.to_string().contains("has no confirmed subscription"))
}

#[tokio::test]
async fn a_topic_without_a_subscription_reaches_nobody() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    let (sns, arn) = bare_topic().await;
    let plain = sink(&arn, options(&moto())).await;
    let check = plain.check().await.map(|_| ());
    assert!(no_subscription(&check), "{check:?}");
    // Without require_subscriber SNS takes the message (and drops it).
    let e = env("h-nobody", b"{}");
    plain.deliver(&e, &ctx(&e)).await.unwrap();

    let strict = |interval| {
        SnsConfig::new(&arn, options(&moto()))
            .unwrap()
            .with_require_subscriber(true)
            .with_subscriber_check_interval(Duration::from_secs(interval))
            .unwrap()
    };
    let (cached, cached_requests) = counted(strict(3_600)).await;
    let (fresh, _) = counted(strict(1)).await;
    for _ in 0..5 {
        assert!(no_subscription(&cached.deliver(&e, &ctx(&e)).await));
    }
    // One listing for five deliveries, and no Publish.
    assert_eq!(cached_requests.count(), 1);
    assert!(no_subscription(&fresh.deliver(&e, &ctx(&e)).await));

    // A subscription appears: the 1 s sink sees it after its interval and its message
    // arrives; the 1 h sink keeps its answer.
    let sqs = sqs_admin(&moto()).await;
    let name = unique("bare-q");
    let url = create_queue(&sqs, &name, &[]).await;
    let sub = subscribe_raw(&sns, &arn, &name).await;
    assert_eq!(plain.check().await.unwrap(), Check::Passed);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let seen = env("h-seen", b"{}");
    fresh.deliver(&seen, &ctx(&seen)).await.unwrap();
    assert!(no_subscription(&cached.deliver(&seen, &ctx(&seen)).await));
    assert_eq!(cached_requests.count(), 1);
    let got = receive(&sqs, &url, 1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].attributes["ankusa_id"], "h-seen");

    // It goes: refused again after the interval.
    sns.unsubscribe()
        .subscription_arn(&sub)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(no_subscription(&fresh.deliver(&seen, &ctx(&seen)).await));
    delete_queue(&sqs, &url).await;
    delete_topic(&sns, &arn).await;
}

/// The SNS query protocol's answers for the subscriber check: get-topic, listing pages,
/// publish. `pages` are the `SubscriptionArn`s of each listing page, in order.
fn listing_server(
    pages: Vec<Vec<&'static str>>,
    list_error: Option<Resp>,
) -> impl Fn(&Req) -> Resp {
    move |req: &Req| {
        let body = String::from_utf8_lossy(&req.body).into_owned();
        let ns = "xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"";
        let meta = "<ResponseMetadata><RequestId>r</RequestId></ResponseMetadata>";
        let xml = |b: String| Resp::new(200, b).header("content-type", "text/xml");
        if body.contains("Action=GetTopicAttributes") {
            return xml(format!(
                "<GetTopicAttributesResponse {ns}><GetTopicAttributesResult><Attributes/>\
                 </GetTopicAttributesResult>{meta}</GetTopicAttributesResponse>"
            ));
        }
        if body.contains("Action=Publish") {
            return xml(format!(
                "<PublishResponse {ns}><PublishResult><MessageId>m-1</MessageId>\
                 </PublishResult>{meta}</PublishResponse>"
            ));
        }
        if let Some(e) = &list_error {
            return e.clone();
        }
        // NextToken=p<i> asks for page i.
        let page: usize = body
            .split('&')
            .find_map(|kv| kv.strip_prefix("NextToken=p"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let members: String = pages[page]
            .iter()
            .map(|arn| {
                format!(
                    "<member><TopicArn>t</TopicArn><Protocol>email</Protocol>\
                     <SubscriptionArn>{arn}</SubscriptionArn><Owner>1</Owner>\
                     <Endpoint>e</Endpoint></member>"
                )
            })
            .collect();
        let next = if page + 1 < pages.len() {
            format!("<NextToken>p{}</NextToken>", page + 1)
        } else {
            String::new()
        };
        xml(format!(
            "<ListSubscriptionsByTopicResponse {ns}><ListSubscriptionsByTopicResult>\
             <Subscriptions>{members}</Subscriptions>{next}</ListSubscriptionsByTopicResult>\
             {meta}</ListSubscriptionsByTopicResponse>"
        ))
    }
}

async fn strict_scripted(server: &Scripted) -> SnsSink {
    let cfg = SnsConfig::new(
        format!("arn:aws:sns:{REGION}:{ACCOUNT}:scripted"),
        options(&server.endpoint()),
    )
    .unwrap()
    .with_require_subscriber(true);
    SnsSink::new(cfg).await.unwrap()
}

fn actions(server: &Scripted) -> Vec<String> {
    server
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter_map(|r| {
            let body = String::from_utf8_lossy(&r.body).into_owned();
            body.split('&')
                .find_map(|kv| kv.strip_prefix("Action=").map(str::to_owned))
        })
        .collect()
}

#[tokio::test]
async fn pending_subscriptions_reach_nobody_and_every_page_is_read() {
    let pending = "PendingConfirmation";
    // Two pages of pending subscriptions only: nobody.
    let server = Scripted::start(listing_server(vec![vec![pending], vec![pending]], None)).await;
    let s = strict_scripted(&server).await;
    assert!(no_subscription(&s.check().await.map(|_| ())));
    let e = env("h-pending", b"{}");
    assert!(no_subscription(&s.deliver(&e, &ctx(&e)).await));
    assert_eq!(
        actions(&server),
        [
            "GetTopicAttributes",
            "ListSubscriptionsByTopic",
            "ListSubscriptionsByTopic",
            "ListSubscriptionsByTopic",
            "ListSubscriptionsByTopic",
        ],
        "no Publish"
    );

    // A confirmed one on the second page: check passes, the delivery is published.
    let confirmed = "arn:aws:sns:us-east-1:123456789012:scripted:0f6b";
    let server = Scripted::start(listing_server(vec![vec![pending], vec![confirmed]], None)).await;
    let s = strict_scripted(&server).await;
    assert_eq!(s.check().await.unwrap(), Check::Passed);
    s.deliver(&e, &ctx(&e)).await.unwrap();
    assert_eq!(actions(&server).last().map(String::as_str), Some("Publish"));
}

#[tokio::test]
async fn a_failed_listing_is_classified_like_any_sns_answer() {
    for (resp, want) in [
        (Resp::sns_error(403, "AuthorizationError"), Class::Config),
        (Resp::sns_error(404, "NotFound"), Class::Config),
        (Resp::sns_error(503, "ServiceUnavailable"), Class::Transient),
    ] {
        let server = Scripted::start(listing_server(vec![], Some(resp))).await;
        let s = strict_scripted(&server).await;
        let check = s.check().await.unwrap_err();
        assert_eq!(check.class(), want, "{check}");
        assert!(
            check.to_string().contains("ListSubscriptionsByTopic"),
            "{check}"
        );
        let e = env("h-listfail", b"{}");
        let res = s.deliver(&e, &ctx(&e)).await;
        assert_class(&res, want);
        assert!(!actions(&server).iter().any(|a| a == "Publish"));
    }
}
