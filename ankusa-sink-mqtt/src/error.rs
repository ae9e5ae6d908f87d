//! [`MqttError`] and the one pure classifier, on MQTT 5 reason codes.

use crate::config::NoSubscriber;
use ankusa_sink_core::{Class, Failure};
use ankusa_sink_kit::Unrepresentable;

/// Why a delivery to an MQTT broker failed. Text never holds a secret (the password is
/// never printed, the URL has no userinfo); broker text goes through
/// [`printable`](ankusa_sink_kit::printable) before it gets here.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum MqttError {
    /// The TLS setup could not be built (an unreadable `tls_ca_file`, no certificate in
    /// it, no system roots). Nothing was sent.
    #[error("mqtt tls setup: {0}")]
    Tls(String),
    /// The broker refused the connection: the CONNACK's reason code.
    #[error("mqtt broker {host} refused the connection: CONNACK {code:#04x} ({})", reason_name(*.code))]
    Refused {
        /// `host:port`.
        host: String,
        /// The CONNACK reason code.
        code: u8,
    },
    /// The connection could not be made (refused, reset, TLS handshake, name lookup) or
    /// broke before its CONNACK. Nothing was published.
    #[error("mqtt broker {host}: cannot connect: {detail}")]
    Connect {
        /// `host:port`.
        host: String,
        /// The socket error's kind, when it was one.
        kind: Option<std::io::ErrorKind>,
        /// What failed (the client's text; it never holds the password).
        detail: String,
    },
    /// No CONNACK within `connect_timeout_ms`.
    #[error("mqtt broker {host}: no CONNACK within {ms} ms")]
    ConnectTimeout {
        /// `host:port`.
        host: String,
        /// The timeout.
        ms: u64,
    },
    /// The broker's CONNACK rules out what this sink does: QoS 1 (Maximum QoS 0), or
    /// retained messages (Retain Available 0) with `retain = true`.
    #[error("mqtt broker {host} does not support {what}")]
    Unsupported {
        /// `host:port`.
        host: String,
        /// What it does not support.
        what: &'static str,
    },
    /// The PUBLISH packet is over the Maximum Packet Size the broker announced in its
    /// CONNACK; nothing was sent.
    #[error(
        "message of {size} bytes (as a PUBLISH packet) is over the broker's Maximum Packet \
         Size of {max} bytes; not sent"
    )]
    TooLarge {
        /// The PUBLISH packet's size.
        size: usize,
        /// The broker's limit.
        max: u32,
    },
    /// A rendered topic no publish may use; nothing was sent.
    #[error("topic refused: {reason}; not sent")]
    Topic {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A value the topic template inserts (`{tenant_id}`, ...) holds `/`, which would add a
    /// topic level the template does not describe (a subscriber's `+` would not match);
    /// refused unless `topic_values_may_add_levels`. Nothing was sent.
    #[error(
        "topic_template: the hook's {placeholder} holds `/`, which would add a topic level \
         (topic_values_may_add_levels = true allows it); not sent"
    )]
    TopicValue {
        /// The placeholder whose value holds it (`tenant_id`, `source_id`, ...).
        placeholder: &'static str,
    },
    /// A value of the hook that no MQTT string may carry (NUL, a control character, a
    /// noncharacter, over 65,535 bytes), in the topic, the Content Type or a user property:
    /// Mosquitto would close the connection for it. Names the field, never the value;
    /// nothing was sent.
    #[error("{0}; not sent")]
    Unrepresentable(#[from] Unrepresentable),
    /// The broker answered the PUBLISH with a PUBACK whose reason code is not Success.
    #[error("mqtt PUBACK {code:#04x} ({}){}", reason_name(*.code), .reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    PubAck {
        /// The PUBACK reason code.
        code: u8,
        /// The broker's reason string, if any (printable).
        reason: Option<String>,
        /// The class of "No matching subscribers" (0x10).
        no_subscriber: NoSubscriber,
        /// The message was published with the retain flag (a retained message is kept
        /// even when nobody subscribes).
        retain: bool,
    },
    /// The connection ended before this publish's PUBACK: the broker's DISCONNECT reason
    /// code when it sent one, else a lost or abandoned connection.
    #[error("mqtt connection ended before the PUBACK{}: {detail}", .code.map(|c| format!(" (DISCONNECT {c:#04x}, {})", reason_name(c))).unwrap_or_default())]
    Disconnected {
        /// The DISCONNECT reason code, if the broker sent one.
        code: Option<u8>,
        /// Whether the PUBLISH had been written to the connection.
        sent: bool,
        /// What ended it.
        detail: String,
    },
    /// No PUBACK within `timeout_ms`; the connection is dropped and made again.
    #[error("mqtt: no PUBACK within {ms} ms")]
    AckTimeout {
        /// The timeout.
        ms: u64,
        /// Whether the PUBLISH had been written to the connection.
        sent: bool,
    },
}

