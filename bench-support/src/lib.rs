// Small helpers of every `vs_raw` bench, included (`include!`) by both harnesses:
// `vs_raw_harness.rs` (HTTP, AMQP, Kafka) and `indexed_harness.rs` (AWS, Pub/Sub).
// Needs nothing from the including bench.

/// The `p` quantile (0..=1) of ascending `sorted` latencies; 0 when there are none.
fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i])
}

/// The median of `v` (the upper one of an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Where the JSON results go: `$BENCH_OUT_DIR`, else the workspace's `target/bench-results`.
fn out_dir() -> std::path::PathBuf {
    // CARGO_MANIFEST_DIR is the bench's crate; the workspace's target/ is one level up.
    std::env::var_os("BENCH_OUT_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-results"),
        Into::into,
    )
}

/// This process's peak resident set (VmHWM), kB; 0 where /proc does not say.
fn vm_hwm_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
