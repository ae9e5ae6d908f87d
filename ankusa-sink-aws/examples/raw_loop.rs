//! Issue 21's baseline for SQS and SNS: what a user writes instead of `ankusa-sink forward`,
//! with the AWS SDK alone (`scripts/bench_pipeline.py --only sqs|sns` times it against
//! `forward`).
//!
//! ```text
//! aws_raw_loop sqs FILE QUEUE_URL [--in-flight N] [--encode]   SendMessageBatch of 10
//! aws_raw_loop sns FILE TOPIC_ARN [--in-flight N] [--encode]   PublishBatch of 10
//! aws_raw_loop create-queue NAME | create-topic NAME     prints the queue URL / topic ARN
//! aws_raw_loop count QUEUE_URL                           prints ApproximateNumberOfMessages
//! aws_raw_loop delete-queue QUEUE_URL | delete-topic TOPIC_ARN
//! ```
//!
//! `sqs` and `sns` send each line of FILE (without its newline), as is, as one message body:
//! no parsing. Lines are grouped by ten into one batch request, and up to `--in-flight`
//! batch requests are outstanding at once (default 8; moto, one Python process, bounds
//! them all: 5,000 SNS publishes took 3.2 / 2.8 / 2.8 / 3.2 / 2.8 s at 2 / 4 / 8 / 16 / 32
//! batches in flight, 1,000 SQS sends 12.5 / 13.5 / 15.2 s at 2 / 8 / 32, on the 2-core
//! bench machine). The SDK's defaults otherwise
//! (standard retries). With `--encode`, each line is parsed as an envelope and sent as the
//! sink sends it: its Message v1 (`ankusa-message`'s `Outgoing`, the sink's default layout) as the body,
//! the `ankusa_*` message attributes (`String`) beside it (`raw_loop::Encoder`); the
//! format's own cost, without the dispatcher. Exits 0 only when every entry of every batch was accepted; 1
//! otherwise. The server: `$ANKUSA_MOTO_ENDPOINT`, default `http://127.0.0.1:4566` (as the
//! tests); region and credentials from the environment (`AWS_REGION`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), else `us-east-1` and static dummy keys
//! (never the instance metadata service).

use ankusa_bench_support::raw_loop::{self, Encoder, Lines};
use ankusa_message::{EmptyValues, Outgoing};
use aws_config::{BehaviorVersion, Region};
use aws_sdk_sns::types::PublishBatchRequestEntry;
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use std::process::ExitCode;
use tokio::task::JoinSet;

const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:4566";
const DEFAULT_IN_FLIGHT: usize = 8;
/// The largest batch SQS and SNS take.
const BATCH: usize = 10;
const USAGE: &str = "usage: aws_raw_loop sqs|sns FILE QUEUE_URL|TOPIC_ARN [--in-flight N] [--encode] | \
                     create-queue NAME | create-topic NAME | count QUEUE_URL | \
                     delete-queue QUEUE_URL | delete-topic TOPIC_ARN";

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The SDK config: the moto endpoint, region and credentials from the environment.
async fn sdk() -> aws_config::SdkConfig {
    let endpoint =
        std::env::var("ANKUSA_MOTO_ENDPOINT").unwrap_or_else(|_| DEFAULT_ENDPOINT.into());
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).endpoint_url(endpoint);
    if std::env::var_os("AWS_REGION").is_none() {
        loader = loader.region(Region::new("us-east-1"));
    }
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        loader = loader.credentials_provider(aws_credential_types::Credentials::new(
            "AKIAIOSFODNN7EXAMPLE",
            "moto-secret-not-checked",
            None,
            None,
            "aws_raw_loop",
        ));
    }
    loader.load().await
}

