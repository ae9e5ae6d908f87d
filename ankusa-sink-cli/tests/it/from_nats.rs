//! `forward --from` a NATS JetStream stream (the server at 127.0.0.1:4222): forwarders
//! sharing one durable pull consumer, a forwarder killed mid-run, a destination down for a
//! while, an undecodable record.

use super::from_source::{Collector, Forwarder, envelopes, the_dead_letter, wait_until};
use super::{NATS_URL, nats_stream, temp_file};
use async_nats::jetstream::{self, consumer};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A fresh stream on the shared server, with a runtime to talk to it from a plain test.
struct Stream {
    rt: tokio::runtime::Runtime,
    js: jetstream::Context,
    name: String,
    subject: String,
    consumer: String,
}

impl Stream {
    fn create(prefix: &str) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (js, name, subject) = rt.block_on(nats_stream(prefix));
        Stream {
            rt,
            js,
            name,
            subject,
            consumer: "forwarders".into(),
        }
    }

    /// A `--from` file for this stream; `extra` is appended (e.g. `ack_wait_ms = 3000`).
    fn source_file(&self, extra: &str) -> PathBuf {
        temp_file(
            "nats-source.toml",
            &format!(
                "type = \"nats\"\nurl = \"{NATS_URL}\"\nstream = \"{}\"\nconsumer = \"{}\"\n{extra}\n",
                self.name, self.consumer
            ),
        )
    }

    /// Publish every payload, the stream's acks awaited in chunks.
    fn publish(&self, payloads: impl IntoIterator<Item = Vec<u8>>) {
        self.rt.block_on(async {
            let mut acks = Vec::new();
            for p in payloads {
                acks.push(
                    self.js
                        .publish(self.subject.clone(), p.into())
                        .await
                        .unwrap(),
                );
                if acks.len() == 256 {
                    for a in acks.drain(..) {
                        a.await.unwrap();
                    }
                }
            }
            for a in acks {
                a.await.unwrap();
            }
        });
    }

    /// The shared consumer's state.
    fn info(&self) -> consumer::Info {
        self.rt.block_on(async {
            self.js
                .get_stream(&self.name)
                .await
                .unwrap()
                .consumer_info(&self.consumer)
                .await
                .unwrap()
        })
    }

    /// Wait until the consumer has nothing pending or unacknowledged.
    fn wait_drained(&self) {
        wait_until(Duration::from_secs(20), "the consumer drained", || {
            let i = self.info();
            i.num_pending == 0 && i.num_ack_pending == 0
        });
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.rt.block_on(self.js.delete_stream(&self.name));
    }
}

fn stop_all(forwarders: Vec<Forwarder>) {
    for f in forwarders {
        let err = f.err.clone();
        let code = f.stop(Duration::from_secs(20));
        eprintln!(
            "forwarder exit {code:?}; stderr: {}",
            std::fs::read_to_string(err).unwrap_or_default().trim()
        );
    }
}

#[test]
fn three_forwarders_on_one_consumer_deliver_every_hook() {
    needs!("NATS");
    let s = Stream::create("cli-nats-src3");
    let hooks = envelopes("n3", 5000);
    s.publish(hooks.iter().map(|(_, b)| b.clone()));
    let c = Collector::start();
    let (source, sink) = (s.source_file(""), c.sink_file());
    let t0 = Instant::now();
    let forwarders: Vec<_> = (0..3)
        .map(|_| Forwarder::spawn(&source, &sink, None, &["--max-unacked", "256"]))
        .collect();
    wait_until(Duration::from_secs(50), "every hook delivered", || {
        c.distinct() == hooks.len()
    });
    eprintln!(
        "3 forwarders: {} hooks in {:?}, {} duplicates",
        hooks.len(),
        t0.elapsed(),
        c.duplicates()
    );
    assert!(hooks.iter().all(|(id, _)| c.has(id)));
    // Every forwarder took a share (the consumer is shared, not copied).
    let shares: Vec<usize> = forwarders
        .iter()
        .map(|f| f.lines().iter().filter(|l| l["outcome"] == "ok").count())
        .collect();
    eprintln!("shares: {shares:?}");
    s.wait_drained();
    stop_all(forwarders);
    let i = s.info();
    assert_eq!((i.num_pending, i.num_ack_pending), (0, 0));
}

#[test]
fn a_forwarder_killed_mid_run_loses_nothing() {
    needs!("NATS");
    let s = Stream::create("cli-nats-kill");
    let hooks = envelopes("nk", 3000);
    s.publish(hooks.iter().map(|(_, b)| b.clone()));
    let c = Collector::start();
    // A short ack_wait, so the killed forwarder's records come back quickly.
    let (source, sink) = (s.source_file("ack_wait_ms = 3000"), c.sink_file());
    let args = ["--attempt-timeout", "2", "--max-unacked", "300"];
    let victim = Forwarder::spawn(&source, &sink, None, &args);
    let survivor = Forwarder::spawn(&source, &sink, None, &args);
    wait_until(Duration::from_secs(30), "deliveries under way", || {
        c.distinct() >= 300
    });
    victim.kill9();
    let killed_at = c.distinct();
    wait_until(Duration::from_secs(45), "every hook delivered", || {
        c.distinct() == hooks.len()
    });
    eprintln!(
        "kill -9 at {killed_at} delivered: all {} arrived, {} duplicates",
        hooks.len(),
        c.duplicates()
    );
    assert!(hooks.iter().all(|(id, _)| c.has(id)));
    s.wait_drained();
    stop_all(vec![survivor]);
}

