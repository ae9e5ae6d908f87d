//! The local sweeper keeps what is young, removes what is old, and leaves anything that
//! is not a day partition alone.

use crate::body;
use ankusa_claimcheck::{
    ClaimConfig, ClaimError, ClaimItem, ClaimStore, ConfigError, SweepReport, SweeperConfig,
};
use std::fs;
use std::path::Path;
use std::time::Duration;

/// A pack-like file in a day partition.
fn plant(root: &Path, tenant_dir: &str, dt_dir: &str) -> std::path::PathBuf {
    let dir = root.join("claims").join(tenant_dir).join(dt_dir);
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("01ARZ3NDEKTSV4RRFFQ69G0000");
    fs::write(&file, b"pack").unwrap();
    file
}

#[tokio::test]
async fn sweeper_keeps_young_and_removes_old_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = ClaimStore::local(root, ClaimConfig::default()).unwrap();
    let sweeper = store.sweeper(SweeperConfig::new(7).unwrap()).unwrap();

    // A real claim checked in today.
    let fresh = store
        .check_in(ClaimItem::new("acme", body(1, 1000)))
        .await
        .unwrap();
    let fresh_day =
        chrono::DateTime::from_timestamp_millis(crate::ulid_of(&fresh).timestamp_ms() as i64)
            .unwrap()
            .date_naive();

    // As of fresh_day: the cutoff is fresh_day - 7; strictly older goes.
    let d = |n: u64| {
        (fresh_day - chrono::Days::new(n))
            .format("dt=%Y-%m-%d")
            .to_string()
    };
    let old = plant(root, "tenant=acme", &d(8));
    let older = plant(root, "tenant=globex", &d(400));
    // The partition of hooks without a tenant is swept like any tenant's.
    let tenantless = plant(root, "tenant=default", &d(9));
    let boundary = plant(root, "tenant=acme", &d(7)); // exactly retention_days old: kept
    let young = plant(root, "tenant=globex", &d(1));
    // Not partitions: left alone, however old they look.
    let odd_dt = plant(root, "tenant=acme", "dt=2001-1-01");
    let not_dt = plant(root, "tenant=acme", "day=2001-01-01");
    let bad_tenant = plant(root, "tenant=a.b", "dt=2001-01-01");
    let not_tenant = plant(root, "other", "dt=2001-01-01");
    let stray_file = root.join("claims/tenant=acme/dt=2001-01-02");
    fs::write(&stray_file, b"not a directory").unwrap();

    let report = sweeper.sweep_at(fresh_day).await;
    assert_eq!(
        report,
        SweepReport {
            scanned: 6,
            deleted: 3,
            failed: 0
        }
    );
    assert!(!old.exists() && !old.parent().unwrap().exists());
    assert!(!older.parent().unwrap().exists());
    assert!(!tenantless.parent().unwrap().exists());
    for kept in [
        &boundary,
        &young,
        &odd_dt,
        &not_dt,
        &bad_tenant,
        &not_tenant,
        &stray_file,
    ] {
        assert!(kept.exists(), "{} was removed", kept.display());
    }
    let urn = fresh.reference().to_string();
    assert_eq!(
        store
            .redeem(Some("acme"), &urn, fresh.sha256(), 1000)
            .await
            .unwrap(),
        body(1, 1000)
    );

    // Eight days on, today's partition is old too: its claim is gone for good.
    let later = fresh_day + chrono::Days::new(8);
    let report = sweeper.sweep_at(later).await;
    assert!(report.deleted >= 2, "{report:?}");
    let err = store
        .redeem(Some("acme"), &urn, fresh.sha256(), 1000)
        .await
        .unwrap_err();
    assert!(matches!(err, ClaimError::NotFound { .. }), "{err:?}");
    assert!(odd_dt.exists() && not_tenant.exists());
}

#[tokio::test]
async fn sweep_now_uses_today_and_a_missing_root_is_nothing_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let sweeper =
        ankusa_claimcheck::Sweeper::new(dir.path().join("nowhere"), SweeperConfig::new(1).unwrap());
    assert_eq!(sweeper.sweep().await, SweepReport::default());

    let today = chrono::Utc::now().date_naive();
    let old = plant(
        dir.path(),
        "tenant=t",
        &(today - chrono::Days::new(30))
            .format("dt=%Y-%m-%d")
            .to_string(),
    );
    let sweeper = ankusa_claimcheck::Sweeper::new(dir.path(), SweeperConfig::new(1).unwrap());
    assert_eq!(sweeper.sweep().await.deleted, 1);
    assert!(!old.exists());
}

#[tokio::test]
async fn run_sweeps_on_its_interval() {
    let dir = tempfile::tempdir().unwrap();
    let old = plant(dir.path(), "tenant=t", "dt=2000-01-01");
    let sweeper = ankusa_claimcheck::Sweeper::new(
        dir.path(),
        SweeperConfig::with_interval(1, Duration::from_millis(10)).unwrap(),
    );
    let task = tokio::spawn(sweeper.run());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while old.exists() {
        assert!(tokio::time::Instant::now() < deadline, "not swept");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    task.abort();
}

#[test]
fn only_a_local_store_has_a_sweeper() {
    let err = ClaimStore::in_memory()
        .sweeper(SweeperConfig::new(7).unwrap())
        .unwrap_err();
    assert_eq!(err, ConfigError::SweeperNeedsLocalStore);
    assert!(err.to_string().contains("lifecycle rule"));
    assert_eq!(SweeperConfig::new(0), Err(ConfigError::RetentionDays));
    assert_eq!(
        SweeperConfig::with_interval(1, Duration::ZERO),
        Err(ConfigError::SweepInterval)
    );
}
