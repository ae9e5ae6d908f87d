//! Settings of the claim store and of the local sweeper, validated when built.

use crate::pack::MAX_PACK_BYTES;
use serde::Deserialize;
use std::time::Duration;

/// Default [`ClaimConfig::pack_max_bytes`]: 16 MiB.
pub const DEFAULT_PACK_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Default [`ClaimConfig::max_concurrent_uploads`].
pub const DEFAULT_MAX_CONCURRENT_UPLOADS: usize = 16;
/// Default [`SweeperConfig::sweep_interval`]: one hour.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(3600);

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `pack_max_bytes` is 0 or leaves no room for a pack's headers under 4 GiB.
    #[error("pack_max_bytes must be between 1 and {MAX_PACK_BYTES}, got {0}")]
    PackMaxBytes(u64),
    /// `max_concurrent_uploads` is 0.
    #[error("max_concurrent_uploads must be at least 1")]
    MaxConcurrentUploads,
    /// `max_read_bytes` is 0.
    #[error("max_read_bytes must be at least 1 (leave it unset for no cap)")]
    MaxReadBytes,
    /// `retention_days` is 0: a claim would not survive the day it was checked in.
    #[error("retention_days must be at least 1")]
    RetentionDays,
    /// `sweep_interval_ms` is 0.
    #[error("sweep_interval_ms must be at least 1")]
    SweepInterval,
    /// A sweeper asked of a store that is not a local directory: cloud stores expire
    /// claims with a bucket lifecycle rule instead.
    #[error(
        "retention_days needs a local claim store; for S3, GCS or Azure set a lifecycle rule \
         on the claims/ prefix instead"
    )]
    SweeperNeedsLocalStore,
}

/// How the claim store packs and uploads.
///
/// Deserializes from `{"pack_max_bytes": 16777216, "max_concurrent_uploads": 16,
/// "max_read_bytes": 104857600}` (all optional); unknown keys and invalid values are
/// refused.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "ClaimConfigRepr")]
pub struct ClaimConfig {
    pack_max_bytes: u64,
    max_concurrent_uploads: usize,
    max_read_bytes: Option<u64>,
}

impl Default for ClaimConfig {
    fn default() -> Self {
        ClaimConfig {
            pack_max_bytes: DEFAULT_PACK_MAX_BYTES,
            max_concurrent_uploads: DEFAULT_MAX_CONCURRENT_UPLOADS,
            max_read_bytes: None,
        }
    }
}

impl ClaimConfig {
    /// Start from the defaults.
    pub fn builder() -> ClaimConfigBuilder {
        ClaimConfigBuilder(ClaimConfig::default())
    }
    /// A batch's bodies for one tenant are split into packs of at most this many body
    /// bytes; a single larger body gets a pack of its own.
    pub fn pack_max_bytes(&self) -> u64 {
        self.pack_max_bytes
    }
    /// At most this many pack uploads of one batch run at once.
    pub fn max_concurrent_uploads(&self) -> usize {
        self.max_concurrent_uploads
    }
    /// No read (redeem, `read`, `read_bytes`) brings more than this many bytes into memory;
    /// a larger claim fails with [`ClaimError::ReadTooLarge`](crate::ClaimError) before any
    /// byte is read. Default `None`: no cap beyond the size the message declares, which a
    /// redeem always checks against the store's index first.
    pub fn max_read_bytes(&self) -> Option<u64> {
        self.max_read_bytes
    }
}

/// Builds a [`ClaimConfig`]; [`build`](Self::build) refuses invalid values.
#[derive(Debug, Clone)]
pub struct ClaimConfigBuilder(ClaimConfig);

