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

#[tokio::test(start_paused = true)]
async fn at_the_defaults_a_quiet_tenant_passes_a_noisy_ones_backlog() {
    // 1,500 hooks of tenant a with one of tenant b every 51 positions, to a sink answering
    // in 50 ms, every setting at its default: the read-ahead reaches b's hooks behind a's
    // backlog, and round robin serves them long before their input position.
    let sink = Script::new(Step::after(Duration::from_millis(50), Step::Ok)).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("s", sink.clone())
        .build()
        .unwrap();
    let mut input = Vec::new();
    let (mut a, mut b) = (0, 0);
    for i in 0..1_530 {
        if i % 51 == 50 {
            input.push(tenant_env("b", b));
            b += 1;
        } else {
            input.push(tenant_env("a", a));
            a += 1;
        }
    }
    let order: Vec<String> = input.iter().map(|e| e.id().to_owned()).collect();
    let feeder = tokio::spawn(async move {
        for e in input {
            d.submit(Hook::new(e)).await.unwrap();
        }
    });
    // Read as a caller does: each delivery dropped when read frees its intake place.
    recv_n(&mut out, 1_530, Duration::from_secs(3_600)).await;
    feeder.await.unwrap();
    let arrived: Vec<String> = sink.seen().iter().map(|s| s.hook.clone()).collect();
    let mut ahead: Vec<i64> = order
        .iter()
        .enumerate()
        .filter(|(_, id)| id.starts_with("b-"))
        .map(|(input_at, id)| {
            let at = arrived.iter().position(|x| x == id).unwrap();
            input_at as i64 - at as i64
        })
        .collect();
    ahead.sort_unstable();
    let median = ahead[ahead.len() / 2];
    eprintln!("b's hooks: median {median} positions ahead of their input order");
    assert!(
        median >= 100,
        "b's median is {median} positions ahead: {ahead:?}"
    );
}
