//! `forward --from` a Kafka topic to a Kafka topic, against the loop a user would write on
//! rdkafka instead (consume, produce acks=all with idempotence, commit after each
//! delivery report), same broker, same run; then the scaling curve with 1, 2 and 3
//! forwarders in one consumer group.
//!
//! Both sides are timed the same way: a counting consumer that has already joined its group
//! reads every record of the output topic, and the clock runs from the first record it sees
//! to the last (group joins on the local broker take seconds and are left out). The raw
//! loop and one forwarder run `FROM_KAFKA_REPS` (default 3) times each, interleaved, each
//! into a fresh topic deleted after it; the medians are compared. `FROM_KAFKA_HOOKS`
//! (default 50,000) records of 1 KiB, three partitions. Environment:
//! `ANKUSA_KAFKA_BROKERS` (default 127.0.0.1:9092).

use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod kafka;

use kafka::{PARTITIONS, brokers, create, delete, producer};

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// A consumer of `topic` that has joined its group (it holds an assignment) before the
/// pipeline under test starts.
async fn counter(topic: &str) -> Counter {
    let c: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique("count"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    // Polling is what joins the group, and a poll that completes the join may already
    // return a record: it is counted, not dropped (a record lost here failed the count).
    let mut seen = 0;
    while c.assignment().map(|a| a.count()).unwrap_or(0) == 0 {
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(200), c.recv()).await {
            seen += 1;
        }
    }
    Counter { c, seen }
}

/// A consumer in its own group, with the records it read while joining.
struct Counter {
    c: StreamConsumer,
    seen: usize,
}

/// Read `n` records; the rate from the first record seen to the last. Joining a consumer
/// group takes the local broker seconds, which is not the pipeline's speed: the clock
/// starts when the first record arrives. The counter is dropped on return, so it no longer
/// fetches `topic` when that is deleted ([`delete`]).
async fn count(counter: Counter, topic: &str, n: usize) -> f64 {
    let mut seen = counter.seen;
    let mut first = None;
    while seen < n {
        match tokio::time::timeout(Duration::from_secs(120), counter.c.recv()).await {
            Ok(Ok(_)) => {
                seen += 1;
                first.get_or_insert_with(Instant::now);
            }
            Ok(Err(e)) => eprintln!("count: {e}"),
            Err(_) => panic!("only {seen} of {n} records arrived on {topic}"),
        }
    }
    let took = first.map_or(Duration::ZERO, |t| t.elapsed());
    (n - 1) as f64 / took.as_secs_f64().max(1e-3)
}

