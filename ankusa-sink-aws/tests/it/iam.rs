//! IAM denial from a real moto: a dedicated moto (its own loopback port) started with
//! `INITIAL_NO_AUTH_ACTION_COUNT`, so after the setup calls every request is checked. Kinesis
//! and EventBridge are JSON services: moto answers their denials as a 403 with an XML body,
//! config by status (the same answer real AWS gives as `AccessDeniedException` JSON, tested
//! by code against the scripted server).

use crate::common::*;
use ankusa_sink_aws::{
    EventBridgeConfig, EventBridgeSink, KinesisConfig, KinesisSink, SnsConfig, SnsSink, SqsConfig,
    SqsSink, StaticCredentials,
};
use ankusa_sink_core::{Class, Sink};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Raw HTTP/1.1 POST with a form body (moto does not check signatures during the no-auth
/// actions; the credential scope in the header routes the request to the service).
fn post(addr: &str, service: &str, form: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let req = format!(
        "POST / HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/x-www-form-urlencoded\r\n\
         authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20260101/{REGION}/{service}/aws4_request, SignedHeaders=host, Signature=0\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{form}",
        form.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out)
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> &'a str {
    let start = text
        .find(open)
        .unwrap_or_else(|| panic!("no {open} in {text}"))
        + open.len();
    let end = text[start..].find(close).unwrap() + start;
    &text[start..end]
}

/// A user without a policy on the moto at `addr`: its access key id and secret.
fn user_without_policy(addr: &str) -> (String, String) {
    let (st, _) = post(
        addr,
        "iam",
        "Action=CreateUser&UserName=nopolicy&Version=2010-05-08",
    );
    assert_eq!(st, 200);
    let (st, body) = post(
        addr,
        "iam",
        "Action=CreateAccessKey&UserName=nopolicy&Version=2010-05-08",
    );
    assert_eq!(st, 200, "{body}");
    (
        between(&body, "<AccessKeyId>", "</AccessKeyId>").to_owned(),
        between(&body, "<SecretAccessKey>", "</SecretAccessKey>").to_owned(),
    )
}

/// The three refusals: an unknown key, a wrong secret, a user without a policy.
fn refusals(key_id: String, secret: String) -> [(&'static str, StaticCredentials); 3] {
    [
        (
            "InvalidClientTokenId",
            StaticCredentials::new("AKIAUNKNOWNKEY000000", "whatever"),
        ),
        (
            "SignatureDoesNotMatch",
            StaticCredentials::new(key_id.clone(), "not-the-secret"),
        ),
        ("AccessDenied", StaticCredentials::new(key_id, secret)),
    ]
}

#[tokio::test]
async fn iam_denials_are_config_for_kinesis_and_eventbridge() {
    // Four unauthenticated actions: CreateStream, CreateEventBus, CreateUser, CreateAccessKey.
    let moto = tokio::task::spawn_blocking(|| start_moto(4)).await.unwrap();
    let ep = moto.endpoint.clone();
    let addr = ep.trim_start_matches("http://").to_owned();
    create_stream(&ep, "denied").await;
    events_admin(&ep)
        .await
        .create_event_bus()
        .name("denied")
        .send()
        .await
        .unwrap();
    let (key_id, secret) = tokio::task::spawn_blocking(move || user_without_policy(&addr))
        .await
        .unwrap();
    for (why, creds) in refusals(key_id, secret) {
        let opts = options(&ep).with_credentials(creds);
        let kinesis = KinesisSink::new(KinesisConfig::new("denied", opts.clone()).unwrap())
            .await
            .unwrap();
        let events = EventBridgeSink::new(
            EventBridgeConfig::new("com.example", opts)
                .unwrap()
                .with_event_bus_name("denied")
                .unwrap(),
        )
        .await
        .unwrap();
        let e = env("h-iam", b"{}");
        for (name, res) in [
            ("kinesis deliver", kinesis.deliver(&e, &ctx(&e)).await),
            ("kinesis check", kinesis.check().await.map(|_| ())),
            ("eventbridge deliver", events.deliver(&e, &ctx(&e)).await),
            ("eventbridge check", events.check().await.map(|_| ())),
        ] {
            let f = res.expect_err(name);
            assert_eq!(f.class(), Class::Config, "{why} {name}: {f}");
            assert_eq!(f.may_have_landed(), Some(false), "{why} {name}: {f}");
            assert!(f.to_string().contains("HTTP 403"), "{why} {name}: {f}");
        }
    }
    drop(moto);
}

#[tokio::test]
async fn iam_denials_are_config_for_sqs_and_sns() {
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    // Four unauthenticated actions: CreateQueue, CreateTopic, CreateUser, CreateAccessKey.
    let moto = tokio::task::spawn_blocking(|| start_moto(4)).await.unwrap();
    let ep = moto.endpoint.clone();
    let addr = ep.trim_start_matches("http://").to_owned();

    let queue_url = create_queue(&sqs_admin(&ep).await, "denied", &[]).await;
    let topic_arn = sns_admin(&ep)
        .await
        .create_topic()
        .name("denied")
        .send()
        .await
        .unwrap()
        .topic_arn()
        .unwrap()
        .to_owned();
    let (key_id, secret) = tokio::task::spawn_blocking(move || user_without_policy(&addr))
        .await
        .unwrap();

    for (why, creds) in refusals(key_id, secret) {
        let opts = options(&ep).with_credentials(creds);
        let sqs = SqsSink::new(SqsConfig::new(&queue_url, opts.clone()).unwrap())
            .await
            .unwrap();
        let sns = SnsSink::new(SnsConfig::new(&topic_arn, opts).unwrap())
            .await
            .unwrap();
        let e = env("h-iam", b"{}");
        for (name, res) in [
            ("sqs deliver", sqs.deliver(&e, &ctx(&e)).await),
            ("sqs check", sqs.check().await.map(|_| ())),
            ("sns deliver", sns.deliver(&e, &ctx(&e)).await),
            ("sns check", sns.check().await.map(|_| ())),
        ] {
            let f = res.expect_err(name);
            assert_eq!(f.class(), Class::Config, "{why} {name}: {f}");
            assert!(f.to_string().contains("403"), "{why} {name}: {f}");
        }
    }
    drop(moto);
}

/// The SQS source: each refusal ends `next` with a config error naming the queue, never the
/// credentials.
#[tokio::test]
async fn iam_denials_end_the_sqs_source_with_a_config_error() {
    use ankusa_source::{Source, SourceError, SourceOptions};
    use std::num::NonZeroUsize;
    ankusa_sink_testkit::require_broker!("moto", moto_addr());
    // Three unauthenticated actions: CreateQueue, CreateUser, CreateAccessKey.
    let moto = tokio::task::spawn_blocking(|| start_moto(3)).await.unwrap();
    let ep = moto.endpoint.clone();
    let addr = ep.trim_start_matches("http://").to_owned();
    let queue_url = create_queue(&sqs_admin(&ep).await, "denied-source", &[]).await;
    let (key_id, secret) = tokio::task::spawn_blocking(move || user_without_policy(&addr))
        .await
        .unwrap();
    let source_options = SourceOptions::new(
        NonZeroUsize::new(8).unwrap(),
        Duration::from_secs(30),
        NonZeroUsize::MIN,
    );
    for (why, creds) in refusals(key_id.clone(), secret.clone()) {
        let config =
            ankusa_sink_aws::SqsSourceConfig::new(&queue_url, options(&ep).with_credentials(creds))
                .unwrap()
                .with_wait_seconds(0)
                .unwrap();
        let mut source = ankusa_sink_aws::SqsSource::open(&config, &source_options)
            .await
            .unwrap();
        let res = tokio::time::timeout(Duration::from_secs(30), source.next())
            .await
            .expect("answered in time")
            .expect("not stopped");
        let Err(SourceError::Config(text)) = res else {
            panic!("{why}: expected a config error, got {res:?}");
        };
        assert!(text.contains("denied-source"), "{why}: {text}");
        for s in [
            key_id.as_str(),
            secret.as_str(),
            "not-the-secret",
            "AKIAUNKNOWNKEY000000",
        ] {
            assert!(!text.contains(s), "{why}: {text}");
        }
        Box::new(source).close(Duration::from_secs(1)).await;
    }
    drop(moto);
}