impl ClaimConfigBuilder {
    /// See [`ClaimConfig::pack_max_bytes`]; 1 ..= 4 GiB - 16 MiB - 1.
    pub fn pack_max_bytes(mut self, bytes: u64) -> Self {
        self.0.pack_max_bytes = bytes;
        self
    }
    /// See [`ClaimConfig::max_concurrent_uploads`]; at least 1.
    pub fn max_concurrent_uploads(mut self, n: usize) -> Self {
        self.0.max_concurrent_uploads = n;
        self
    }
    /// See [`ClaimConfig::max_read_bytes`]; at least 1.
    pub fn max_read_bytes(mut self, bytes: u64) -> Self {
        self.0.max_read_bytes = Some(bytes);
        self
    }
    /// Validate.
    pub fn build(self) -> Result<ClaimConfig, ConfigError> {
        let c = self.0;
        if c.pack_max_bytes == 0 || c.pack_max_bytes > MAX_PACK_BYTES {
            return Err(ConfigError::PackMaxBytes(c.pack_max_bytes));
        }
        if c.max_concurrent_uploads == 0 {
            return Err(ConfigError::MaxConcurrentUploads);
        }
        if c.max_read_bytes == Some(0) {
            return Err(ConfigError::MaxReadBytes);
        }
        Ok(c)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimConfigRepr {
    pack_max_bytes: Option<u64>,
    max_concurrent_uploads: Option<usize>,
    max_read_bytes: Option<u64>,
}

impl TryFrom<ClaimConfigRepr> for ClaimConfig {
    type Error = ConfigError;
    fn try_from(r: ClaimConfigRepr) -> Result<Self, ConfigError> {
        let mut b = ClaimConfig::builder();
        if let Some(v) = r.pack_max_bytes {
            b = b.pack_max_bytes(v);
        }
        if let Some(v) = r.max_concurrent_uploads {
            b = b.max_concurrent_uploads(v);
        }
        if let Some(v) = r.max_read_bytes {
            b = b.max_read_bytes(v);
        }
        b.build()
    }
}

/// How long claims live in a local store, and how often the sweeper looks.
///
/// Deserializes from `{"retention_days": 7, "sweep_interval_ms": 3600000}`
/// (`sweep_interval_ms` optional).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SweeperConfigRepr")]
pub struct SweeperConfig {
    retention_days: u32,
    sweep_interval: Duration,
}

impl SweeperConfig {
    /// Keep claims at least `retention_days` (≥ 1) full days, sweeping hourly.
    pub fn new(retention_days: u32) -> Result<Self, ConfigError> {
        Self::with_interval(retention_days, DEFAULT_SWEEP_INTERVAL)
    }
    /// Keep claims at least `retention_days` (≥ 1) full days, sweeping every `interval`
    /// (≥ 1 ms).
    pub fn with_interval(retention_days: u32, interval: Duration) -> Result<Self, ConfigError> {
        if retention_days == 0 {
            return Err(ConfigError::RetentionDays);
        }
        if interval < Duration::from_millis(1) {
            return Err(ConfigError::SweepInterval);
        }
        Ok(SweeperConfig {
            retention_days,
            sweep_interval: interval,
        })
    }
    /// Partitions dated strictly before `today - retention_days` are deleted.
    pub fn retention_days(&self) -> u32 {
        self.retention_days
    }
    /// Time between sweeps.
    pub fn sweep_interval(&self) -> Duration {
        self.sweep_interval
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SweeperConfigRepr {
    retention_days: u32,
    sweep_interval_ms: Option<u64>,
}

impl TryFrom<SweeperConfigRepr> for SweeperConfig {
    type Error = ConfigError;
    fn try_from(r: SweeperConfigRepr) -> Result<Self, ConfigError> {
        let interval = r
            .sweep_interval_ms
            .map_or(DEFAULT_SWEEP_INTERVAL, Duration::from_millis);
        SweeperConfig::with_interval(r.retention_days, interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bounds() {
        let c = ClaimConfig::default();
        assert_eq!(c.pack_max_bytes(), 16 * 1024 * 1024);
        assert_eq!(c.max_concurrent_uploads(), 16);
        assert_eq!(
            ClaimConfig::builder().pack_max_bytes(0).build(),
            Err(ConfigError::PackMaxBytes(0))
        );
        assert_eq!(
            ClaimConfig::builder()
                .pack_max_bytes(u64::from(u32::MAX))
                .build(),
            Err(ConfigError::PackMaxBytes(u64::from(u32::MAX)))
        );
        assert_eq!(
            ClaimConfig::builder().max_concurrent_uploads(0).build(),
            Err(ConfigError::MaxConcurrentUploads)
        );
        assert!(
            ClaimConfig::builder()
                .pack_max_bytes(MAX_PACK_BYTES)
                .build()
                .is_ok()
        );
    }

    #[test]
    fn serde_validates() {
        let c: ClaimConfig = serde_json::from_str(r#"{"pack_max_bytes":1024}"#).unwrap();
        assert_eq!(c.pack_max_bytes(), 1024);
        assert_eq!(c.max_concurrent_uploads(), 16);
        assert_eq!(c.max_read_bytes(), None);
        let c: ClaimConfig = serde_json::from_str(r#"{"max_read_bytes":4096}"#).unwrap();
        assert_eq!(c.max_read_bytes(), Some(4096));
        let err = serde_json::from_str::<ClaimConfig>(r#"{"max_read_bytes":0}"#).unwrap_err();
        assert!(err.to_string().contains("max_read_bytes must be"), "{err}");
        let err = serde_json::from_str::<ClaimConfig>(r#"{"pack_max_bytes":0}"#).unwrap_err();
        assert!(err.to_string().contains("pack_max_bytes must be"), "{err}");
        assert!(serde_json::from_str::<ClaimConfig>(r#"{"pack_max":1}"#).is_err());

        let s: SweeperConfig = serde_json::from_str(r#"{"retention_days":7}"#).unwrap();
        assert_eq!(s.retention_days(), 7);
        assert_eq!(s.sweep_interval(), DEFAULT_SWEEP_INTERVAL);
        let err = serde_json::from_str::<SweeperConfig>(r#"{"retention_days":0}"#).unwrap_err();
        assert!(
            err.to_string()
                .contains("retention_days must be at least 1"),
            "{err}"
        );
        let err =
            serde_json::from_str::<SweeperConfig>(r#"{"retention_days":1,"sweep_interval_ms":0}"#)
                .unwrap_err();
        assert!(err.to_string().contains("sweep_interval_ms"), "{err}");
    }
}
