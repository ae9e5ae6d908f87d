//! `forward --from` a Kafka topic: forwarders in one consumer group share it, a killed one's
//! records reach the others, a down sink holds the commit, undecodable records are
//! dead-lettered and committed past. End offsets come from delivery reports (the local
//! Kafka-protocol broker's metadata reports a partition's end as its last batch's base
//! offset + 1).

use super::from_source::{Collector, Forwarder, envelopes, the_dead_letter, wait_until};
use super::temp_file;
use ankusa_sink_testkit::support::unique_name;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub(super) fn brokers() -> String {
    std::env::var("ANKUSA_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

/// A fresh topic, and its forwarders' consumer group.
pub(super) struct Topic {
    pub(super) name: String,
    group: String,
    admin: AdminClient<DefaultClientContext>,
}

impl Topic {
    pub(super) async fn create(partitions: i32) -> Self {
        let name = unique_name("from-kafka");
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .create()
            .unwrap();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        for r in admin
            .create_topics(
                &[NewTopic::new(&name, partitions, TopicReplication::Fixed(1))],
                &opts,
            )
            .await
            .unwrap()
        {
            r.unwrap();
        }
        Topic {
            group: format!("{name}-fwd"),
            name,
            admin,
        }
    }

    /// A `--from` file for this topic's group; short session timeouts so a killed member's
    /// partitions move within seconds.
    pub(super) fn source_file(&self) -> PathBuf {
        temp_file(
            "kafka-source.toml",
            &format!(
                "type = \"kafka\"\nbrokers = [\"{}\"]\ntopic = \"{}\"\ngroup = \"{}\"\n\
                 [properties]\n\"session.timeout.ms\" = \"6000\"\n\
                 \"heartbeat.interval.ms\" = \"500\"\n",
                brokers(),
                self.name,
                self.group
            ),
        )
    }

    /// Produce `records` round robin over `partitions`; one past the last offset written
    /// to each partition, from the delivery reports.
    pub(super) async fn produce(&self, records: &[Vec<u8>], partitions: i32) -> BTreeMap<i32, i64> {
        let p: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("linger.ms", "5")
            .create()
            .unwrap();
        let sends = records.iter().enumerate().map(|(i, r)| {
            let partition = i32::try_from(i).unwrap() % partitions;
            p.send(
                FutureRecord::<(), _>::to(&self.name)
                    .payload(r.as_slice())
                    .partition(partition),
                Duration::from_secs(30),
            )
        });
        let mut ends = BTreeMap::new();
        for r in futures_util::future::join_all(sends).await {
            let d = r.map_err(|(e, _)| e).unwrap();
            let end = ends.entry(d.partition).or_insert(0);
            *end = (*end).max(d.offset + 1);
        }
        ends
    }

    /// The group's committed offset per partition (`None`: nothing committed).
    pub(super) fn committed(&self, partitions: i32) -> BTreeMap<i32, Option<i64>> {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("group.id", &self.group)
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(&self.name, p);
        }
        let got = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
        got.elements()
            .iter()
            .map(|e| {
                let o = match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                };
                (e.partition(), o)
            })
            .collect()
    }

    pub(super) async fn delete(self) {
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let _ = self.admin.delete_topics(&[&self.name], &opts).await;
    }
}

