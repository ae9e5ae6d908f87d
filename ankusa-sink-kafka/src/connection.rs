//! The connection keys a sink file and a source file share: the brokers, the client id,
//! TLS, SASL, librdkafka properties and `allow_insecure`. Both configs flatten
//! [`KafkaConnection`] in, so the keys are declared once and spelled alike.

use crate::config::{SaslConfig, TlsConfig, servers};
use serde::de::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// The connection keys as written (checked by the config that flattens them in).
/// `bootstrap_servers` is also read as `brokers` (what a source file says); it is optional
/// here so that each side can name the key it documents when it is missing.
#[derive(serde::Deserialize)]
#[serde(remote = "Self")]
pub(crate) struct KafkaConnection {
    #[serde(default, deserialize_with = "some_servers", alias = "brokers")]
    pub(crate) bootstrap_servers: Option<Vec<String>>,
    pub(crate) client_id: Option<String>,
    pub(crate) tls: Option<TlsConfig>,
    pub(crate) sasl: Option<SaslConfig>,
    #[serde(default)]
    pub(crate) properties: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) allow_insecure: bool,
}

fn some_servers<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    servers(d).map(Some)
}

impl<'de> Deserialize<'de> for KafkaConnection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut track = serde_path_to_error::Track::new();
        KafkaConnection::deserialize(serde_path_to_error::Deserializer::new(d, &mut track))
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
