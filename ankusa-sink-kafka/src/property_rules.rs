//! What the sink knows about librdkafka properties apart from any configuration: those it
//! sets itself, those it refuses, those whose values are secret, librdkafka's size ceiling,
//! and scrubbing secrets from librdkafka's text. Plain rules, in a module of their own so
//! that `config` (which enforces them) and `properties` (which builds the `ClientConfig`)
//! both read them without importing each other.

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
        t.replace(s.as_ref(), ankusa_sink_kit::REDACTED)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn scrub_replaces_every_secret() {
        assert_eq!(
            scrub(&["pw1", "pw2"], "a pw1 b pw2 c pw1"),
            "a REDACTED b REDACTED c REDACTED"
        );
    }
}
