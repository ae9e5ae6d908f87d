//! Dead letters a fleet can share: `--dead-letter SINK.toml` sends each one as a message
//! whose body is its record; `dead-letters stats|list` read them back without taking any;
//! `forward --from DLQ --redrive` with filters takes exactly the matching ones back to the
//! sink they died at and leaves the rest.

use super::brokers::{AWS_ENV, moto, xml_field};
use super::from_kafka::Topic;
use super::from_source::{Collector, Forwarder, wait_until};
use super::{amqp_channel, amqp_queue, json_lines, run, run_with, temp_file, text};
use ankusa_sink_testkit::support::unique_name;
use lapin::options::{BasicGetOptions, BasicNackOptions};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// `n` hooks as `gen` lines, tenants `t1` and `t2` in turn; their ids by tenant.
fn hooks(n: usize) -> (Vec<Vec<u8>>, BTreeSet<String>, BTreeSet<String>) {
    let prefix = unique_name("dl");
    let (mut t1, mut t2) = (BTreeSet::new(), BTreeSet::new());
    let lines = (0..n)
        .map(|i| {
            let id = format!("{prefix}-{i}");
            let tenant = if i % 2 == 0 { "t1" } else { "t2" };
            if i % 2 == 0 { &mut t1 } else { &mut t2 }.insert(id.clone());
            let env = ankusa_sink_core::Envelope::builder(id, "src", format!("{{\"n\":{i}}}"))
                .tenant_id(tenant)
                .build()
                .unwrap();
            serde_json::to_vec(&env).unwrap()
        })
        .collect();
    (lines, t1, t2)
}

/// `dead-letters stats` of `args`, as JSON.
fn stats(args: &[&str]) -> Value {
    stats_with(args, &[])
}

