#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod dispatch;
mod error;
mod pack;
mod store;
mod sweeper;

pub use config::{
    ClaimConfig, ClaimConfigBuilder, ConfigError, DEFAULT_MAX_CONCURRENT_UPLOADS,
    DEFAULT_PACK_MAX_BYTES, DEFAULT_SWEEP_INTERVAL, SweeperConfig,
};
pub use dispatch::needs_claim;
pub use error::{ClaimError, StoreError};
pub use pack::{MAX_PACK_BYTES, MAX_PACK_CLAIMS};
pub use store::{ClaimItem, ClaimStore, DEFAULT_TENANT, Location};
pub use sweeper::{SweepReport, Sweeper};

/// Re-exported: [`Claim`] and [`ClaimRef`] are the core's, so sinks and this crate agree.
pub use ankusa_sink_core::{Claim, ClaimRef, ClaimRefError};
/// Re-exported: the date type of [`Sweeper::sweep_at`].
pub use chrono::NaiveDate;
/// Re-exported: build the store (S3, GCS, Azure, local, memory) with the same version.
pub use object_store;
