//! Issue 21's baseline for RabbitMQ: what a user writes instead of `ankusa-sink forward`,
//! with lapin alone (`scripts/bench_pipeline.py --only amqp` times it against `forward`).
//!
//! ```text
//! amqp_raw_loop send FILE EXCHANGE [--routing-key KEY] [--window N] [--encode]
//! amqp_raw_loop setup EXCHANGE QUEUE      a durable topic exchange, a durable queue bound with `#`
//! amqp_raw_loop count QUEUE               prints the queue's message count (a passive declare)
//! amqp_raw_loop delete EXCHANGE QUEUE     deletes both
//! ```
//!
//! `send` publishes each line of FILE (without its newline), as is, as one message body:
//! no parsing. One connection, one confirm-mode channel; every publish is `mandatory` and
//! persistent (`delivery_mode` 2) with `content_type` `application/json`, the guarantees
//! the sink gives. Up to `--window` publishes await their confirm at once (default 4096:
//! 100,000 publishes of 1.6 kB took 9.8 / 8.3–9.1 / 7.1–8.3 / 7.6 s at a window of 256 /
//! 1024 / 4096 / 16384 on the 2-core bench machine; 4096 for less memory than 16384).
//! With `--encode`, each line is parsed as an envelope and sent as the sink sends it: its
//! Message v1 (`ankusa-message`'s `Outgoing`, the sink's default layout) as the body, `message_id`,
//! `timestamp` and the `ankusa_*` headers beside it (`raw_loop::Encoder`); the format's
//! own cost, without the dispatcher. Exits 0 only when every message was acked and none was returned;
//! 1 otherwise. The broker: `$ANKUSA_AMQP_URL`, default
//! `amqp://guest:guest@127.0.0.1:5672/%2f` (as the tests).

#[path = "shared/declare.rs"]
mod declare;

use ankusa_bench_support::raw_loop::{self, Encoder, Lines};
use ankusa_message::{Attr, Body, EmptyValues, Outgoing};
use ankusa_sink_core::Envelope;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
    PublisherConfirm,
};
use std::collections::VecDeque;
use std::process::ExitCode;

const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const DEFAULT_WINDOW: usize = 4096;
const USAGE: &str = "usage: amqp_raw_loop send FILE EXCHANGE [--routing-key KEY] [--window N] [--encode] | \
                     setup EXCHANGE QUEUE | count QUEUE | delete EXCHANGE QUEUE";

type Error = Box<dyn std::error::Error>;

fn url() -> String {
    std::env::var("ANKUSA_AMQP_URL").unwrap_or_else(|_| DEFAULT_URL.into())
}

