//! `forward --from` a Kafka topic: a consumer group shares the partitions among
//! forwarders; each partition's offset is committed only up to the lowest record not yet
//! finished.

use crate::client::Monitor;
use crate::config::{ConfigError, KafkaConfig};
use crate::connection::KafkaConnection;
use ankusa_source::{
    Ack, Lag, Record, Settle, Settlement, Source, SourceError, SourceOptions, Window,
};
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer as _, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError as RdKafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::{ClientContext, Message as _, Offset, TopicPartitionList, config::RDKafkaLogLevel};
use serde::Deserialize;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// The client id a source uses unless configured.
pub const DEFAULT_SOURCE_CLIENT_ID: &str = "ankusa-source-kafka";

/// How often finished records' offsets are committed.
const COMMIT_EVERY: Duration = Duration::from_millis(500);

/// How long one lag question (committed offsets, then each partition's watermarks) may
/// take in all.
const LAG_TIMEOUT: Duration = Duration::from_secs(2);

/// Properties the source sets itself (on top of the sink's own).
const SOURCE_OWNED: &[&str] = &[
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.offset.reset",
    "isolation.level",
];

/// Where a new consumer group begins.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Start {
    /// The oldest record the topic still holds (the default: a new group misses nothing).
    #[default]
    Earliest,
    /// Only records written after the group first joins.
    Latest,
}

impl Start {
    fn as_str(self) -> &'static str {
        match self {
            Start::Earliest => "earliest",
            Start::Latest => "latest",
        }
    }
}

/// A valid Kafka source configuration (`type = "kafka"` in a `--from` file).
///
/// `brokers`, `topic` and `group` are required; `start`, `client_id`, `tls`, `sasl`,
/// `properties` and `allow_insecure` mean what they mean for the sink. `Debug` prints no
/// secret.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SourceRepr")]
#[non_exhaustive]
pub struct KafkaSourceConfig {
    conn: KafkaConfig,
    group: String,
    start: Start,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceRepr {
    /// `brokers` (also accepted as `bootstrap_servers`), `client_id`, `tls`, `sasl`,
    /// `properties`, `allow_insecure`: the sink's keys.
    #[serde(flatten)]
    conn: KafkaConnection,
    topic: String,
    group: String,
    #[serde(default)]
    start: Start,
}

impl TryFrom<SourceRepr> for KafkaSourceConfig {
    type Error = ConfigError;