/// The MQTT 5 name of a reason code (CONNACK, PUBACK and DISCONNECT share them).
pub(crate) fn reason_name(code: u8) -> &'static str {
    match code {
        0x00 => "Success",
        0x04 => "Disconnect with Will Message",
        0x10 => "No matching subscribers",
        0x80 => "Unspecified error",
        0x81 => "Malformed Packet",
        0x82 => "Protocol Error",
        0x83 => "Implementation specific error",
        0x84 => "Unsupported Protocol Version",
        0x85 => "Client Identifier not valid",
        0x86 => "Bad User Name or Password",
        0x87 => "Not authorized",
        0x88 => "Server unavailable",
        0x89 => "Server busy",
        0x8A => "Banned",
        0x8B => "Server shutting down",
        0x8C => "Bad authentication method",
        0x8D => "Keep Alive timeout",
        0x8E => "Session taken over",
        0x90 => "Topic Name invalid",
        0x91 => "Packet Identifier in use",
        0x93 => "Receive Maximum exceeded",
        0x94 => "Topic Alias invalid",
        0x95 => "Packet too large",
        0x96 => "Message rate too high",
        0x97 => "Quota exceeded",
        0x98 => "Administrative action",
        0x99 => "Payload format invalid",
        0x9A => "Retain not supported",
        0x9B => "QoS not supported",
        0x9C => "Use another server",
        0x9D => "Server moved",
        0x9F => "Connection rate exceeded",
        0xA0 => "Maximum connect time",
        _ => "unknown reason code",
    }
}

/// What dispatch does with `err`: a pure, deterministic function of the error, on the
/// MQTT 5 reason codes the broker sent (and the client's own findings), never on text.
///
/// | Error | Class |
/// | --- | --- |
/// | `TooLarge` (over the CONNACK's Maximum Packet Size, nothing sent) | `Permanent` |
/// | `Topic` (a rendered topic with a wildcard, NUL, a `$` start, empty or too long; nothing sent) | `Permanent` |
/// | `TopicValue` (an inserted value holds `/`; nothing sent) | `Permanent` |
/// | `Unrepresentable` (a control character or noncharacter in the topic, Content Type or a user property, or one over 65,535 bytes; nothing sent) | `Permanent` |
/// | PUBACK 0x10 No matching subscribers | `no_subscriber`: `Config` (default) or `Transient` (`ok` never fails) |
/// | PUBACK 0x87 Not authorized (an ACL refuses the topic) | `Config` |
/// | PUBACK 0x90 Topic Name invalid, 0x99 Payload format invalid | `Permanent` |
/// | PUBACK 0x97 Quota exceeded | `Throttled` |
/// | PUBACK 0x80 Unspecified, 0x83 Implementation specific, 0x91 Packet Identifier in use, any other | `Transient` |
/// | CONNACK 0x86 Bad User Name or Password, 0x87 Not authorized, 0x8A Banned, 0x8C Bad authentication method, 0x85 Client Identifier not valid, 0x84 Unsupported Protocol Version, 0x95 Packet too large (the CONNECT), 0x9A Retain not supported, 0x9B QoS not supported, 0x9C Use another server, 0x9D Server moved | `Config` |
/// | CONNACK 0x89 Server busy, 0x97 Quota exceeded, 0x9F Connection rate exceeded | `Throttled` |
/// | CONNACK 0x88 Server unavailable, 0x80, 0x81, 0x82, 0x83, any other | `Transient` |
/// | `Unsupported` (CONNACK Maximum QoS 0; Retain Available 0 with `retain`), `Tls` (the TLS setup) | `Config` |
/// | DISCONNECT 0x87 Not authorized, 0x9A Retain not supported, 0x9B QoS not supported, 0x9C Use another server, 0x9D Server moved | `Config` |
/// | DISCONNECT 0x89 Server busy, 0x96 Message rate too high, 0x97 Quota exceeded | `Throttled` |
/// | DISCONNECT 0x8B Server shutting down, 0x8E Session taken over, 0x90, 0x95, 0x99 (which publish is unknown), any other; a connection lost without DISCONNECT | `Transient` |
/// | `Connect` (refused, reset, TLS handshake), `ConnectTimeout`, `AckTimeout` | `Transient` |
pub(crate) fn classify(err: &MqttError) -> Class {
    match err {
        MqttError::TooLarge { .. }
        | MqttError::Topic { .. }
        | MqttError::TopicValue { .. }
        | MqttError::Unrepresentable(_) => Class::Permanent,
        MqttError::Tls(_) | MqttError::Unsupported { .. } => Class::Config,
        MqttError::PubAck {
            code,
            no_subscriber,
            ..
        } => match code {
            0x10 => match no_subscriber {
                // `Ok` never becomes an error; should one be built, it is a passing state.
                NoSubscriber::Config => Class::Config,
                NoSubscriber::Transient | NoSubscriber::Ok => Class::Transient,
            },
            0x87 => Class::Config,
            0x90 | 0x99 => Class::Permanent,
            0x97 => Class::Throttled,
            _ => Class::Transient,
        },
        MqttError::Refused { code, .. } => match code {
            0x84..=0x87 | 0x8A | 0x8C | 0x95 | 0x9A..=0x9D => Class::Config,
            0x89 | 0x97 | 0x9F => Class::Throttled,
            _ => Class::Transient,
        },
        MqttError::Disconnected { code, .. } => match code {
            Some(0x87 | 0x9A..=0x9D) => Class::Config,
            Some(0x89 | 0x96 | 0x97) => Class::Throttled,
            _ => Class::Transient,
        },
        MqttError::Connect { .. }
        | MqttError::ConnectTimeout { .. }
        | MqttError::AckTimeout { .. } => Class::Transient,
    }
}

