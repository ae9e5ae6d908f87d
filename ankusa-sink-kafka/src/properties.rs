//! The librdkafka side of a [`KafkaConfig`]: the properties the sink owns or refuses, the
//! producer's `ClientConfig`, and the secrets to scrub from what librdkafka says.

use crate::config::{ConfigError, KafkaConfig};
use rdkafka::ClientConfig;
use rdkafka::error::KafkaError as RdKafkaError;

/// librdkafka properties the sink sets itself; `properties` refuses them.
pub(crate) const OWNED_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "metadata.broker.list",
    "client.id",
    "acks",
    "request.required.acks",
    "enable.idempotence",
    "transactional.id",
    "partitioner",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "request.timeout.ms",
    "message.max.bytes",
    "compression.codec",
    "compression.type",
    "allow.auto.create.topics",
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
];

/// librdkafka properties refused because they would weaken TLS or load native code: broker
/// certificate verification and trust roots are set only through the `tls` options, and no
/// plugin, engine or provider library is ever loaded. Compared ignoring case, with `_` read
/// as `.`.
const UNSAFE_PROPERTIES: &[&str] = &[
    "enable.ssl.certificate.verification",
    "ssl.ca.pem",
    "ssl.ca.certificate.stores",
    "ssl.ca.location",
    "ssl.endpoint.identification.algorithm",
    "ssl.engine.location",
    "ssl.engine.id",
    "ssl.providers",
    "plugin.library.paths",
    "https.ca.location",
    "https.ca.pem",
    "sasl.kerberos.kinit.cmd",
];

/// Room for headers and record framing on top of `max_record_bytes` in `message.max.bytes`.
pub(crate) const RECORD_OVERHEAD: usize = 65_536;
/// librdkafka's ceiling for `message.max.bytes`.
pub(crate) const MAX_MESSAGE_MAX_BYTES: usize = 1_000_000_000;

/// Whether the extra property `name` is refused for weakening TLS or loading native code.
pub(crate) fn is_unsafe_property(name: &str) -> bool {
    let n = name.to_ascii_lowercase().replace('_', ".");
    UNSAFE_PROPERTIES.contains(&n.as_str())
}

