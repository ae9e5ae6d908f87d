//! `forward --from` a RabbitMQ queue: competing forwarders, a crash, a sink that is down,
//! an undecodable record. Every test uses its own queue and deletes it.

use super::from_source::{Collector, Forwarder, envelopes, the_dead_letter, wait_until};
use super::{amqp_channel, amqp_url, temp_file};
use ankusa_sink_testkit::support::unique_name;
use lapin::options::{ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A broker connection on its own runtime (the harness waits by blocking), with one
/// queue of its own, deleted on drop.
pub(super) struct Broker {
    rt: tokio::runtime::Runtime,
    _conn: Connection,
    ch: Channel,
    pub(super) queue: String,
}

impl Broker {
    pub(super) fn new() -> Broker {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let queue = unique_name("cli-src");
        let (conn, ch) = rt.block_on(async {
            let (conn, ch) = amqp_channel().await;
            ch.confirm_select(ConfirmSelectOptions::default())
                .await
                .unwrap();
            let mut args = FieldTable::default();
            // A test that panics before its cleanup leaks nothing for long.
            args.insert("x-expires".into(), AMQPValue::LongInt(300_000));
            ch.queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                args,
            )
            .await
            .unwrap();
            (conn, ch)
        });
        Broker {
            rt,
            _conn: conn,
            ch,
            queue,
        }
    }

    /// Publish every payload (persistent) and wait for the broker's confirms.
    pub(super) fn publish<'a>(&self, payloads: impl IntoIterator<Item = &'a [u8]>) {
        self.rt.block_on(async {
            let mut confirms = Vec::new();
            for p in payloads {
                let c = self
                    .ch
                    .basic_publish(
                        "".into(),
                        self.queue.as_str().into(),
                        Default::default(),
                        p,
                        BasicProperties::default().with_delivery_mode(2),
                    )
                    .await
                    .unwrap();
                confirms.push(c);
            }
            for c in confirms {
                assert!(c.await.unwrap().is_ack(), "the broker took the message");
            }
        });
    }

    /// (ready messages, consumers) by a passive declare.
    pub(super) fn counts(&self) -> (u32, u32) {
        self.rt.block_on(async {
            let q = self
                .ch
                .queue_declare(
                    self.queue.as_str().into(),
                    QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
                .unwrap();
            (q.message_count(), q.consumer_count())
        })
    }

    /// Once no forwarder consumes the queue any more (what they held went back to it), no
    /// message is left: none ready, none unacknowledged.
    fn assert_drained(&self) {
        wait_until(
            Duration::from_secs(10),
            "the forwarders left the queue",
            || self.counts().1 == 0,
        );
        assert_eq!(self.counts().0, 0, "{}: messages left", self.queue);
    }

    /// (ready, unacknowledged) as the broker counts them now (`rabbitmqctl list_queues`).
    fn ready_unacked(&self) -> (u64, u64) {
        let out = std::process::Command::new("rabbitmqctl")
            .args([
                "-q",
                "list_queues",
                "name",
                "messages_ready",
                "messages_unacknowledged",
            ])
            .output()
            .expect("rabbitmqctl runs");
        assert!(out.status.success(), "{}", super::text(&out.stderr));
        let text = super::text(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(self.queue.as_str()))
            .unwrap_or_else(|| panic!("{} not listed: {text}", self.queue));
        let n: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap())
            .collect();
        (n[0], n[1])
    }

    /// A `--from` file for this queue.
    pub(super) fn source_file(&self, extra: &str) -> PathBuf {
        temp_file(
            "amqp-source.toml",
            &format!(
                "type = \"amqp\"\nurl = \"{}\"\nqueue = \"{}\"\n{extra}",
                amqp_url(),
                self.queue
            ),
        )
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.rt.block_on(
            self.ch
                .queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default()),
        );
    }
}

fn ok_lines(f: &Forwarder) -> usize {
    f.lines().iter().filter(|l| l["outcome"] == "ok").count()
}

#[test]
fn three_forwarders_share_a_queue_and_deliver_every_hook() {
    needs!("RabbitMQ");
    const N: usize = 5_000;
    let broker = Broker::new();
    let collector = Collector::start();
    let hooks = envelopes(&unique_name("amqp-share"), N);
    broker.publish(hooks.iter().map(|(_, b)| b.as_slice()));
    let source = broker.source_file("");
    let sink = collector.sink_file();
    let t0 = Instant::now();
    let forwarders: Vec<Forwarder> = (0..3)
        .map(|_| Forwarder::spawn(&source, &sink, None, &[]))
        .collect();
    wait_until(Duration::from_secs(50), "every hook delivered", || {
        collector.distinct() == N
    });
    let took = t0.elapsed();
    let shares: Vec<usize> = forwarders.iter().map(ok_lines).collect();
    for f in forwarders {
        f.stop(Duration::from_secs(20));
    }
    assert!(hooks.iter().all(|(id, _)| collector.has(id)));
    eprintln!(
        "amqp: 3 forwarders delivered {N} hooks in {took:?} (ok lines per forwarder {shares:?}), \
         {} duplicates",
        collector.duplicates()
    );
    assert!(
        shares.iter().filter(|&&n| n > 0).count() >= 2,
        "the queue was shared: {shares:?}"
    );
    broker.assert_drained();
}