async fn channel() -> Result<(Connection, Channel), Error> {
    let conn = Connection::connect(&url(), ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    Ok((conn, ch))
}

/// Whether one confirm is a plain ack (not a nack, not a returned message).
async fn confirmed(c: PublisherConfirm) -> bool {
    matches!(c.await, Ok(Confirmation::Ack(None)))
}

/// The sink's properties for `out`, written by hand as a lapin user would: persistent,
/// `message_id`, `timestamp`, `content_type`, the keys as longstr headers.
fn encoded(out: Outgoing<'_>, env: &Envelope) -> (Body, BasicProperties) {
    let mut headers = FieldTable::default();
    let mut props = BasicProperties::default()
        .with_delivery_mode(2)
        .with_timestamp(u64::try_from(env.received_at() / 1000).unwrap_or(0));
    for (attr, value) in out.attributes() {
        match attr {
            Attr::Id => props = props.with_message_id(value.as_ref().into()),
            Attr::ContentType => props = props.with_content_type(value.as_ref().into()),
            Attr::IdempotencyKey | Attr::DedupeKey | Attr::ReplayId => {
                headers.insert(
                    attr.as_attr().into(),
                    AMQPValue::LongString(value.as_ref().into()),
                );
            }
            _ => {}
        }
    }
    (out.into_body(), props.with_headers(headers))
}

/// Publishes every line of `file` (as is, or with `encode` its Message v1); (messages sent,
/// messages acked).
async fn send(
    file: &str,
    exchange: &str,
    key: &str,
    window: usize,
    encode: bool,
) -> Result<(u64, u64), Error> {
    let encoder = encode.then(|| Encoder::message(EmptyValues::Drop));
    let (conn, ch) = channel().await?;
    ch.confirm_select(ConfirmSelectOptions::default()).await?;
    let props = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_delivery_mode(2);
    let options = BasicPublishOptions {
        mandatory: true,
        immediate: false,
    };
    let mut lines = Lines::open(file)?;
    let mut pending: VecDeque<PublisherConfirm> = VecDeque::with_capacity(window);
    let (mut sent, mut acked) = (0u64, 0u64);
    while let Some(line) = lines.next_line()? {
        if pending.len() >= window {
            // Confirms come back in publish order: the oldest is the next to settle.
            if let Some(c) = pending.pop_front() {
                acked += u64::from(confirmed(c).await);
            }
        }
        let c = match &encoder {
            Some(e) => {
                let (body, props) = e.encode(line, encoded)?;
                ch.basic_publish(exchange.into(), key.into(), options, body.as_bytes(), props)
                    .await?
            }
            None => {
                ch.basic_publish(exchange.into(), key.into(), options, line, props.clone())
                    .await?
            }
        };
        sent += 1;
        pending.push_back(c);
    }
    for c in pending {
        acked += u64::from(confirmed(c).await);
    }
    let _ = conn.close(200, "done".into()).await;
    Ok((sent, acked))
}

async fn setup(exchange: &str, queue: &str) -> Result<(), Error> {
    let (conn, ch) = channel().await?;
    ch.exchange_declare(
        exchange.into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await?;
    declare::durable_queue(&ch, queue, FieldTable::default()).await?;
    declare::bind(&ch, queue, exchange, "#").await?;
    let _ = conn.close(200, "done".into()).await;
    Ok(())
}

async fn count(queue: &str) -> Result<u32, Error> {
    let (conn, ch) = channel().await?;
    let q = declare::passive(&ch, queue).await?;
    let _ = conn.close(200, "done".into()).await;
    Ok(q.message_count())
}

async fn delete(exchange: &str, queue: &str) -> Result<(), Error> {
    let (conn, ch) = channel().await?;
    ch.queue_delete(queue.into(), QueueDeleteOptions::default())
        .await?;
    ch.exchange_delete(exchange.into(), ExchangeDeleteOptions::default())
        .await?;
    let _ = conn.close(200, "done".into()).await;
    Ok(())
}

async fn run(args: Vec<String>) -> Result<ExitCode, Error> {
    let (encode, args) = raw_loop::encode_flag(args);
    let arg = |i: usize| args.get(i).map(String::as_str).ok_or(USAGE);
    match arg(0)? {
        "send" => {
            let (file, exchange) = (arg(1)?, arg(2)?);
            let mut key = "pipeline".to_owned();
            let mut window = DEFAULT_WINDOW;
            let mut rest = args[3..].iter();
            while let Some(flag) = rest.next() {
                let value = rest.next().ok_or(USAGE)?;
                match flag.as_str() {
                    "--routing-key" => key.clone_from(value),
                    "--window" => window = value.parse::<usize>()?.max(1),
                    _ => return Err(USAGE.into()),
                }
            }
            let (sent, acked) = send(file, exchange, &key, window, encode).await?;
            eprintln!(
                "amqp_raw_loop: {sent} published, {acked} acked (window {window}{})",
                if encode { ", Message v1" } else { "" }
            );
            Ok(if sent == acked {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        "setup" => setup(arg(1)?, arg(2)?).await.map(|()| ExitCode::SUCCESS),
        "count" => {
            println!("{}", count(arg(1)?).await?);
            Ok(ExitCode::SUCCESS)
        }
        "delete" => delete(arg(1)?, arg(2)?).await.map(|()| ExitCode::SUCCESS),
        _ => Err(USAGE.into()),
    }
}

fn main() -> ExitCode {
    raw_loop::main("amqp_raw_loop", raw_loop::runtime(2), run)
}