/// [`stats`] with `env` for the child.
fn stats_with(args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut all = vec!["dead-letters", "stats", "--json"];
    all.extend_from_slice(args);
    let out = run_with(&all, env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The ids `dead-letters list` of `args` prints (each line checked to hold no body).
fn listed(args: &[&str]) -> Vec<String> {
    listed_with(args, &[])
}

/// [`listed`] with `env` for the child.
fn listed_with(args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let mut all = vec!["dead-letters", "list", "--json"];
    all.extend_from_slice(args);
    let out = run_with(&all, env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    json_lines(&out.stdout)
        .into_iter()
        .map(|l| {
            assert!(l.get("body").is_none() && l.get("headers").is_none(), "{l}");
            l["id"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// `forward` of `args` with `--json`, its output.
fn forward(args: &[&str]) -> Output {
    forward_with(args, &[])
}

/// [`forward`] with `env` for the child.
fn forward_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut all = vec!["forward", "--json"];
    all.extend_from_slice(args);
    run_with(&all, env)
}

/// A redrive (`forward` of `args`, `env` for the child) that ends well, delivers exactly
/// `want`, and leaves `left` records (when given) where they were.
fn redrive(args: &[&str], env: &[(&str, &str)], want: &BTreeSet<String>, left: Option<u64>) {
    let out = forward_with(args, env);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(&ids_with(&out, "ok"), want);
    if let Some(n) = left {
        assert!(err.contains(&format!("left {n} ")), "{err}");
    }
}

fn ids_with(out: &Output, outcome: &str) -> BTreeSet<String> {
    json_lines(&out.stdout)
        .into_iter()
        .filter(|l| l["outcome"] == outcome)
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A RabbitMQ queue as the dead-letter sink and as its source, in `dir`.
fn amqp_dlq(dir: &Path, queue: &str) -> (PathBuf, PathBuf) {
    let url = super::amqp_url();
    let sink = dir.join("dlq.toml");
    std::fs::write(
        &sink,
        format!("type = \"amqp\"\nurl = \"{url}\"\nexchange = \"\"\nrouting_key_template = \"{queue}\"\n"),
    )
    .unwrap();
    let source = dir.join("dlq-src.toml");
    std::fs::write(
        &source,
        format!("type = \"amqp\"\nurl = \"{url}\"\nqueue = \"{queue}\"\n"),
    )
    .unwrap();
    (sink, source)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_dead_letters_are_counted_listed_and_redriven_by_filter() {
    needs!("RabbitMQ");
    let (_conn, ch) = amqp_channel().await;
    let queue = amqp_queue(&ch).await;
    let c = Collector::start();
    c.set_down(true);
    let sink = c.sink_file_named("hooks");
    let dir = sink.parent().unwrap().to_owned();
    let (dlq, dlq_src) = amqp_dlq(&dir, &queue);
    let (lines, t1, t2) = hooks(40);
    let input = dir.join("hooks.jsonl");
    std::fs::write(&input, lines.join(&b'\n')).unwrap();
    let (sink_s, dlq_s, src_s) = (
        sink.to_str().unwrap(),
        dlq.to_str().unwrap(),
        dlq_src.to_str().unwrap(),
    );

    let out = forward(&[
        "--input",
        input.to_str().unwrap(),
        "--sink",
        sink_s,
        "--dead-letter",
        dlq_s,
        "--retry",
        "--max-attempts",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(
        ids_with(&out, "dead_lettered").len(),
        40,
        "{}",
        text(&out.stdout)
    );

    // A dead letter is a message whose headers say where and why it died.
    let msg = ch
        .basic_get(queue.as_str().into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("a dead letter in the queue");
    let headers = format!("{:?}", msg.delivery.properties.headers());
    for h in [
        "\"ankusa_record\"",
        "ankusa_record_sink",
        "ankusa_record_class",
        "ankusa_record_reason",
    ] {
        assert!(headers.contains(h), "{h} in {headers}");
    }
    msg.delivery
        .nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .unwrap();

    let s = stats(&["--from", src_s]);
    assert_eq!(s["dead_letters"], 40, "{s}");
    assert_eq!(s["by_sink"]["hooks"], 40);
    assert_eq!(
        (s["by_tenant"]["t1"].as_u64(), s["by_tenant"]["t2"].as_u64()),
        (Some(20), Some(20))
    );
    assert_eq!(s["by_class"]["transient"], 40);
    let only_t1: BTreeSet<String> = listed(&["--from", src_s, "--only-tenant", "t1"])
        .into_iter()
        .collect();
    assert_eq!(only_t1, t1);
    assert_eq!(
        stats(&["--from", src_s])["dead_letters"],
        40,
        "reading takes none"
    );

    // The destination is back: a redrive of t1 alone delivers exactly t1, leaves t2.
    c.set_down(false);
    redrive(
        &[
            "--from",
            src_s,
            "--redrive",
            "--dead-letter",
            dlq_s,
            "--only-tenant",
            "t1",
            "--sink",
            sink_s,
            "--rate",
            "500",
        ],
        &[],
        &t1,
        Some(20),
    );
    assert_eq!(c.distinct(), 20);
    assert!(t2.iter().all(|id| !c.has(id)));
    let s = stats(&["--from", src_s]);
    assert_eq!(
        (s["dead_letters"].as_u64(), s["by_tenant"]["t2"].as_u64()),
        (Some(20), Some(20)),
        "{s}"
    );

    // The rest, unfiltered: the queue is empty after.
    redrive(
        &[
            "--from",
            src_s,
            "--redrive",
            "--dead-letter",
            dlq_s,
            "--sink",
            sink_s,
        ],
        &[],
        &t2,
        None,
    );
    assert_eq!(stats(&["--from", src_s])["dead_letters"], 0);
}

#[test]
fn a_dead_letter_sink_that_refuses_is_a_dead_letter_error_and_exit_74() {
    needs!("RabbitMQ");
    let c = Collector::start();
    c.set_down(true);
    let sink = c.sink_file_named("hooks");
    let dir = sink.parent().unwrap().to_owned();
    // The default exchange to a queue nobody declared: unroutable, so refused every time.
    let (dlq, _) = amqp_dlq(&dir, &unique_name("no-such-queue"));
    let (lines, ids, _) = hooks(2);
    let input = dir.join("hooks.jsonl");
    std::fs::write(&input, lines[..1].concat()).unwrap();
    let t0 = std::time::Instant::now();
    let out = forward(&[
        "--input",
        input.to_str().unwrap(),
        "--sink",
        sink.to_str().unwrap(),
        "--dead-letter",
        dlq.to_str().unwrap(),
        "--retry",
        "--max-attempts",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(74), "{}", text(&out.stderr));
    let line = &json_lines(&out.stdout)[0];
    assert_eq!(line["outcome"], "failed", "never dead_lettered: {line}");
    assert!(ids.contains(line["id"].as_str().unwrap()));
    assert!(
        line["dead_letter_error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{line}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "no hang: {:?}",
        t0.elapsed()
    );
}

#[test]
fn inspecting_to_a_full_device_exits_74() {
    let dl = temp_file(
        "dead.jsonl",
        &ankusa_dispatch::record_line(
            &ankusa_sink_core::Envelope::builder("h1", "s", "b")
                .build()
                .unwrap(),
            &ankusa_dispatch::DeadLetterInfo::new(
                "hooks",
                &ankusa_sink_core::Failure::permanent(ankusa_sink_core::Reason("gone".into())),
                1,
                1,
                1,
            ),
        )
        .unwrap(),
    );
    for cmd in ["stats", "list"] {
        let out = super::bin()
            .args(["dead-letters", cmd, "--input", dl.to_str().unwrap()])
            .stdin(std::process::Stdio::null())
            .stdout(super::operator_faults::dev_full())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(74), "{cmd}: {}", text(&out.stderr));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_three_forwarders_share_one_dead_letter_topic_through_a_kill() {
    needs!("Kafka");
    let (src, dlq) = (Topic::create(3).await, Topic::create(1).await);
    let c = Collector::start();
    c.set_down(true);
    let sink = c.sink_file_named("hooks");
    let dlq_sink = temp_file(
        "dlq.toml",
        &format!(
            "type = \"kafka\"\nbrokers = [\"{}\"]\ntopic = \"{}\"\n",
            super::from_kafka::brokers(),
            dlq.name
        ),
    );
    let dlq_src = dlq.source_file();
    let n = 300;
    let (lines, t1, t2) = hooks(n);
    let args = ["--max-attempts", "1", "--max-unacked", "16"];
    let src_file = src.source_file();
    let mut fleet: Vec<Forwarder> = (0..3)
        .map(|_| Forwarder::spawn(&src_file, &sink, Some(&dlq_sink), &args))
        .collect();
    src.produce(&lines, 3).await;
    let dead = |f: &Forwarder| -> Vec<String> {
        f.lines()
            .into_iter()
            .filter(|l| l["outcome"] == "dead_lettered")
            .map(|l| l["id"].as_str().unwrap().to_owned())
            .collect()
    };
    wait_until(Duration::from_secs(120), "a third dead-lettered", || {
        fleet.iter().map(|f| dead(f).len()).sum::<usize>() >= n / 3
    });
    let killed = fleet.remove(0);
    let killed_lines = dead(&killed);
    killed.kill9();
    let all_ids = |fleet: &[Forwarder]| -> BTreeSet<String> {
        fleet
            .iter()
            .flat_map(dead)
            .chain(killed_lines.iter().cloned())
            .collect()
    };
    wait_until(Duration::from_secs(150), "every hook dead-lettered", || {
        all_ids(&fleet).len() == n
    });
    let lines_total = killed_lines.len() + fleet.iter().map(|f| dead(f).len()).sum::<usize>();
    for f in fleet {
        let err = f.stderr();
        assert_eq!(f.stop(Duration::from_secs(30)), Some(143), "{err}");
    }

    let dlq_s = dlq_src.to_str().unwrap();
    let s = stats(&["--from", dlq_s]);
    let stored = s["dead_letters"].as_u64().unwrap() as usize;
    // A dead letter the killed forwarder stored before it could write its line is in the
    // topic and in no line: at most its window of them.
    assert!(
        (lines_total..=lines_total + 16).contains(&stored),
        "stored {stored}, outcome lines {lines_total}: {s}"
    );
    assert_eq!(s["by_sink"]["hooks"].as_u64(), Some(stored as u64));
    let ids: BTreeSet<String> = listed(&["--from", dlq_s]).into_iter().collect();
    assert_eq!(ids.len(), n, "every hook's dead letter is in the topic");

    // Redrive t1, then t2: each delivers exactly its own, the other left in the topic.
    c.set_down(false);
    let (sink_s, dlq_sink_s) = (sink.to_str().unwrap(), dlq_sink.to_str().unwrap());
    for (tenant, want) in [("t1", &t1), ("t2", &t2)] {
        let before = c.distinct();
        redrive(
            &[
                "--from",
                dlq_s,
                "--redrive",
                "--dead-letter",
                dlq_sink_s,
                "--only-tenant",
                tenant,
                "--sink",
                sink_s,
            ],
            &[],
            want,
            None,
        );
        assert_eq!(c.distinct(), before + want.len(), "only {tenant}'s hooks");
    }
    assert_eq!(c.distinct(), n);
}

#[test]
fn sqs_three_forwarders_share_one_dead_letter_queue() {
    needs!("moto");
    let q = unique_name("dlq");
    let queue_url = xml_field(
        &moto(
            "sqs",
            &format!("Action=CreateQueue&QueueName={q}&Version=2012-11-05"),
        ),
        "QueueUrl",
    );
    // One file is both: the dead-letter sink, and the source that reads it back.
    let dlq = temp_file(
        "dlq.toml",
        &format!(
            "type = \"sqs\"\nqueue_url = \"{queue_url}\"\nregion = \"us-east-1\"\n\
             endpoint = \"http://127.0.0.1:4566\"\n"
        ),
    );
    let c = Collector::start();
    c.set_down(true);
    let sink = c.sink_file_named("hooks");
    let (lines, t1, t2) = hooks(30);
    let (sink_s, dlq_s) = (sink.to_str().unwrap(), dlq.to_str().unwrap());
    let inputs: Vec<PathBuf> = lines
        .chunks(10)
        .map(|chunk| temp_file("part.jsonl", &text(&chunk.join(&b'\n'))))
        .collect();
    let runs: Vec<std::thread::JoinHandle<Output>> = inputs
        .into_iter()
        .map(|input| {
            let (sink_s, dlq_s) = (sink_s.to_owned(), dlq_s.to_owned());
            std::thread::spawn(move || {
                let input = input.to_str().unwrap().to_owned();
                forward_with(
                    &[
                        "--input",
                        &input,
                        "--sink",
                        &sink_s,
                        "--dead-letter",
                        &dlq_s,
                        "--retry",
                        "--max-attempts",
                        "1",
                    ],
                    &AWS_ENV,
                )
            })
        })
        .collect();
    let mut dead = BTreeSet::new();
    for r in runs {
        let out = r.join().unwrap();
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
        dead.extend(ids_with(&out, "dead_lettered"));
    }
    assert_eq!(dead.len(), 30);
    let s = stats_with(&["--from", dlq_s], &AWS_ENV);
    assert_eq!(s["dead_letters"], 30, "{s}");
    assert_eq!(s["by_tenant"]["t2"], 15);
    let listed: BTreeSet<String> = listed_with(&["--from", dlq_s, "--only-tenant", "t2"], &AWS_ENV)
        .into_iter()
        .collect();
    assert_eq!(listed, t2);

    c.set_down(false);
    redrive(
        &[
            "--from",
            dlq_s,
            "--redrive",
            "--dead-letter",
            dlq_s,
            "--only-tenant",
            "t1",
            "--sink",
            sink_s,
        ],
        &AWS_ENV,
        &t1,
        Some(15),
    );
    assert!(t2.iter().all(|id| !c.has(id)));
    let s = stats_with(&["--from", dlq_s], &AWS_ENV);
    assert_eq!(
        (s["dead_letters"].as_u64(), s["by_tenant"]["t2"].as_u64()),
        (Some(15), Some(15)),
        "{s}"
    );
}

#[test]
fn a_file_of_dead_letters_is_inspected_and_redriven_by_filter_at_a_pace() {
    let c = Collector::start();
    c.set_down(true);
    let sink = c.sink_file_named("hooks");
    let dir = sink.parent().unwrap().to_owned();
    let (lines, t1, _) = hooks(10);
    let input = dir.join("hooks.jsonl");
    std::fs::write(&input, lines.join(&b'\n')).unwrap();
    let dl = dir.join("dead.jsonl");
    let (sink_s, dl_s) = (sink.to_str().unwrap(), dl.to_str().unwrap());
    let out = forward(&[
        "--input",
        input.to_str().unwrap(),
        "--sink",
        sink_s,
        "--dead-letter",
        dl_s,
        "--retry",
        "--max-attempts",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let s = stats(&["--input", dl_s]);
    assert_eq!(s["dead_letters"], 10, "{s}");
    let table = run(&["dead-letters", "stats", "--input", dl_s]);
    let table = text(&table.stdout);
    assert!(
        table.starts_with("dead letters: 10\nby sink:\n  hooks"),
        "{table}"
    );
    assert_eq!(listed(&["--input", dl_s, "--only-tenant", "t1"]).len(), 5);
    assert_eq!(
        listed(&["--input", dl_s, "--until", "2000-01-01T00:00:00Z"]).len(),
        0
    );
    assert_eq!(
        listed(&[
            "--input",
            dl_s,
            "--since",
            "2000-01-01T00:00:00Z",
            "--only-class",
            "transient"
        ])
        .len(),
        10
    );

    c.set_down(false);
    let t0 = std::time::Instant::now();
    redrive(
        &[
            "--input",
            dl_s,
            "--only-tenant",
            "t1",
            "--sink",
            sink_s,
            "--rate",
            "10",
        ],
        &[],
        &t1,
        Some(5),
    );
    // Five at ten a second: the last goes 0.4 s after the first.
    assert!(
        t0.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(c.distinct(), 5);
}

/// Exit 2, and stderr says `says`.
fn usage_error(args: &[&str], says: &str) {
    let out = run(args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
}

#[test]
fn a_dead_letter_sink_file_must_parse_and_keep_what_it_takes() {
    let hook = temp_file(
        "hook.jsonl",
        "{\"id\":\"h\",\"source_id\":\"s\",\"body\":\"\"}\n",
    );
    let hook_s = hook.to_str().unwrap();
    let garbage = temp_file("dlq.toml", "type = \"kafka\"\nnot toml at all [\n");
    let before = std::fs::read(&garbage).unwrap();
    let forward_to = |dl: &Path| -> Vec<String> {
        [
            "forward",
            "--input",
            hook_s,
            "--sink",
            "log",
            "--dead-letter",
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .chain([dl.to_str().unwrap().to_owned()])
        .collect()
    };
    let args = forward_to(&garbage);
    usage_error(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        "--dead-letter",
    );
    assert_eq!(
        std::fs::read(&garbage).unwrap(),
        before,
        "never appended to"
    );
    let log = temp_file("dl-log.toml", "type = \"log\"\n");
    let args = forward_to(&log);
    usage_error(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        "must keep what it takes",
    );

    let src = temp_file(
        "src.toml",
        "type = \"kafka\"\nbrokers = [\"127.0.0.1:9\"]\ntopic = \"t\"\ngroup = \"g\"\n",
    );
    let src = src.to_str().unwrap();
    let list = ["dead-letters", "list", "--input", hook_s];
    for (args, says) in [
        (
            vec![
                "forward",
                "--from",
                src,
                "--sink",
                "log",
                "--only-sink",
                "a",
            ],
            "add --redrive",
        ),
        (
            vec!["forward", "--from", src, "--sink", "log", "--redrive"],
            "--dead-letter",
        ),
        (
            [&list[..], &["--only-class", "bogus"]].concat(),
            "--only-class",
        ),
        ([&list[..], &["--since", "yesterday"]].concat(), "--since"),
        (vec!["dead-letters", "stats"], "--from"),
    ] {
        usage_error(&args, says);
    }
    for bad in ["0", "-1", "inf", "x"] {
        // `--rate=-1`: as `--rate -1`, clap would read `-1` as a flag of its own.
        let rate = format!("--rate={bad}");
        usage_error(
            &["forward", "--input", hook_s, "--sink", "log", &rate],
            "--rate",
        );
    }
    for ok in ["2026-12-07T10:00:00+01:00", "2026-12-07T09:00:00Z"] {
        let out = run(&[&list[..], &["--since", ok]].concat());
        assert_eq!(
            out.status.code(),
            Some(0),
            "--since {ok}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn the_dead_letter_examples_are_sinks_that_keep_what_they_take() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/deadletters");
    for f in ["kafka.toml", "amqp.toml", "sqs.toml"] {
        let path = dir.join(f);
        let out = run_with(
            &["info", "--json", "--sink", path.to_str().unwrap()],
            &[
                ("ANKUSA_KAFKA_BROKERS", "127.0.0.1:9092"),
                ("ANKUSA_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
                (
                    "ANKUSA_SQS_DLQ_URL",
                    "https://sqs.eu-west-1.amazonaws.com/123456789012/dlq",
                ),
                ("AWS_REGION", "eu-west-1"),
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{f}: {}", text(&out.stderr));
        let info: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(info["capabilities"]["durable"], true, "{f}");
    }
}
