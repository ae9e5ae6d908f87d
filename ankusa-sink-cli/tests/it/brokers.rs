//! Every broker sink type built from a config file, against the brokers the test script
//! starts; and the README's swap: the same hooks to RabbitMQ by changing only the file.

use super::from_kafka::{Topic, brokers};
use super::{
    amqp_channel, amqp_queue, amqp_url, bin, check_says_config, check_then_deliver,
    deliver_says_config, run, run_with, temp_file, text,
};
use ankusa_sink_testkit::support::unique_name;
use lapin::ExchangeKind;
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// `forward` the same generated hooks to `sink`, with `env` for the child.
fn forward(sink: &Path, hooks: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let (sink, hooks) = (sink.to_str().unwrap(), hooks.to_str().unwrap());
    run_with(
        &[
            "forward",
            "--sink",
            sink,
            "--input",
            hooks,
            "--json",
            "--concurrency",
            "16",
        ],
        env,
    )
}

fn ok_lines(out: &std::process::Output) -> usize {
    text(&out.stdout)
        .lines()
        .filter(|l| l.contains(r#""outcome":"ok""#))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_hooks_swap_to_rabbitmq_by_config_only() {
    needs!("RabbitMQ");
    let hooks = temp_file(
        "hooks.jsonl",
        &text(&run(&["gen", "--count", "20", "--size", "300"]).stdout),
    );
    // First the embedded default ...
    let out = forward(Path::new("log"), &hooks, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(ok_lines(&out), 20);

    // ... then RabbitMQ, through the README's example file, unchanged.
    let (_conn, ch) = amqp_channel().await;
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare(
        "ankusa.hooks".into(),
        ExchangeKind::Topic,
        durable,
        FieldTable::default(),
    )
    .await
    .unwrap();
    let queue = amqp_queue(&ch).await;
    ch.queue_bind(
        queue.as_str().into(),
        "ankusa.hooks".into(),
        "hooks.#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sinks/amqp.toml");
    let out = forward(&example, &hooks, &[("ANKUSA_AMQP_URL", &amqp_url())]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(ok_lines(&out), 20);
    let mut got = 0;
    while let Some(msg) = ch
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        let m = ankusa_message::decode(&msg.delivery.data).expect("Message v1");
        assert_eq!(m.source_id, "gen");
        got += 1;
    }
    assert_eq!(got, 20, "every hook reached the bound queue");
    let out = run(&[
        "describe",
        "--sink",
        example.to_str().unwrap(),
        "--sink",
        "log",
        "--source-id",
        "gen",
    ]);
    // The example's URL comes from the environment, so describe needs it too.
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("ANKUSA_AMQP_URL is not set"));
    let _ = ch
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_missing_exchange_is_config() {
    needs!("RabbitMQ");
    let f = temp_file(
        "amqp.toml",
        &format!(
            "type = \"amqp\"\nurl = \"{}\"\nexchange = \"{}\"\n",
            amqp_url(),
            unique_name("cli-absent")
        ),
    );
    let out = check_says_config(&f, &[]);
    assert!(!text(&out.stdout).contains("guest:guest"));
    deliver_says_config(&f, &[]);
}

/// `bytes` as a Rust debug byte array prints them: `[78, 79, ...]` (what lapin's return
/// warning and frame traces looked like).
fn as_byte_list(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(u8::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unroutable_hook_never_logs_its_body_or_the_login_even_at_trace() {
    needs!("RabbitMQ");
    let (_conn, ch) = amqp_channel().await;
    // An exchange with no queue bound: the mandatory publish comes back 312 NO_ROUTE.
    let exchange = unique_name("cli-noroute");
    ch.exchange_declare(
        exchange.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    let f = temp_file(
        "amqp.toml",
        &format!(
            "type = \"amqp\"\nurl = \"{}\"\nexchange = \"{exchange}\"\nrouting_key = \"k\"\n",
            amqp_url()
        ),
    );
    const BODY: &str = "NOROUTE-BODY-7f3a9c";
    let body = temp_file("body.txt", BODY);
    let out = bin()
        .env("RUST_LOG", "trace")
        .args(["deliver", "--sink", f.to_str().unwrap(), "--json"])
        .args(["--body", body.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(r#""class":"config""#),
        "{}",
        text(&out.stdout)
    );
    let stderr = text(&out.stderr);
    // The Message v1 carries the body base64-encoded; its JSON bytes were logged as a list.
    let b64 = "Tk9ST1VURS1CT0RZLTdmM2E5Yw==";
    for (what, needle) in [
        ("body", BODY.to_owned()),
        ("encoded body", b64.to_owned()),
        ("encoded body as bytes", as_byte_list(&b64.as_bytes()[..12])),
        ("password as bytes", as_byte_list(b"\0guest\0guest")),
    ] {
        assert!(
            !stderr.contains(&needle),
            "the {what} reached the log:\n{stderr}"
        );
    }
    let _ = ch
        .exchange_delete(exchange.as_str().into(), Default::default())
        .await;
}

/// A Kafka sink config for `topic`.
fn kafka_sink(topic: &str) -> PathBuf {
    temp_file(
        "kafka.toml",
        &format!(
            "type = \"kafka\"\nbrokers = [\"{}\"]\ntopic = \"{topic}\"\n",
            brokers()
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_from_a_config_file() {
    needs!("Kafka");
    let topic = Topic::create(1).await;
    check_then_deliver(&kafka_sink(&topic.name), "k-1", &[]);
    check_says_config(&kafka_sink(&format!("{}-missing", topic.name)), &[]);
    topic.delete().await;
}

/// One AWS query-protocol call to moto for `service`; returns the response body. moto
/// routes by the credential scope and does not check the signature.
pub(super) fn moto(service: &str, body: &str) -> String {
    let host =
        std::env::var("ANKUSA_MOTO_ENDPOINT").unwrap_or_else(|_| "127.0.0.1:4566".to_owned());
    let mut s = TcpStream::connect(&host).expect("moto is running");
    write!(
        s,
        "POST / HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/x-www-form-urlencoded\r\nauthorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s);
    let mut len = 0;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let mut out = vec![0; len];
    r.read_exact(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

pub(super) fn xml_field(xml: &str, tag: &str) -> String {
    let start = xml.find(&format!("<{tag}>")).expect(tag) + tag.len() + 2;
    let end = xml[start..].find(&format!("</{tag}>")).unwrap() + start;
    xml[start..end].to_owned()
}

pub(super) const AWS_ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

#[test]
fn sqs_and_sns_from_config_files() {
    needs!("moto");
    let q = unique_name("cli-q");
    let queue_url = xml_field(
        &moto(
            "sqs",
            &format!("Action=CreateQueue&QueueName={q}&Version=2012-11-05"),
        ),
        "QueueUrl",
    );
    let sqs = temp_file(
        "sqs.toml",
        &format!(
            "type = \"sqs\"\nqueue_url = \"{queue_url}\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:4566\"\n"
        ),
    );
    check_then_deliver(&sqs, "s-1", &AWS_ENV);
    let gone = temp_file(
        "sqs.toml",
        &format!(
            "type = \"sqs\"\nqueue_url = \"{queue_url}-gone\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:4566\"\n"
        ),
    );
    deliver_says_config(&gone, &AWS_ENV);

    let t = unique_name("cli-t");
    let arn = xml_field(
        &moto(
            "sns",
            &format!("Action=CreateTopic&Name={t}&Version=2010-03-31"),
        ),
        "TopicArn",
    );
    let sns = temp_file(
        "sns.toml",
        &format!(
            "type = \"sns\"\ntopic_arn = \"{arn}\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:4566\"\n"
        ),
    );
    // No subscription yet: SNS would drop the message, and check says so.
    let out = check_says_config(&sns, &AWS_ENV);
    assert!(
        text(&out.stdout).contains("config: sns topic")
            && text(&out.stdout).contains("has no confirmed subscription"),
        "{}",
        text(&out.stdout)
    );
    moto(
        "sns",
        &format!(
            "Action=Subscribe&TopicArn={arn}&Protocol=sqs&Endpoint=arn:aws:sqs:us-east-1:123456789012:{q}&Version=2010-03-31"
        ),
    );
    check_then_deliver(&sns, "n-1", &AWS_ENV);
    let out = run_with(
        &[
            "describe",
            "--sink",
            sqs.to_str().unwrap(),
            "--sink",
            sns.to_str().unwrap(),
            "--source-id",
            "s",
        ],
        &AWS_ENV,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["asyncapi"], "3.0.0");
    assert_eq!(doc["channels"].as_object().unwrap().len(), 2);
    assert!(
        !text(&out.stdout).contains("testing"),
        "no credentials in describe"
    );

    moto(
        "sqs",
        &format!("Action=DeleteQueue&QueueUrl={queue_url}&Version=2012-11-05"),
    );
    moto(
        "sns",
        &format!("Action=DeleteTopic&TopicArn={arn}&Version=2010-03-31"),
    );
}