#[test]
fn a_killed_forwarder_hooks_are_redelivered_to_the_other() {
    needs!("RabbitMQ");
    const N: usize = 3_000;
    let broker = Broker::new();
    let collector = Collector::start();
    let hooks = envelopes(&unique_name("amqp-kill"), N);
    broker.publish(hooks.iter().map(|(_, b)| b.as_slice()));
    let source = broker.source_file("");
    let sink = collector.sink_file();
    let victim = Forwarder::spawn(&source, &sink, None, &[]);
    let survivor = Forwarder::spawn(&source, &sink, None, &[]);
    wait_until(Duration::from_secs(30), "a third delivered", || {
        collector.distinct() >= N / 3
    });
    victim.kill9();
    let at_kill = collector.distinct();
    wait_until(Duration::from_secs(40), "every hook delivered", || {
        collector.distinct() == N
    });
    survivor.stop(Duration::from_secs(20));
    assert!(hooks.iter().all(|(id, _)| collector.has(id)));
    eprintln!(
        "amqp: killed a forwarder at {at_kill}/{N} delivered; all {N} arrived, {} duplicates",
        collector.duplicates()
    );
    assert!(at_kill < N, "the kill happened mid-run");
    broker.assert_drained();
}

#[test]
fn while_the_sink_is_down_nothing_is_acked_and_then_everything_flows() {
    needs!("RabbitMQ");
    const N: usize = 300;
    let broker = Broker::new();
    let collector = Collector::start();
    collector.set_down(true);
    let hooks = envelopes(&unique_name("amqp-down"), N);
    broker.publish(hooks.iter().map(|(_, b)| b.as_slice()));
    let source = broker.source_file("prefetch = 40\n");
    let fwd = Forwarder::spawn(
        &source,
        &collector.sink_file(),
        None,
        &["--max-unacked", "20", "--breaker-open", "1"],
    );
    // Five refusals open the circuit breaker (then one probe a second): down for a while.
    wait_until(Duration::from_secs(20), "attempts refused", || {
        collector.refused() >= 5
    });
    std::thread::sleep(Duration::from_millis(1500));
    // Down: every hook is still in the queue, ready or held unacknowledged by the
    // forwarder, which holds no more than its prefetch.
    let (ready, unacked) = broker.ready_unacked();
    assert_eq!(
        ready + unacked,
        N as u64,
        "nothing acked while down ({ready} ready, {unacked} unacked)"
    );
    assert!(
        unacked > 0 && unacked <= 40,
        "the prefetch bounds it: {unacked}"
    );
    assert_eq!(collector.distinct(), 0);
    collector.set_down(false);
    let up = Instant::now();
    wait_until(
        Duration::from_secs(40),
        "every hook delivered once up",
        || collector.distinct() == N,
    );
    let flowed = up.elapsed();
    fwd.stop(Duration::from_secs(20));
    eprintln!(
        "amqp: {} attempts refused while down ({ready} ready, {unacked} unacked); all \
         delivered {flowed:?} after the sink came back; {} duplicates",
        collector.refused(),
        collector.duplicates()
    );
    broker.assert_drained();
}

#[test]
fn stopped_while_the_sink_is_down_every_hook_is_back_in_the_queue() {
    needs!("RabbitMQ");
    const N: usize = 50;
    let broker = Broker::new();
    let collector = Collector::start();
    collector.set_down(true);
    let hooks = envelopes(&unique_name("amqp-term"), N);
    broker.publish(hooks.iter().map(|(_, b)| b.as_slice()));
    let fwd = Forwarder::spawn(&broker.source_file(""), &collector.sink_file(), None, &[]);
    wait_until(Duration::from_secs(20), "attempts refused", || {
        collector.refused() >= 5
    });
    let t = Instant::now();
    fwd.stop(Duration::from_secs(20));
    eprintln!(
        "amqp: stopped within {:?} while the sink was down",
        t.elapsed()
    );
    wait_until(
        Duration::from_secs(10),
        "the forwarder left the queue",
        || broker.counts().1 == 0,
    );
    assert_eq!(
        broker.counts().0,
        N as u32,
        "nothing acked that was not delivered: every hook is ready again"
    );
}