/// Whether the message may have reached the broker: a pure function like [`classify`].
///
/// | Error | May have landed |
/// | --- | --- |
/// | `Tls`, `Refused`, `Connect`, `ConnectTimeout`, `Unsupported`, `TooLarge`, `Topic`, `TopicValue`, `Unrepresentable` (nothing published) | `Some(false)` |
/// | a PUBACK other than 0x10 (the broker answered no) | `Some(false)` |
/// | PUBACK 0x10 No matching subscribers | `Some(retain)`: a retained message is kept |
/// | `Disconnected`, `AckTimeout` after the PUBLISH was written | `Some(true)` |
/// | `Disconnected`, `AckTimeout` before it was (still queued in the client) | `Some(false)` |
pub(crate) fn landed(err: &MqttError) -> Option<bool> {
    match err {
        MqttError::PubAck {
            code: 0x10, retain, ..
        } => Some(*retain),
        MqttError::Disconnected { sent, .. } | MqttError::AckTimeout { sent, .. } => Some(*sent),
        MqttError::Tls(_)
        | MqttError::Refused { .. }
        | MqttError::Connect { .. }
        | MqttError::ConnectTimeout { .. }
        | MqttError::Unsupported { .. }
        | MqttError::TooLarge { .. }
        | MqttError::Topic { .. }
        | MqttError::TopicValue { .. }
        | MqttError::Unrepresentable(_)
        | MqttError::PubAck { .. } => Some(false),
    }
}

