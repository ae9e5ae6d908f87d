//! Routes, bad input, batching sinks, panics, replays.

use crate::*;
use ankusa_dispatch::{BuildError, Dispatcher, Hook, Outcome, SubmitError};
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn an_unknown_route_or_sink_fails_that_hook_only() {
    let a = Script::new(Step::Ok).arc();
    let b = Script::new(Step::Ok).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("a", a.clone())
        .sink("b", b.clone())
        .route("only-a", ["a"])
        .build()
        .unwrap();
    assert!(matches!(
        d.submit(Hook::new(env("x")).route("nope")).await,
        Err(SubmitError::UnknownRoute(r)) if r == "nope"
    ));
    assert!(matches!(
        d.submit(Hook::new(env("x")).only_sink("nope")).await,
        Err(SubmitError::UnknownSink(s)) if s == "nope"
    ));
    assert!(matches!(
        d.submit(Hook::new(env("x")).route("only-a").only_sink("b")).await,
        Err(SubmitError::UnknownSink(s)) if s == "b"
    ));
    d.submit(Hook::new(env("h1")).route("only-a"))
        .await
        .unwrap();
    d.submit(Hook::new(env("h2")).only_sink("b")).await.unwrap();
    let got = recv_n(&mut out, 2, Duration::from_secs(1)).await;
    assert!(got.iter().all(|x| matches!(x.outcome, Outcome::Delivered)));
    assert_eq!((a.calls(), b.calls()), (1, 1));
    assert!(d.has_sink("a") && !d.has_sink("nope"));
}

#[tokio::test]
async fn bad_builds_are_refused() {
    let s = || Script::new(Step::Ok).arc();
    let err = |b: ankusa_dispatch::DispatcherBuilder| b.build().expect_err("refused");
    assert!(matches!(err(Dispatcher::builder()), BuildError::NoSinks));
    assert!(matches!(
        err(Dispatcher::builder().sink("a", s()).sink("a", s())),
        BuildError::DuplicateSink(n) if n == "a"
    ));
    assert!(matches!(
        err(Dispatcher::builder().sink("a", s()).route("r", ["b"])),
        BuildError::UnknownSink { .. }
    ));
    assert!(matches!(
        err(Dispatcher::builder().sink("a", s()).route("r", Vec::<String>::new())),
        BuildError::EmptyRoute(r) if r == "r"
    ));
    assert!(matches!(
        err(Dispatcher::builder()
            .sink("a", s())
            .config(DispatchConfig::default().with_concurrency(0))),
        BuildError::ZeroConcurrency
    ));
}

#[tokio::test(start_paused = true)]
async fn batched_sinks_get_ctx_batch_and_are_not_counted_against_concurrency() {
    let batched = Script::new(Step::after(Duration::from_secs(1), Step::Ok))
        .batched()
        .arc();
    let (d, mut out, plain) = one_slot_beside_plain("batched", &batched);
    submit_hooks(&d, 5).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(batched.calls(), 5, "every batched attempt at once");
    assert_eq!(plain.calls(), 1, "one global slot for the others");
    assert!(batched.seen().iter().all(|s| s.batch));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        plain.calls(),
        5,
        "the batched attempts in flight take no slot"
    );
    assert!(plain.seen().iter().all(|s| !s.batch));
    recv_n(&mut out, 10, Duration::from_secs(5)).await;
}

#[tokio::test(start_paused = true)]
async fn a_panicking_sink_fails_transient_and_is_retried() {
    let sink = Script::new(Step::Ok).first([Step::Panic]).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("p", sink.clone())
        .config(config(policy(
            Duration::from_millis(10),
            5,
            Duration::from_secs(60),
        )))
        .build()
        .unwrap();
    d.submit(Hook::new(env("h1"))).await.unwrap();
    let x = recv_n(&mut out, 1, Duration::from_secs(1)).await.remove(0);
    assert!(matches!(x.outcome, Outcome::Delivered));
    assert_eq!(x.attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn replays_carry_their_id_and_continue_the_attempt_count() {
    let sink = Script::new(Step::Ok).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("s", sink.clone())
        .build()
        .unwrap();
    d.submit(Hook::new(env("h1")).replay_id("r9").first_attempt(3))
        .await
        .unwrap();
    let x = recv_n(&mut out, 1, Duration::from_secs(1)).await.remove(0);
    assert_eq!(x.replay_id.as_deref(), Some("r9"));
    let seen = sink.seen();
    assert_eq!(
        (seen[0].attempt, seen[0].replay_id.as_deref()),
        (3, Some("r9"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_attempt_times_out_transient_and_never_runs_past_the_horizon() {
    // Timed out after attempt_timeout, retried, delivered.
    let sink = Script::new(Step::Ok)
        .first([Step::after(Duration::from_secs(3600), Step::Ok)])
        .arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("s", sink.clone())
        .config(
            config(policy(
                Duration::from_millis(10),
                5,
                Duration::from_secs(60),
            ))
            .with_attempt_timeout(Duration::from_secs(1)),
        )
        .build()
        .unwrap();
    d.submit(Hook::new(env("h1"))).await.unwrap();
    let x = recv_n(&mut out, 1, Duration::from_secs(5)).await.remove(0);
    assert!(matches!(x.outcome, Outcome::Delivered));
    assert_eq!(x.attempts, 2);
    let seen = sink.seen();
    assert!(seen[1].at - seen[0].at >= Duration::from_secs(1));

    // A 30 s timeout is cut to what is left of a 5 s horizon.
    let sink = Script::new(Step::after(Duration::from_secs(3600), Step::Ok)).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("s", sink.clone())
        .config(config(policy(
            Duration::from_millis(10),
            5,
            Duration::from_secs(5),
        )))
        .build()
        .unwrap();
    let t0 = tokio::time::Instant::now();
    d.submit(Hook::new(env("h2"))).await.unwrap();
    let x = recv_n(&mut out, 1, Duration::from_secs(60)).await.remove(0);
    assert_eq!(
        dead_class(&x),
        Some((ankusa_sink_core::Class::Transient, "transient"))
    );
    assert_eq!(x.attempts, 1);
    let at = t0.elapsed();
    assert!(
        at >= Duration::from_secs(5) && at < Duration::from_secs(6),
        "{at:?}"
    );
}