/// Whether a property's value must never be printed: its name mentions a password, a
/// secret, a key, a token, a credential or a JAAS/OAUTHBEARER config.
pub(crate) fn is_sensitive_property(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "password",
        "secret",
        "key",
        "token",
        "credential",
        "jaas",
        "oauthbearer",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// `text` with every secret replaced.
pub(crate) fn scrub<S: AsRef<str>>(secrets: &[S], text: &str) -> String {
    secrets.iter().fold(text.to_owned(), |t, s| {
        t.replace(s.as_ref(), ankusa_sink_core::REDACTED)
    })
}

/// Let librdkafka judge every property (names and values) without creating a client, so a
/// refused one is named; its value never reaches the error.
pub(crate) fn check_properties(config: &KafkaConfig) -> Result<(), ConfigError> {
    let secrets = config.secrets();
    match config.client_config().create_native_config() {
        Ok(_) => Ok(()),
        Err(RdKafkaError::ClientConfig(_, why, name, _value)) => Err(ConfigError::Property {
            why: (!is_sensitive_property(&name)).then(|| scrub(&secrets, &why)),
            name,
        }),
        Err(e) => Err(ConfigError::Client(scrub(&secrets, &e.to_string()))),
    }
}

impl KafkaConfig {
    /// The librdkafka configuration of the sink's producer.
    pub(crate) fn client_config(&self) -> ClientConfig {
        let timeout = self.produce_timeout_ms.get().to_string();
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.bootstrap_servers.join(","))
            .set("client.id", &self.client_id)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            // The Java client's default partitioner: keyed records land where Java puts them.
            .set("partitioner", "murmur2_random")
            .set("message.timeout.ms", &timeout)
            .set("request.timeout.ms", &timeout)
            .set(
                "message.max.bytes",
                (self.max_record_bytes.get() + RECORD_OVERHEAD)
                    .max(1_000_000)
                    .to_string(),
            )
            .set("compression.codec", self.compression.as_str())
            // Never create the topic: a missing one is the operator's to fix.
            .set("allow.auto.create.topics", "false")
            // Connect to the brokers as soon as metadata names them. With sparse connections
            // a producer whose first record comes after the bootstrap metadata answer leaves
            // the partition leader unconnected until the idempotent producer's 500 ms id
            // timer, which then finds no broker up and waits 500 ms more: every start paid
            // 0.5 or 1.0 s by a race (overridable in `properties`).
            .set("enable.sparse.connections", "false")
            // Fail records for a missing topic within the produce timeout rather than
            // after librdkafka's 30 s propagation grace (overridable in `properties`).
            .set(
                "topic.metadata.propagation.max.ms",
                (self.produce_timeout_ms.get() / 2).to_string(),
            );
        self.set_security(&mut c);
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }

    /// The librdkafka configuration of a source's consumer in `group`, starting a new group
    /// at `start` (`earliest` or `latest`): offsets committed only by the source, and only
    /// up to what its dispatcher finished; transactional records only once committed.
    #[cfg(feature = "source")]
    pub(crate) fn consumer_config(&self, group: &str, start: &str) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.bootstrap_servers.join(","))
            .set("client.id", &self.client_id)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", start)
            .set("isolation.level", "read_committed")
            .set("allow.auto.create.topics", "false");
        self.set_security(&mut c);
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }

    /// `security.protocol`, SASL and TLS.
    fn set_security(&self, c: &mut ClientConfig) {
        let protocol = match (&self.tls, &self.sasl) {
            (None, None) => "plaintext",
            (Some(_), None) => "ssl",
            (None, Some(_)) => "sasl_plaintext",
            (Some(_), Some(_)) => "sasl_ssl",
        };
        c.set("security.protocol", protocol);
        if let Some(sasl) = &self.sasl {
            c.set("sasl.mechanism", sasl.mechanism.as_str())
                .set("sasl.username", &sasl.username)
                .set("sasl.password", sasl.password.expose());
        }
        if let Some(tls) = &self.tls {
            for (k, v) in [
                ("ssl.ca.location", &tls.ca_location),
                ("ssl.certificate.location", &tls.certificate_location),
                ("ssl.key.location", &tls.key_location),
            ] {
                if let Some(v) = v {
                    c.set(k, v);
                }
            }
            if let Some(p) = &tls.key_password {
                c.set("ssl.key.password", p.expose());
            }
            c.set(
                "ssl.endpoint.identification.algorithm",
                if tls.verify_hostname { "https" } else { "none" },
            );
        }
    }

    /// Every secret value this configuration holds, to scrub from librdkafka's messages.
    pub(crate) fn secrets(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        if let Some(s) = &self.sasl {
            out.push(s.password.expose());
        }
        if let Some(p) = self.tls.as_ref().and_then(|t| t.key_password.as_ref()) {
            out.push(p.expose());
        }
        for (k, v) in &self.properties {
            if is_sensitive_property(k) {
                out.push(v);
            }
        }
        out.retain(|s| !s.is_empty());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Compression, SaslConfig, SaslMechanism};
    use std::time::Duration;

    fn base() -> KafkaConfig {
        KafkaConfig::new("h:1", "t").unwrap()
    }

    #[test]
    fn client_config_owns_the_delivery_guarantees() {
        let cfg = KafkaConfig::new("h:1,h:2", "t")
            .unwrap()
            .with_produce_timeout(Duration::from_millis(1500))
            .with_compression(Compression::Zstd)
            .with_allow_insecure(true)
            .unwrap()
            .with_sasl(SaslConfig::new(SaslMechanism::Plain, "u", "p"))
            .unwrap()
            .with_property("linger.ms", "1")
            .unwrap();
        let c = cfg.client_config();
        for (k, v) in [
            ("bootstrap.servers", "h:1,h:2"),
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("partitioner", "murmur2_random"),
            ("message.timeout.ms", "1500"),
            ("request.timeout.ms", "1500"),
            ("message.max.bytes", "1065536"),
            ("compression.codec", "zstd"),
            ("allow.auto.create.topics", "false"),
            ("enable.sparse.connections", "false"),
            ("topic.metadata.propagation.max.ms", "750"),
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", "PLAIN"),
            ("linger.ms", "1"),
        ] {
            assert_eq!(c.get(k), Some(v), "{k}");
        }
    }

    #[test]
    fn eager_connections_are_a_default_properties_may_change() {
        let cfg = KafkaConfig::new("h:1", "t")
            .unwrap()
            .with_property("enable.sparse.connections", "true")
            .unwrap();
        assert_eq!(
            cfg.client_config().get("enable.sparse.connections"),
            Some("true")
        );
    }

    #[test]
    fn properties_that_weaken_tls_or_load_code_are_refused_by_name() {
        for name in [
            "enable.ssl.certificate.verification",
            "ssl.ca.pem",
            "ssl.ca.certificate.stores",
            "plugin.library.paths",
            "ssl.engine.location",
            "ssl.providers",
            "ssl_engine_id",
            "ssl.engine.id",
            "SSL.CA.PEM",
            "https.ca.pem",
            "sasl.kerberos.kinit.cmd",
        ] {
            let err = base().with_property(name, "planted-value-77").unwrap_err();
            assert_eq!(err, ConfigError::UnsafeProperty(name.into()), "{name}");
            let text = err.to_string();
            assert!(text.contains(name), "{text}");
            assert!(!text.contains("planted-value-77"), "{text}");
        }
        // Owned ones stay owned (their own message); tuning and client identity pass.
        for name in OWNED_PROPERTIES {
            let err = base().with_property(*name, "x");
            assert!(matches!(err, Err(ConfigError::OwnedProperty(_))), "{name}");
        }
        for (name, value) in [
            ("ssl.crl.location", "x"),
            ("ssl.keystore.location", "x"),
            ("linger.ms", "5"),
        ] {
            base().with_property(name, value).unwrap();
        }
    }

    #[test]
    fn sensitive_property_names() {
        for name in [
            "sasl.oauthbearer.client.secret",
            "ssl.keystore.password",
            "ssl_key_x",
            "sasl.jaas.config",
            "x.token",
        ] {
            assert!(is_sensitive_property(name), "{name}");
        }
        for name in ["linger.ms", "batch.size", "ssl.crl.location"] {
            assert!(!is_sensitive_property(name), "{name}");
        }
    }

    #[test]
    fn librdkafka_judges_values_and_names_without_quoting_secrets() {
        let err = base().with_property("linger.ms", "soon").unwrap_err();
        assert!(
            matches!(&err, ConfigError::Property { name, why: Some(_) } if name == "linger.ms"),
            "{err:?}"
        );
        let err = base().with_property("no.such.property", "1").unwrap_err();
        assert!(err.to_string().contains("no.such.property"), "{err}");
        let err = base()
            .with_property("sasl.oauthbearer.client.secret.x", "planted-s3")
            .unwrap_err();
        assert!(!format!("{err} {err:?}").contains("planted-s3"), "{err}");
    }

    #[test]
    fn scrub_replaces_every_secret() {
        assert_eq!(
            scrub(&["pw1", "pw2"], "a pw1 b pw2 c pw1"),
            "a REDACTED b REDACTED c REDACTED"
        );
    }
}
