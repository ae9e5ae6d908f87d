//! What a Kinesis record and an EventBridge entry carry: the Message v1 body alone,
//! which holds everything the attributes would (id, tenant, headers, idempotency key).

use crate::error::AwsError;
#[cfg(feature = "eventbridge")]
use ankusa_message::Body;
use ankusa_message::Outgoing;
#[cfg(feature = "kinesis")]
use ankusa_sink_kit::Unrepresentable;
use std::fmt;

#[cfg(feature = "kinesis")]
/// One prepared Kinesis record.
///
/// `Debug` shows sizes only: the data and the key carry the hook.
#[derive(Clone)]
pub(crate) struct Record {
    /// The Message v1 JSON.
    pub(crate) data: Vec<u8>,
    /// The partition key: the key template's rendering, else the idempotency key.
    pub(crate) partition_key: String,
}

#[cfg(feature = "kinesis")]
impl Record {
    /// What Kinesis counts toward its record limit: data plus partition key (UTF-8).
    pub(crate) fn size(&self) -> usize {
        self.data.len() + self.partition_key.len()
    }
}

#[cfg(feature = "kinesis")]
/// A partition key Kinesis takes: one over its 256 characters becomes `sha256:` and the
/// hex SHA-256 of the key (71 characters), so the same hook key still reaches the same
/// shard instead of failing every such hook.
fn partition_key(key: &str) -> String {
    use sha2::Digest as _;
    if key.chars().count() <= crate::config::KINESIS_MAX_PARTITION_KEY_CHARS {
        return key.to_owned();
    }
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(key.as_bytes()))
    )
}

#[cfg(feature = "kinesis")]
/// A partition key Kinesis takes: 1-256 Unicode characters (the `PutRecord` API
/// reference). An over-long key was hashed already ([`partition_key`]); an empty one (a key
/// template that renders `""`, such as `{tenant_id}` for a hook without a tenant) would be
/// refused with `ValidationException`. Kinesis names no character rule, and hashes the
/// key's UTF-8 bytes: any character is kept.
fn check_partition_key(key: &str) -> Result<(), Unrepresentable> {
    if key.is_empty() {
        return Err(Unrepresentable::new("partition key", "is empty"));
    }
    Ok(())
}

#[cfg(feature = "kinesis")]
/// The Kinesis record for `out`: the Message v1 body as the data, the rendered key (the
/// layout's key template) or the idempotency key as the partition key.
///
/// # Errors
/// [`AwsError::Unrepresentable`] for an empty partition key.
pub(crate) fn to_record(out: Outgoing<'_>) -> Result<Record, AwsError> {
    let partition_key = partition_key(out.key().unwrap_or(out.idempotency_key()));
    check_partition_key(&partition_key)?;
    Ok(Record {
        data: out.into_body().as_bytes().to_vec(),
        partition_key,
    })
}

#[cfg(feature = "kinesis")]
impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("data_bytes", &self.data.len())
            .field("partition_key_chars", &self.partition_key.chars().count())
            .finish()
    }
}

#[cfg(feature = "eventbridge")]
/// One prepared EventBridge entry: its `Detail`; `Source`, `DetailType` and `EventBusName`
/// are the sink's, the same for every entry.
///
/// `Debug` shows the size only.
#[derive(Clone)]
pub(crate) struct Event {
    /// The Message v1 JSON (an object, as `Detail` must be).
    pub(crate) detail: String,
    /// What EventBridge counts: `Detail`, `Source` and `DetailType` (UTF-8 bytes).
    pub(crate) size: usize,
}

#[cfg(feature = "eventbridge")]
/// The EventBridge entry for `out`, whose `Source` and `DetailType` are `source` and
/// `detail_type`.
pub(crate) fn to_event(out: Outgoing<'_>, source: &str, detail_type: &str) -> Event {
    let detail = match out.into_body() {
        Body::Message(json) => String::from_utf8(json).expect("Message v1 is JSON, hence UTF-8"),
        Body::Raw(raw) => String::from_utf8_lossy(&raw).into_owned(),
    };
    Event {
        size: detail.len() + source.len() + detail_type.len(),
        detail,
    }
}

#[cfg(feature = "eventbridge")]
impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event").field("size", &self.size).finish()
    }
}

#[cfg(all(test, feature = "kinesis", feature = "eventbridge"))]
mod tests {
    use super::*;
    use ankusa_message::template::{AbsentTenant, KeyTemplate};
    use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, encode};
    use ankusa_sink_core::{Ctx, Envelope};

    fn layout() -> Layout {
        Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Drop)
    }

    #[test]
    fn a_record_is_the_message_keyed_by_the_template_or_the_idempotency_key() {
        let env = Envelope::builder("h1", "stripe", &b"{\"a\":1}"[..])
            .tenant_id("acme")
            .dedupe_key("evt_1")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        let body = encode(&env, &ctx, Some(DEFAULT_INLINE_MAX_BYTES)).unwrap();
        let r = to_record(Outgoing::new(&env, &ctx, &layout()).unwrap()).unwrap();
        assert_eq!(r.data, body);
        assert_eq!(r.partition_key, "acme:stripe:evt_1");
        assert_eq!(r.size(), body.len() + "acme:stripe:evt_1".len());

        let keyed = layout().with_key(
            KeyTemplate::parse("{tenant_id}/{source_id}", AbsentTenant::Default).unwrap(),
        );
        let r = to_record(Outgoing::new(&env, &ctx, &keyed).unwrap()).unwrap();
        assert_eq!((r.partition_key.as_str(), &r.data), ("acme/stripe", &body));
        let bare = Envelope::builder("h2", "gh", "").build().unwrap();
        let ctx = Ctx::for_envelope(&bare);
        let r = to_record(Outgoing::new(&bare, &ctx, &keyed).unwrap()).unwrap();
        assert_eq!(r.partition_key, "default/gh");
        let text = format!("{r:?}");
        assert!(
            !text.contains("default/gh") && !text.contains("\"v\""),
            "{text}"
        );
    }

    #[test]
    fn an_over_long_key_is_hashed_the_same_way_every_time() {
        let long = "k".repeat(300);
        let env = Envelope::builder("h1", "stripe", "")
            .dedupe_key(long.clone())
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env);
        let a = to_record(Outgoing::new(&env, &ctx, &layout()).unwrap()).unwrap();
        let b = to_record(Outgoing::new(&env, &ctx, &layout()).unwrap()).unwrap();
        assert_eq!(a.partition_key, b.partition_key);
        assert!(
            a.partition_key.starts_with("sha256:"),
            "{}",
            a.partition_key
        );
        assert_eq!(a.partition_key.len(), 71);
        let edge = "é".repeat(256);
        assert_eq!(
            partition_key(&edge),
            edge,
            "256 characters, 512 bytes: kept"
        );
    }

    #[test]
    fn an_event_is_the_message_as_detail() {
        let env = Envelope::builder("h1", "stripe", "x").build().unwrap();
        let ctx = Ctx::for_envelope(&env);
        let body = encode(&env, &ctx, Some(DEFAULT_INLINE_MAX_BYTES)).unwrap();
        let e = to_event(Outgoing::new(&env, &ctx, &layout()).unwrap(), "app", "Hook");
        assert_eq!(e.detail.as_bytes(), &body[..]);
        assert!(
            serde_json::from_str::<serde_json::Value>(&e.detail)
                .unwrap()
                .is_object()
        );
        assert_eq!(e.size, body.len() + 3 + 4);
        assert_eq!(format!("{e:?}"), format!("Event {{ size: {} }}", e.size));
    }
}
