//! A sink's own settings (a sink file's `[dispatch]` table): rate, tenant cap, breaker.

use crate::*;
use ankusa_dispatch::{BreakerConfig, BuildError, Dispatcher, Hook, SinkDispatch};
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn a_rate_limit_makes_hooks_wait_not_fail() {
    let sink = Script::new(Step::Ok).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("s", sink.clone())
        .sink_settings("s", SinkDispatch::default().with_rate_per_second(20.0))
        .config(DispatchConfig::default().with_intake(100))
        .build()
        .unwrap();
    let t0 = tokio::time::Instant::now();
    submit_hooks(&d, 22).await;
    let got = recv_n(&mut out, 22, Duration::from_secs(10)).await;
    assert!(
        got.iter()
            .all(|x| matches!(x.outcome, ankusa_dispatch::Outcome::Delivered))
    );
    // Two in the burst, then one each 50 ms: the last at 1 s.
    let last = sink.seen().last().unwrap().at - t0;
    assert!(
        last >= Duration::from_millis(990) && last < Duration::from_millis(1100),
        "{last:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_sinks_own_tenant_cap_and_breaker_override_the_dispatchers() {
    let capped = Script::new(Step::after(Duration::from_secs(1), Step::Ok)).arc();
    let fragile = Script::new(Step::Transient).arc();
    let (d, _out) = Dispatcher::builder()
        .sink("capped", capped.clone())
        .sink("fragile", fragile.clone())
        .route("capped", ["capped"])
        .route("fragile", ["fragile"])
        .sink_settings("capped", SinkDispatch::default().with_tenant_concurrency(1))
        .sink_settings(
            "fragile",
            SinkDispatch::default().with_breaker(BreakerConfig::new(1, Duration::from_secs(3600))),
        )
        .config(
            retrying(Duration::from_millis(10))
                .with_concurrency(16)
                .with_intake(100),
        )
        .build()
        .unwrap();
    for i in 0..4 {
        let e = Envelope::builder(format!("c{i}"), "src", "{}")
            .tenant_id("t")
            .build()
            .unwrap();
        d.submit(Hook::new(e).route("capped")).await.unwrap();
        d.submit(Hook::new(env(&format!("f{i}"))).route("fragile"))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(capped.active(), 1, "its own cap of one attempt per tenant");
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The four first attempts ran at once; then its own breaker (one failure) held every
    // retry, where the dispatcher's (five failures) would have let them go.
    assert_eq!(fragile.calls(), 4);
}

#[test]
fn settings_for_a_missing_sink_or_a_bad_rate_are_refused() {
    let r = Dispatcher::builder()
        .sink("s", Script::new(Step::Ok).arc())
        .sink_settings("other", SinkDispatch::default())
        .build();
    assert!(matches!(r, Err(BuildError::NoSuchSink(n)) if n == "other"));
    // 1e-300 passed the old check and panicked in the scheduler task at the first attempt.
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300, 0.000_9, 1e7] {
        let r = Dispatcher::builder()
            .sink("s", Script::new(Step::Ok).arc())
            .sink_settings("s", SinkDispatch::default().with_rate_per_second(bad))
            .build();
        assert!(matches!(r, Err(BuildError::BadRate(_))), "{bad}");
    }
}

/// Every number out of its range is a build error naming it: each panicked at start (a
/// semaphore past its maximum) or in the scheduler task (an `Instant` past its end).
#[tokio::test]
async fn extreme_numbers_are_build_errors_naming_the_setting() {
    use ankusa_dispatch::{Concurrency, MAX_BREAKER_OPEN, MAX_CONCURRENCY};
    let build = |config: DispatchConfig, own: Option<SinkDispatch>| {
        let mut b = Dispatcher::builder()
            .sink("s", Script::new(Step::Ok).arc())
            .config(config);
        if let Some(own) = own {
            b = b.sink_settings("s", own);
        }
        b.build().map(|_| ())
    };
    let named = |r: Result<(), BuildError>, want_sink: bool, want_key: &str| match r {
        Err(e @ BuildError::OutOfRange { .. }) => {
            let BuildError::OutOfRange { sink, key, .. } = &e else {
                unreachable!()
            };
            assert_eq!((sink.is_some(), *key), (want_sink, want_key), "{e}");
            assert!(e.to_string().contains(want_key), "{e}");
        }
        other => panic!("{want_key}: {other:?}"),
    };
    let all = DispatchConfig::default;
    named(
        build(all().with_concurrency(usize::MAX), None),
        false,
        "concurrency",
    );
    named(
        build(all().with_concurrency(MAX_CONCURRENCY + 1), None),
        false,
        "concurrency",
    );
    named(
        build(all().with_sink_concurrency(usize::MAX >> 2), None),
        false,
        "sink_concurrency",
    );
    named(
        build(all().with_tenant_concurrency(u32::MAX), None),
        false,
        "tenant_concurrency",
    );
    named(
        build(
            all().with_breaker(BreakerConfig::new(5, Duration::from_secs(u64::MAX))),
            None,
        ),
        false,
        "breaker.open_for",
    );
    let own = SinkDispatch::default;
    named(
        build(
            all(),
            Some(own().with_concurrency(Concurrency::Fixed(usize::MAX))),
        ),
        true,
        "concurrency",
    );
    named(
        build(
            all(),
            Some(own().with_concurrency(Concurrency::Adaptive { max: usize::MAX })),
        ),
        true,
        "concurrency.max",
    );
    named(
        build(
            all(),
            Some(own().with_breaker(BreakerConfig::new(1, MAX_BREAKER_OPEN * 2))),
        ),
        true,
        "breaker.open_for",
    );
    // The ends of the ranges are taken, and an intake past what a semaphore counts is
    // clamped rather than a panic.
    build(
        all()
            .with_concurrency(MAX_CONCURRENCY)
            .with_intake(usize::MAX)
            .with_breaker(BreakerConfig::new(1, MAX_BREAKER_OPEN)),
        Some(
            own()
                .with_rate_per_second(0.001)
                .with_concurrency(Concurrency::Fixed(MAX_CONCURRENCY)),
        ),
    )
    .unwrap();
}

/// A sink whose pipeline window is past what a semaphore counts still builds (its intake
/// is clamped): a third-party sink's `capabilities()` cannot stop the dispatcher.
#[tokio::test]
async fn a_huge_declared_window_is_clamped_not_a_panic() {
    let sink = Script::new(Step::Ok).window(usize::MAX, usize::MAX).arc();
    let (d, mut out) = Dispatcher::builder().sink("w", sink).build().unwrap();
    d.submit(Hook::new(env("w1"))).await.unwrap();
    let x = recv_n(&mut out, 1, Duration::from_secs(10)).await.remove(0);
    assert!(matches!(x.outcome, ankusa_dispatch::Outcome::Delivered));
}
