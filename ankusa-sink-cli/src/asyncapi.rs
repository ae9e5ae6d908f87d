//! An AsyncAPI 3.0 document for several sinks.

use ankusa_sink_core::{Capabilities, Description, Payload, Subject};
use serde_json::{Map, Value, json};

/// Only `payload: message` descriptions reach the document; sinks that send the raw body
/// (HTTP) or describe nothing (log) are left out. One server per protocol, host and path
/// (two sinks on one broker share it); one channel, operation and message per sink, the
/// message carrying that sink's message bindings over the one Message v1 schema, and its
/// capability manifest (`capabilities[i]`, when given) as `x-ankusa-capabilities`.
pub(crate) fn document(
    subject: &Subject,
    described: &[(&'static str, Option<Description>)],
    capabilities: &[Option<Capabilities>],
) -> Value {
    let mut servers = Map::new();
    let mut server_of: Vec<(&str, Option<&str>, Option<&str>, String)> = Vec::new();
    let mut channels = Map::new();
    let mut operations = Map::new();
    let mut messages = Map::new();
    for (i, (kind, d)) in described.iter().enumerate() {
        let Some(d) = d.as_ref().filter(|d| d.payload == Payload::Message) else {
            continue;
        };
        let key = (
            d.protocol.as_str(),
            d.host.as_deref(),
            d.pathname.as_deref(),
        );
        let server = match server_of
            .iter()
            .find(|(p, h, path, _)| (*p, *h, *path) == key)
        {
            Some((.., name)) => name.clone(),
            None => {
                let name = format!("{}{}", d.protocol, server_of.len());
                let mut server = Map::new();
                server.insert("host".into(), json!(d.host.clone().unwrap_or_default()));
                server.insert("protocol".into(), json!(d.protocol));
                if let Some(p) = &d.pathname {
                    server.insert("pathname".into(), json!(p));
                }
                servers.insert(name.clone(), Value::Object(server));
                server_of.push((key.0, key.1, key.2, name.clone()));
                name
            }
        };
        let name = format!("{kind}{i}");
        let mut message = Map::new();
        message.insert("name".into(), json!("SinkMessageV1"));
        message.insert("contentType".into(), json!("application/json"));
        message.insert(
            "payload".into(),
            json!({"$ref": "#/components/schemas/SinkMessageV1"}),
        );
        if !d.message_bindings.is_empty() {
            message.insert("bindings".into(), Value::Object(d.message_bindings.clone()));
        }
        if let Some(Some(c)) = capabilities.get(i) {
            // A specification extension: the schema allows `x-` keys on a message.
            message.insert(
                "x-ankusa-capabilities".into(),
                serde_json::to_value(c).expect("capabilities serialize"),
            );
        }
        messages.insert(name.clone(), Value::Object(message));
        let mut channel = Map::new();
        if let Some(a) = &d.address {
            channel.insert("address".into(), json!(a));
        }
        channel.insert(
            "servers".into(),
            json!([{"$ref": format!("#/servers/{server}")}]),
        );
        channel.insert(
            "messages".into(),
            json!({"hook": {"$ref": format!("#/components/messages/{name}")}}),
        );
        if !d.bindings.is_empty() {
            channel.insert("bindings".into(), Value::Object(d.bindings.clone()));
        }
        channels.insert(name.clone(), Value::Object(channel));
        let mut operation = Map::new();
        operation.insert("action".into(), json!("send"));
        operation.insert(
            "channel".into(),
            json!({"$ref": format!("#/channels/{name}")}),
        );
        if !d.operation_bindings.is_empty() {
            operation.insert(
                "bindings".into(),
                Value::Object(d.operation_bindings.clone()),
            );
        }
        operations.insert(format!("publish_{name}"), Value::Object(operation));
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
            "messages": messages,
            "schemas": {
                "SinkMessageV1": ankusa_message::json_schema(),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amqp(host: &str, exchange: &str) -> Description {
        let mut d = Description::new("amqp", Payload::Message);
        d.host = Some(host.into());
        d.address = Some(exchange.into());
        d
    }

    #[test]
    fn only_message_payloads_are_documented() {
        let http = Description::new("http", Payload::Body);
        let doc = document(
            &Subject::new("s", None),
            &[
                ("amqp", Some(amqp("127.0.0.1:5672", "hooks"))),
                ("http", Some(http)),
                ("log", None),
            ],
            &[],
        );
        assert_eq!(doc["asyncapi"], "3.0.0");
        assert_eq!(doc["servers"].as_object().unwrap().len(), 1);
        assert_eq!(doc["servers"]["amqp0"]["protocol"], "amqp");
        assert_eq!(doc["channels"]["amqp0"]["address"], "hooks");
        assert_eq!(doc["operations"]["publish_amqp0"]["action"], "send");
        assert_eq!(doc["channels"].as_object().unwrap().len(), 1);
    }

    #[test]
    fn one_server_per_protocol_host_and_path_and_bindings_where_they_belong() {
        let mut kafka = Description::new("kafka", Payload::Message);
        kafka.host = Some("127.0.0.1:5672".into());
        kafka.address = Some("hooks".into());
        kafka
            .bindings
            .insert("kafka".into(), json!({"topic": "hooks"}));
        kafka
            .message_bindings
            .insert("kafka".into(), json!({"key": {"type": "string"}}));
        let mut vhost = amqp("127.0.0.1:5672", "z");
        vhost.pathname = Some("/other".into());
        let doc = document(
            &Subject::new("s", None),
            &[
                ("amqp", Some(amqp("127.0.0.1:5672", "x"))),
                ("amqp", Some(amqp("127.0.0.1:5672", "y"))),
                ("amqp", Some(amqp("10.0.0.1:5672", "x"))),
                ("amqp", Some(vhost)),
                ("kafka", Some(kafka)),
            ],
            &[],
        );
        let servers = doc["servers"].as_object().unwrap();
        assert_eq!(servers.len(), 4, "{servers:?}");
        let server = |c: &str| doc["channels"][c]["servers"][0]["$ref"].clone();
        assert_eq!(server("amqp0"), server("amqp1"));
        assert_ne!(server("amqp0"), server("amqp2"));
        assert_ne!(server("amqp0"), server("amqp3"));
        assert_eq!(
            doc["channels"]["kafka4"]["bindings"]["kafka"]["topic"],
            "hooks"
        );
        assert_eq!(
            doc["components"]["messages"]["kafka4"]["bindings"]["kafka"]["key"]["type"],
            "string"
        );
        assert_eq!(
            doc["components"]["messages"]["amqp0"]["payload"]["$ref"],
            "#/components/schemas/SinkMessageV1"
        );
        assert!(
            doc["components"]["messages"]["amqp0"]
                .get("bindings")
                .is_none()
        );
    }
}
