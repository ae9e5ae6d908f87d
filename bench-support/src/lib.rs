#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod http;
pub mod indexed;
pub mod raw_loop;
pub mod vs_raw;

use std::path::PathBuf;

/// Which side a run measures.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Through the Ankusa sink.
    Sink,
    /// Through the raw client, configured as the sink configures it.
    Raw,
}

impl Mode {
    /// The name in the tables, the JSON and `--only`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sink => "sink",
            Mode::Raw => "raw",
        }
    }
}

/// `--only sink|raw` among `args`: run one mode only (the peak-memory child, or profiling).
///
/// # Panics
/// When `--only` is followed by anything else.
pub fn only_mode_arg(args: &[String]) -> Option<Mode> {
    only_child_arg(args).map(|child| child.unwrap_or_else(|| panic!("--only sink|raw")))
}

/// `--only sink|raw|raw_encode` among `args`, for a harness that also has the
/// [`vs_raw::RAW_ENCODE`] side (the raw client encoding each delivery's own Message v1):
/// `Some(None)` for that side.
///
/// # Panics
/// When `--only` is followed by anything else.
pub fn only_child_arg(args: &[String]) -> Option<Option<Mode>> {
    args.iter()
        .position(|a| a == "--only")
        .map(|i| match args.get(i + 1).map(String::as_str) {
            Some("sink") => Some(Mode::Sink),
            Some("raw") => Some(Mode::Raw),
            Some(vs_raw::RAW_ENCODE) => None,
            other => panic!("--only sink|raw|{}, not {other:?}", vs_raw::RAW_ENCODE),
        })
}

/// The `p` quantile (0..=1) of ascending `sorted` latencies; 0 when there are none.
pub fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i])
}

/// The median of `v` (the upper one of an even count).
///
/// # Panics
/// When `v` is empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Where the JSON results go: `$BENCH_OUT_DIR`, else the workspace's `target/bench-results`.
pub fn out_dir() -> PathBuf {
    // This crate sits at the workspace's top level, like every bench's crate: the
    // workspace's target/ is one level up from either.
    std::env::var_os("BENCH_OUT_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-results"),
        Into::into,
    )
}

/// Writes `doc` to `<out_dir>/<name>.json` (pretty-printed); returns the path.
///
/// # Panics
/// When the directory or the file cannot be written.
pub fn write_results(name: &str, doc: &serde_json::Value) -> PathBuf {
    let dir = out_dir();
    std::fs::create_dir_all(&dir).expect("create the results dir");
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(doc).unwrap()).expect("write results");
    path
}

/// This process's peak resident set (VmHWM), kB; 0 where /proc does not say.
pub fn vm_hwm_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The line an `--only` child ends with, read by [`child_peak_rss`].
const VM_HWM_LINE: &str = "VMHWM_KB ";

/// The `--only` child's last line: its peak resident set, for [`child_peak_rss`].
pub fn print_vm_hwm() {
    println!("{VM_HWM_LINE}{}", vm_hwm_kb());
}

/// Peak RSS, kB, of this bench re-run as a child with `--only <mode> <extra>` (so it runs
/// one mode only and reports with [`print_vm_hwm`]); the child's stderr when it did not say.
pub fn child_peak_rss(mode: Mode, extra: &[&str]) -> Result<u64, String> {
    child_peak_rss_of(mode.name(), extra)
}

/// [`child_peak_rss`] of the child run with `--only <name>`, for a mode a harness adds on
/// its own (the vs_raw harness's `raw_encode`).
pub fn child_peak_rss_of(name: &str, extra: &[&str]) -> Result<u64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args(["--only", name])
        .args(extra)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix(VM_HWM_LINE))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_medians() {
        assert_eq!(pct(&[], 0.5), 0.0);
        assert_eq!(pct(&[1, 2, 3, 4, 5], 0.5), 3.0);
        assert_eq!(pct(&[1, 2, 3, 4, 5], 0.99), 5.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0, 4.0]), 3.0);
    }

    #[test]
    fn only_mode_is_read_from_the_arguments() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(only_mode_arg(&args(&["bench", "--bench"])), None);
        assert_eq!(
            only_mode_arg(&args(&["bench", "--only", "raw", "sqs"])),
            Some(Mode::Raw)
        );
        assert_eq!(only_mode_arg(&args(&["--only", "sink"])), Some(Mode::Sink));
        assert_eq!(only_child_arg(&args(&["--only", "raw_encode"])), Some(None));
        assert_eq!(
            only_child_arg(&args(&["--only", "raw"])),
            Some(Some(Mode::Raw))
        );
        assert_eq!(only_child_arg(&args(&["bench"])), None);
    }
}
