//! Retention for a local claim store: delete whole day partitions once they are old.

use crate::config::SweeperConfig;
use ankusa_sink_core::validate_partition;
use chrono::{Days, NaiveDate, Utc};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Day partitions looked at (`claims/tenant=*/dt=YYYY-MM-DD` directories).
    pub scanned: usize,
    /// Partitions deleted.
    pub deleted: usize,
    /// Partitions that were due but could not be deleted (logged; tried again next sweep).
    pub failed: usize,
}

/// Deletes `claims/tenant=<tenant>/dt=<yyyy-mm-dd>` directories of a local claim store
/// whose date is strictly before `today (UTC) - retention_days`, so a claim always lives
/// at least `retention_days` full days.
///
/// # Behavior
/// - Only directories that look like partitions are touched: a `tenant=` directory with a
///   valid tenant, holding a `dt=` directory with a real calendar date in
///   `YYYY-MM-DD` form. Anything else (files, symlinks, other names) is left alone.
/// - A partition that cannot be deleted is logged and counted in
///   [`SweepReport::failed`]; the sweep goes on.
/// - Cloud stores are not swept: give the bucket a lifecycle rule (crate docs).
#[derive(Debug, Clone)]
pub struct Sweeper {
    root: PathBuf,
    config: SweeperConfig,
}

impl Sweeper {
    /// A sweeper for the local claim store rooted at `root` (the directory holding
    /// `claims/`). [`ClaimStore::sweeper`](crate::ClaimStore::sweeper) builds one for a
    /// local store.
    pub fn new(root: impl Into<PathBuf>, config: SweeperConfig) -> Self {
        Sweeper {
            root: root.into(),
            config,
        }
    }

    /// The settings.
    pub fn config(&self) -> &SweeperConfig {
        &self.config
    }

    /// Sweep once, as of today (UTC).
    pub async fn sweep(&self) -> SweepReport {
        self.sweep_at(Utc::now().date_naive()).await
    }

    /// Sweep once, as of `today`: partitions dated before `today - retention_days` go.
    pub async fn sweep_at(&self, today: NaiveDate) -> SweepReport {
        let this = self.clone();
        let started = Instant::now();
        let report = tokio::task::spawn_blocking(move || this.sweep_blocking(today))
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(target: "ankusa_claimcheck", error = %e, "claim sweep task failed");
                SweepReport::default()
            });
        tracing::info!(
            target: "ankusa_claimcheck",
            scanned = report.scanned,
            deleted = report.deleted,
            failed = report.failed,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "claim sweep"
        );
        report
    }

    /// Sweep now and then every `sweep_interval`, forever. Spawn it; drop (abort) the task
    /// to stop.
    pub async fn run(self) {
        let mut tick = tokio::time::interval(self.config.sweep_interval());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.sweep().await;
        }
    }

    fn sweep_blocking(&self, today: NaiveDate) -> SweepReport {
        let mut report = SweepReport::default();
        let Some(cutoff) =
            today.checked_sub_days(Days::new(u64::from(self.config.retention_days())))
        else {
            return report;
        };
        for tenant_dir in subdirs(&self.root.join("claims")) {
            let tenant_ok = file_name(&tenant_dir)
                .and_then(|n| n.strip_prefix("tenant="))
                .is_some_and(|t| validate_partition(t).is_ok());
            if !tenant_ok {
                continue;
            }
            for day_dir in subdirs(&tenant_dir) {
                let Some(date) = file_name(&day_dir).and_then(partition_date) else {
                    continue;
                };
                report.scanned += 1;
                if date >= cutoff {
                    continue;
                }
                match fs::remove_dir_all(&day_dir) {
                    Ok(()) => report.deleted += 1,
                    Err(e) => {
                        report.failed += 1;
                        tracing::warn!(
                            target: "ankusa_claimcheck",
                            partition = %day_dir.display(),
                            error = %e,
                            "could not delete an expired claim partition"
                        );
                    }
                }
            }
        }
        report
    }
}

/// Real directories (not symlinks) directly under `dir`; none if it cannot be read.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

fn file_name(path: &Path) -> Option<&str> {
    path.file_name()?.to_str()
}

/// `dt=YYYY-MM-DD` with a real date, exactly that shape.
fn partition_date(name: &str) -> Option<NaiveDate> {
    let date = name.strip_prefix("dt=")?;
    let b = date.as_bytes();
    let shape = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    if !shape {
        return None;
    }
    NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names() {
        assert_eq!(
            partition_date("dt=2026-11-30"),
            NaiveDate::from_ymd_opt(2026, 11, 30)
        );
        for bad in [
            "dt=2026-1-30",
            "dt=2026-02-30",
            "dt=2026-11-30x",
            "2026-11-30",
            "dt=+2026-11-3",
            "dt=",
            "date=2026-11-30",
        ] {
            assert_eq!(partition_date(bad), None, "{bad}");
        }
    }
}
