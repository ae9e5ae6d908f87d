//! The Message v1 JSON Schema.

/// The Message v1 JSON Schema (draft 2020-12 keywords), as text: what
/// [`encode`] writes, checked against it in this crate's tests. AsyncAPI documents embed
/// it ([`json_schema`]).
const JSON_SCHEMA: &str = r#"{
  "type": "object",
  "required": ["v", "id", "source_id", "received_at", "size", "sha256", "dedupe_key",
               "replay_id", "idempotency_key", "headers"],
  "properties": {
    "v": {"const": 1},
    "id": {"type": "string"},
    "source_id": {"type": "string"},
    "tenant_id": {"type": ["string", "null"]},
    "received_at": {"type": "integer", "description": "Unix milliseconds"},
    "content_type": {"type": ["string", "null"]},
    "size": {"type": "integer"},
    "dedupe_key": {"type": ["string", "null"]},
    "replay_id": {"type": ["string", "null"]},
    "idempotency_key": {"type": "string"},
    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
    "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    "body_base64": {"type": "string", "contentEncoding": "base64"},
    "claim": {"type": "string", "pattern": "^urn:ankusa:claim:v1:[A-Za-z0-9_-]{1,64}:[0-7][0-9A-HJKMNP-TV-Z]{25}$"}
  },
  "oneOf": [{"required": ["body_base64"]}, {"required": ["claim"]}]
}"#;

/// The Message v1 JSON Schema: the module table as a schema, for AsyncAPI documents and
/// consumers' validators. [`encode`](crate::encode)'s output is valid against it.
pub fn json_schema() -> serde_json::Value {
    serde_json::from_str(JSON_SCHEMA).expect("the Message v1 schema is JSON")
}
