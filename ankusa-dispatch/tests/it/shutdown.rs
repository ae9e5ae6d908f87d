//! Shutdown: in-flight attempts finish within the grace, everything else comes back.

use crate::*;
use ankusa_dispatch::{DeadLetter, Dispatcher, Hook, Outcome, SubmitError};
use ankusa_sink_core::Class;
use std::collections::HashSet;
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn nothing_is_dropped_every_pair_is_delivered_or_handed_back() {
    let finishing = Script::new(Step::after(Duration::from_secs(2), Step::Ok)).arc();
    let waiting = Script::new(Step::RetryAfter(3_600_000)).arc();
    let stuck = Script::new(Step::after(Duration::from_secs(3600), Step::Ok)).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("finishing", finishing.clone())
        .sink("waiting", waiting.clone())
        .sink("stuck", stuck.clone())
        .config(
            retrying_for_a_day(Duration::from_millis(100))
                .with_sink_concurrency(1)
                .with_intake(100),
        )
        .build()
        .unwrap();
    let hooks = 3;
    submit_hooks(&d, hooks).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(d.waiting(), 3, "each of waiting's attempts failed at once");
    let left = d.shutdown(Duration::from_secs(5)).await;
    let mut delivered = Vec::new();
    while let Some(x) = out.recv().await {
        delivered.push(x);
    }
    // finishing: h0 was in flight and finished within the grace; h1, h2 never started.
    let fin: Vec<_> = delivered
        .iter()
        .filter(|x| &*x.sink == "finishing")
        .collect();
    assert_eq!(fin.len(), 1);
    assert!(matches!(fin[0].outcome, Outcome::Delivered));
    let by = |sink: &str| left.iter().filter(|u| &*u.sink == sink).collect::<Vec<_>>();
    assert_eq!(by("finishing").len(), 2);
    assert!(
        by("finishing")
            .iter()
            .all(|u| u.attempts == 0 && !u.was_in_flight)
    );
    // waiting: each waits for its retry.
    let w = by("waiting");
    assert_eq!(w.len(), 3);
    assert!(w.iter().all(|u| u.attempts == 1 && !u.was_in_flight));
    assert!(w.iter().all(|u| matches!(
        u.last_failure.as_ref().map(|f| f.class()),
        Some(Class::RetryAfter(_))
    )));
    // stuck: h0 still in flight at the grace's end.
    let s = by("stuck");
    assert_eq!(s.len(), 3);
    assert_eq!(
        s.iter()
            .filter(|u| u.was_in_flight && u.attempts == 1)
            .count(),
        1
    );
    // Every pair exactly once.
    let mut pairs: HashSet<(String, String)> = HashSet::new();
    for (hook, sink) in delivered
        .iter()
        .map(|x| (x.envelope.id().to_owned(), x.sink.to_string()))
        .chain(
            left.iter()
                .map(|u| (u.envelope.id().to_owned(), u.sink.to_string())),
        )
    {
        assert!(pairs.insert((hook, sink)), "a pair twice");
    }
    assert_eq!(pairs.len(), hooks * 3);
    // After the shutdown the hook comes back.
    match d.submit(Hook::new(env("late"))).await {
        Err(SubmitError::ShuttingDown(h)) => assert_eq!(h.envelope().id(), "late"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_still_being_stored_at_the_grace_end_is_handed_back() {
    let dl = Script::new(Step::after(Duration::from_secs(3600), Step::Ok)).arc();
    let main = Script::new(Step::Permanent).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("main", main.clone())
        .dead_letter(DeadLetter::sink(dl.clone()))
        .build()
        .unwrap();
    d.submit(Hook::new(env("h1"))).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!((main.calls(), dl.calls()), (1, 1));
    let left = d.shutdown(Duration::from_secs(1)).await;
    assert!(
        out.recv().await.is_none(),
        "no delivery: the dead letter was not stored"
    );
    assert_eq!(left.len(), 1, "the pair is handed back");
    assert_eq!(left[0].envelope.id(), "h1");
    assert_eq!(&*left[0].sink, "main");
    assert_eq!(left[0].attempts, 1);
    assert_eq!(
        left[0].last_failure.as_ref().map(|f| f.class()),
        Some(Class::Permanent)
    );
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_stored_within_the_grace_is_delivered() {
    let dl = Script::new(Step::after(Duration::from_secs(1), Step::Ok)).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("main", Script::new(Step::Permanent).arc())
        .dead_letter(DeadLetter::sink(dl.clone()))
        .build()
        .unwrap();
    d.submit(Hook::new(env("h1"))).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(d.shutdown(Duration::from_secs(5)).await.is_empty());
    let x = out.recv().await.expect("the dead letter's delivery");
    assert!(matches!(
        x.outcome,
        Outcome::DeadLettered {
            store_error: None,
            ..
        }
    ));
    assert!(out.recv().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn two_shutdowns_lose_nothing() {
    // `slow` keeps attempts in flight, so the second shutdown arrives mid-drain.
    let (d, mut out) = Dispatcher::builder()
        .sink("w", Script::new(Step::RetryAfter(3_600_000)).arc())
        .sink(
            "slow",
            Script::new(Step::after(Duration::from_millis(500), Step::Ok)).arc(),
        )
        .build()
        .unwrap();
    submit_hooks(&d, 3).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (a, b) = tokio::join!(
        d.shutdown(Duration::from_secs(1)),
        d.shutdown(Duration::from_secs(1))
    );
    assert_eq!(a.len() + b.len(), 3, "w's three waiting pairs");
    let mut delivered = 0;
    while let Some(x) = out.recv().await {
        assert_eq!(&*x.sink, "slow");
        delivered += 1;
    }
    assert_eq!(delivered, 3);
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_finishes_every_hook_then_ends_the_stream() {
    let sink = Script::new(Step::Ok).first([Step::Transient]).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("s", sink.clone())
        .config(retrying(Duration::from_secs(1)))
        .build()
        .unwrap();
    d.submit(Hook::new(env("h1"))).await.unwrap();
    drop(d);
    let x = recv_n(&mut out, 1, Duration::from_secs(10)).await.remove(0);
    assert!(matches!(x.outcome, Outcome::Delivered));
    assert_eq!(x.attempts, 2);
    let end = tokio::time::timeout(Duration::from_secs(10), out.recv()).await;
    assert!(matches!(end, Ok(None)), "the stream ends");
}