/// One message: its body, and with `--encode` its attributes (name, string value).
struct Entry {
    body: String,
    attributes: Vec<(&'static str, String)>,
}

/// The sink's message for `out`, written by hand as an SDK user would.
fn encoded(out: Outgoing<'_>, _: &ankusa_sink_core::Envelope) -> Entry {
    let attributes = out
        .attributes()
        .iter()
        .map(|(attr, value)| (attr.as_attr(), value.to_string()))
        .collect();
    // Message v1 is JSON, so always UTF-8: the encoded buffer becomes the String uncopied.
    let body = String::from_utf8(Vec::from(out.into_body().into_bytes()))
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    Entry { body, attributes }
}

/// Each SDK's `MessageAttributeValue`, `String`-typed.
macro_rules! string_attributes {
    ($ty:ty, $attrs:expr) => {
        $attrs
            .into_iter()
            .map(|(name, value)| {
                <$ty>::builder()
                    .data_type("String")
                    .string_value(value)
                    .build()
                    .map(|v| (name.to_owned(), v))
            })
            .collect::<Result<std::collections::HashMap<_, _>, _>>()
    };
}

/// Where the batches go.
#[derive(Clone)]
enum Target {
    Sqs(aws_sdk_sqs::Client, String),
    Sns(aws_sdk_sns::Client, String),
}

impl Target {
    /// Sends `bodies` as one batch request: how many entries were accepted.
    async fn send(self, bodies: Vec<Entry>) -> Result<usize, Error> {
        match self {
            Target::Sqs(client, url) => {
                let entries = bodies
                    .into_iter()
                    .enumerate()
                    .map(|(i, b)| {
                        let attrs = string_attributes!(
                            aws_sdk_sqs::types::MessageAttributeValue,
                            b.attributes
                        )?;
                        SendMessageBatchRequestEntry::builder()
                            .id(i.to_string())
                            .message_body(b.body)
                            .set_message_attributes((!attrs.is_empty()).then_some(attrs))
                            .build()
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let out = client
                    .send_message_batch()
                    .queue_url(url)
                    .set_entries(Some(entries))
                    .send()
                    .await?;
                Ok(out.successful().len())
            }
            Target::Sns(client, arn) => {
                let entries = bodies
                    .into_iter()
                    .enumerate()
                    .map(|(i, b)| {
                        let attrs = string_attributes!(
                            aws_sdk_sns::types::MessageAttributeValue,
                            b.attributes
                        )?;
                        PublishBatchRequestEntry::builder()
                            .id(i.to_string())
                            .message(b.body)
                            .set_message_attributes((!attrs.is_empty()).then_some(attrs))
                            .build()
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let out = client
                    .publish_batch()
                    .topic_arn(arn)
                    .set_publish_batch_request_entries(Some(entries))
                    .send()
                    .await?;
                Ok(out.successful().len())
            }
        }
    }
}

/// Accepted entries of one finished batch task; an error counts as none, and is printed.
fn accepted(r: Result<Result<usize, Error>, tokio::task::JoinError>) -> u64 {
    match r {
        Ok(Ok(n)) => n as u64,
        Ok(Err(e)) => {
            eprintln!("aws_raw_loop: batch failed: {e}");
            0
        }
        Err(e) => {
            eprintln!("aws_raw_loop: batch task failed: {e}");
            0
        }
    }
}

/// Sends every line of `file`; (messages sent, messages accepted).
async fn send(
    file: &str,
    target: Target,
    in_flight: usize,
    encode: bool,
) -> Result<(u64, u64), Error> {
    let encoder = encode.then(|| Encoder::message(EmptyValues::Drop));
    let mut lines = Lines::open(file)?;
    let mut tasks = JoinSet::new();
    let (mut sent, mut ok) = (0u64, 0u64);
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let line = lines.next_line()?;
        let eof = line.is_none();
        if let Some(line) = line {
            batch.push(match &encoder {
                Some(e) => e.encode(line, encoded)?,
                None => Entry {
                    body: String::from_utf8(line.to_vec())?,
                    attributes: Vec::new(),
                },
            });
        }
        if batch.len() == BATCH || (eof && !batch.is_empty()) {
            while tasks.len() >= in_flight {
                if let Some(r) = tasks.join_next().await {
                    ok += accepted(r);
                }
            }
            sent += batch.len() as u64;
            let bodies = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
            tasks.spawn(target.clone().send(bodies));
        }
        if eof {
            break;
        }
    }
    while let Some(r) = tasks.join_next().await {
        ok += accepted(r);
    }
    Ok((sent, ok))
}

async fn run(args: Vec<String>) -> Result<ExitCode, Error> {
    let (encode, args) = raw_loop::encode_flag(args);
    let arg = |i: usize| args.get(i).map(String::as_str).ok_or(USAGE);
    let sdk = sdk().await;
    let sqs = || aws_sdk_sqs::Client::new(&sdk);
    let sns = || aws_sdk_sns::Client::new(&sdk);
    match arg(0)? {
        cmd @ ("sqs" | "sns") => {
            let (file, dest) = (arg(1)?, arg(2)?.to_owned());
            let in_flight = match (args.get(3).map(String::as_str), args.get(4)) {
                (None, _) => DEFAULT_IN_FLIGHT,
                (Some("--in-flight"), Some(n)) => n.parse::<usize>()?.max(1),
                _ => return Err(USAGE.into()),
            };
            let target = if cmd == "sqs" {
                Target::Sqs(sqs(), dest)
            } else {
                Target::Sns(sns(), dest)
            };
            let (sent, ok) = send(file, target, in_flight, encode).await?;
            eprintln!(
                "aws_raw_loop: {sent} sent, {ok} accepted ({in_flight} batches in flight{})",
                if encode { ", Message v1" } else { "" }
            );
            return Ok(if sent == ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        "create-queue" => {
            let out = sqs().create_queue().queue_name(arg(1)?).send().await?;
            println!("{}", out.queue_url().ok_or("no queue URL")?);
        }
        "create-topic" => {
            let out = sns().create_topic().name(arg(1)?).send().await?;
            println!("{}", out.topic_arn().ok_or("no topic ARN")?);
        }
        "count" => {
            let out = sqs()
                .get_queue_attributes()
                .queue_url(arg(1)?)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
                .send()
                .await?;
            let n = out
                .attributes()
                .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
                .ok_or("no ApproximateNumberOfMessages")?;
            println!("{n}");
        }
        "delete-queue" => {
            sqs().delete_queue().queue_url(arg(1)?).send().await?;
        }
        "delete-topic" => {
            sns().delete_topic().topic_arn(arg(1)?).send().await?;
        }
        _ => return Err(USAGE.into()),
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    raw_loop::main("aws_raw_loop", raw_loop::runtime(2), run)
}
