//! What each failure class makes the dispatcher do.

use crate::*;
use ankusa_dispatch::{CONFIG_ERRORS_METRIC, Dispatcher, Hook, Outcome};
use ankusa_sink_core::Class;
use std::time::Duration;

fn one_sink(
    name: &str,
    sink: Arc<Script>,
    p: ankusa_dispatch::DispatchPolicy,
) -> (Dispatcher, ankusa_dispatch::Deliveries) {
    Dispatcher::builder()
        .sink(name, sink)
        .config(config(p))
        .build()
        .unwrap()
}

fn day() -> Duration {
    Duration::from_secs(86_400)
}

#[tokio::test(start_paused = true)]
async fn permanent_and_config_dead_letter_after_one_attempt() {
    recorder();
    for (step, class) in [
        (Step::Permanent, Class::Permanent),
        (Step::Config, Class::Config),
    ] {
        let name = unique_name("perm");
        let sink = Script::new(step).arc();
        let (d, mut out) = one_sink(
            &name,
            sink.clone(),
            policy(Duration::from_millis(10), 10, day()),
        );
        d.submit(Hook::new(env("h1"))).await.unwrap();
        let got = recv_n(&mut out, 1, Duration::from_secs(1)).await;
        assert_eq!(dead_class(&got[0]), Some((class, "permanent")));
        assert_eq!(got[0].attempts, 1);
        // Nothing more happens later.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(sink.calls(), 1);
        let config_errors = counter(CONFIG_ERRORS_METRIC, &format!("sink={name}"));
        let expected = if class == Class::Config { 1 } else { 0 };
        assert_eq!(config_errors, Some(expected), "{class:?}");
        d.shutdown(Duration::ZERO).await;
    }
}

