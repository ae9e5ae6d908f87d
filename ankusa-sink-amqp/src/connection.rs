//! The connection keys a sink file and a source file share: where the broker is, how long
//! connecting may take, and whether a cleartext login to a remote host is accepted. Both
//! configs flatten [`AmqpConnection`] in, so the keys are declared once and spelled alike.

use serde::de::{Deserialize, Deserializer};

/// `url`, `connect_timeout_ms` and `allow_insecure`, as written (checked by the config
/// that flattens them in).
#[derive(serde::Deserialize)]
#[serde(remote = "Self")]
pub(crate) struct AmqpConnection {
    pub(crate) url: String,
    #[serde(default)]
    pub(crate) connect_timeout_ms: Option<u64>,
    #[serde(default)]
    pub(crate) allow_insecure: bool,
}

impl<'de> Deserialize<'de> for AmqpConnection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut track = serde_path_to_error::Track::new();
        AmqpConnection::deserialize(serde_path_to_error::Deserializer::new(d, &mut track))
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