    fn try_from(r: SourceRepr) -> Result<Self, ConfigError> {
        let conn = r.conn;
        let brokers = conn
            .bootstrap_servers
            .ok_or(ConfigError::Missing("brokers"))?;
        for name in conn.properties.keys() {
            if SOURCE_OWNED.contains(&name.as_str()) {
                return Err(ConfigError::OwnedProperty(name.clone()));
            }
        }
        let mut c = KafkaSourceConfig::new(brokers.join(","), r.topic, r.group)?;
        if let Some(id) = conn.client_id {
            c.conn.client_id = id;
        }
        c.conn.tls = conn.tls;
        c.conn.sasl = conn.sasl;
        c.conn.properties = conn.properties;
        c.conn.allow_insecure = conn.allow_insecure;
        c.conn = c.conn.checked()?;
        c.start = r.start;
        Ok(c)
    }
}

impl fmt::Debug for KafkaSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSourceConfig")
            .field("brokers", &self.conn.bootstrap_servers)
            .field("topic", &self.conn.topic)
            .field("group", &self.group)
            .field("start", &self.start)
            .field("client_id", &self.conn.client_id)
            .field("tls", &self.conn.tls)
            .field("sasl", &self.conn.sasl)
            .field(
                "properties",
                &self.conn.properties.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl KafkaSourceConfig {
    /// A source reading `topic` on `brokers` (`host:port`, several joined with `,`) as a
    /// member of `group`, a new group starting at the earliest record.
    pub fn new(
        brokers: impl AsRef<str>,
        topic: impl Into<String>,
        group: impl Into<String>,
    ) -> Result<Self, ConfigError> {
        // `KafkaConfig::new` checks the brokers and the topic name.
        let mut conn = KafkaConfig::new(brokers, topic)?;
        conn.client_id = DEFAULT_SOURCE_CLIENT_ID.to_owned();
        let group = group.into();
        if group.trim().is_empty() {
            return Err(ConfigError::Value {
                option: "group",
                why: "must not be empty",
            });
        }
        Ok(KafkaSourceConfig {
            conn,
            group,
            start: Start::default(),
        })
    }

    /// Where a new group begins.
    pub fn with_start(mut self, start: Start) -> Self {
        self.start = start;
        self
    }

    /// An extra librdkafka property (consumer tuning: `fetch.max.bytes`,
    /// `session.timeout.ms`, ...). Refused as for the sink, and for the properties the
    /// source owns (`group.id`, commits, `auto.offset.reset`, `isolation.level`).
    pub fn with_property(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Self, ConfigError> {
        let name = name.into();
        if SOURCE_OWNED.contains(&name.as_str()) {
            return Err(ConfigError::OwnedProperty(name));
        }
        self.conn = self.conn.with_property(name, value)?;
        Ok(self)
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.conn.topic
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The source that reads for the sink `sink` alone: the same topic in the consumer
    /// group `<group>-<sink>`, so that each sink commits its own offsets, its backlog
    /// waits in the topic, and a failing sink holds back no other (the topic is read once
    /// per sink). A new group starts where `start` says. `sink` is made a group name:
    /// characters other than ASCII letters, digits, `_`, `-` and `.` become `_`.
    pub fn for_sink(&self, sink: &str) -> Self {
        KafkaSourceConfig {
            group: format!("{}-{}", self.group, ankusa_source::lane_name(sink, &['.'])),
            ..self.clone()
        }
    }
}

/// The state of one assigned partition.
#[derive(Debug)]
struct Part {
    /// Bumped on every assignment: a settlement of a record read under an earlier one is
    /// ignored (the partition was revoked meanwhile; its new owner reads it again).
    generation: u64,
    /// Offsets handed out and not acknowledged (a released one stays: it holds the commit).
    pending: BTreeSet<i64>,
    /// One past the highest offset handed out.
    next: Option<i64>,
    /// The offset last committed (the next one to read).
    committed: Option<i64>,
}

impl Part {
    /// The offset to commit: the lowest not finished, or one past the last handed out.
    fn committable(&self) -> Option<i64> {
        self.pending.first().copied().or(self.next)
    }
}

/// Which offsets of which partitions may be committed. Pure: the consumer calls it from
/// its rebalance callback, the committer and the settle handles.
#[derive(Debug, Default)]
struct Tracker {
    parts: HashMap<i32, Part>,
    generations: u64,
    /// Whether an assignment is in force: false before the first one and between a revoke
    /// and the next assign (the lag is not asked for then: it would read 0 for a moment).
    assigned: bool,
}

impl Tracker {
    fn assign(&mut self, partition: i32) {
        self.generations += 1;
        self.parts.insert(
            partition,
            Part {
                generation: self.generations,
                pending: BTreeSet::new(),
                next: None,
                committed: None,
            },
        );
    }

    /// Forget a revoked partition; the offset to commit for it, if it moved.
    fn revoke(&mut self, partition: i32) -> Option<i64> {
        let p = self.parts.remove(&partition)?;
        p.committable()
            .filter(|&c| p.committed.is_none_or(|d| c > d))
    }

    /// A record was handed out; its partition's generation.
    fn received(&mut self, partition: i32, offset: i64) -> u64 {
        if !self.parts.contains_key(&partition) {
            self.assign(partition);
        }
        let p = self.parts.get_mut(&partition).expect("assigned above");
        p.pending.insert(offset);
        p.next = Some(p.next.map_or(offset + 1, |n| n.max(offset + 1)));
        p.generation
    }

    /// A record is finished.
    fn acked(&mut self, partition: i32, generation: u64, offset: i64) {
        if let Some(p) = self.parts.get_mut(&partition)
            && p.generation == generation
        {
            p.pending.remove(&offset);
        }
    }

    /// Offsets to commit now (those that moved), marked committed.
    fn due(&mut self) -> Vec<(i32, i64)> {
        let mut out = Vec::new();
        for (&partition, p) in &mut self.parts {
            if let Some(c) = p.committable()
                && p.committed.is_none_or(|d| c > d)
            {
                p.committed = Some(c);
                out.push((partition, c));
            }
        }
        out
    }
}

fn lock(t: &Mutex<Tracker>) -> MutexGuard<'_, Tracker> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

/// Routes the consumer's logs through the sink's scrubbing monitor and keeps the tracker
/// in step with rebalances.
struct SourceContext {
    monitor: Arc<Monitor>,
    tracker: Arc<Mutex<Tracker>>,
    topic: String,
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.monitor.client_log(level, fac, log_message);
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        self.monitor.client_error(&error, reason);
    }
}

impl ConsumerContext for SourceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(list) => {
                // Commit what is finished on the partitions leaving, then forget them:
                // records of theirs still in flight settle into nothing, and their new
                // owner reads them again (a duplicate, never a loss).
                let revoked: Vec<(i32, i64)> = {
                    let mut t = lock(&self.tracker);
                    t.assigned = false;
                    list.elements()
                        .iter()
                        .filter_map(|e| t.revoke(e.partition()).map(|o| (e.partition(), o)))
                        .collect()
                };
                let tpl = offsets(&self.topic, revoked);
                if tpl.count() > 0
                    && let Err(e) = consumer.commit(&tpl, CommitMode::Sync)
                {
                    tracing::warn!(target: "ankusa_source", error = %e, "commit on revoke failed");
                }
            }
            Rebalance::Assign(list) => {
                let mut t = lock(&self.tracker);
                t.assigned = true;
                for e in list.elements() {
                    t.assign(e.partition());
                }
            }
            Rebalance::Error(e) => {
                tracing::warn!(target: "ankusa_source", error = %e, "rebalance error");
            }
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        if let Err(e) = result {
            tracing::debug!(target: "ankusa_source", error = %e, "offset commit failed");
        }
    }
}

type Consumer = StreamConsumer<SourceContext>;

/// A Kafka topic read as a member of a consumer group.
pub struct KafkaSource {
    consumer: Arc<Consumer>,
    tracker: Arc<Mutex<Tracker>>,
    window: Window,
    topic: String,
    start: Start,
    describe: String,
    committer: tokio::task::JoinHandle<()>,
    stopped: bool,
}

impl fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSource")
            .field("describe", &self.describe)
            .field("unsettled", &self.window.unsettled())
            .finish_non_exhaustive()
    }
}

