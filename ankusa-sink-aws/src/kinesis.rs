//! The Kinesis Data Streams sink: `PutRecord`, `PutRecords`, `DescribeStreamSummary`.

use crate::config::{
    KINESIS_MAX_BATCH_BYTES, KINESIS_MAX_BATCH_RECORDS, KINESIS_MAX_RECORD_BYTES, KinesisConfig,
};
use crate::error::{self, AwsError};
use crate::outgoing::{self, Ids, Record};
use crate::sink::{self, AwsSink, BatchResults, Limits, Publisher, fail_all, forward_sink};
use ankusa_message::Outgoing;
use ankusa_message::template::KeyTemplate;
use ankusa_sink_core::{Description, InFlight, Ordering, Payload, Subject, async_trait};
use ankusa_sink_kit::host_port;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use std::fmt;

/// What Kinesis counts toward a record's limit.
const COUNTS: &str = "data + partition key";

/// Writes each hook as one Kinesis record: the Message v1 JSON as the data (a record has no
/// attributes; the body carries the id, tenant, headers and idempotency key).
///
/// # Behavior
/// - Partition key: `partition_key_template` rendered for the hook, else the hook's
///   idempotency key; a key over 256 characters is sent as `sha256:<hex>` of itself.
/// - `Ok` only when Kinesis returned the record's sequence number and shard id.
/// - A record whose data plus partition key exceed `max_message_bytes` (1 MiB) is
///   permanent and not sent.
/// - With batching on and `ctx.batch` set, deliveries share `PutRecords` requests (500
///   records, 5 MiB); each gets its own record's result, by position. A partial failure
///   (`FailedRecordCount` > 0) fails only the records that carry an `ErrorCode`.
/// - `check()` reads the stream's summary (`DescribeStreamSummary`); nothing is written.
pub struct KinesisSink {
    inner: AwsSink<KinesisPublisher>,
}

forward_sink!(KinesisSink, KinesisConfig, aws_sdk_kinesis::Client);

impl KinesisSink {
    /// A sink using `client` (its region, endpoint, credentials and interceptors); the
    /// config's connection options are not used.
    pub fn from_client(config: KinesisConfig, client: aws_sdk_kinesis::Client) -> Self {
        let host = match config.endpoint() {
            Some(e) => host_port(e),
            None => client
                .config()
                .region()
                .map(|r| format!("kinesis.{r}.amazonaws.com")),
        };
        let options = config.options().clone();
        let mut layout = sink::layout(&options);
        if let Some(key) = config.partition_key_template() {
            layout = layout.with_key(key.clone());
        }
        let publisher = KinesisPublisher {
            client,
            stream: config.stream().to_owned(),
            key: config.partition_key_template().cloned(),
            host,
        };
        let limits = Limits {
            max_entry_bytes: config.max_message_bytes(),
            default_max_entry_bytes: KINESIS_MAX_RECORD_BYTES,
            counts: COUNTS,
            max_entries: KINESIS_MAX_BATCH_RECORDS,
            max_batch_bytes: KINESIS_MAX_BATCH_BYTES,
            max_window: InFlight::PIPELINE.deliveries.get(),
        };
        KinesisSink {
            inner: AwsSink::new(publisher, options, layout, limits),
        }
    }
}

pub(crate) struct KinesisPublisher {
    client: aws_sdk_kinesis::Client,
    stream: String,
    key: Option<KeyTemplate>,
    host: Option<String>,
}

impl fmt::Debug for KinesisPublisher {
    // The client's config holds the credentials provider: never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KinesisPublisher")
            .field("stream", &self.stream)
            .field(
                "partition_key_template",
                &self.key.as_ref().map(KeyTemplate::as_str),
            )
            .finish_non_exhaustive()
    }
}

/// `Ok` only for a sequence number and a shard id.
fn confirm(
    operation: &'static str,
    sequence_number: Option<&str>,
    shard_id: Option<&str>,
) -> Result<(), AwsError> {
    match (sequence_number, shard_id) {
        (Some(seq), Some(shard)) if !seq.is_empty() && !shard.is_empty() => Ok(()),
        _ => Err(AwsError::Unconfirmed {
            service: "kinesis",
            operation,
        }),
    }
}

#[async_trait]
impl Publisher for KinesisPublisher {
    type Entry = Record;
    const SERVICE: &'static str = "kinesis";

    fn entry(&self, out: Outgoing<'_>, _ids: Ids) -> Result<(Record, usize), AwsError> {
        let record = outgoing::to_record(out)?;
        let size = record.size();
        Ok((record, size))
    }

    async fn publish(&self, r: Record) -> Result<(), AwsError> {
        const OP: &str = "PutRecord";
        let out = self
            .client
            .put_record()
            .stream_name(&self.stream)
            .data(Blob::new(r.data))
            .partition_key(r.partition_key)
            .send()
            .await
            .map_err(|err| error::kinesis(OP, err))?;
        confirm(OP, Some(out.sequence_number()), Some(out.shard_id()))
    }

    async fn publish_batch(&self, records: Vec<Record>) -> Vec<Result<(), AwsError>> {
        const OP: &str = "PutRecords";
        let n = records.len();
        let request: Vec<_> = records
            .into_iter()
            .map(|r| {
                PutRecordsRequestEntry::builder()
                    .data(Blob::new(r.data))
                    .partition_key(r.partition_key)
                    .build()
                    .expect("data and partition key are set")
            })
            .collect();
        let out = match self
            .client
            .put_records()
            .stream_name(&self.stream)
            .set_records(Some(request))
            .send()
            .await
        {
            Ok(out) => out,
            Err(err) => return fail_all(error::kinesis(OP, err), n),
        };
        // Results come by position: any other count leaves no entry's result known.
        let mut results = BatchResults::new("kinesis", OP, n);
        if out.records().len() == n {
            for (i, r) in out.records().iter().enumerate() {
                match r.error_code() {
                    Some(code) => results.failed_at(i, code, r.error_message()),
                    None => results.set_at(i, confirm(OP, r.sequence_number(), r.shard_id())),
                }
            }
        }
        results.finish()
    }

    async fn check(&self) -> Result<(), AwsError> {
        self.client
            .describe_stream_summary()
            .stream_name(&self.stream)
            .send()
            .await
            .map(|_| ())
            .map_err(|err| error::kinesis("DescribeStreamSummary", err))
    }

    /// Kinesis keeps one shard's records in sequence-number order, and a partition key
    /// maps to one shard: per key, as long as each record is its own `PutRecord`.
    /// `PutRecords` promises no order within a request, so a batching sink promises none;
    /// nor does the default key, the idempotency key, which is one hook's own.
    fn ordering(&self, batched: bool) -> Ordering {
        match &self.key {
            Some(k) if !batched => Ordering::PerKey {
                key: k.as_str().to_owned(),
            },
            _ => Ordering::None,
        }
    }

    fn describe(&self, _subject: &Subject) -> Description {
        // AsyncAPI has no Kinesis binding: protocol, host and stream only.
        let mut d = Description::new("kinesis", Payload::Message);
        d.host = self.host.clone();
        d.address = Some(self.stream.clone());
        d
    }
}
