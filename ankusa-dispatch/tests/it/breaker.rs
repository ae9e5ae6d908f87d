//! The circuit breaker per sink.

use crate::*;
use ankusa_dispatch::{BreakerConfig, Deliveries, Dispatcher, Outcome, metrics::BREAKER_OPEN};
use ankusa_sink_core::Class;
use std::sync::Arc;
use std::time::Duration;

/// `sink` named `name`, alone, one attempt at a time, behind a breaker that opens after
/// `failures` and stays open `open_for`; hooks dead-letter at `horizon`.
fn behind_breaker(
    name: &str,
    sink: &Arc<Script>,
    failures: u32,
    open_for: Duration,
    horizon: Duration,
) -> (Dispatcher, Deliveries) {
    let config = config(policy(Duration::from_millis(100), 100, horizon))
        .with_concurrency(1)
        // Deliveries are read after all hooks are in.
        .with_intake(100)
        .with_breaker(BreakerConfig::new(failures, open_for));
    alone(name, sink, config)
}

#[tokio::test(start_paused = true)]
async fn failures_open_it_one_probe_after_open_for_and_a_success_closes_it() {
    recorder();
    let name = unique_name("brk");
    let labels = format!("sink={name}");
    // Four failures, then the destination is back.
    let sink = Script::new(Step::Ok)
        .first([
            Step::Transient,
            Step::Transient,
            Step::Transient,
            Step::Transient,
        ])
        .arc();
    let (d, mut out) = behind_breaker(
        &name,
        &sink,
        3,
        Duration::from_secs(10),
        Duration::from_secs(3600),
    );
    assert_eq!(gauge(BREAKER_OPEN, &labels), Some(0.0));
    let t0 = tokio::time::Instant::now();
    submit_hooks(&d, 5).await;
    tokio::time::sleep_until(t0 + Duration::from_secs(9)).await;
    assert_eq!(sink.calls(), 3, "open after three failures: attempts stop");
    assert_eq!(gauge(BREAKER_OPEN, &labels), Some(1.0));
    // At 10 s one probe goes through (and fails: open again for 10 s).
    tokio::time::sleep_until(t0 + Duration::from_secs(15)).await;
    assert_eq!(sink.calls(), 4, "exactly one probe");
    // At 20 s the second probe succeeds and closes it; everything flows.
    let got = recv_n(&mut out, 5, Duration::from_secs(30)).await;
    assert!(got.iter().all(|x| matches!(x.outcome, Outcome::Delivered)));
    assert_eq!(sink.calls(), 9);
    let probe = sink.seen()[4].at - t0;
    assert!(probe >= Duration::from_secs(20), "{probe:?}");
    assert_eq!(gauge(BREAKER_OPEN, &labels), Some(0.0));
}

#[tokio::test(start_paused = true)]
async fn permanent_failures_never_open_it() {
    recorder();
    let name = unique_name("brk-perm");
    let sink = Script::new(Step::Permanent).arc();
    let (d, mut out) = behind_breaker(
        &name,
        &sink,
        2,
        Duration::from_secs(3600),
        Duration::from_secs(3600),
    );
    submit_hooks(&d, 6).await;
    let got = recv_n(&mut out, 6, Duration::from_secs(1)).await;
    assert!(
        got.iter()
            .all(|x| dead_class(x) == Some((Class::Permanent, "permanent")))
    );
    assert_eq!(sink.calls(), 6);
    assert_eq!(gauge(BREAKER_OPEN, &format!("sink={name}")), Some(0.0));
}

#[tokio::test(start_paused = true)]
async fn hooks_held_by_an_open_breaker_dead_letter_at_the_horizon() {
    let sink = Script::new(Step::Transient).arc();
    let (d, mut out) = behind_breaker(
        "down",
        &sink,
        1,
        Duration::from_secs(3600),
        Duration::from_secs(5),
    );
    let t0 = tokio::time::Instant::now();
    submit_hooks(&d, 3).await;
    let got = recv_n(&mut out, 3, Duration::from_secs(10)).await;
    let at = t0.elapsed();
    assert!(
        at >= Duration::from_secs(5) && at <= Duration::from_secs(7),
        "{at:?}"
    );
    assert_eq!(sink.calls(), 1, "the breaker held every other attempt");
    let mut attempts: Vec<u32> = got.iter().map(|x| x.attempts).collect();
    attempts.sort();
    assert_eq!(attempts, [0, 0, 1]);
    assert!(
        got.iter()
            .all(|x| dead_class(x) == Some((Class::Transient, "transient")))
    );
}

#[tokio::test(start_paused = true)]
async fn without_retries_the_jobs_an_open_breaker_holds_fail_at_once() {
    recorder();
    let name = unique_name("brk-once");
    let sink = Script::new(Step::Transient).arc();
    // One attempt each (a run without `--retry`): holding a job for a probe every
    // `open_for` would keep the run going for hours while the destination is down.
    let config = config(policy(
        Duration::from_millis(100),
        1,
        Duration::from_secs(86_400),
    ))
    .with_concurrency(1)
    .with_intake(100)
    .with_breaker(BreakerConfig::new(2, Duration::from_secs(3600)));
    let (d, mut out) = alone(&name, &sink, config);
    submit_hooks(&d, 10).await;
    let got = recv_n(&mut out, 10, Duration::from_secs(5)).await;
    assert_eq!(
        sink.calls(),
        2,
        "two failures opened it; nothing else was sent"
    );
    let held: Vec<_> = got.iter().filter(|x| x.attempts == 0).collect();
    assert_eq!(held.len(), 8);
    for x in held {
        let Outcome::DeadLettered { failure, .. } = &x.outcome else {
            panic!("{x:?}")
        };
        assert_eq!(failure.class(), Class::Transient);
        assert_eq!(failure.may_have_landed(), Some(false), "nothing was sent");
        assert!(
            failure.to_string().contains("circuit breaker open"),
            "{failure}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn only_a_success_closes_it_a_permanent_answer_to_a_probe_does_not() {
    recorder();
    let name = unique_name("brk-probe-perm");
    let labels = format!("sink={name}");
    // Down (two failures open it); the probe meets a hook the sink refuses by itself
    // (permanent); the destination is still down.
    let sink = Script::new(Step::Transient)
        .first([Step::Transient, Step::Transient, Step::Permanent])
        .arc();
    let (d, _out) = behind_breaker(
        &name,
        &sink,
        2,
        Duration::from_secs(10),
        Duration::from_secs(3600),
    );
    let t0 = tokio::time::Instant::now();
    submit_hooks(&d, 8).await;
    tokio::time::sleep_until(t0 + Duration::from_secs(15)).await;
    // At 10 s: the probe (permanent) frees the probe's place, the next probe fails and
    // opens it again. Closed by the permanent answer, the other held hooks would have
    // gone out too.
    assert_eq!(sink.calls(), 4, "two failures, two probes");
    assert_eq!(gauge(BREAKER_OPEN, &labels), Some(1.0));
}
