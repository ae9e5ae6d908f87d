//! The connection keys a sink file and a source file share: the brokers, the client id,
//! TLS, SASL, librdkafka properties and `allow_insecure`. Both configs flatten
//! [`KafkaConnection`] in, so the keys are declared once and spelled alike.

use ankusa_sink_core::Secret;
use serde::Deserialize;
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

/// A SASL mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SaslMechanism {
    /// `PLAIN` (use with TLS).
    Plain,
    /// `SCRAM-SHA-256`.
    #[serde(rename = "scram_sha_256")]
    ScramSha256,
    /// `SCRAM-SHA-512`.
    #[serde(rename = "scram_sha_512")]
    ScramSha512,
}

impl SaslMechanism {
    /// The librdkafka name.
    pub fn as_str(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// SASL credentials (keys `mechanism`, `username`, `password`). `Debug` never prints the
/// password.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SaslConfig {
    pub(crate) mechanism: SaslMechanism,
    pub(crate) username: String,
    pub(crate) password: Secret,
}

impl SaslConfig {
    /// SASL credentials.
    pub fn new(
        mechanism: SaslMechanism,
        username: impl Into<String>,
        password: impl Into<Secret>,
    ) -> Self {
        SaslConfig {
            mechanism,
            username: username.into(),
            password: password.into(),
        }
    }
}

/// TLS to the brokers (keys `ca_location`, `certificate_location`, `key_location`,
/// `key_password`, `verify_hostname`). `Debug` never prints the key password.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TlsConfig {
    /// CA bundle file (PEM); the system store when absent.
    #[serde(default)]
    pub(crate) ca_location: Option<String>,
    /// Client certificate file (PEM), for mutual TLS.
    #[serde(default)]
    pub(crate) certificate_location: Option<String>,
    /// Client private key file (PEM), for mutual TLS.
    #[serde(default)]
    pub(crate) key_location: Option<String>,
    /// The private key's password.
    #[serde(default)]
    pub(crate) key_password: Option<Secret>,
    /// Check the broker's certificate names its host (default true).
    #[serde(default = "yes")]
    pub(crate) verify_hostname: bool,
}

fn yes() -> bool {
    true
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            ca_location: None,
            certificate_location: None,
            key_location: None,
            key_password: None,
            verify_hostname: true,
        }
    }
}

impl TlsConfig {
    /// Trust the CA bundle in `path` (PEM) instead of the system store.
    pub fn with_ca_location(mut self, path: impl Into<String>) -> Self {
        self.ca_location = Some(path.into());
        self
    }
    /// Authenticate with the client certificate and private key in these files (PEM).
    pub fn with_client_certificate(
        mut self,
        certificate: impl Into<String>,
        key: impl Into<String>,
    ) -> Self {
        self.certificate_location = Some(certificate.into());
        self.key_location = Some(key.into());
        self
    }
    /// The private key's password.
    pub fn with_key_password(mut self, password: impl Into<Secret>) -> Self {
        self.key_password = Some(password.into());
        self
    }
    /// Whether the broker's certificate must name its host (default true; `false` is
    /// warned about when the sink is built).
    pub fn with_verify_hostname(mut self, verify: bool) -> Self {
        self.verify_hostname = verify;
        self
    }
}

pub(crate) fn servers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Servers {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Servers::deserialize(d)? {
        Servers::One(s) => split_servers(&s),
        Servers::Many(v) => v,
    })
}

pub(crate) fn split_servers(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}
