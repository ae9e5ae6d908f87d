//! The dispatcher through the binary against RabbitMQ: the claim check once per hook, and a
//! SIGTERM mid-run that loses no hook.

use super::{amqp_channel, amqp_queue, amqp_url, bin, json_lines, spawn_piped, temp_file, text};
use ankusa_message::{MessageBody, decode};
use ankusa_sink_testkit::support::unique_name;
use lapin::Channel;
use lapin::options::{BasicGetOptions, QueueDeleteOptions};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A queue, and a sink file named `name.toml` publishing to it through the default exchange.
async fn queue_sink(ch: &Channel, name: &str) -> (String, PathBuf) {
    let queue = amqp_queue(ch).await;
    let file = temp_file(
        &format!("{name}.toml"),
        &format!(
            "type = \"amqp\"\nurl = \"{}\"\nexchange = \"\"\nrouting_key = \"{queue}\"\n",
            amqp_url()
        ),
    );
    (queue, file)
}

/// Every message in `queue`, decoded.
async fn drain(ch: &Channel, queue: &str) -> Vec<ankusa_message::Message> {
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        out.push(decode(&m.delivery.data).expect("Message v1"));
    }
    out
}

async fn delete(ch: &Channel, queue: &str) {
    let _ = ch
        .queue_delete(queue.into(), QueueDeleteOptions::default())
        .await;
}

fn files_under(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() { files_under(&p) } else { 1 }
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_hook_travels_as_a_claim_checked_in_once_for_two_sinks() {
    needs!("RabbitMQ");
    let (_conn, ch) = amqp_channel().await;
    let (qa, a) = queue_sink(&ch, &unique_name("cli-a")).await;
    let (qb, b) = queue_sink(&ch, &unique_name("cli-b")).await;
    // 200 KB, over the AMQP sink's 64 KiB inline threshold.
    let body: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let body_file = temp_file("body.bin", "");
    std::fs::write(&body_file, &body).unwrap();
    let store = temp_file("x", "").parent().unwrap().join("claims");
    let store_url = format!("file://{}", store.display());
    let out = bin()
        .args(["deliver", "--json", "--id", "h-big", "--tenant", "acme"])
        .args(["--sink", a.to_str().unwrap(), "--sink", b.to_str().unwrap()])
        .args(["--claim-store", &store_url])
        .args(["--body", body_file.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 2, "one line per sink");
    assert!(lines.iter().all(|l| l["outcome"] == "ok"), "{lines:?}");
    assert_eq!(
        files_under(&store),
        1,
        "checked in exactly once for both sinks"
    );

    let claims = ankusa_claimcheck::ClaimStore::local(&store, Default::default()).unwrap();
    let mut urns = HashSet::new();
    for q in [&qa, &qb] {
        let msgs = drain(&ch, q).await;
        assert_eq!(msgs.len(), 1, "{q}");
        let m = &msgs[0];
        let MessageBody::Claim(reference) = &m.body else {
            panic!("the body travels by reference")
        };
        urns.insert(reference.to_string());
        let redeemed = claims.redeem_message(m).await.unwrap();
        assert_eq!(
            &redeemed[..],
            &body[..],
            "the claim redeems to the exact body"
        );
    }
    assert_eq!(urns.len(), 1, "the same claim went to both sinks");
    delete(&ch, &qa).await;
    delete(&ch, &qb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_run_gives_one_line_per_hook_read_and_loses_none() {
    needs!("RabbitMQ");
    let (_conn, ch) = amqp_channel().await;
    let name = unique_name("cli-s");
    let (queue, sink) = queue_sink(&ch, &name).await;
    let hooks = text(
        &bin()
            .args(["gen", "--count", "4000", "--size", "200"])
            .output()
            .unwrap()
            .stdout,
    );
    let mut child = spawn_piped(
        &[
            "forward",
            "--json",
            "--concurrency",
            "16",
            "--retry",
            "--sink",
            sink.to_str().unwrap(),
        ],
        Stdio::piped(),
    );
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map(Result::unwrap)
            .collect::<Vec<String>>()
    });
    let all: Vec<&str> = hooks.lines().collect();
    // The first half, then the rest while a SIGTERM lands mid-run.
    stdin.write_all(all[..2000].join("\n").as_bytes()).unwrap();
    stdin.write_all(b"\n").unwrap();
    stdin.flush().unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(all_rest(&hooks).as_bytes());
        // stdin stays open until the child is gone.
        std::thread::sleep(Duration::from_secs(5));
        drop(stdin);
    });
    std::thread::sleep(Duration::from_millis(30));
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let status = child.wait().unwrap();
    let lines = lines.join().unwrap();
    let _ = writer.join();
    assert_eq!(status.code(), Some(143));
    let mut seen = HashSet::new();
    let (mut ok_ids, mut abandoned) = (HashSet::new(), HashSet::new());
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let id = v["id"].as_str().unwrap().to_owned();
        assert_eq!(v["sink"], name.as_str());
        assert!(seen.insert(id.clone()), "one line per hook: {id} twice");
        match v["outcome"].as_str().unwrap() {
            "ok" => ok_ids.insert(id),
            "abandoned" => abandoned.insert(id),
            other => panic!("{other}: {l}"),
        };
    }
    assert!(
        ok_ids.len() >= 2000,
        "the first half was delivered: {}",
        ok_ids.len()
    );
    let queued: HashSet<String> = drain(&ch, &queue).await.into_iter().map(|m| m.id).collect();
    // Every hook reported ok is in the broker; nothing is in the broker that got no line.
    assert!(ok_ids.is_subset(&queued), "a hook reported ok is missing");
    for id in &queued {
        assert!(
            ok_ids.contains(id) || abandoned.contains(id),
            "{id} reached the broker without an outcome line"
        );
    }
    let stderr = text(&child.stderr.take().map_or_else(Vec::new, |mut e| {
        let mut b = Vec::new();
        let _ = std::io::Read::read_to_end(&mut e, &mut b);
        b
    }));
    assert!(
        stderr.contains("delivered"),
        "the summary is printed: {stderr}"
    );
    delete(&ch, &queue).await;
}

fn all_rest(hooks: &str) -> String {
    let mut s = hooks.lines().skip(2000).collect::<Vec<_>>().join("\n");
    s.push('\n');
    s
}