pub(super) fn all_committed(ends: &BTreeMap<i32, i64>) -> BTreeMap<i32, Option<i64>> {
    ends.iter().map(|(&p, &o)| (p, Some(o))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_forwarders_share_a_topic_and_every_hook_arrives() {
    needs!("Kafka");
    let topic = Topic::create(3).await;
    let hooks = envelopes("k3", 5_000);
    let ends = topic
        .produce(&hooks.iter().map(|(_, b)| b.clone()).collect::<Vec<_>>(), 3)
        .await;
    let sink = Collector::start();
    let (src, sink_file) = (topic.source_file(), sink.sink_file());
    let fwd: Vec<Forwarder> = (0..3)
        .map(|_| Forwarder::spawn(&src, &sink_file, None, &[]))
        .collect();
    wait_until(Duration::from_secs(150), "every hook delivered", || {
        sink.distinct() == 5_000
    });
    // Every forwarder commits within its commit interval of finishing.
    wait_until(Duration::from_secs(20), "every offset committed", || {
        topic.committed(3) == all_committed(&ends)
    });
    for f in fwd {
        let err = f.stderr();
        assert_eq!(f.stop(Duration::from_secs(30)), Some(143), "{err}");
    }
    eprintln!("3 forwarders, 5000 hooks: {} duplicates", sink.duplicates());
    assert_eq!(topic.committed(3), all_committed(&ends));
    topic.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_forwarder_s_hooks_reach_the_other() {
    needs!("Kafka");
    let topic = Topic::create(2).await;
    let hooks = envelopes("kk", 5_000);
    let ends = topic
        .produce(&hooks.iter().map(|(_, b)| b.clone()).collect::<Vec<_>>(), 2)
        .await;
    let sink = Collector::start();
    let (src, sink_file) = (topic.source_file(), sink.sink_file());
    let a = Forwarder::spawn(&src, &sink_file, None, &[]);
    let b = Forwarder::spawn(&src, &sink_file, None, &[]);
    wait_until(Duration::from_secs(120), "a first part delivered", || {
        sink.distinct() >= 1_000
    });
    a.kill9();
    wait_until(Duration::from_secs(150), "every hook delivered", || {
        sink.distinct() == 5_000
    });
    wait_until(Duration::from_secs(20), "every offset committed", || {
        topic.committed(2) == all_committed(&ends)
    });
    let err = b.stderr();
    assert_eq!(b.stop(Duration::from_secs(30)), Some(143), "{err}");
    eprintln!(
        "kill -9 of one of two forwarders, 5000 hooks: {} duplicates",
        sink.duplicates()
    );
    topic.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_sink_holds_the_commit_and_everything_flows_when_it_returns() {
    needs!("Kafka");
    let topic = Topic::create(1).await;
    let hooks = envelopes("kd", 200);
    let ends = topic
        .produce(&hooks.iter().map(|(_, b)| b.clone()).collect::<Vec<_>>(), 1)
        .await;
    let sink = Collector::start();
    sink.set_down(true);
    let f = Forwarder::spawn(
        &topic.source_file(),
        &sink.sink_file(),
        None,
        &["--breaker-open", "1", "--max-unacked", "64"],
    );
    wait_until(Duration::from_secs(60), "the sink refused hooks", || {
        sink.refused() >= 64
    });
    // Several commit intervals with every hook failing: nothing is committed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Not past the first record: nothing finished (a commit of 0 says just that).
    let held = topic.committed(1)[&0];
    assert!(matches!(held, None | Some(0)), "{held:?}");
    sink.set_down(false);
    wait_until(Duration::from_secs(90), "every hook delivered", || {
        sink.distinct() == 200
    });
    wait_until(Duration::from_secs(20), "every offset committed", || {
        topic.committed(1) == all_committed(&ends)
    });
    let err = f.stderr();
    assert_eq!(f.stop(Duration::from_secs(30)), Some(143), "{err}");
    topic.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_records_are_dead_lettered_and_committed_past_and_messages_bridge() {
    needs!("Kafka");
    let topic = Topic::create(1).await;
    let hooks = envelopes("ku", 2);
    // A Message v1 from another broker's sink is a hook too.
    let env = ankusa_sink_core::Envelope::builder("ku-msg", "src", "bridged")
        .tenant_id("acme")
        .build()
        .unwrap();
    let msg =
        ankusa_message::encode(&env, &ankusa_sink_core::Ctx::for_envelope(&env), None).unwrap();
    let records = vec![
        hooks[0].1.clone(),
        b"not json".to_vec(),
        msg,
        hooks[1].1.clone(),
    ];
    let ends = topic.produce(&records, 1).await;
    let sink = Collector::start();
    let dl = temp_file("dead.jsonl", "");
    let f = Forwarder::spawn(&topic.source_file(), &sink.sink_file(), Some(&dl), &[]);
    wait_until(Duration::from_secs(60), "the hooks delivered", || {
        sink.distinct() == 3
    });
    wait_until(
        Duration::from_secs(20),
        "committed past the bad record",
        || topic.committed(1) == all_committed(&ends),
    );
    assert!(sink.has("ku-msg"));
    let lines = f.lines();
    let err = f.stderr();
    assert_eq!(f.stop(Duration::from_secs(30)), Some(143), "{err}");
    let invalid: Vec<_> = lines.iter().filter(|l| l["outcome"] == "invalid").collect();
    assert_eq!(invalid.len(), 1, "{lines:?}");
    assert_eq!(invalid[0]["position"], format!("{}/0@1", topic.name));
    let dead = the_dead_letter(&dl, b"not json");
    assert_eq!(dead["dead_letter"]["error_class"], "permanent");
    topic.delete().await;
}

#[test]
fn a_missing_topic_stops_the_forwarder_with_a_config_error() {
    needs!("Kafka");
    let src = temp_file(
        "kafka-source.toml",
        &format!(
            "type = \"kafka\"\nbrokers = [\"{}\"]\ntopic = \"{}\"\ngroup = \"g\"\n",
            brokers(),
            unique_name("from-kafka-missing")
        ),
    );
    let sink = Collector::start();
    let mut f = Forwarder::spawn(&src, &sink.sink_file(), None, &[]);
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = f.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "still running on a missing topic"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let err = std::fs::read_to_string(&f.err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("the source failed") && err.contains("kafka topic"),
        "{err}"
    );
}