#[test]
fn an_undecodable_record_is_dead_lettered_and_acked() {
    needs!("RabbitMQ");
    let broker = Broker::new();
    let collector = Collector::start();
    let hooks = envelopes(&unique_name("amqp-bad"), 3);
    broker
        .publish(std::iter::once(&b"not json"[..]).chain(hooks.iter().map(|(_, b)| b.as_slice())));
    let dead = temp_file("dead.jsonl", "");
    let fwd = Forwarder::spawn(
        &broker.source_file(""),
        &collector.sink_file(),
        Some(&dead),
        &[],
    );
    wait_until(Duration::from_secs(20), "the good hooks delivered", || {
        collector.distinct() == 3
    });
    wait_until(Duration::from_secs(10), "the invalid line", || {
        fwd.lines().iter().any(|l| l["outcome"] == "invalid")
    });
    let lines = fwd.lines();
    let invalid = lines.iter().find(|l| l["outcome"] == "invalid").unwrap();
    assert!(
        invalid["position"]
            .as_str()
            .is_some_and(|p| p.starts_with(&format!("{}#", broker.queue))),
        "{invalid}"
    );
    wait_until(Duration::from_secs(10), "the dead letter", || {
        std::fs::read_to_string(&dead)
            .unwrap_or_default()
            .contains("raw_base64")
    });
    the_dead_letter(&dead, b"not json");
    fwd.stop(Duration::from_secs(20));
    // Acked, not requeued: the queue moved on and is empty.
    broker.assert_drained();
}

/// `forward --from` with `extra` arguments, waited for within `limit` (killed past it:
/// a forwarder that does not refuse runs until stopped).
fn forward_from_exits(
    source: &std::path::Path,
    extra: &[&str],
    limit: Duration,
) -> std::process::Output {
    let mut child = super::bin()
        .args(["forward", "--from"])
        .arg(source)
        .args(extra)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?} (it did not refuse): {}",
                super::text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_sink_that_keeps_nothing_is_refused_unless_allowed() {
    needs!("RabbitMQ");
    const N: usize = 5;
    let broker = Broker::new();
    let hooks = envelopes(&unique_name("amqp-nondurable"), N);
    broker.publish(hooks.iter().map(|(_, b)| b.as_slice()));
    let source = broker.source_file("");
    // Without the flag: refused before the queue is read, the log sink named.
    let out = forward_from_exits(
        &source,
        &["--sink", "log", "--json"],
        Duration::from_secs(30),
    );
    let err = super::text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("keep nothing: log;") && err.contains("--allow-non-durable"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "no outcome line");
    assert_eq!(
        broker.counts(),
        (N as u32, 0),
        "nothing consumed: every record still ready"
    );
    // With it: the records flow to the log sink, and one WARN line says which sinks.
    let fwd = Forwarder::spawn(
        &source,
        std::path::Path::new("log"),
        None,
        &["--allow-non-durable"],
    );
    wait_until(Duration::from_secs(20), "every hook logged", || {
        ok_lines(&fwd) == N
    });
    let stderr = fwd.stderr();
    fwd.stop(Duration::from_secs(20));
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("--allow-non-durable"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("sinks=log"),
        "{stderr}"
    );
    broker.assert_drained();
}

/// `count` envelopes of exactly the same size (a `body` of `body_bytes` each): ids
/// `{prefix}-{i:03}`.
fn same_size_envelopes(prefix: &str, count: usize, body_bytes: usize) -> Vec<(String, Vec<u8>)> {
    let out: Vec<(String, Vec<u8>)> = (0..count)
        .map(|i| {
            let id = format!("{prefix}-{i:03}");
            let env =
                ankusa_sink_core::Envelope::builder(id.clone(), "src", vec![b'x'; body_bytes])
                    .content_type("application/octet-stream")
                    .build()
                    .unwrap();
            (id, serde_json::to_vec(&env).unwrap())
        })
        .collect();
    assert!(out.iter().all(|(_, b)| b.len() == out[0].1.len()));
    out
}

