//! Issue 21's Kafka loops in Rust, beside the confluent-kafka script
//! (`scripts/bench/kafka_produce.py`): the same producer with rdkafka alone
//! (`scripts/bench_pipeline.py --only kafka` times it against `forward`).
//!
//! ```text
//! kafka_raw_loop FILE TOPIC [--encode]
//! ```
//!
//! Produces each line of FILE (without its newline), as is, as one record's value, as the
//! script does: `acks=all`, idempotence on, otherwise librdkafka's defaults; a full local
//! queue is waited out (`poll` 100 ms), every produce is followed by `poll(0)`, then one
//! `flush`. With `--encode`, each line is parsed as an envelope and produced as the sink
//! produces it: its Message v1 (`ankusa-message`'s `Outgoing`, the sink's default layout) as the value,
//! the default key (`{tenant_id}/{source_id}`), `received_at` as the timestamp and one header
//! per `ankusa_*` attribute (`raw_loop::Encoder`); the format's own cost, without the
//! dispatcher. Exits 0 only when every record was acknowledged; 1 otherwise. Broker:
//! `$ANKUSA_KAFKA_BROKERS`, default `127.0.0.1:9092` (as the script).

use ankusa_bench_support::raw_loop::{self, Encoder, Lines};
use ankusa_message::template::{AbsentTenant, KeyTemplate};
use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, Outgoing};
use ankusa_sink_core::Envelope;
use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const USAGE: &str = "usage: kafka_raw_loop FILE TOPIC [--encode]";

type Error = Box<dyn std::error::Error>;

/// Counts failed deliveries, as the script's `on_delivery`.
#[derive(Default)]
struct Counting {
    failed: AtomicU64,
}

impl ClientContext for Counting {}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Produces `record`, waiting out a full local queue as the script does.
fn produce(
    p: &BaseProducer<Counting>,
    mut record: BaseRecord<'_, [u8], [u8]>,
) -> Result<(), KafkaError> {
    loop {
        match p.send(record) {
            Ok(()) => break,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                p.poll(Duration::from_millis(100));
            }
            Err((e, _)) => return Err(e),
        }
    }
    p.poll(Duration::ZERO);
    Ok(())
}

/// The sink's record for `out`, written by hand as an rdkafka user would.
fn send_encoded(
    p: &BaseProducer<Counting>,
    topic: &str,
    out: Outgoing<'_>,
    env: &Envelope,
) -> Result<(), KafkaError> {
    let attributes = out.attributes();
    let mut headers = OwnedHeaders::new_with_capacity(attributes.len());
    for (attr, value) in attributes {
        headers = headers.insert(Header {
            key: attr.as_attr(),
            value: Some(value.as_ref()),
        });
    }
    let record = BaseRecord::to(topic)
        .payload(out.body())
        .key(out.key().unwrap_or_default().as_bytes())
        .timestamp(env.received_at())
        .headers(headers);
    produce(p, record)
}

fn run(args: &[String]) -> Result<ExitCode, Error> {
    let (encode, args) = raw_loop::encode_flag(args.to_vec());
    let [file, topic] = args.as_slice() else {
        return Err(USAGE.into());
    };
    let brokers = std::env::var("ANKUSA_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into());
    let p: BaseProducer<Counting> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create_with_context(Counting::default())?;
    let encoder = encode.then(|| {
        let key = KeyTemplate::parse(ankusa_sink_kafka::DEFAULT_KEY, AbsentTenant::Empty)
            .expect("the sink's default key");
        Encoder::new(
            Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Keep).with_key(key),
        )
    });
    let mut lines = Lines::open(file)?;
    let mut sent = 0u64;
    while let Some(line) = lines.next_line()? {
        match &encoder {
            Some(e) => e.encode(line, |out, env| send_encoded(&p, topic, out, env))??,
            None => produce(&p, BaseRecord::to(topic).payload(line))?,
        }
        sent += 1;
    }
    p.flush(Duration::from_secs(60))?;
    let failed = p.context().failed.load(Ordering::Relaxed);
    eprintln!(
        "kafka_raw_loop: {sent} produced, {failed} failed{}",
        if encode { " (Message v1)" } else { "" }
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kafka_raw_loop: {e}");
            ExitCode::FAILURE
        }
    }
}
