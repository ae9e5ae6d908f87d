//! Issue 21's baseline for Pub/Sub: what a user writes instead of `ankusa-sink forward`,
//! with Google's publisher alone (`scripts/bench_pipeline.py --only pubsub` times it against
//! `forward`).
//!
//! ```text
//! pubsub_raw_loop FILE PROJECT TOPIC [--window N] [--batch-messages N] [--batch-bytes N] [--delay-ms N] [--encode]
//! ```
//!
//! Publishes each line of FILE (without its newline), as is, as one message's data: no
//! parsing, no attributes. One `Publisher` (google-cloud-pubsub) batches the messages: up to
//! `--batch-messages` (default 1000, the service's largest batch; the client's own default
//! is 100), `--batch-bytes` (default 9,000,000; the client's 1 MB) or `--delay-ms` (default
//! 10, the client's) per publish request, several requests in flight (the client's own
//! pipelining). At most `--window` messages await their id at once (default 20,000). The
//! defaults are the best of those tried against the emulator on the 2-core bench machine:
//! 100,000 messages took 0.64 s (batches of 1000, window 20,000), 0.67 s (500), 0.91 s
//! (1000, window 2000), 0.99 s (the client's 100 messages / 1 MB). With `--encode`, each
//! line is parsed as an envelope and published as the sink publishes it: its Message v1
//! (`ankusa-message`'s `Outgoing`, the sink's default layout) as `data`, the `ankusa_*` attributes
//! (`raw_loop::Encoder`); the format's own cost, without the dispatcher. Exits 0 only when every
//! message got a message id; 1
//! otherwise. The emulator: `http://$ANKUSA_PUBSUB_EMULATOR_HOST`, default
//! `127.0.0.1:8085` (as the tests), anonymous credentials.

use ankusa_bench_support::raw_loop::{self, Encoder, Lines};
use ankusa_message::{EmptyValues, Outgoing};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use google_cloud_pubsub::client::Publisher;
use google_cloud_pubsub::model::Message;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: pubsub_raw_loop FILE PROJECT TOPIC [--window N] [--batch-messages N] \
                     [--batch-bytes N] [--delay-ms N] [--encode]";

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The publisher's settings.
struct Settings {
    window: usize,
    batch_messages: u32,
    batch_bytes: u32,
    delay: Duration,
    /// Message v1 per line instead of the line as is.
    encode: bool,
}

/// The sink's message for `out`, written by hand as a publisher user would: Message v1 as
/// `data`, the attributes by their names.
fn encoded(out: Outgoing<'_>, _: &ankusa_sink_core::Envelope) -> Message {
    let attributes = out
        .attributes()
        .iter()
        .map(|(attr, value)| (attr.as_attr(), value.as_ref()));
    let msg = Message::new().set_attributes(attributes);
    msg.set_data(out.into_body().into_bytes())
}

/// One finished publish: 1 when it got a message id, else 0 (and the error is printed once).
fn acked(r: Result<String, google_cloud_pubsub::error::PublishError>, printed: &mut bool) -> u64 {
    match r {
        Ok(id) if !id.is_empty() => 1,
        Ok(_) => 0,
        Err(e) => {
            if !*printed {
                eprintln!("pubsub_raw_loop: publish failed: {e}");
                *printed = true;
            }
            0
        }
    }
}

/// Publishes every line of `file`; (messages sent, messages with an id).
async fn publish(file: &str, topic: String, s: &Settings) -> Result<(u64, u64), Error> {
    let host =
        std::env::var("ANKUSA_PUBSUB_EMULATOR_HOST").unwrap_or_else(|_| "127.0.0.1:8085".into());
    let publisher = Publisher::builder(topic)
        .with_endpoint(format!("http://{host}"))
        .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build())
        .set_message_count_threshold(s.batch_messages)
        .set_byte_threshold(s.batch_bytes)
        .set_delay_threshold(s.delay)
        .build()
        .await?;
    let encoder = s.encode.then(|| Encoder::message(EmptyValues::Drop));
    let mut lines = Lines::open(file)?;
    let mut pending = FuturesUnordered::new();
    let (mut sent, mut ok, mut printed) = (0u64, 0u64, false);
    while let Some(line) = lines.next_line()? {
        while pending.len() >= s.window {
            if let Some(r) = pending.next().await {
                ok += acked(r, &mut printed);
            }
        }
        let msg = match &encoder {
            Some(e) => e.encode(line, encoded)?,
            None => Message::new().set_data(line.to_vec()),
        };
        pending.push(publisher.publish(msg));
        sent += 1;
    }
    while let Some(r) = pending.next().await {
        ok += acked(r, &mut printed);
    }
    Ok((sent, ok))
}

async fn run(args: Vec<String>) -> Result<ExitCode, Error> {
    let (encode, args) = raw_loop::encode_flag(args);
    let arg = |i: usize| args.get(i).map(String::as_str).ok_or(USAGE);
    let (file, project, topic) = (arg(0)?, arg(1)?, arg(2)?);
    let mut s = Settings {
        window: 20_000,
        batch_messages: 1000,
        batch_bytes: 9_000_000,
        delay: Duration::from_millis(10),
        encode,
    };
    let mut rest = args[3..].iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or(USAGE)?;
        match flag.as_str() {
            "--window" => s.window = value.parse::<usize>()?.max(1),
            "--batch-messages" => s.batch_messages = value.parse()?,
            "--batch-bytes" => s.batch_bytes = value.parse()?,
            "--delay-ms" => s.delay = Duration::from_millis(value.parse()?),
            _ => return Err(USAGE.into()),
        }
    }
    let (sent, ok) = publish(file, format!("projects/{project}/topics/{topic}"), &s).await?;
    eprintln!(
        "pubsub_raw_loop: {sent} published, {ok} with a message id (window {}, batches of {} \
         messages / {} bytes / {:?}{})",
        s.window,
        s.batch_messages,
        s.batch_bytes,
        s.delay,
        if s.encode { ", Message v1" } else { "" }
    );
    Ok(if sent == ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn main() -> ExitCode {
    raw_loop::main("pubsub_raw_loop", raw_loop::runtime(2), run)
}
