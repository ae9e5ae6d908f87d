//! A panic in the sink is a bug, not a network blip: counted, logged at ERROR once per
//! hook, given up on (permanent, "sink panicked") at the pair's third panic, and never
//! counted toward the breaker.

use crate::span::global_capture;
use crate::*;
use ankusa_dispatch::metrics::{BREAKER_OPEN, SINK_PANICS};
use ankusa_dispatch::{BreakerConfig, Dispatcher, Hook};
use tracing::Level;

/// Ten attempts within a minute, and a breaker that opens at the second counted failure.
fn panics_config() -> DispatchConfig {
    retrying(Duration::from_millis(10)).with_breaker(BreakerConfig::new(2, Duration::from_secs(30)))
}

#[tokio::test(start_paused = true)]
async fn a_sink_that_always_panics_is_given_up_on_at_the_third_panic() {
    recorder();
    let name = unique_name("panics");
    let sink = Script::new(Step::Panic).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink(&name, sink.clone())
        .config(panics_config())
        .build()
        .unwrap();
    assert_eq!(counter(SINK_PANICS, &format!("sink={name}")), Some(0));
    d.submit(Hook::new(env("p1"))).await.unwrap();
    let x = recv_n(&mut out, 1, Duration::from_secs(60)).await.remove(0);
    let Outcome::DeadLettered { failure, .. } = &x.outcome else {
        panic!("{:?}", x.outcome);
    };
    assert_eq!(failure.class(), Class::Permanent);
    assert!(
        failure
            .reason_chain()
            .starts_with("sink panicked: scripted panic"),
        "{}",
        failure.reason_chain()
    );
    // Three attempts, not the policy's ten.
    assert_eq!((x.attempts, sink.calls()), (3, 3));
    assert_eq!(counter(SINK_PANICS, &format!("sink={name}")), Some(3));
}

#[tokio::test(start_paused = true)]
async fn panics_never_open_the_breaker_and_the_next_hook_goes_at_once() {
    recorder();
    let name = unique_name("panics-brk");
    let labels = format!("sink={name}");
    // The first hook's three attempts panic; the destination itself is fine.
    let sink = Script::new(Step::Ok)
        .first([Step::Panic, Step::Panic, Step::Panic])
        .arc();
    let (d, mut out) = Dispatcher::builder()
        .sink(&name, sink.clone())
        .config(panics_config())
        .build()
        .unwrap();
    d.submit(Hook::new(env("b1"))).await.unwrap();
    let x = recv_n(&mut out, 1, Duration::from_secs(60)).await.remove(0);
    assert_eq!(dead_class(&x).map(|c| c.0), Some(Class::Permanent));
    // Counted toward the breaker, two panics would have opened it (and the third, a
    // probe, kept it open).
    assert_eq!(gauge(BREAKER_OPEN, &labels), Some(0.0));
    d.submit(Hook::new(env("b2"))).await.unwrap();
    let y = recv_n(&mut out, 1, Duration::from_secs(60)).await.remove(0);
    assert!(matches!(y.outcome, Outcome::Delivered), "{:?}", y.outcome);
    assert_eq!(y.attempts, 1);
}

// A current-thread runtime: the scheduler logs on this thread, which has no subscriber of
// its own: the global capture sees it, and this test keeps the lines of its own hooks.
#[tokio::test(start_paused = true)]
async fn a_panic_is_logged_at_error_once_per_hook() {
    let cap = global_capture();
    let sink = Script::new(Step::Panic).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink(unique_name("panics-log"), sink)
        .config(panics_config())
        .build()
        .unwrap();
    // Ids no other test of this binary uses.
    for id in ["panic-log-h1", "panic-log-h2"] {
        d.submit(Hook::new(env(id))).await.unwrap();
    }
    recv_n(&mut out, 2, Duration::from_secs(60)).await;
    for id in ["panic-log-h1", "panic-log-h2"] {
        let errors: Vec<_> = cap
            .lines_with(&format!("hook_id={id}"))
            .into_iter()
            .filter(|l| l.level == Level::ERROR)
            .collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].text.contains("scripted panic"), "{errors:?}");
    }
}
