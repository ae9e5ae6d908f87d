//! A sink's own pipeline window: deliveries and bytes in flight, outside the shared limit;
//! the intake's byte bound. (Deliveries hold their intake permits until dropped, so tests
//! that submit everything before reading set an intake large enough for all of it.)

use crate::*;
use ankusa_dispatch::{Dispatcher, Hook, Outcome};
use std::sync::Arc;
use std::time::Duration;

/// `n` hooks of `size` body bytes for sink `sink`.
async fn submit_n(d: &Dispatcher, sink: &str, n: usize, size: usize) {
    for i in 0..n {
        d.submit(Hook::new(env_sized(&format!("{sink}{i}"), size)).only_sink(sink))
            .await
            .unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_windowed_sink_fills_its_window_outside_the_shared_limit() {
    let piped = Script::new(Step::after(Duration::from_secs(1), Step::Ok))
        .window(8, 1 << 20)
        .arc();
    let (d, mut out, plain) = one_slot_beside_plain("piped", &piped);
    submit_n(&d, "piped", 20, 100).await;
    submit_n(&d, "plain", 3, 100).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(piped.active(), 8, "the window, not the shared limit of 1");
    assert_eq!(plain.active(), 1, "the others share the limit");
    let got = recv_n(&mut out, 23, Duration::from_secs(10)).await;
    assert!(got.iter().all(|x| matches!(x.outcome, Outcome::Delivered)));
    assert_eq!(piped.peak(), 8);
    assert_eq!(plain.peak(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_window_bounds_bytes_and_a_larger_body_goes_alone() {
    let piped = Script::new(Step::after(Duration::from_secs(1), Step::Ok))
        .window(100, 3_000)
        .arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("piped", piped.clone())
        .build()
        .unwrap();
    submit_n(&d, "piped", 6, 1_000).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(piped.active(), 3, "3 x 1,000 bytes fill 3,000");
    recv_n(&mut out, 6, Duration::from_secs(10)).await;
    assert_eq!(piped.peak(), 3);

    d.submit(Hook::new(env_sized("big", 5_000)).only_sink("piped"))
        .await
        .unwrap();
    submit_n(&d, "piped", 2, 1_000).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(piped.active(), 1, "a body over the window goes, alone");
    let got = recv_n(&mut out, 3, Duration::from_secs(10)).await;
    assert_eq!(got[0].envelope.id(), "big");
}

#[tokio::test(start_paused = true)]
async fn windows_off_or_a_per_sink_limit_override_the_window() {
    for (config, want) in [
        (
            DispatchConfig::default()
                .with_concurrency(2)
                .with_sink_windows(false)
                .with_intake(100),
            2,
        ),
        (
            DispatchConfig::default()
                .with_sink_concurrency(3)
                .with_intake(100),
            3,
        ),
    ] {
        let piped = Script::new(Step::after(Duration::from_secs(1), Step::Ok))
            .window(8, 1 << 20)
            .arc();
        let (d, mut out) = alone("piped", &piped, config);
        submit_n(&d, "piped", 10, 100).await;
        recv_n(&mut out, 10, Duration::from_secs(10)).await;
        assert_eq!(piped.peak(), want);
    }
}

#[tokio::test(start_paused = true)]
async fn the_intake_bounds_body_bytes_and_admits_a_larger_body_alone() {
    let slow = Script::new(Step::after(Duration::from_secs(1), Step::Ok))
        .window(100, 1 << 20)
        .arc();
    let (d, mut out) = alone(
        "slow",
        &slow,
        DispatchConfig::default().with_intake_bytes(3_000),
    );
    submit_n(&d, "slow", 3, 1_000).await;
    let d2 = d.clone();
    let fourth = tokio::spawn(async move { submit_n(&d2, "slow", 1, 1_000).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !fourth.is_finished(),
        "3,000 bytes admitted: the fourth waits"
    );
    assert_eq!(slow.calls(), 3);
    // The first attempts settle, their bytes come back, and the fourth goes in.
    drop(recv_n(&mut out, 3, Duration::from_secs(5)).await);
    tokio::time::timeout(Duration::from_secs(1), fourth)
        .await
        .expect("admitted once bytes came back")
        .unwrap();
    recv_n(&mut out, 1, Duration::from_secs(5)).await;

    tokio::time::timeout(Duration::from_secs(1), submit_n(&d, "slow", 1, 10_000))
        .await
        .expect("a hook larger than the bound is admitted alone");
    recv_n(&mut out, 1, Duration::from_secs(5)).await;
}

/// A batching sink whose deliveries take 1 s, with a window of 40 deliveries (1 MiB).
fn batching_windowed() -> Arc<Script> {
    Script::new(Step::after(Duration::from_secs(1), Step::Ok))
        .batched()
        .window(40, 1 << 20)
        .arc()
}

#[tokio::test(start_paused = true)]
async fn a_batching_sink_with_a_window_runs_on_it_and_sizes_the_intake() {
    let batching = batching_windowed();
    // The default intake: twice (concurrency 1 + the window of 40) = 82 jobs, far above
    // the 2 that concurrency alone would give.
    let (d, mut out) = alone(
        "batching",
        &batching,
        DispatchConfig::default().with_concurrency(1),
    );
    // Each delivery dropped as it comes: it holds its intake permit until then.
    let reader = tokio::spawn(async move {
        let mut delivered = 0;
        while let Some(x) = out.recv().await {
            delivered += usize::from(matches!(x.outcome, Outcome::Delivered));
            if delivered == 100 {
                break;
            }
        }
        delivered
    });
    let submitter = {
        let d = d.clone();
        tokio::spawn(async move { submit_n(&d, "batching", 100, 100).await })
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        batching.active(),
        40,
        "its window, not the shared limit of 1"
    );
    assert!(batching.seen().iter().all(|s| s.batch));
    submitter.await.unwrap();
    assert_eq!(reader.await.unwrap(), 100);
    assert_eq!(batching.peak(), 40, "never past the window");
}

#[tokio::test(start_paused = true)]
async fn sink_concurrency_never_caps_a_batching_sinks_deliveries() {
    // The specification: a batching sink's attempts wait in its batcher for a batch to
    // fill, so `sink_concurrency` counts its requests, not its deliveries; its window
    // bounds the deliveries.
    let batching = batching_windowed();
    let config = DispatchConfig::default()
        .with_sink_concurrency(2)
        .with_intake(200);
    let (d, mut out) = alone("batching", &batching, config);
    submit_n(&d, "batching", 100, 100).await;
    recv_n(&mut out, 100, Duration::from_secs(30)).await;
    assert_eq!(
        batching.peak(),
        40,
        "the window, not sink_concurrency, bounds it"
    );
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_limit_grows_while_the_round_trip_holds() {
    let sink = Script::new(Step::after(Duration::from_millis(10), Step::Ok)).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("s", sink.clone())
        .sink_concurrency("s", ankusa_dispatch::Concurrency::Adaptive { max: 20 })
        .config(DispatchConfig::default().with_intake(4000))
        .build()
        .unwrap();
    submit_n(&d, "s", 3000, 10).await;
    recv_n(&mut out, 3000, Duration::from_secs(60)).await;
    assert_eq!(
        sink.peak(),
        20,
        "grew to its max: the round trip never moved"
    );
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_sink_pauses_whole_for_a_stated_retry_after() {
    // The destination asks for 1 s: no other hook of the sink goes before it ends (a
    // destination refusing in no time would otherwise get the limit's worth again at once).
    let sink = Script::new(Step::after(Duration::from_millis(10), Step::Ok))
        .first([Step::RetryAfter(1000)])
        .arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("s", sink.clone())
        .sink_concurrency("s", ankusa_dispatch::Concurrency::Adaptive { max: 8 })
        .config(retrying(Duration::from_millis(10)).with_intake(100))
        .build()
        .unwrap();
    let t0 = tokio::time::Instant::now();
    submit_n(&d, "s", 5, 10).await;
    recv_n(&mut out, 5, Duration::from_secs(30)).await;
    let seen = sink.seen();
    assert!(seen.len() >= 6, "{}", seen.len());
    assert!(
        seen[1..]
            .iter()
            .all(|s| s.at - t0 >= Duration::from_secs(1)),
        "{:?}",
        seen.iter().map(|s| s.at - t0).collect::<Vec<_>>()
    );
}