/// The loop a user writes: consume, produce, commit each record's offset + 1 once its
/// delivery report is in (at most 4,096 records outstanding).
async fn raw_loop(input: &str, output: &str, stop: tokio::sync::watch::Receiver<bool>) {
    let c: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique("raw"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    c.subscribe(&[input]).unwrap();
    let c = std::sync::Arc::new(c);
    let p = producer();
    let window = std::sync::Arc::new(tokio::sync::Semaphore::new(4096));
    loop {
        if *stop.borrow() {
            return;
        }
        let permit = window.clone().acquire_owned().await.unwrap();
        let m = match tokio::time::timeout(Duration::from_millis(200), c.recv()).await {
            Ok(Ok(m)) => m,
            _ => continue,
        };
        let payload = m.payload().unwrap_or_default().to_vec();
        let (partition, offset) = (m.partition(), m.offset());
        let (p, c, output, input) = (p.clone(), c.clone(), output.to_owned(), input.to_owned());
        tokio::spawn(async move {
            let _ = p
                .send(
                    FutureRecord::<(), _>::to(&output).payload(&payload),
                    Duration::from_secs(30),
                )
                .await;
            let mut tpl = TopicPartitionList::new();
            let _ = tpl.add_partition_offset(&input, partition, Offset::Offset(offset + 1));
            let _ = c.commit(&tpl, CommitMode::Async);
            drop(permit);
        });
    }
}

fn forwarder(source: &std::path::Path, sink: &std::path::Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_ankusa-sink"))
        .args(["forward", "--from"])
        .arg(source)
        .arg("--sink")
        .arg(sink)
        .args(["--concurrency", "4096", "--max-unacked", "8192"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n: usize = std::env::var("FROM_KAFKA_HOOKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let admin = kafka::admin();
    let input = unique("bench-from-in");
    create(&admin, &input).await;
    kafka::fill(&input, &kafka::hooks("h", n)).await;
    println!("from_kafka: {n} hooks of 1 KiB, {PARTITIONS} partitions, acks=all + idempotence");

    // What reading alone costs here: a consumer that only counts the input topic.
    let c = counter(&input).await;
    println!(
        "consume only (the counter's ceiling): {:.0} hooks/s",
        count(c, &input, n).await
    );

    // The raw loop and one forwarder, interleaved (the broker's state and the machine's
    // load drift over a run: one of each in turn, then the medians).
    let reps: usize = std::env::var("FROM_KAFKA_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let dir = std::env::temp_dir().join(unique("bench-from"));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut raws, mut ones) = (Vec::new(), Vec::new());
    for rep in 1..=reps {
        let raw = run_raw(&admin, &input, n).await;
        println!("raw rdkafka consume-produce loop (rep {rep}/{reps}): {raw:.0} hooks/s");
        raws.push(raw);
        let one = run_forward(&admin, &input, n, 1, &dir).await;
        println!("forward --from, 1 forwarder (rep {rep}/{reps}): {one:.0} hooks/s");
        ones.push(one);
    }
    let raw_rate = median(&mut raws);
    println!("raw rdkafka consume-produce loop: {raw_rate:.0} hooks/s (median)");
    let one = median(&mut ones);
    println!(
        "forward --from, 1 forwarder(s): {one:.0} hooks/s (median, {:.2} of raw)",
        one / raw_rate
    );
    for forwarders in 2..=3 {
        let rate = run_forward(&admin, &input, n, forwarders, &dir).await;
        println!(
            "forward --from, {forwarders} forwarder(s): {rate:.0} hooks/s ({:.2} of raw)",
            rate / raw_rate
        );
    }
    delete(&admin, &input).await;
    let _ = std::fs::remove_dir_all(&dir);
    // Every figure is printed; leave without running librdkafka's teardown.
    std::process::exit(0);
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The raw loop from `input` to a fresh topic, deleted after: hooks/s.
async fn run_raw(admin: &AdminClient<DefaultClientContext>, input: &str, n: usize) -> f64 {
    let out = unique("bench-from-raw");
    create(admin, &out).await;
    let c = counter(&out).await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let raw = tokio::spawn({
        let (i, o) = (input.to_owned(), out.clone());
        async move { raw_loop(&i, &o, stop_rx).await }
    });
    let rate = count(c, &out, n).await;
    let _ = stop_tx.send(true);
    let _ = raw.await;
    delete(admin, &out).await;
    rate
}

/// `forwarders` processes of `forward --from` in one new group, from `input` to a fresh
/// topic, deleted after: hooks/s.
async fn run_forward(
    admin: &AdminClient<DefaultClientContext>,
    input: &str,
    n: usize,
    forwarders: usize,
    dir: &std::path::Path,
) -> f64 {
    let out = unique("bench-from-fwd");
    create(admin, &out).await;
    let source = dir.join(unique("source"));
    std::fs::write(
        &source,
        format!(
            "type = \"kafka\"\nbrokers = [\"{}\"]\ntopic = \"{input}\"\ngroup = \"{}\"\n",
            brokers(),
            unique("fwd")
        ),
    )
    .unwrap();
    let sink = dir.join(unique("kafka"));
    std::fs::write(
        &sink,
        format!(
            "type = \"kafka\"\nbrokers = [\"{}\"]\ntopic = \"{out}\"\n",
            brokers()
        ),
    )
    .unwrap();
    let c = counter(&out).await;
    let mut kids: Vec<_> = (0..forwarders).map(|_| forwarder(&source, &sink)).collect();
    let rate = count(c, &out, n).await;
    for k in &mut kids {
        let _ = Command::new("kill")
            .args(["-TERM", &k.id().to_string()])
            .status();
    }
    for k in &mut kids {
        let _ = k.wait();
    }
    delete(admin, &out).await;
    rate
}