impl KafkaSource {
    /// Join the group and subscribe; records flow on [`Source::next`]. Must run inside a
    /// tokio runtime (a committer task commits finished offsets twice a second).
    pub fn new(config: &KafkaSourceConfig, options: &SourceOptions) -> Result<Self, SourceError> {
        let monitor = Arc::new(Monitor::new(&config.conn));
        let tracker = Arc::new(Mutex::new(Tracker::default()));
        let context = SourceContext {
            monitor: monitor.clone(),
            tracker: tracker.clone(),
            topic: config.conn.topic.clone(),
        };
        let mut client = config
            .conn
            .consumer_config(&config.group, config.start.as_str());
        for (name, value) in fetch_limits(options.max_unacked_bytes.get()) {
            // An operator's own setting in `properties` wins: they asked for it.
            if !config.conn.properties.contains_key(name) {
                client.set(name, value);
            }
        }
        let consumer: Consumer = client
            .create_with_context(context)
            .map_err(|e| SourceError::Config(monitor.scrub(&e.to_string())))?;
        consumer
            .subscribe(&[config.conn.topic.as_str()])
            .map_err(|e| SourceError::Config(monitor.scrub(&e.to_string())))?;
        let consumer = Arc::new(consumer);
        let committer = tokio::spawn(commit_loop(
            Arc::downgrade(&consumer),
            tracker.clone(),
            config.conn.topic.clone(),
        ));
        for warning in config.conn.insecure_settings() {
            tracing::warn!(target: "ankusa_source", "{warning}");
        }
        Ok(KafkaSource {
            consumer,
            tracker,
            window: Window::for_options(options),
            topic: config.conn.topic.clone(),
            start: config.start,
            describe: format!(
                "kafka topic {} on {} (group {})",
                config.conn.topic,
                config.conn.bootstrap_servers.join(","),
                config.group
            ),
            committer,
            stopped: false,
        })
    }

    /// Commit every partition's finished offsets now, and wait for the broker's answer.
    fn commit_sync(&self) {
        let due = lock(&self.tracker).due();
        let tpl = offsets(&self.topic, due);
        if tpl.count() > 0
            && let Err(e) = self.consumer.commit(&tpl, CommitMode::Sync)
        {
            tracing::warn!(target: "ankusa_source", error = %e, "final offset commit failed");
        }
    }
}

