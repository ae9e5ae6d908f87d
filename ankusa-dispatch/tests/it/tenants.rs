//! Tenants share each sink fairly: served round robin, and capped per sink when
//! `tenant_concurrency` says so.

use crate::*;
use ankusa_dispatch::{Dispatcher, Hook, metrics::TENANTS_WAITING};
use std::time::Duration;

fn tenant_env(tenant: &str, i: usize) -> Envelope {
    Envelope::builder(format!("{tenant}-{i}"), "src", "{}")
        .tenant_id(tenant)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_backlog_delays_another_tenants_first_hook_by_one_round_at_most() {
    recorder();
    let name = unique_name("fair");
    let sink = Script::new(Step::after(Duration::from_millis(50), Step::Ok)).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink(&name, sink.clone())
        .config(
            DispatchConfig::default()
                .with_concurrency(1)
                .with_intake(1000),
        )
        .build()
        .unwrap();
    for i in 0..200 {
        d.submit(Hook::new(tenant_env("big", i))).await.unwrap();
    }
    for i in 0..3 {
        d.submit(Hook::new(tenant_env("small", i))).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        gauge(TENANTS_WAITING, &format!("sink={name}")),
        Some(2.0),
        "both tenants wait"
    );
    recv_n(&mut out, 203, Duration::from_secs(60)).await;
    let order: Vec<String> = sink.seen().iter().map(|s| s.hook.clone()).collect();
    // Turns alternate: the small tenant's hooks go second, fourth and sixth, not after
    // the big tenant's 200.
    let small: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, h)| h.starts_with("small"))
        .map(|(i, _)| i)
        .collect();
    assert!(small.iter().all(|&i| i <= 6), "{small:?}");
    assert_eq!(gauge(TENANTS_WAITING, &format!("sink={name}")), Some(0.0));
}

#[tokio::test(start_paused = true)]
async fn tenant_concurrency_caps_one_tenants_attempts_on_a_sink() {
    let sink = Script::new(Step::after(Duration::from_secs(1), Step::Ok)).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("s", sink.clone())
        .config(
            DispatchConfig::default()
                .with_concurrency(16)
                .with_tenant_concurrency(2)
                .with_intake(100),
        )
        .build()
        .unwrap();
    for i in 0..10 {
        d.submit(Hook::new(tenant_env("a", i))).await.unwrap();
    }
    for i in 0..3 {
        d.submit(Hook::new(tenant_env("b", i))).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        sink.active(),
        4,
        "two of each tenant, though 16 slots are free"
    );
    recv_n(&mut out, 13, Duration::from_secs(30)).await;
    assert_eq!(sink.peak(), 4);
}