#[tokio::test(start_paused = true)]
async fn transient_dead_letters_at_max_attempts() {
    let sink = Script::new(Step::Transient).arc();
    let (d, mut out) = one_sink(
        "t",
        sink.clone(),
        policy(Duration::from_millis(100), 3, day()),
    );
    d.submit(Hook::new(env("h1"))).await.unwrap();
    let got = recv_n(&mut out, 1, Duration::from_secs(10)).await;
    assert_eq!(dead_class(&got[0]), Some((Class::Transient, "transient")));
    assert_eq!(got[0].attempts, 3);
    let seen = sink.seen();
    assert_eq!(seen.len(), 3);
    // No jitter: 100 ms, then 200 ms.
    assert_eq!(seen[1].at - seen[0].at, Duration::from_millis(100));
    assert_eq!(seen[2].at - seen[1].at, Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn transient_dead_letters_at_the_horizon_without_waiting_past_it() {
    // Backoffs 300 ms, 600 ms, 1.2 s: the third retry would start past the 1 s horizon.
    let sink = Script::new(Step::Transient).arc();
    let (d, mut out) = one_sink(
        "t",
        sink.clone(),
        policy(Duration::from_millis(300), 100, Duration::from_secs(1)),
    );
    let t0 = tokio::time::Instant::now();
    d.submit(Hook::new(env("h1"))).await.unwrap();
    let got = recv_n(&mut out, 1, Duration::from_secs(10)).await;
    assert_eq!(dead_class(&got[0]), Some((Class::Transient, "transient")));
    assert_eq!(got[0].attempts, 3);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert!(got[0].last_attempt_ms - got[0].first_attempt_ms >= 900);
}

#[tokio::test(start_paused = true)]
async fn retry_after_beyond_the_horizon_dead_letters_at_once_as_throttled() {
    let sink = Script::new(Step::RetryAfter(120_000)).arc();
    let (d, mut out) = one_sink(
        "ra",
        sink.clone(),
        policy(Duration::from_millis(100), 100, Duration::from_secs(10)),
    );
    let t0 = tokio::time::Instant::now();
    d.submit(Hook::new(env("h1"))).await.unwrap();
    let got = recv_n(&mut out, 1, Duration::from_secs(1)).await;
    assert!(matches!(
        dead_class(&got[0]),
        Some((Class::RetryAfter(_), "throttled"))
    ));
    assert_eq!(got[0].attempts, 1);
    assert!(t0.elapsed() < Duration::from_millis(10));
}

#[tokio::test(start_paused = true)]
async fn a_throttle_without_a_pause_waits_the_drawn_pause_and_reports_it() {
    // Backoff 1 ms: the wait between attempts is the drawn throttle pause, 1..=500 ms
    // after attempt 1 and 1..=1000 ms after attempt 2.
    let sink = Script::new(Step::Throttled).arc();
    let (d, mut out) = one_sink(
        "th",
        sink.clone(),
        policy(Duration::from_millis(1), 3, day()),
    );
    d.submit(Hook::new(env("h1"))).await.unwrap();
    let got = recv_n(&mut out, 1, Duration::from_secs(10)).await;
    assert_eq!(dead_class(&got[0]), Some((Class::Throttled, "throttled")));
    assert_eq!(got[0].attempts, 3);
    // The last failure's pause, throttle_after_ms(3): 1..=2000.
    let ms = got[0].retry_after_ms.expect("the pause dispatch drew");
    assert!((1..=2000).contains(&ms), "{ms}");
    let seen = sink.seen();
    for (pair, cap) in seen.windows(2).zip([500u128, 1000]) {
        let waited = (pair[1].at - pair[0].at).as_millis();
        assert!((1..=cap).contains(&waited), "{waited} > {cap}");
    }
}

#[tokio::test(start_paused = true)]
async fn only_throttles_report_a_pause() {
    for (step, want) in [
        (Step::Transient, None),
        (Step::Permanent, None),
        (Step::RetryAfter(7_000), Some(7_000)),
    ] {
        let (d, mut out) = one_sink(
            "p",
            Script::new(step).arc(),
            policy(Duration::from_millis(1), 1, day()),
        );
        d.submit(Hook::new(env("h1"))).await.unwrap();
        let got = recv_n(&mut out, 1, Duration::from_secs(10)).await;
        assert_eq!(got[0].retry_after_ms, want);
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_and_capped() {
    // Honoured: no attempt before the 5 s pause (the backoff is 100 ms).
    let sink = Script::new(Step::Ok).first([Step::RetryAfter(5_000)]).arc();
    let (d, mut out) = one_sink(
        "ra",
        sink.clone(),
        policy(Duration::from_millis(100), 100, day()),
    );
    d.submit(Hook::new(env("h1"))).await.unwrap();
    let got = recv_n(&mut out, 1, Duration::from_secs(10)).await;
    assert!(matches!(got[0].outcome, Outcome::Delivered));
    let seen = sink.seen();
    assert_eq!(seen[1].at - seen[0].at, Duration::from_secs(5));

    // Capped: an hour asked, max_retry_after 2 s.
    let sink = Script::new(Step::Ok)
        .first([Step::RetryAfter(3_600_000)])
        .arc();
    let mut p = policy(Duration::from_millis(100), 100, day());
    p.max_retry_after = Duration::from_secs(2);
    let (d, mut out) = one_sink("ra", sink.clone(), p);
    d.submit(Hook::new(env("h2"))).await.unwrap();
    let got = recv_n(&mut out, 1, Duration::from_secs(10)).await;
    assert!(matches!(got[0].outcome, Outcome::Delivered));
    let seen = sink.seen();
    assert_eq!(seen[1].at - seen[0].at, Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn the_policy_counts_the_hooks_attempt_number_not_this_dispatchers() {
    // A hook fed again at attempt 6 (`deliver --attempt 6`, a re-fed record) with a policy
    // of 6 attempts: its attempt here is its last.
    let sink = Script::new(Step::Transient).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("s", sink.clone())
        .config(config(policy(Duration::from_millis(100), 6, day())))
        .build()
        .unwrap();
    d.submit(Hook::new(env("late")).first_attempt(6))
        .await
        .unwrap();
    let got = recv_n(&mut out, 1, Duration::from_secs(60)).await;
    assert_eq!(sink.calls(), 1, "no retry after the policy's last attempt");
    assert_eq!(sink.seen()[0].attempt, 6);
    assert_eq!(dead_class(&got[0]), Some((Class::Transient, "transient")));
}