#[test]
fn nothing_is_acked_while_the_destination_is_down() {
    needs!("NATS");
    let s = Stream::create("cli-nats-down");
    let hooks = envelopes("nd", 200);
    s.publish(hooks.iter().map(|(_, b)| b.clone()));
    let c = Collector::start();
    c.set_down(true);
    // ack_wait 2.5 s: the down time below spans more than two of them, so only the
    // forwarder's in-progress acks keep the waiting hooks from being redelivered.
    let (source, sink) = (s.source_file("ack_wait_ms = 2500"), c.sink_file());
    let f = Forwarder::spawn(
        &source,
        &sink,
        None,
        &[
            "--attempt-timeout",
            "1",
            "--max-unacked",
            "50",
            "--breaker-open",
            "1",
        ],
    );
    wait_until(Duration::from_secs(20), "the window filled", || {
        c.refused() > 0 && s.info().num_ack_pending == 50
    });
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(6) {
        let i = s.info();
        assert_eq!(c.distinct(), 0);
        // Nothing acknowledged: every hook is pending or held by the forwarder.
        assert_eq!(
            i.num_pending + i.num_ack_pending as u64,
            hooks.len() as u64,
            "{i:?}"
        );
        assert!(i.num_ack_pending <= 50, "{i:?}");
        assert_eq!(i.ack_floor.stream_sequence, 0, "{i:?}");
        assert_eq!(i.num_redelivered, 0, "redelivered while in progress: {i:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("refused while down: {}", c.refused());
    c.set_down(false);
    wait_until(Duration::from_secs(40), "every hook delivered", || {
        c.distinct() == hooks.len()
    });
    eprintln!("after the outage: {} duplicates", c.duplicates());
    s.wait_drained();
    stop_all(vec![f]);
}

#[test]
fn an_undecodable_record_is_dead_lettered_and_acked() {
    needs!("NATS");
    let s = Stream::create("cli-nats-bad");
    let hooks = envelopes("nb", 2);
    s.publish([hooks[0].1.clone(), b"not json".to_vec(), hooks[1].1.clone()]);
    let c = Collector::start();
    let dl = temp_file("dead.jsonl", "");
    let (source, sink) = (s.source_file(""), c.sink_file());
    let f = Forwarder::spawn(&source, &sink, Some(&dl), &[]);
    wait_until(Duration::from_secs(20), "the good hooks delivered", || {
        c.distinct() == 2
    });
    wait_until(Duration::from_secs(10), "the invalid line", || {
        f.lines().iter().any(|l| l["outcome"] == "invalid")
    });
    let lines = f.lines();
    let invalid = lines.iter().find(|l| l["outcome"] == "invalid").unwrap();
    assert_eq!(
        invalid["position"],
        format!("{}/{}@2", s.name, s.consumer).as_str()
    );
    assert!(
        invalid["reason"].as_str().unwrap().contains("not JSON"),
        "{invalid}"
    );
    s.wait_drained();
    stop_all(vec![f]);
    the_dead_letter(&dl, b"not json");
    let i = s.info();
    assert_eq!((i.num_pending, i.num_ack_pending), (0, 0));
}

/// A source that does not answer at start is not a usage error: exit 69 (EX_UNAVAILABLE,
/// for a supervisor to retry), nothing read, and the same for `dead-letters`. A source the
/// broker refuses by its config stays exit 2.
#[test]
fn a_source_that_does_not_answer_at_start_exits_69_not_2() {
    let addr = super::free_addr();
    let from = temp_file(
        "from.toml",
        &format!(
            "type = \"nats\"\nurl = \"nats://{addr}\"\nstream = \"s\"\nconsumer = \"c\"\n\
             connect_timeout_ms = 500\n"
        ),
    );
    let sink = temp_file("log.toml", "type = \"log\"\n");
    let out = super::run_with(
        &[
            "forward",
            "--json",
            "--from",
            from.to_str().unwrap(),
            "--sink",
            sink.to_str().unwrap(),
            "--allow-non-durable",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("the source did not answer"), "{stderr}");
    assert!(out.stdout.is_empty());
    let out = super::run_with(
        &["dead-letters", "stats", "--from", from.to_str().unwrap()],
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A stream that does not exist on a server that answers: the config's, exit 2.
    let missing = temp_file(
        "from.toml",
        &format!(
            "type = \"nats\"\nurl = \"{NATS_URL}\"\nstream = \"ankusa_no_such_{}\"\n\
             consumer = \"c\"\n",
            std::process::id()
        ),
    );
    let out = super::run_with(
        &[
            "forward",
            "--json",
            "--from",
            missing.to_str().unwrap(),
            "--sink",
            sink.to_str().unwrap(),
            "--allow-non-durable",
        ],
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
