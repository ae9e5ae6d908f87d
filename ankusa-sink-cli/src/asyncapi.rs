//! An AsyncAPI 3.0 document for several sinks.

use ankusa_sink_core::{Description, Payload, Subject};
use serde_json::{Map, Value, json};

/// Only `payload: message` descriptions reach the document; sinks that send the raw body
/// (HTTP) or describe nothing (log) are left out.
pub(crate) fn document(
    subject: &Subject,
    described: &[(&'static str, Option<Description>)],
) -> Value {
    let mut servers = Map::new();
    let mut channels = Map::new();
    let mut operations = Map::new();
    for (i, (kind, d)) in described.iter().enumerate() {
        let Some(d) = d.as_ref().filter(|d| d.payload == Payload::Message) else {
            continue;
        };
        let name = format!("{kind}{i}");
        let mut server = Map::new();
        server.insert("host".into(), json!(d.host.clone().unwrap_or_default()));
        server.insert("protocol".into(), json!(d.protocol));
        if let Some(p) = &d.pathname {
            server.insert("pathname".into(), json!(p));
        }
        servers.insert(name.clone(), Value::Object(server));
        let mut channel = Map::new();
        if let Some(a) = &d.address {
            channel.insert("address".into(), json!(a));
        }
        channel.insert(
            "servers".into(),
            json!([{"$ref": format!("#/servers/{name}")}]),
        );
        channel.insert(
            "messages".into(),
            json!({"hook": {"$ref": "#/components/messages/SinkMessageV1"}}),
        );
        if !d.bindings.is_empty() {
            channel.insert("bindings".into(), Value::Object(d.bindings.clone()));
        }
        channels.insert(name.clone(), Value::Object(channel));
        operations.insert(
            format!("publish_{name}"),
            json!({"action": "send", "channel": {"$ref": format!("#/channels/{name}")}}),
        );
    }
    json!({
        "asyncapi": "3.0.0",
        "info": {
            "title": format!("Ankusa hooks of source {}", subject.source_id),
            "version": "1.0.0",
        },
        "servers": servers,
        "channels": channels,
        "operations": operations,
        "components": {
            "messages": {
                "SinkMessageV1": {
                    "name": "SinkMessageV1",
                    "contentType": "application/json",
                    "payload": ankusa_sink_core::message::json_schema(),
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_message_payloads_are_documented() {
        let mut amqp = Description::new("amqp", Payload::Message);
        amqp.host = Some("127.0.0.1:5672".into());
        amqp.address = Some("hooks".into());
        let http = Description::new("http", Payload::Body);
        let doc = document(
            &Subject::new("s", None),
            &[("amqp", Some(amqp)), ("http", Some(http)), ("log", None)],
        );
        assert_eq!(doc["asyncapi"], "3.0.0");
        assert_eq!(doc["servers"].as_object().unwrap().len(), 1);
        assert_eq!(doc["servers"]["amqp0"]["protocol"], "amqp");
        assert_eq!(doc["channels"]["amqp0"]["address"], "hooks");
        assert_eq!(doc["operations"]["publish_amqp0"]["action"], "send");
    }
}
