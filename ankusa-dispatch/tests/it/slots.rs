//! Retries hold no slot and no intake permit; sinks share the slots fairly.

use crate::*;
use ankusa_dispatch::{BreakerConfig, Deliveries, Dispatcher, Hook, Outcome};
use ankusa_sink_core::Class;
use std::time::Duration;

/// Sinks `a` (behind route `to-a`) and `b` sharing one global slot.
fn a_and_b(a: &Arc<Script>, b: &Arc<Script>, config: DispatchConfig) -> (Dispatcher, Deliveries) {
    Dispatcher::builder()
        .sink("a", a.clone())
        .sink("b", b.clone())
        .route("to-a", ["a"])
        .config(config.with_concurrency(1))
        .build()
        .unwrap()
}

/// A breaker that never opens: a's hooks wait for their retries alone (an open breaker holds
/// hooks too, tested apart).
fn closed_breaker() -> BreakerConfig {
    BreakerConfig::new(u32::MAX, Duration::from_secs(1))
}

async fn submit_to_a(d: &Dispatcher, hooks: usize) {
    for i in 0..hooks {
        d.submit(Hook::new(env(&format!("a{i}"))).route("to-a"))
            .await
            .unwrap();
    }
}

/// Submit `a_hooks` hooks to `a` and then 20 to `b` within a second (`why` the intake never
/// blocks on a's hooks), and return b's 20 deliveries, which come within a second.
async fn b_passes_a(
    d: &Dispatcher,
    out: &mut Deliveries,
    a_hooks: usize,
    why: &str,
) -> Vec<Delivery> {
    tokio::time::timeout(Duration::from_secs(1), async {
        submit_to_a(d, a_hooks).await;
        for i in 0..20 {
            d.submit(Hook::new(env(&format!("b{i}"))).only_sink("b"))
                .await
                .unwrap();
        }
    })
    .await
    .expect(why);
    let got = recv_n(out, 20, Duration::from_secs(1)).await;
    assert!(got.iter().all(|x| &*x.sink == "b"), "{got:?}");
    got
}

#[tokio::test(start_paused = true)]
async fn a_thousand_hooks_waiting_an_hour_do_not_stop_fresh_hooks() {
    let a = Script::new(Step::RetryAfter(3_600_000)).arc();
    let b = Script::new(Step::Ok).arc();
    let (d, mut out) = a_and_b(
        &a,
        &b,
        retrying_for_a_day(Duration::from_millis(100))
            .with_breaker(closed_breaker())
            // b's deliveries are read after all hooks are in.
            .with_intake(64),
    );
    let t0 = tokio::time::Instant::now();
    let got = b_passes_a(&d, &mut out, 1_000, "intake never blocks on waiting hooks").await;
    assert!(got.iter().all(|x| matches!(x.outcome, Outcome::Delivered)));
    assert!(t0.elapsed() < Duration::from_secs(1));
    // b was served between a's attempts; a's last ones follow.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(a.calls(), 1_000);
    assert_eq!(d.waiting(), 1_000);
    let left = d.shutdown(Duration::from_secs(1)).await;
    assert_eq!(left.len(), 1_000);
    assert!(left.iter().all(|u| &*u.sink == "a"
        && u.attempts == 1
        && !u.was_in_flight
        && matches!(
            u.last_failure.as_ref().map(|f| f.class()),
            Some(Class::RetryAfter(_))
        )));
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_woken_retries_does_not_starve_another_sink() {
    // 50 hooks to `a` all wake at t = 1 s and take 100 ms each with one global slot.
    let a = Script::new(Step::after(Duration::from_millis(100), Step::Ok))
        .first((0..50).map(|_| Step::RetryAfter(1_000)))
        .arc();
    let b = Script::new(Step::Ok).arc();
    let (d, mut out) = a_and_b(
        &a,
        &b,
        retrying_for_a_day(Duration::from_millis(1))
            .with_breaker(closed_breaker())
            .with_intake(100),
    );
    let t0 = tokio::time::Instant::now();
    submit_to_a(&d, 50).await;
    tokio::time::sleep_until(t0 + Duration::from_millis(1_150)).await;
    assert!(a.calls() > 50, "the burst is under way");
    let submitted = tokio::time::Instant::now();
    d.submit(Hook::new(env("b1")).only_sink("b")).await.unwrap();
    loop {
        let x = recv_n(&mut out, 1, Duration::from_secs(30)).await.remove(0);
        if &*x.sink == "b" {
            break;
        }
    }
    let waited = submitted.elapsed();
    assert!(
        waited <= Duration::from_millis(200),
        "b waited {waited:?} behind a's backlog"
    );
    d.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(start_paused = true)]
async fn two_submits_waiting_on_a_full_intake_do_not_deadlock() {
    let (d, mut out) = Dispatcher::builder()
        .sink("a", Script::new(Step::Ok).arc())
        .sink("b", Script::new(Step::Ok).arc())
        .config(DispatchConfig::default().with_intake(2))
        .build()
        .unwrap();
    d.submit(Hook::new(env("h0"))).await.unwrap();
    // Holding both deliveries holds both intake permits.
    let held = recv_n(&mut out, 2, Duration::from_secs(1)).await;
    let (d1, d2) = (d.clone(), d.clone());
    let x = tokio::spawn(async move { d1.submit(Hook::new(env("x"))).await });
    let y = tokio::spawn(async move { d2.submit(Hook::new(env("y"))).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(held);
    for _ in 0..4 {
        // Dropping each delivery frees its permit for the next submit.
        drop(recv_n(&mut out, 1, Duration::from_secs(5)).await);
    }
    x.await.unwrap().unwrap();
    y.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn hooks_held_by_an_open_breaker_keep_no_intake_permit() {
    // The default breaker opens after five retry-afters: the other 195 hooks to `a` are
    // held, and they must not hold the intake (64) either.
    let a = Script::new(Step::RetryAfter(3_600_000)).arc();
    let b = Script::new(Step::Ok).arc();
    let (d, mut out) = a_and_b(&a, &b, DispatchConfig::default().with_intake(64));
    b_passes_a(&d, &mut out, 200, "intake never blocks on held hooks").await;
    assert_eq!(a.calls(), 5);
    let left = d.shutdown(Duration::from_secs(1)).await;
    assert_eq!(left.len(), 200);
}