/// librdkafka's own read-ahead, sized by the source's byte budget: the window bounds the
/// records handed out, but librdkafka keeps fetching into its consumer queue (64 MiB by
/// default, 50 MiB per fetch) whatever the dispatcher does. Its queue holds at most the
/// budget (`queued.max.messages.kbytes`), and one fetch answer at most the budget too
/// (`fetch.max.bytes`, never under the consumer's `message.max.bytes`, 1,000,000, which
/// librdkafka requires); neither more than librdkafka's defaults, so the default budget
/// (256 MiB) keeps them. A forwarder holds at most the budget in records handed out, plus
/// the read-ahead queue, plus one fetch in flight.
fn fetch_limits(max_bytes: usize) -> [(&'static str, String); 2] {
    /// librdkafka's defaults.
    const QUEUED: usize = 64 * 1024 * 1024;
    const FETCH: usize = 50 * 1024 * 1024;
    const MIN_FETCH: usize = 1_000_000;
    [
        (
            "queued.max.messages.kbytes",
            (max_bytes.min(QUEUED) / 1024).max(1).to_string(),
        ),
        (
            "fetch.max.bytes",
            max_bytes.clamp(MIN_FETCH, FETCH).to_string(),
        ),
    ]
}

/// Commit finished offsets every [`COMMIT_EVERY`] until the source is dropped.
async fn commit_loop(
    consumer: std::sync::Weak<Consumer>,
    tracker: Arc<Mutex<Tracker>>,
    topic: String,
) {
    let mut tick = tokio::time::interval(COMMIT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(consumer) = consumer.upgrade() else {
            return;
        };
        let due = lock(&tracker).due();
        if due.is_empty() {
            continue;
        }
        if let Err(e) = consumer.commit(&offsets(&topic, due), CommitMode::Async) {
            tracing::debug!(target: "ankusa_source", error = %e, "offset commit failed");
        }
    }
}

/// The commit list of `(partition, offset)` pairs of `topic`.
fn offsets(topic: &str, offsets: Vec<(i32, i64)>) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (p, offset) in offsets {
        let _ = tpl.add_partition_offset(topic, p, Offset::Offset(offset));
    }
    tpl
}

/// The settle handle of one record.
struct KafkaAck {
    tracker: Arc<Mutex<Tracker>>,
    partition: i32,
    generation: u64,
    offset: i64,
}

impl Settle for KafkaAck {
    fn settle(self: Box<Self>, how: Settlement) {
        match how {
            Settlement::Ack => {
                lock(&self.tracker).acked(self.partition, self.generation, self.offset)
            }
            // Kafka cannot give one record out again: its offset stays pending, so the
            // partition is never committed past it, and a restart or rebalance reads it
            // again.
            Settlement::Release => tracing::debug!(
                target: "ankusa_source",
                partition = self.partition,
                offset = self.offset,
                "record released: its partition's commit holds here"
            ),
        }
    }
}

/// Whether a consumer error means the configuration cannot work.
fn is_config_error(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::GroupAuthorizationFailed
            | RDKafkaErrorCode::SaslAuthenticationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
            | RDKafkaErrorCode::UnknownTopicOrPartition
            | RDKafkaErrorCode::UnknownTopic
            | RDKafkaErrorCode::InvalidGroupId
            | RDKafkaErrorCode::Authentication
    )
}

