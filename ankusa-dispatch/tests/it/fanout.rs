//! Fan-out: every sink of a hook has its own attempts and outcome.

use crate::*;
use ankusa_dispatch::{Dispatcher, Hook, Outcome};
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn each_sink_gets_its_own_delivery_and_a_failing_one_never_delays_the_other() {
    // `slow` spends 10 s failing, then backs off an hour; `fast` takes the hook at once.
    let slow = Script::new(Step::Ok)
        .first([Step::after(Duration::from_secs(10), Step::Transient)])
        .arc();
    let fast = Script::new(Step::Ok).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("slow", slow.clone())
        .sink("fast", fast.clone())
        .config(config(policy(
            Duration::from_secs(3600),
            10,
            Duration::from_secs(86_400),
        )))
        .build()
        .unwrap();
    let t0 = tokio::time::Instant::now();
    d.submit(Hook::new(env("h1"))).await.unwrap();
    let first = recv_n(&mut out, 1, Duration::from_millis(50)).await;
    assert_eq!(&*first[0].sink, "fast");
    assert!(matches!(first[0].outcome, Outcome::Delivered));
    assert_eq!(first[0].attempts, 1);
    // Reported times are Unix ms, whatever clock drives the retries.
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!((first[0].first_attempt_ms - wall).abs() < 5_000);
    assert!(t0.elapsed() < Duration::from_millis(50));
    assert_eq!(fast.calls(), 1);
    assert_eq!(slow.calls(), 1, "slow's attempt started alongside");

    // slow: the 10 s attempt fails, the retry waits the hour, then delivers.
    let second = recv_n(&mut out, 1, Duration::from_secs(3700)).await;
    assert_eq!(&*second[0].sink, "slow");
    assert!(matches!(second[0].outcome, Outcome::Delivered));
    assert_eq!(second[0].attempts, 2);
    assert_eq!(second[0].envelope.id(), "h1");
    assert!(t0.elapsed() >= Duration::from_secs(3610));
    // ... and follow the runtime's clock: the retry is an hour after the first attempt.
    assert!(second[0].last_attempt_ms - second[0].first_attempt_ms >= 3_610_000);
    let seen = slow.seen();
    assert_eq!(seen.iter().map(|s| s.attempt).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(fast.calls(), 1, "the other sink never saw the retry");
    assert!(d.shutdown(Duration::from_secs(1)).await.is_empty());
    assert!(out.recv().await.is_none());
}
