//! Where a sink publishes, for AsyncAPI documents; and URL redaction.

use serde::{Deserialize, Serialize};

/// The hook a description is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    /// The source id.
    pub source_id: String,
    /// The tenant; `None` when it varies from hook to hook.
    pub tenant_id: Option<String>,
}

impl Subject {
    /// A subject.
    pub fn new(source_id: impl Into<String>, tenant_id: Option<String>) -> Self {
        Subject {
            source_id: source_id.into(),
            tenant_id,
        }
    }
}

/// What the destination receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Payload {
    /// The Message v1 JSON (queue sinks). Only these reach an AsyncAPI document.
    Message,
    /// The raw hook body (HTTP).
    Body,
    /// A CloudEvent (a sink with `format = "cloudevents"` or `"cloudevents-structured"`).
    /// Not in an AsyncAPI document, which describes Message v1 channels.
    CloudEvent,
}

/// Where a sink publishes: an AsyncAPI server plus channel.
///
/// Never contains credentials or URL userinfo: build hosts and URLs with
/// `ankusa_sink_kit::{host_port, redact_url}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Description {
    /// AsyncAPI protocol: `http`, `https`, `kafka`, `amqp`, `amqps`, `sqs`, `sns`, `googlepubsub`.
    pub protocol: String,
    /// Server host (and port), without userinfo.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Server path (e.g. an AMQP vhost).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pathname: Option<String>,
    /// The channel address (topic, queue, exchange, URL path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Channel bindings (the AsyncAPI channel's `bindings` object: the Kafka topic, the
    /// AMQP exchange, the SQS queue, the SNS topic). A binding whose required fields the
    /// sink cannot fill is left out, never emitted empty.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty", default)]
    pub bindings: serde_json::Map<String, serde_json::Value>,
    /// Message bindings (the Kafka key schema, the Pub/Sub ordering key).
    #[serde(skip_serializing_if = "serde_json::Map::is_empty", default)]
    pub message_bindings: serde_json::Map<String, serde_json::Value>,
    /// Operation bindings (the HTTP method).
    #[serde(skip_serializing_if = "serde_json::Map::is_empty", default)]
    pub operation_bindings: serde_json::Map<String, serde_json::Value>,
    /// What travels.
    pub payload: Payload,
    /// Options computed per hook (e.g. `routing_key`), so the address is a template.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub computed: Vec<String>,
}

impl Description {
    /// A description with no host, address, bindings or computed options.
    pub fn new(protocol: impl Into<String>, payload: Payload) -> Self {
        Description {
            protocol: protocol.into(),
            host: None,
            pathname: None,
            address: None,
            bindings: serde_json::Map::new(),
            message_bindings: serde_json::Map::new(),
            operation_bindings: serde_json::Map::new(),
            payload,
            computed: Vec::new(),
        }
    }
}

/// Placeholder written over redacted parts (`Secret`'s `Debug`, an envelope's path).
pub(crate) const REDACTED: &str = "REDACTED";

/// `REDACTED-PATH-` and the first 8 hex digits of the path's SHA-256: how an envelope's
/// `Debug` shows a path (it may carry a token) while two paths can still be told apart.
pub(crate) fn redacted_path(path: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(path.as_bytes());
    let mut out = format!("{REDACTED}-PATH-");
    for b in &digest[..4] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape() {
        let mut d = Description::new("amqp", Payload::Message);
        d.host = Some("127.0.0.1:5672".into());
        d.computed.push("routing_key".into());
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"protocol":"amqp","host":"127.0.0.1:5672","payload":"message","computed":["routing_key"]})
        );
    }
}