impl From<MqttError> for Failure {
    fn from(e: MqttError) -> Self {
        let landed = landed(&e);
        Failure::new(classify(&e), e).with_may_have_landed(landed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn puback(code: u8, no_subscriber: NoSubscriber) -> MqttError {
        MqttError::PubAck {
            code,
            reason: None,
            no_subscriber,
            retain: false,
        }
    }

    fn refused(code: u8) -> MqttError {
        MqttError::Refused {
            host: "h:1883".into(),
            code,
        }
    }

    fn disconnected(code: Option<u8>) -> MqttError {
        MqttError::Disconnected {
            code,
            sent: true,
            detail: "x".into(),
        }
    }

    /// Every code of every row; the rows a real broker produces are provoked for real in
    /// `tests/it/classify.rs` too (mosquitto, or a scripted broker parsed by the client).
    #[test]
    fn every_code_of_the_table() {
        use NoSubscriber::{Config, Transient};
        for (e, want) in [
            (MqttError::TooLarge { size: 2, max: 1 }, Class::Permanent),
            (MqttError::Topic { reason: "x" }, Class::Permanent),
            (
                MqttError::TopicValue {
                    placeholder: "tenant_id",
                },
                Class::Permanent,
            ),
            (
                Unrepresentable::new("user property \"ankusa_id\"", "x").into(),
                Class::Permanent,
            ),
            (puback(0x10, Config), Class::Config),
            (puback(0x10, Transient), Class::Transient),
            (puback(0x87, Config), Class::Config),
            (puback(0x90, Config), Class::Permanent),
            (puback(0x99, Config), Class::Permanent),
            (puback(0x97, Config), Class::Throttled),
            (puback(0x80, Config), Class::Transient),
            (puback(0x83, Config), Class::Transient),
            (puback(0x91, Config), Class::Transient),
            (MqttError::Tls("x".into()), Class::Config),
            (
                MqttError::Unsupported {
                    host: "h".into(),
                    what: "QoS 1",
                },
                Class::Config,
            ),
            (
                MqttError::Connect {
                    host: "h".into(),
                    kind: Some(std::io::ErrorKind::ConnectionRefused),
                    detail: "x".into(),
                },
                Class::Transient,
            ),
            (
                MqttError::ConnectTimeout {
                    host: "h".into(),
                    ms: 1,
                },
                Class::Transient,
            ),
            (
                MqttError::AckTimeout { ms: 1, sent: true },
                Class::Transient,
            ),
            (disconnected(None), Class::Transient),
        ] {
            assert_eq!(classify(&e), want, "{e}");
        }
        for code in [
            0x84, 0x85, 0x86, 0x87, 0x8A, 0x8C, 0x95, 0x9A, 0x9B, 0x9C, 0x9D,
        ] {
            assert_eq!(classify(&refused(code)), Class::Config, "{code:#x}");
        }
        for code in [0x89, 0x97, 0x9F] {
            assert_eq!(classify(&refused(code)), Class::Throttled, "{code:#x}");
        }
        for code in [0x80, 0x81, 0x82, 0x83, 0x88] {
            assert_eq!(classify(&refused(code)), Class::Transient, "{code:#x}");
        }
        for code in [0x87, 0x9A, 0x9B, 0x9C, 0x9D] {
            assert_eq!(
                classify(&disconnected(Some(code))),
                Class::Config,
                "{code:#x}"
            );
        }
        for code in [0x89, 0x96, 0x97] {
            assert_eq!(
                classify(&disconnected(Some(code))),
                Class::Throttled,
                "{code:#x}"
            );
        }
        for code in [0x80, 0x8B, 0x8D, 0x8E, 0x90, 0x95, 0x98, 0x99] {
            assert_eq!(
                classify(&disconnected(Some(code))),
                Class::Transient,
                "{code:#x}"
            );
        }
    }

    #[test]
    fn landing_rows() {
        let retained = MqttError::PubAck {
            code: 0x10,
            reason: None,
            no_subscriber: NoSubscriber::Config,
            retain: true,
        };
        for (e, want) in [
            (MqttError::Tls("x".into()), Some(false)),
            (refused(0x86), Some(false)),
            (MqttError::TooLarge { size: 2, max: 1 }, Some(false)),
            (MqttError::Topic { reason: "x" }, Some(false)),
            (
                MqttError::TopicValue {
                    placeholder: "tenant_id",
                },
                Some(false),
            ),
            (Unrepresentable::new("topic", "x").into(), Some(false)),
            (puback(0x97, NoSubscriber::Config), Some(false)),
            (puback(0x10, NoSubscriber::Config), Some(false)),
            (retained, Some(true)),
            (disconnected(None), Some(true)),
            (
                MqttError::Disconnected {
                    code: Some(0x8B),
                    sent: false,
                    detail: "x".into(),
                },
                Some(false),
            ),
            (MqttError::AckTimeout { ms: 1, sent: true }, Some(true)),
            (MqttError::AckTimeout { ms: 1, sent: false }, Some(false)),
        ] {
            assert_eq!(landed(&e), want, "{e}");
        }
    }

    #[test]
    fn text_names_the_code() {
        let e = puback(0x97, NoSubscriber::Config);
        assert_eq!(e.to_string(), "mqtt PUBACK 0x97 (Quota exceeded)");
        assert!(
            refused(0x86)
                .to_string()
                .contains("Bad User Name or Password")
        );
        assert!(
            disconnected(Some(0x89))
                .to_string()
                .contains("DISCONNECT 0x89, Server busy")
        );
    }
}
