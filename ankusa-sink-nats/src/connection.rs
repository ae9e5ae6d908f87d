//! The connection keys a sink file and a source file share: where, who, TLS, timeouts.
//! Both configs flatten [`NatsConnection`] in, so the keys are declared once and spelled
//! alike.

use ankusa_sink_core::Secret;
use serde::de::{Deserialize, Deserializer};
use std::num::NonZeroU64;
use std::path::PathBuf;

/// `url`, `user`, `password`, `token`, `nkey_seed`, `credentials_file`, `tls_ca_file`,
/// `client_name`, `timeout_ms` and `connect_timeout_ms`, as written (checked by
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
}

impl<'de> Deserialize<'de> for NatsConnection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut track = serde_path_to_error::Track::new();
        NatsConnection::deserialize(serde_path_to_error::Deserializer::new(d, &mut track))
            .map_err(|e| keyed(track, e))
    }
}

/// Name the key of an error in a flattened part of a table (``key `url`: ...``) as errors
/// of the rest of the table are named: serde's `flatten` drops the key path.
fn keyed<E: serde::de::Error>(track: serde_path_to_error::Track, e: E) -> E {
    let path = track.path().to_string();
    if path.is_empty() || path == "." {
        e
    } else {
        E::custom(format_args!("key `{path}`: {e}"))
    }
}
