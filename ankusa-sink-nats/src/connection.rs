//! The connection keys a sink file and a source file share: where, who, TLS, timeouts.
//! Both configs flatten [`NatsConnection`] in, so the keys are declared once and spelled
//! alike.

use ankusa_sink_core::Secret;
use std::num::NonZeroU64;
use std::path::PathBuf;

/// `url`, `user`, `password`, `token`, `nkey_seed`, `credentials_file`, `tls_ca_file`,
/// `client_name`, `timeout_ms`, `connect_timeout_ms` and `allow_insecure`, as written (checked by
/// `NatsConfig::from_connection`).
#[derive(serde::Deserialize)]
#[serde(remote = "Self")]
pub(crate) struct NatsConnection {
    pub(crate) url: String,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<Secret>,
    pub(crate) token: Option<Secret>,
    pub(crate) nkey_seed: Option<Secret>,
    pub(crate) credentials_file: Option<PathBuf>,
    pub(crate) tls_ca_file: Option<PathBuf>,
    pub(crate) client_name: Option<String>,
    pub(crate) timeout_ms: Option<NonZeroU64>,
    pub(crate) connect_timeout_ms: Option<NonZeroU64>,
    pub(crate) allow_insecure: Option<bool>,
}

ankusa_sink_kit::keyed_flatten!(NatsConnection);
