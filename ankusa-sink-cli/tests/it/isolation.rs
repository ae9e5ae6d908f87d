//! One failing destination costs only itself: `forward --from` with two sinks reads the
//! source once per sink (a Kafka group, a JetStream durable consumer, a RabbitMQ queue bound
//! to the exchange each), so a sink answering 503 holds back none of the other's hooks; a
//! kill -9 and a restart lose nothing for either; the failing sink, back, gets every hook.

use super::amqp_fanout::{delete_all, durable_fanout, publish_confirmed};
use super::from_kafka::Topic;
use super::from_source::{Collector, Forwarder, envelopes, wait_until};
use super::{NATS_URL, amqp_channel, amqp_url, nats_stream, temp_file};
use ankusa_sink_testkit::support::unique_name;
use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use std::path::Path;
use std::time::Duration;

/// Good and bad (503 until told otherwise) read `src`, which `publish` fills with `n` hooks
/// once the first forwarder runs: good gets every hook while bad refuses them, and the WARN
/// names bad's full window; a kill -9 then a restart with bad back: bad gets every hook,
/// good loses none.
fn good_and_bad(src: &Path, n: usize, publish: impl FnOnce(&[Vec<u8>])) {
    let hooks: Vec<Vec<u8>> = envelopes(&unique_name("iso"), n)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    let (good, bad) = (Collector::start(), Collector::start());
    bad.set_down(true);
    let (good_file, bad_file) = (good.sink_file_named("good"), bad.sink_file_named("bad"));
    let bad_arg = bad_file.to_str().unwrap();
    let args = [
        "--sink",
        bad_arg,
        "--breaker-open",
        "1",
        "--max-unacked",
        "64",
    ];
    let f = Forwarder::spawn(src, &good_file, None, &args);
    publish(&hooks);
    wait_until(
        Duration::from_secs(150),
        "good has every hook while bad refuses them",
        || good.distinct() == n,
    );
    assert_eq!(bad.distinct(), 0);
    assert!(bad.refused() > 0);
    wait_until(
        Duration::from_secs(10),
        "the WARN names bad's window",
        || f.stderr().contains("source window of sink bad is full"),
    );
    f.kill9();
    bad.set_down(false);
    let f = Forwarder::spawn(src, &good_file, None, &args);
    wait_until(
        Duration::from_secs(150),
        "bad, back, has every hook",
        || bad.distinct() == n,
    );
    assert_eq!(good.distinct(), n);
    let err = f.stderr();
    assert_eq!(f.stop(Duration::from_secs(30)), Some(143), "{err}");
    eprintln!(
        "{n} hooks, good + bad (503), kill -9, restart: duplicates good {} bad {}",
        good.duplicates(),
        bad.duplicates()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_a_failing_sink_holds_back_no_other() {
    needs!("Kafka");
    let topic = Topic::create(4).await;
    let src = topic.source_file();
    let rt = tokio::runtime::Handle::current();
    let t = &topic;
    tokio::task::block_in_place(|| {
        good_and_bad(&src, 2_000, |hooks| {
            rt.block_on(t.produce(hooks, 4));
        })
    });
    topic.delete().await;
}

#[test]
fn nats_a_failing_sink_holds_back_no_other() {
    needs!("NATS");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (js, stream, subject) = rt.block_on(nats_stream("iso"));
    let src = temp_file(
        "nats-source.toml",
        &format!(
            "type = \"nats\"\nurl = \"{NATS_URL}\"\nstream = \"{stream}\"\nconsumer = \"fwd\"\n"
        ),
    );
    good_and_bad(&src, 2_000, |hooks| {
        rt.block_on(async {
            for chunk in hooks.chunks(256) {
                let mut acks = Vec::new();
                for h in chunk {
                    acks.push(js.publish(subject.clone(), h.clone().into()).await.unwrap());
                }
                for a in acks {
                    a.await.unwrap();
                }
            }
        })
    });
    let info = rt.block_on(async {
        let s = js.get_stream(&stream).await.unwrap();
        let (g, b) = (s.clone(), s);
        (
            g.consumer_info("fwd-good").await.unwrap().num_ack_pending,
            b.consumer_info("fwd-bad").await.unwrap().num_ack_pending,
        )
    });
    assert_eq!(info, (0, 0), "both consumers acknowledged everything");
    let _ = rt.block_on(js.delete_stream(&stream));
}

#[test]
fn amqp_bound_to_an_exchange_a_failing_sink_holds_back_no_other() {
    needs!("RabbitMQ");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let base = unique_name("iso-q");
    let exchange = unique_name("iso-x");
    let (_conn, ch) = rt.block_on(async {
        let (conn, ch) = amqp_channel().await;
        durable_fanout(&ch, &exchange).await;
        (conn, ch)
    });
    let src = temp_file(
        "amqp-source.toml",
        &format!(
            "type = \"amqp\"\nurl = \"{}\"\nqueue = \"{base}\"\nexchange = \"{exchange}\"\n",
            amqp_url()
        ),
    );
    let queues = [format!("{base}-good"), format!("{base}-bad")];
    good_and_bad(&src, 2_000, |hooks| {
        // The forwarder declares and binds a queue per sink: publish once both exist.
        wait_until(Duration::from_secs(30), "both queues bound", || {
            queues.iter().all(|q| {
                rt.block_on(async {
                    let (_c, probe) = amqp_channel().await;
                    probe
                        .queue_declare(
                            q.as_str().into(),
                            QueueDeclareOptions {
                                passive: true,
                                ..Default::default()
                            },
                            FieldTable::default(),
                        )
                        .await
                        .is_ok()
                })
            })
        });
        rt.block_on(async {
            let (_c, pch) = amqp_channel().await;
            publish_confirmed(&pch, &exchange, hooks, hooks.len().max(1)).await;
        });
    });
    rt.block_on(delete_all(&ch, &exchange, &queues));
}

#[test]
fn amqp_a_queue_alone_is_shared_and_the_forwarder_says_so() {
    needs!("RabbitMQ");
    let queue = unique_name("iso-shared");
    let src = temp_file(
        "amqp-source.toml",
        &format!(
            "type = \"amqp\"\nurl = \"{}\"\nqueue = \"{queue}\"\ndeclare = true\n",
            amqp_url()
        ),
    );
    let (a, b) = (Collector::start(), Collector::start());
    let b_file = b.sink_file_named("b");
    let f = Forwarder::spawn(
        &src,
        &a.sink_file_named("a"),
        None,
        &["--sink", b_file.to_str().unwrap()],
    );
    wait_until(Duration::from_secs(30), "the WARN", || {
        f.stderr().contains("cannot be read once per sink")
    });
    let err = f.stderr();
    assert_eq!(f.stop(Duration::from_secs(30)), Some(143), "{err}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (_c, ch) = amqp_channel().await;
        let _ = ch
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await;
    });
}

/// A sink file for `c` (named `stem`) that parks in `park` (a Kafka topic) after
/// `after_s`, and the park's sink and source files beside it.
fn parking_sink(c: &Collector, stem: &str, park: &Topic, after_s: u32) -> std::path::PathBuf {
    let brokers = super::from_kafka::brokers();
    let sink = temp_file(
        &format!("{stem}.toml"),
        &format!("type = \"http\"\nurl = \"{}\"\ntimeout_ms = 5000\n", c.url),
    );
    let dir = sink.parent().unwrap().to_owned();
    std::fs::write(
        dir.join("park.toml"),
        format!(
            "type = \"kafka\"\nbrokers = [\"{brokers}\"]\ntopic = \"{}\"\n",
            park.name
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("park-src.toml"),
        format!(
            "type = \"kafka\"\nbrokers = [\"{brokers}\"]\ntopic = \"{}\"\ngroup = \"{}-fwd\"\n\
             [properties]\n\"session.timeout.ms\" = \"6000\"\n",
            park.name, park.name
        ),
    )
    .unwrap();
    let text = std::fs::read_to_string(&sink).unwrap();
    std::fs::write(
        &sink,
        format!(
            "{text}[dispatch]\npark = \"park.toml\"\npark_from = \"park-src.toml\"\n\
             park_after_seconds = {after_s}\n"
        ),
    )
    .unwrap();
    sink
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_a_far_retry_is_parked_committed_and_delivered_after_a_restart() {
    needs!("Kafka");
    let (topic, park) = (Topic::create(1).await, Topic::create(1).await);
    let hooks: Vec<Vec<u8>> = envelopes(&unique_name("park"), 20)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    let ends = topic.produce(&hooks, 1).await;
    let far = Collector::start();
    far.set_down(true);
    // A Retry-After of 6 s against a threshold of 2 s: every hook parks.
    far.set_retry_after(6);
    let sink = parking_sink(&far, "far", &park, 2);
    let src = topic.source_file();
    tokio::task::block_in_place(|| {
        let f = Forwarder::spawn(&src, &sink, None, &[]);
        wait_until(Duration::from_secs(90), "20 parked", || {
            f.lines()
                .iter()
                .filter(|l| l["outcome"] == "parked")
                .count()
                == 20
        });
        let line = f
            .lines()
            .into_iter()
            .find(|l| l["outcome"] == "parked")
            .unwrap();
        assert_eq!(line["class"], "retry_after", "{line}");
        assert!(line["not_before_ms"].as_i64().unwrap() > 0, "{line}");
        // Parked is settled for the source: the main topic is committed to its end while
        // the destination still refuses every hook.
        wait_until(Duration::from_secs(20), "the source committed", || {
            topic.committed(1) == super::from_kafka::all_committed(&ends)
        });
        assert_eq!(far.distinct(), 0);
        // A crash before the not-before: the parked hooks live in the park topic alone.
        f.kill9();
        far.set_down(false);
        let f = Forwarder::spawn(&src, &sink, None, &[]);
        wait_until(
            Duration::from_secs(90),
            "every parked hook delivered",
            || far.distinct() == 20,
        );
        wait_until(Duration::from_secs(20), "the park topic committed", || {
            park.committed(1).values().all(|o| o.is_some_and(|o| o > 0))
        });
        let ok: Vec<_> = f
            .lines()
            .into_iter()
            .filter(|l| l["outcome"] == "ok")
            .collect();
        assert_eq!(ok.len(), 20);
        assert!(ok.iter().all(|l| l["attempts"] == 1), "{ok:?}");
        let err = f.stderr();
        assert_eq!(f.stop(Duration::from_secs(30)), Some(143), "{err}");
    });
    topic.delete().await;
    park.delete().await;
}

/// A NATS server of this test's own (JetStream on, its store in a temp dir), so that it
/// can be restarted without touching the shared one; killed on drop.
struct OwnNats {
    port: u16,
    store: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl OwnNats {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let store = temp_file("nats-store", "").with_file_name("store");
        let mut n = OwnNats {
            port,
            store,
            child: None,
        };
        n.up();
        n
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn up(&mut self) {
        let child = std::process::Command::new("nats-server")
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.store)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server runs (scripts/services/nats.sh installs it)");
        self.child = Some(child);
        wait_until(
            Duration::from_secs(20),
            "the own NATS server listens",
            || std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok(),
        );
    }

    /// SIGTERM (JetStream flushes its store), wait, start again on the same store.
    fn restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            super::hardening::signal(&c, "-TERM");
            let _ = c.wait();
        }
        self.up();
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn nats_a_parked_backlog_survives_a_restart_of_its_broker() {
    needs!("NATS");
    let mut own = OwnNats::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The hooks come from the shared server; the park stream lives on the own one.
    let (js, stream, subject) = rt.block_on(nats_stream("parkmain"));
    let park_subject = "ankusa.park.far";
    rt.block_on(async {
        let c = async_nats::connect(own.url()).await.unwrap();
        async_nats::jetstream::new(c)
            .create_stream(async_nats::jetstream::stream::Config {
                name: "PARK".into(),
                subjects: vec![park_subject.into()],
                ..Default::default()
            })
            .await
            .unwrap();
    });
    let src = temp_file(
        "nats-source.toml",
        &format!(
            "type = \"nats\"\nurl = \"{NATS_URL}\"\nstream = \"{stream}\"\nconsumer = \"fwd\"\n"
        ),
    );
    let far = Collector::start();
    far.set_down(true);
    far.set_retry_after(10);
    let sink = temp_file(
        "far.toml",
        &format!(
            "type = \"http\"\nurl = \"{}\"\ntimeout_ms = 5000\n[dispatch]\npark = \"park.toml\"\n\
             park_from = \"park-src.toml\"\npark_after_seconds = 2\n",
            far.url
        ),
    );
    let dir = sink.parent().unwrap();
    std::fs::write(
        dir.join("park.toml"),
        format!(
            "type = \"nats\"\nurl = \"{}\"\nsubject = \"{park_subject}\"\n",
            own.url()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("park-src.toml"),
        format!(
            "type = \"nats\"\nurl = \"{}\"\nstream = \"PARK\"\nconsumer = \"parked\"\n",
            own.url()
        ),
    )
    .unwrap();
    let hooks: Vec<Vec<u8>> = envelopes(&unique_name("npark"), 20)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    let f = Forwarder::spawn(&src, &sink, None, &[]);
    rt.block_on(async {
        for h in &hooks {
            js.publish(subject.clone(), h.clone().into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    });
    wait_until(Duration::from_secs(60), "20 parked", || {
        f.lines()
            .iter()
            .filter(|l| l["outcome"] == "parked")
            .count()
            == 20
    });
    // The parked backlog lives in the own server's stream: restart it under the forwarder.
    own.restart();
    far.set_down(false);
    wait_until(
        Duration::from_secs(90),
        "every parked hook delivered after the broker's restart",
        || far.distinct() == 20,
    );
    let err = f.stderr();
    assert_eq!(f.stop(Duration::from_secs(30)), Some(143), "{err}");
    let pending = rt.block_on(async {
        let s = js.get_stream(&stream).await.unwrap();
        s.consumer_info("fwd").await.unwrap().num_ack_pending
    });
    assert_eq!(
        pending, 0,
        "the main stream's records were acknowledged when parked"
    );
    let _ = rt.block_on(js.delete_stream(&stream));
}
