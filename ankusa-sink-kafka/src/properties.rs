//! The librdkafka side of a [`KafkaConfig`]: the producer's (and a source's consumer's)
//! `ClientConfig`, and the secrets to scrub from what librdkafka says. The properties the
//! sink owns or refuses are in `property_rules.rs`.

use crate::config::KafkaConfig;
use crate::property_rules::{RECORD_OVERHEAD, is_sensitive_property};
use rdkafka::ClientConfig;

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
}
