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
}

/// Where a sink publishes: an AsyncAPI server plus channel.
///
/// Never contains credentials or URL userinfo: build hosts and URLs with [`redact_url`].
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
    /// Protocol bindings (AsyncAPI `bindings` object for the channel/operation).
    #[serde(skip_serializing_if = "serde_json::Map::is_empty", default)]
    pub bindings: serde_json::Map<String, serde_json::Value>,
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
            payload,
            computed: Vec::new(),
        }
    }
}

/// Placeholder written over redacted parts.
pub const REDACTED: &str = "REDACTED";

/// A URL fit for logs, errors and descriptions: userinfo removed, every query value
/// replaced by `REDACTED` (webhook URLs carry tokens there), fragment dropped. Text that is
/// not an absolute URL is returned as `REDACTED` rather than risk printing a secret.
pub fn redact_url(raw: &str) -> String {
    let Ok(mut url) = url::Url::parse(raw) else {
        return REDACTED.to_owned();
    };
    // Setting fails only for URLs that cannot have userinfo (data:, mailto:), which have none.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_fragment(None);
    if url.query().is_some() {
        let keys: Vec<String> = url.query_pairs().map(|(k, _)| k.into_owned()).collect();
        let mut q = url.query_pairs_mut();
        q.clear();
        for k in keys {
            q.append_pair(&k, REDACTED);
        }
    }
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(
            redact_url("amqp://user:pa55@127.0.0.1:5672/vh"),
            "amqp://127.0.0.1:5672/vh"
        );
        assert_eq!(
            redact_url("https://u@h.example/p?token=abc&x=1#frag"),
            "https://h.example/p?token=REDACTED&x=REDACTED"
        );
        assert_eq!(redact_url("not a url pa55"), "REDACTED");
        assert_eq!(redact_url("http://h/"), "http://h/");
    }

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