#[test]
fn the_byte_budget_bounds_what_the_broker_has_out_while_the_sink_is_down() {
    needs!("RabbitMQ");
    const N: usize = 20;
    let broker = Broker::new();
    let collector = Collector::start();
    collector.set_down(true);
    let hooks = same_size_envelopes(&unique_name("amqp-bytes"), N, 100_000);
    let size = hooks[0].1.len() as u64;
    // Three records' worth and a half: the fourth never fits while three are held.
    let budget = 3 * size + size / 2;
    broker.publish(hooks.iter().map(|(_, b)| b.as_slice()));
    // The default prefetch (the dispatcher's 32) would take all twenty at once.
    let fwd = Forwarder::spawn(
        &broker.source_file(""),
        &collector.sink_file(),
        None,
        &[
            "--max-unacked-bytes",
            &budget.to_string(),
            "--breaker-open",
            "1",
        ],
    );
    wait_until(Duration::from_secs(20), "attempts refused", || {
        collector.refused() >= 3
    });
    // While the sink is down, every sample of what the broker has given out and not had
    // acknowledged fits the budget, and nothing was acknowledged.
    let mut most = 0;
    for _ in 0..5 {
        let (ready, unacked) = broker.ready_unacked();
        assert_eq!(ready + unacked, N as u64, "nothing acked while down");
        assert!(
            unacked * size <= budget,
            "{unacked} unacknowledged records of {size} bytes exceed --max-unacked-bytes \
             {budget}"
        );
        most = most.max(unacked);
        let seen = collector.refused();
        wait_until(Duration::from_secs(20), "more attempts", || {
            collector.refused() > seen
        });
    }
    assert!(most >= 1, "the forwarder held records");
    assert_eq!(collector.distinct(), 0);
    collector.set_down(false);
    wait_until(
        Duration::from_secs(60),
        "every hook delivered once up",
        || collector.distinct() == N,
    );
    fwd.stop(Duration::from_secs(20));
    eprintln!(
        "amqp: at most {most} of {N} records of {size} bytes unacknowledged with a budget of \
         {budget} bytes while the sink was down; all delivered after"
    );
    broker.assert_drained();
}

#[test]
fn a_record_larger_than_the_byte_budget_goes_through_alone() {
    needs!("RabbitMQ");
    let broker = Broker::new();
    let collector = Collector::start();
    let prefix = unique_name("amqp-alone");
    let small = envelopes(&prefix, 6);
    let big = same_size_envelopes(&format!("{prefix}-big"), 1, 200_000);
    let all: Vec<&(String, Vec<u8>)> = small[..3].iter().chain(&big).chain(&small[3..]).collect();
    broker.publish(all.iter().map(|(_, b)| b.as_slice()));
    let fwd = Forwarder::spawn(
        &broker.source_file(""),
        &collector.sink_file(),
        None,
        &["--max-unacked-bytes", "50000"],
    );
    wait_until(Duration::from_secs(30), "every hook delivered", || {
        collector.distinct() == all.len()
    });
    fwd.stop(Duration::from_secs(20));
    assert!(all.iter().all(|(id, _)| collector.has(id)));
    broker.assert_drained();
}

#[test]
fn a_record_longer_than_max_line_bytes_is_dead_lettered_and_acked_undecoded() {
    needs!("RabbitMQ");
    let broker = Broker::new();
    let collector = Collector::start();
    let prefix = unique_name("amqp-long");
    let small = envelopes(&prefix, 2);
    let long = same_size_envelopes(&format!("{prefix}-long"), 1, 5_000);
    broker.publish(
        std::iter::once(small[0].1.as_slice())
            .chain(std::iter::once(long[0].1.as_slice()))
            .chain(std::iter::once(small[1].1.as_slice())),
    );
    let dead = temp_file("dead.jsonl", "");
    let fwd = Forwarder::spawn(
        &broker.source_file(""),
        &collector.sink_file(),
        Some(&dead),
        &["--max-line-bytes", "2000"],
    );
    wait_until(Duration::from_secs(20), "the invalid line", || {
        fwd.lines().iter().any(|l| l["outcome"] == "invalid")
    });
    wait_until(Duration::from_secs(20), "the short hooks delivered", || {
        small.iter().all(|(id, _)| collector.has(id))
    });
    wait_until(Duration::from_secs(10), "the dead letter", || {
        std::fs::read_to_string(&dead)
            .unwrap_or_default()
            .contains("raw_base64")
    });
    let lines = fwd.lines();
    let invalid: Vec<_> = lines.iter().filter(|l| l["outcome"] == "invalid").collect();
    assert_eq!(invalid.len(), 1, "{lines:?}");
    assert_eq!(
        invalid[0]["reason"], "longer than --max-line-bytes (2000 bytes)",
        "{}",
        invalid[0]
    );
    assert!(
        invalid[0]["position"]
            .as_str()
            .is_some_and(|p| p.starts_with(&format!("{}#", broker.queue))),
        "{}",
        invalid[0]
    );
    // Kept only up to --max-line-bytes, and flagged so.
    let dl = the_dead_letter(&dead, &long[0].1[..2000]);
    assert_eq!(dl["raw_truncated"], true);
    assert_eq!(dl["raw_bytes"], long[0].1.len());
    assert_eq!(dl["dead_letter"]["reason"], invalid[0]["reason"]);
    assert!(!collector.has(&long[0].0), "never decoded nor delivered");
    fwd.stop(Duration::from_secs(20));
    // Acked, not requeued.
    broker.assert_drained();
}
