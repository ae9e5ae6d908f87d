//! The connection keys a sink file and a source file share: the brokers, the client id,
//! TLS, SASL, librdkafka properties and `allow_insecure`. Both configs flatten
//! [`KafkaConnection`] in, so the keys are declared once and spelled alike.

use crate::config::{SaslConfig, TlsConfig, servers};
use serde::de::Deserializer;
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

ankusa_sink_kit::keyed_flatten!(KafkaConnection);
