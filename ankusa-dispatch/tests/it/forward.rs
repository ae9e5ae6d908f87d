//! `ankusa_dispatch::forward` through its public API over an in-memory source: each record
//! acknowledged after its final outcome, undecodable ones dead-lettered raw, a stop
//! releasing what is not finished.

use crate::*;
use ankusa_dispatch::forward::{Forward, ForwardEvent};
use ankusa_dispatch::{DeadLetter, Dispatcher};
use ankusa_source::{MemorySource, Settlement};
use std::time::Duration;

fn record(id: &str) -> Vec<u8> {
    serde_json::to_vec(&env(id)).unwrap()
}

fn settled(s: &ankusa_source::Settlements) -> Vec<(String, Settlement)> {
    let mut v = s.lock().unwrap().clone();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[tokio::test]
async fn every_record_is_delivered_or_dead_lettered_then_acknowledged() {
    let dir = scratch("forward");
    let path = dir.join("dead.jsonl");
    let source = MemorySource::new([
        record("h1"),
        b"{\"id\": 7".to_vec(),
        record("h2"),
        vec![b'x'; 4096],
    ]);
    let settlements = source.settlements();
    let ok = Script::new(Step::Ok).arc();
    let (d, deliveries) = Dispatcher::builder()
        .sink("a", ok.clone())
        .sink("b", Script::new(Step::Ok).arc())
        .build()
        .unwrap();
    let report = Forward::new(Box::new(source), d)
        .dead_letter(DeadLetter::jsonl(&path).unwrap())
        .max_record_bytes(1024, "the test limit")
        .run(deliveries, Duration::from_secs(5))
        .await;
    assert_eq!(
        (report.submitted, report.delivered, report.invalid),
        (2, 4, 2)
    );
    assert!(report.error.is_none() && report.unfinished.is_empty());
    assert_eq!(ok.calls(), 2);
    let all_acked: Vec<_> = (0..4)
        .map(|i| (format!("memory#{i}"), Settlement::Ack))
        .collect();
    assert_eq!(settled(&settlements), all_acked);
    // Both invalid records are filed raw with their reason, never a value from them.
    let lines = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["position"], "memory#1");
    let reason = lines[0]["dead_letter"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("not JSON"), "{reason}");
    assert_eq!(
        lines[1]["dead_letter"]["reason"],
        "longer than the test limit (1024 bytes)"
    );
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(lines[1]["raw_base64"].as_str().unwrap())
        .unwrap();
    // Over the limit, the record is kept only up to it, and says so.
    assert_eq!(raw, vec![b'x'; 1024]);
    assert_eq!(lines[1]["raw_truncated"], true);
    assert_eq!(lines[1]["raw_bytes"], 4096);
    assert!(lines[0].get("raw_truncated").is_none() && lines[0].get("raw_bytes").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_stop_releases_what_is_not_finished() {
    let source = MemorySource::new([record("h1")]);
    let settlements = source.settlements();
    // Fails, then waits a minute for its retry: the stop finds it waiting.
    let (d, deliveries) = Dispatcher::builder()
        .sink("flaky", Script::new(Step::Transient).arc())
        .config(retrying(Duration::from_secs(60)))
        .build()
        .unwrap();
    let forward = Forward::new(Box::new(source), d);
    let stop = forward.stopper();
    let run = tokio::spawn(forward.run(deliveries, Duration::from_secs(1)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!run.is_finished(), "waits for the retry");
    stop.stop();
    let report = run.await.unwrap();
    assert_eq!((report.submitted, report.delivered), (1, 0));
    assert_eq!(report.unfinished.len(), 1);
    assert_eq!(&*report.unfinished[0].sink, "flaky");
    assert_eq!(
        settled(&settlements),
        [("memory#0".to_owned(), Settlement::Release)]
    );
}

#[tokio::test]
async fn read_reports_each_record_and_hands_the_source_back() {
    let source = MemorySource::new([record("h1"), b"[1,2]".to_vec()]);
    let (d, mut deliveries) = Dispatcher::builder()
        .sink("a", Script::new(Step::Ok).arc())
        .sink("b", Script::new(Step::Ok).arc())
        .build()
        .unwrap();
    let mut events = Vec::new();
    let source = Forward::new(Box::new(source), d.clone())
        .read(|e| events.push(e))
        .await;
    assert!(source.describe().contains("memory source"));
    assert!(
        matches!(&events[0], ForwardEvent::Submitted { position, pairs: 2 } if position == "memory#0"),
        "{events:?}"
    );
    let ForwardEvent::Invalid { position, reason } = &events[1] else {
        panic!("{events:?}")
    };
    assert_eq!(position, "memory#1");
    assert!(
        reason.starts_with("neither an envelope nor a Message v1"),
        "{reason}"
    );
    assert_eq!(
        recv_n(&mut deliveries, 2, Duration::from_secs(5))
            .await
            .len(),
        2
    );
    drop(d);
    source.close(Duration::from_secs(1)).await;
}

/// Sources "good" and "bad" of the same 2,000 records, each with a window of 64; "bad"
/// fails every attempt (transient: retried, its breaker opens).
fn good_and_bad(
    n: usize,
) -> (
    MemorySource,
    MemorySource,
    Dispatcher,
    ankusa_dispatch::Deliveries,
) {
    let records: Vec<_> = (0..n).map(|i| record(&format!("h{i}"))).collect();
    let good = MemorySource::new(records.clone()).with_max_unacked(64);
    let bad = MemorySource::new(records).with_max_unacked(64);
    let (d, deliveries) = Dispatcher::builder()
        .sink("good", Script::new(Step::Ok).arc())
        .sink("bad", Script::new(Step::Transient).arc())
        .config(config(policy(
            Duration::from_secs(1),
            u32::MAX,
            Duration::from_secs(3600),
        )))
        .build()
        .unwrap();
    (good, bad, d, deliveries)
}

async fn wait_acked(s: &ankusa_source::Settlements, n: usize, limit: Duration) -> usize {
    let t0 = tokio::time::Instant::now();
    loop {
        let acked = s
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, how)| *how == Settlement::Ack)
            .count();
        if acked >= n || t0.elapsed() >= limit {
            return acked;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_source_per_sink_a_failing_sink_holds_back_only_its_own_records() {
    let (good, bad, d, deliveries) = good_and_bad(2_000);
    let (gs, bs) = (good.settlements(), bad.settlements());
    let fwd = Forward::per_sink(
        vec![
            (
                "good".to_owned(),
                Box::new(good) as Box<dyn ankusa_source::Source>,
            ),
            ("bad".to_owned(), Box::new(bad)),
        ],
        d,
    );
    let stop = fwd.stopper();
    let run = tokio::spawn(fwd.run(deliveries, Duration::from_secs(1)));
    // Every record of good's source is delivered and acknowledged while bad fails them all.
    assert_eq!(
        wait_acked(&gs, 2_000, Duration::from_secs(600)).await,
        2_000
    );
    assert_eq!(
        wait_acked(&bs, 1, Duration::ZERO).await,
        0,
        "bad acknowledged nothing"
    );
    stop.stop();
    let report = run.await.unwrap();
    assert_eq!(report.delivered, 2_000);
    // Bad's window held what it read; the stop released every one of them to its source.
    let unfinished = report.unfinished.len();
    assert!((1..=64).contains(&unfinished), "{unfinished}");
    assert!(report.unfinished.iter().all(|u| &*u.sink == "bad"));
    let released = bs
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, h)| *h == Settlement::Release)
        .count();
    assert_eq!(released, unfinished);
}

#[tokio::test(start_paused = true)]
async fn one_shared_source_a_failing_sink_holds_back_every_sink() {
    // What a source that cannot be split costs (an AMQP queue alone): good gets no more than
    // the window while bad fails. The contrast to the test above, so that it can fail.
    let (good, _bad, d, deliveries) = good_and_bad(2_000);
    let gs = good.settlements();
    let fwd = Forward::new(Box::new(good), d);
    let stop = fwd.stopper();
    let run = tokio::spawn(fwd.run(deliveries, Duration::from_secs(1)));
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(
        wait_acked(&gs, 1, Duration::ZERO).await,
        0,
        "no record is acked"
    );
    stop.stop();
    let report = run.await.unwrap();
    assert_eq!(report.submitted, 64, "reading stopped at the window");
    assert_eq!(report.delivered, 64, "good got the window's hooks, no more");
}
