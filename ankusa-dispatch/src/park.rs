//! The park record: a (hook, sink) pair waiting for a far-off retry, as it is written to the
//! sink's park destination and read back. One JSON object:
//!
//! ```json
//! {"ankusa_park":{"v":1,"sink":"bad","attempts":3,"first_attempt_ms":1765130000000,
//!   "not_before_ms":1765133600000,"parked_at_ms":1765130000500,"class":"retry_after"},
//!  "envelope":{"id":"h1","source_id":"stripe","body":"...", ...}}
//! ```
//!
//! `envelope` is the hook as `gen` prints it, every header kept (it is delivered later as
//! it would have been now). The record travels as the body of a message: a sink that sends
//! the body as it is, or a Message v1 (the default of the queue sinks), both read back.

use ankusa_sink_core::{Envelope, EnvelopeError};
use serde::{Deserialize, Serialize};

/// The park record's format version.
pub const PARK_RECORD_VERSION: u32 = 1;

/// A parked pair's retry state: version [`PARK_RECORD_VERSION`] of the format (a new
/// field is a new version).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkRecord {
    /// The sink it waits for.
    pub sink: String,
    /// Attempts made so far (the hook's attempt number of the last one).
    pub attempts: u32,
    /// Unix ms of its first attempt: the horizon (`max_elapsed`) counts from it.
    pub first_attempt_ms: i64,
    /// Unix ms before which its next attempt does not start.
    pub not_before_ms: i64,
    /// Unix ms when it was parked.
    pub parked_at_ms: i64,
    /// The last failure's class (`transient`, `retry_after`, ...).
    pub class: String,
}

#[derive(Serialize)]
struct Out<'a> {
    ankusa_park: Versioned<&'a ParkRecord>,
    envelope: &'a Envelope,
}

#[derive(Serialize, Deserialize)]
struct Versioned<T> {
    v: u32,
    #[serde(flatten)]
    record: T,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct In {
    ankusa_park: Versioned<ParkRecord>,
    envelope: Envelope,
}

/// The envelope that carries `record` of `env` to a park destination: its body is the park
/// record (JSON), its id `<id>.park.<attempts>` (each park of a hook is a new message, never
/// deduplicated against an earlier one), its source and tenant the hook's.
///
/// # Errors
/// The id it makes is not a valid envelope id (an id near the length limit).
pub fn park_envelope(env: &Envelope, record: &ParkRecord) -> Result<Envelope, EnvelopeError> {
    let body = serde_json::to_vec(&Out {
        ankusa_park: Versioned {
            v: PARK_RECORD_VERSION,
            record,
        },
        envelope: env,
    })
    .expect("an envelope and a park record serialize");
    let mut b = Envelope::builder(
        format!("{}.park.{}", env.id(), record.attempts),
        env.source_id(),
        body,
    )
    .content_type("application/json");
    if let Some(t) = env.tenant_id() {
        b = b.tenant_id(t);
    }
    b.build()
}

/// A park record read back: `None` when `payload` is not one (its reason says why, never
/// quoting a value).
///
/// # Errors
/// Why `payload` is not a park record of this version.
pub fn parse_park_record(payload: &[u8]) -> Result<(ParkRecord, Envelope), String> {
    let i: In = serde_json::from_slice(payload).map_err(|e| {
        format!(
            "not a park record ({:?} error at line {}, column {})",
            e.classify(),
            e.line(),
            e.column()
        )
    })?;
    if i.ankusa_park.v != PARK_RECORD_VERSION {
        return Err(format!(
            "a park record of version {} (this build reads {PARK_RECORD_VERSION})",
            i.ankusa_park.v
        ));
    }
    Ok((i.ankusa_park.record, i.envelope))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_park_record_round_trips_with_its_hook_whole() {
        let env = Envelope::builder("h1", "stripe", &b"{\"a\":1}"[..])
            .tenant_id("acme")
            .header("Authorization", "Bearer t")
            .build()
            .unwrap();
        let record = ParkRecord {
            sink: "bad".into(),
            attempts: 3,
            first_attempt_ms: 10,
            not_before_ms: 3_600_010,
            parked_at_ms: 20,
            class: "retry_after".into(),
        };
        let carrier = park_envelope(&env, &record).unwrap();
        assert_eq!(carrier.id(), "h1.park.3");
        assert_eq!(carrier.tenant_id(), Some("acme"));
        let (back, hook) = parse_park_record(carrier.body()).unwrap();
        assert_eq!(back, record);
        assert_eq!(hook.id(), "h1");
        assert_eq!(hook.header("authorization"), Some("Bearer t"));
        assert_eq!(hook.body().as_ref(), b"{\"a\":1}");
        for bad in [&b"{}"[..], b"not json", b"{\"ankusa_park\":{\"v\":2}}"] {
            assert!(parse_park_record(bad).is_err());
        }
        let v2 = String::from_utf8(carrier.body().to_vec())
            .unwrap()
            .replace("\"v\":1", "\"v\":2");
        let e = parse_park_record(v2.as_bytes()).unwrap_err();
        assert!(e.contains("version 2"), "{e}");
    }
}