#[async_trait::async_trait]
impl Source for KafkaSource {
    async fn next(&mut self) -> Option<Result<Record, SourceError>> {
        if self.stopped {
            return None;
        }
        let permit = self.window.acquire().await;
        loop {
            match self.consumer.recv().await {
                Ok(m) => {
                    let (partition, offset) = (m.partition(), m.offset());
                    let payload = m.payload().unwrap_or_default().to_vec();
                    drop(m);
                    // Tracked first: a record dropped while it waits for bytes holds its
                    // partition's commit, so it is read again rather than skipped.
                    let generation = lock(&self.tracker).received(partition, offset);
                    let permit = self.window.charge(permit, payload.len()).await;
                    let ack = KafkaAck {
                        tracker: self.tracker.clone(),
                        partition,
                        generation,
                        offset,
                    };
                    return Some(Ok(Record::new(
                        payload,
                        format!("{}/{partition}@{offset}", self.topic),
                        Ack::new(ack, permit),
                    )));
                }
                Err(e) => match e.rdkafka_error_code() {
                    Some(code) if is_config_error(code) => {
                        return Some(Err(SourceError::Config(format!(
                            "kafka topic {}: {code}",
                            self.topic
                        ))));
                    }
                    // A broker going away, a rebalance in progress: librdkafka recovers by
                    // itself; the error was logged by the context.
                    _ => {
                        tracing::debug!(target: "ankusa_source", error = %e, "consume error");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
    }

    fn stop(&mut self) {
        self.stopped = true;
    }

    async fn close(self: Box<Self>, grace: Duration) {
        self.committer.abort();
        let this = *self;
        // Committing and leaving the group block on the broker: off the async workers.
        let done = tokio::task::spawn_blocking(move || {
            this.commit_sync();
            this.consumer.unsubscribe();
            drop(this);
        });
        let _ = tokio::time::timeout(grace.max(Duration::from_secs(1)), done).await;
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn window(&self) -> Option<Window> {
        Some(self.window.clone())
    }

    /// The group's lag over the partitions assigned to this consumer: see `KafkaLag`.
    fn lag(&self) -> Option<Arc<dyn Lag>> {
        Some(Arc::new(KafkaLag {
            consumer: Arc::downgrade(&self.consumer),
            tracker: self.tracker.clone(),
            start: self.start,
        }))
    }
}

/// The consumer group's lag over the partitions assigned to this consumer: for each, its
/// high watermark less the group's committed offset (with nothing committed: less the low
/// watermark, or nothing for a group that starts at the latest record), never negative.
/// Records read and not yet committed count: the figure falls as offsets are committed.
///
/// `None` before the first assignment and during a rebalance, when the broker does not
/// answer within [`LAG_TIMEOUT`], and once the source is gone (the handle holds the
/// consumer weakly: it never keeps the consumer, nor its place in the group, alive). The
/// questions block, so they run on tokio's blocking threads.
struct KafkaLag {
    consumer: Weak<Consumer>,
    tracker: Arc<Mutex<Tracker>>,
    start: Start,
}

#[async_trait::async_trait]
impl Lag for KafkaLag {
    // The group's lag runs from its committed offsets: what this reader holds counts.
    fn counts_read(&self) -> bool {
        true
    }

    async fn lag(&self) -> Option<u64> {
        if !lock(&self.tracker).assigned {
            return None;
        }
        let consumer = self.consumer.clone();
        let start = self.start;
        // The last strong reference may end here, off the async workers: dropping a
        // consumer leaves the group, which blocks.
        let ask = tokio::task::spawn_blocking(move || {
            group_lag(consumer.upgrade()?.as_ref(), start, LAG_TIMEOUT)
        });
        tokio::time::timeout(LAG_TIMEOUT + Duration::from_millis(500), ask)
            .await
            .ok()?
            .ok()?
    }
}

/// The lag of the partitions assigned to `consumer` (blocking, within `within` in all).
fn group_lag(consumer: &Consumer, start: Start, within: Duration) -> Option<u64> {
    let deadline = Instant::now() + within;
    let left = || deadline.saturating_duration_since(Instant::now());
    let assigned = consumer.assignment().ok()?;
    if assigned.count() == 0 {
        // A member with no partition (more members than partitions): nothing behind.
        return Some(0);
    }
    let committed = consumer.committed_offsets(assigned, left()).ok()?;
    let mut lag = 0u64;
    for e in committed.elements() {
        e.error().ok()?;
        let (low, high) = consumer
            .fetch_watermarks(e.topic(), e.partition(), left())
            .ok()?;
        let from = match (e.offset(), start) {
            (Offset::Offset(o), _) => o,
            (_, Start::Earliest) => low,
            (_, Start::Latest) => high,
        };
        // Below the low watermark (records removed by retention), the group resumes there.
        lag += partition_lag(low, high, from);
    }
    Some(lag)
}

/// Records of one partition from `from` (raised to `low`) up to `high`; never negative.
fn partition_lag(low: i64, high: i64, from: i64) -> u64 {
    u64::try_from(high.saturating_sub(from.max(low))).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::property_rules::is_sensitive_property;

    #[test]
    fn commits_stop_at_the_lowest_unfinished_record() {
        let mut t = Tracker::default();
        t.assign(0);
        let g = t.received(0, 10);
        for o in 11..15 {
            t.received(0, o);
        }
        assert_eq!(t.due(), [(0, 10)], "nothing finished: the first record");
        t.acked(0, g, 11);
        t.acked(0, g, 12);
        assert!(
            t.due().is_empty(),
            "10 is not finished: the commit holds at 10"
        );
        t.acked(0, g, 10);
        assert_eq!(t.due(), [(0, 13)]);
        t.acked(0, g, 13);
        t.acked(0, g, 14);
        assert_eq!(t.due(), [(0, 15)], "all finished: one past the last");
        assert!(t.due().is_empty(), "committed once");
    }

    #[test]
    fn a_revoked_partition_forgets_its_in_flight_records() {
        let mut t = Tracker::default();
        t.assign(3);
        let old = t.received(3, 5);
        t.received(3, 6);
        t.acked(3, old, 6);
        assert_eq!(t.revoke(3), Some(5), "the commit on revoke stops at 5");
        t.assign(3);
        let new = t.received(3, 5);
        assert_ne!(old, new);
        // The old generation's settlement of 5 is ignored: it must not move the new one.
        t.acked(3, old, 5);
        assert_eq!(t.due(), [(3, 5)]);
        t.acked(3, new, 5);
        assert_eq!(t.due(), [(3, 6)]);
    }

    #[test]
    fn a_partition_lag_is_never_negative_nor_below_the_low_watermark() {
        assert_eq!(partition_lag(0, 10, 4), 6);
        assert_eq!(partition_lag(5, 10, 2), 5, "retention removed 0..5");
        assert_eq!(
            partition_lag(0, 10, 12),
            0,
            "committed past the high watermark"
        );
        assert_eq!(partition_lag(0, 0, 0), 0);
    }

    #[test]
    fn the_fetch_queue_is_sized_by_the_byte_budget() {
        let get = |b: usize| {
            let l = fetch_limits(b);
            (l[0].1.clone(), l[1].1.clone())
        };
        assert_eq!(
            get(268_435_456),
            ("65536".into(), "52428800".into()),
            "the default budget keeps librdkafka's defaults: 64 MiB queued, 50 MiB fetches"
        );
        assert_eq!(get(8 * 1024 * 1024), ("8192".into(), "8388608".into()));
        assert_eq!(get(1000), ("1".into(), "1000000".into()), "the floors");
        assert_eq!(get(usize::MAX), ("65536".into(), "52428800".into()));
        // librdkafka takes both with the consumer's defaults, at either end: creating the
        // client runs its cross-checks (`fetch.max.bytes` >= `message.max.bytes`); no
        // broker is needed for that.
        for b in [1, 1000, 268_435_456, usize::MAX] {
            let mut c = KafkaSourceConfig::new("127.0.0.1:9092", "t", "g")
                .unwrap()
                .conn
                .consumer_config("g", "earliest");
            for (k, v) in fetch_limits(b) {
                c.set(k, v);
            }
            let made: KafkaResult<BaseConsumer> = c.create();
            made.unwrap_or_else(|e| panic!("budget {b}: {e}"));
        }
    }

    #[test]
    fn owned_properties_and_an_empty_group_are_refused() {
        for p in SOURCE_OWNED {
            let c = KafkaSourceConfig::new("127.0.0.1:9092", "t", "g")
                .unwrap()
                .with_property(*p, "x");
            assert!(matches!(c, Err(ConfigError::OwnedProperty(_))), "{p}");
        }
        assert!(KafkaSourceConfig::new("127.0.0.1:9092", "t", " ").is_err());
        let toml_like = serde_json::json!({
            "brokers": ["127.0.0.1:9092"], "topic": "t", "group": "g", "start": "latest",
            "properties": {"sasl.oauthbearer.config": "secret-value"}
        });
        let c: KafkaSourceConfig = serde_json::from_value(toml_like).unwrap();
        assert_eq!(c.start, Start::Latest);
        assert!(!format!("{c:?}").contains("secret-value"));
        assert!(is_sensitive_property("sasl.oauthbearer.config"));
    }
}
