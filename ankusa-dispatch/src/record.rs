//! The record of a (hook, sink) pair that dispatch stopped working on: **dead** (given up:
//! a dead letter) or **parked** (a far-off retry, to resume later). One format, written by
//! one function and read back by one, whether it lands in a dead-letter file, a dead-letter
//! sink or a park destination.
//!
//! A record is the hook's envelope as `ankusa-sink gen` prints it (only the headers a sink
//! would forward: credentials a provider sent never land at rest) plus one object, named
//! after the state:
//!
//! ```json
//! {"id":"h1","source_id":"stripe","body":"...",
//!  "dead_letter":{"sink":"http","class":"permanent","error_class":"permanent",
//!    "reason":"HTTP 410 Gone","may_have_landed":false,"attempts":1,
//!    "first_attempt_ms":1765130000000,"last_attempt_ms":1765130000000}}
//! {"id":"h2","source_id":"stripe","body":"...",
//!  "parked":{"sink":"http","class":"retry_after", ..., "not_before_ms":1765133600000,
//!    "parked_at_ms":1765130000500}}
//! ```
//!
//! In a sink (a dead-letter topic, a park queue) the record line is the body of a message
//! ([`carrier`]): sent as it is, or as the body of a Message v1 (the queue sinks' default);
//! [`PairRecord::parse`] reads both.

use crate::dead_letter::DeadLetterInfo;
use ankusa_message::MessageBody;
use ankusa_sink_core::{Envelope, EnvelopeError};
use serde::{Deserialize, Serialize};

/// What became of the pair a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PairState {
    /// Given up: a dead letter (the `dead_letter` object).
    Dead,
    /// Waiting for a far-off retry (the `parked` object).
    Parked {
        /// Unix ms before which its next attempt does not start.
        not_before_ms: i64,
        /// Unix ms when it was parked.
        parked_at_ms: i64,
    },
}

impl PairState {
    /// The record's key for this state: `dead_letter` or `parked`.
    pub fn key(&self) -> &'static str {
        match self {
            PairState::Dead => "dead_letter",
            PairState::Parked { .. } => "parked",
        }
    }

    /// The state's name in a carrier's `ankusa-record` header: `dead` or `parked`.
    pub fn name(&self) -> &'static str {
        match self {
            PairState::Dead => "dead",
            PairState::Parked { .. } => "parked",
        }
    }
}

/// A record read back: the hook, why it stopped, and in which state.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PairRecord {
    /// The hook as it was dispatched (forwardable headers only).
    pub envelope: Envelope,
    /// The sink, the last failure, the attempts.
    pub info: DeadLetterInfo,
    /// Dead or parked.
    pub state: PairState,
}

/// The `parked` object: the dead-letter fields and when to resume.
#[derive(Serialize, Deserialize)]
struct ParkedInfo<I> {
    #[serde(flatten)]
    info: I,
    not_before_ms: i64,
    parked_at_ms: i64,
}

/// The envelope with only the headers a sink would forward, and its path's query values
/// masked (a webhook's query often carries its token; the logs mask it the same way).
fn forwardable_only(env: &Envelope) -> std::borrow::Cow<'_, Envelope> {
    let forwardable = |n: &str| ankusa_message::is_forwardable(&n.to_ascii_lowercase());
    let path = ankusa_sink_kit::redact_path_query(env.path());
    let path_kept = matches!(path, std::borrow::Cow::Borrowed(p) if p == env.path());
    if path_kept && env.headers().iter().all(|(n, _)| forwardable(n)) {
        return std::borrow::Cow::Borrowed(env);
    }
    let kept = env
        .headers()
        .iter()
        .filter(|(n, _)| forwardable(n))
        .cloned()
        .collect();
    // Headers go and query values are masked: the copy is as valid as the envelope it
    // came from.
    std::borrow::Cow::Owned(
        env.to_builder()
            .headers(kept)
            .path(path.into_owned())
            .build()
            .unwrap_or_else(|_| env.clone()),
    )
}

/// The record line of `env` at its sink (`info`) in `state`: the envelope's own JSON, keys
/// in the order `gen` prints them, with the state's object added as its last key.
///
/// # Errors
/// Serialization failed (it does not, for a valid envelope).
pub fn pair_line(
    env: &Envelope,
    info: &DeadLetterInfo,
    state: &PairState,
) -> serde_json::Result<String> {
    let env = forwardable_only(env);
    let mut line = serde_json::to_string(&*env)?;
    let object = match *state {
        PairState::Dead => serde_json::to_string(info)?,
        PairState::Parked {
            not_before_ms,
            parked_at_ms,
        } => serde_json::to_string(&ParkedInfo {
            info,
            not_before_ms,
            parked_at_ms,
        })?,
    };
    if line.ends_with('}') {
        line.pop();
        if !line.ends_with('{') {
            line.push(',');
        }
        line.push('"');
        line.push_str(state.key());
        line.push_str("\":");
        line.push_str(&object);
        line.push('}');
    }
    Ok(line)
}

/// Longest carrier id kept as it is; a longer one is `<state>.<digest>`.
const MAX_CARRIER_ID: usize = 120;

/// Longest `ankusa-reason` header a carrier gets, in bytes.
const REASON_HEADER_MAX: usize = 128;

/// The envelope that carries the record of `env` (at `info`'s sink, in `state`) to a sink:
/// its body is the record line (JSON), its source and tenant the hook's, and its id
/// `<id>.<dead|parked>.<sink>.<ms>` (the last attempt's, or the park's, time; over 120
/// bytes, `<dead|parked>.<40 hex digits of its SHA-256>`): each
/// record is a message of its own, never deduplicated against another sink's record of
/// the same hook or an earlier record of the same pair. Deliver it with
/// [`record_attrs`] on its context: the sink then sends where and why beside the body.
///
/// # Errors
/// The record could not be made into a valid envelope.
pub fn carrier(
    env: &Envelope,
    info: &DeadLetterInfo,
    state: &PairState,
) -> Result<Envelope, EnvelopeError> {
    let line = pair_line(env, info, state).expect("an envelope and its record serialize");
    let ms = match *state {
        PairState::Dead => info.last_attempt_ms,
        PairState::Parked { parked_at_ms, .. } => parked_at_ms,
    };
    let mut id = format!(
        "{}.{}.{}.{ms}",
        env.id(),
        state.name(),
        header_text(&info.sink)
    );
    if id.len() > MAX_CARRIER_ID {
        // Long ids and sink names: a digest keeps it unique and within what every broker
        // takes as a message or deduplication id (an SQS FIFO one: 128).
        let digest = ankusa_message::sha256_hex(id.as_bytes());
        id = format!("{}.{}", state.name(), &digest[..40]);
    }
    let mut b = Envelope::builder(id, env.source_id(), line).content_type("application/json");
    if let Some(t) = env.tenant_id() {
        b = b.tenant_id(t);
    }
    b.build()
}

/// What a carrier says of its record beside its body (the sink's message attributes or
/// headers `ankusa_record`, `ankusa_record_sink`, `ankusa_record_class`,
/// `ankusa_record_reason`): the state, the sink, the class and the reason's head
/// ([`reason_key`]), as printable ASCII.
pub fn record_attrs(info: &DeadLetterInfo, state: &PairState) -> ankusa_message::RecordAttrs {
    ankusa_message::RecordAttrs {
        state: state.name().to_owned(),
        sink: header_text(&info.sink),
        class: header_text(&info.class),
        reason: reason_key(&info.reason),
    }
}

/// `s` as printable ASCII (anything else a `?`), at most [`REASON_HEADER_MAX`] bytes: a
/// value every broker's header or attribute takes.
fn header_text(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .take(REASON_HEADER_MAX)
        .collect()
}

/// A reason as `dead-letters stats` groups it and a carrier's `ankusa-reason` header
/// carries it: the first line of the failure's message without its source chain (the
/// part after the first `: `, where addresses and values tend to be), printable ASCII,
/// at most 128 bytes. `HTTP 503 Service Unavailable` stays whole.
pub fn reason_key(reason: &str) -> String {
    let first = reason.lines().next().unwrap_or_default();
    let head = first.split(": ").next().unwrap_or_default().trim();
    header_text(head)
}

impl PairRecord {
    /// A record read back from `payload`: a record line, or a Message v1 whose inline body
    /// is one. The error says why it is not one, never quoting a value.
    ///
    /// # Errors
    /// `payload` is not a record.
    pub fn parse(payload: &[u8]) -> Result<PairRecord, String> {
        match serde_json::from_slice::<serde_json::Value>(payload) {
            Ok(v) if v.get("v").is_some() && v.get("idempotency_key").is_some() => {
                let m = ankusa_message::decode(payload)
                    .map_err(|e| format!("not a valid Message v1: {e}"))?;
                match &m.body {
                    MessageBody::Inline(b) => {
                        let v = serde_json::from_slice(b).map_err(|e| not_json(&e))?;
                        PairRecord::from_value(v)
                    }
                    MessageBody::Claim(_) => Err("a record's body is a claim".to_owned()),
                }
            }
            Ok(v) => PairRecord::from_value(v),
            Err(e) => Err(not_json(&e)),
        }
    }

    /// A record from its line's JSON: the envelope's keys plus `dead_letter` or `parked`.
    ///
    /// # Errors
    /// Neither key, both, or an invalid object or envelope (named, never quoted).
    pub fn from_value(mut value: serde_json::Value) -> Result<PairRecord, String> {
        let serde_json::Value::Object(map) = &mut value else {
            return Err("not a record (not a JSON object)".to_owned());
        };
        let (dead, parked) = (map.remove("dead_letter"), map.remove("parked"));
        let (info, state) = match (dead, parked) {
            (Some(d), None) => (
                serde_json::from_value(d).map_err(|e| invalid("dead_letter", &e))?,
                PairState::Dead,
            ),
            (None, Some(p)) => {
                let p: ParkedInfo<DeadLetterInfo> =
                    serde_json::from_value(p).map_err(|e| invalid("parked", &e))?;
                (
                    p.info,
                    PairState::Parked {
                        not_before_ms: p.not_before_ms,
                        parked_at_ms: p.parked_at_ms,
                    },
                )
            }
            (None, None) => {
                return Err("not a record (no dead_letter or parked object)".to_owned());
            }
            (Some(_), Some(_)) => {
                return Err("not a record (both dead_letter and parked)".to_owned());
            }
        };
        let envelope = serde_json::from_value(value).map_err(|e| {
            format!(
                "a record whose envelope is not valid ({:?} error)",
                e.classify()
            )
        })?;
        Ok(PairRecord {
            envelope,
            info,
            state,
        })
    }
}

/// Which records a redrive takes, or `dead-letters stats|list` shows: every condition set
/// must hold (none set: every record).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordFilter {
    /// The sink it died at.
    pub sink: Option<String>,
    /// The hook's tenant.
    pub tenant: Option<String>,
    /// The failure's class (`permanent`, `config`, `retry_after`, `transient`) or error
    /// class (`permanent`, `throttled`, `transient`).
    pub class: Option<String>,
    /// Its last attempt at or after this Unix ms.
    pub since_ms: Option<i64>,
    /// Its last attempt before this Unix ms.
    pub until_ms: Option<i64>,
    /// Its reason contains this text (case-sensitive).
    pub reason_contains: Option<String>,
}

impl RecordFilter {
    /// Every record.
    pub fn new() -> Self {
        RecordFilter::default()
    }

    /// Only records of `sink`.
    pub fn sink(mut self, sink: impl Into<String>) -> Self {
        self.sink = Some(sink.into());
        self
    }

    /// Only hooks of `tenant`.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Only failures of this class or error class.
    pub fn class(mut self, class: impl Into<String>) -> Self {
        self.class = Some(class.into());
        self
    }

    /// Only last attempts in `[since_ms, until_ms)` (either end open with `None`).
    pub fn between(mut self, since_ms: Option<i64>, until_ms: Option<i64>) -> Self {
        self.since_ms = since_ms;
        self.until_ms = until_ms;
        self
    }

    /// Only reasons containing `text`.
    pub fn reason_contains(mut self, text: impl Into<String>) -> Self {
        self.reason_contains = Some(text.into());
        self
    }

    /// Whether no condition is set.
    pub fn is_empty(&self) -> bool {
        *self == RecordFilter::default()
    }

    /// Whether the record of `envelope` with `info` meets every condition set.
    pub fn matches(&self, envelope: &Envelope, info: &DeadLetterInfo) -> bool {
        let i = info;
        self.sink.as_ref().is_none_or(|s| *s == i.sink)
            && self
                .tenant
                .as_deref()
                .is_none_or(|t| envelope.tenant_id() == Some(t))
            && self
                .class
                .as_ref()
                .is_none_or(|c| *c == i.class || *c == i.error_class)
            && self.since_ms.is_none_or(|t| i.last_attempt_ms >= t)
            && self.until_ms.is_none_or(|t| i.last_attempt_ms < t)
            && self
                .reason_contains
                .as_deref()
                .is_none_or(|t| i.reason.contains(t))
    }
}

fn not_json(e: &serde_json::Error) -> String {
    format!(
        "not JSON ({:?} error at line {}, column {})",
        e.classify(),
        e.line(),
        e.column()
    )
}

fn invalid(key: &str, e: &serde_json::Error) -> String {
    format!("not a valid {key} object ({:?} error)", e.classify())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::{Failure, Reason};

    /// A hook with a fixed `received_at`: two built apart compare equal.
    fn hook() -> Envelope {
        Envelope::builder("h1", "stripe", &b"{\"a\":1}"[..])
            .received_at(1_765_130_000_000)
            .tenant_id("acme")
            .header("Authorization", "Bearer t")
            .header("X-Event", "paid")
            .build()
            .unwrap()
    }

    #[test]
    fn both_states_round_trip_through_one_reader_as_lines_and_carriers() {
        let f = Failure::retry_after_ms(3_600_000, Reason("HTTP 429: slow down".into()));
        let info = DeadLetterInfo::new("far", &f, 3, 10, 20);
        for state in [
            PairState::Dead,
            PairState::Parked {
                not_before_ms: 3_600_020,
                parked_at_ms: 20,
            },
        ] {
            let line = pair_line(&hook(), &info, &state).unwrap();
            let alone = serde_json::to_string(&forwardable_only(&hook())).unwrap();
            assert!(line.starts_with(&alone[..alone.len() - 1]), "{line}");
            assert!(!line.contains("Bearer"), "credentials never stored: {line}");
            let back = PairRecord::parse(line.as_bytes()).unwrap();
            assert_eq!((back.info.clone(), back.state), (info.clone(), state));
            assert_eq!(back.envelope.header("x-event"), Some("paid"));
            let c = carrier(&hook(), &info, &state).unwrap();
            assert_eq!(c.id(), format!("h1.{}.far.20", state.name()));
            assert_eq!(c.tenant_id(), Some("acme"));
            let attrs = record_attrs(&info, &state);
            assert_eq!(
                (attrs.state.as_str(), attrs.reason.as_str()),
                (state.name(), "HTTP 429")
            );
            let long = Envelope::builder("h".repeat(200), "s", "b")
                .build()
                .unwrap();
            let long_id = carrier(&long, &info, &state).unwrap().id().to_owned();
            assert!(
                long_id.len() <= 128 && long_id.starts_with(state.name()),
                "{long_id}"
            );
            let via_carrier = PairRecord::parse(c.body()).unwrap();
            assert_eq!(via_carrier.envelope.id(), "h1");
            let ctx = ankusa_sink_core::Ctx::for_envelope(&c);
            let message = ankusa_message::encode(&c, &ctx, None).unwrap();
            let via_message = PairRecord::parse(&message).unwrap();
            assert_eq!(via_message.state, state);
        }
        for bad in [
            &b"{}"[..],
            b"not json",
            b"{\"id\":\"h\",\"source_id\":\"s\",\"body\":\"\",\"dead_letter\":{\"sink\":3}}",
            b"[1]",
        ] {
            assert!(PairRecord::parse(bad).is_err());
        }
    }

    #[test]
    fn filters_hold_every_condition_set() {
        let f = Failure::transient(Reason("HTTP 503 Service Unavailable".into()));
        let r = PairRecord {
            envelope: hook(),
            info: DeadLetterInfo::new("http", &f, 5, 100, 200),
            state: PairState::Dead,
        };
        assert!(
            RecordFilter::new().is_empty() && RecordFilter::new().matches(&r.envelope, &r.info)
        );
        for yes in [
            RecordFilter::new().sink("http"),
            RecordFilter::new().tenant("acme").class("transient"),
            RecordFilter::new().between(Some(200), Some(201)),
            RecordFilter::new().reason_contains("503"),
        ] {
            assert!(yes.matches(&r.envelope, &r.info), "{yes:?}");
        }
        for no in [
            RecordFilter::new().sink("kafka"),
            RecordFilter::new().tenant("other"),
            RecordFilter::new().class("throttled"),
            RecordFilter::new().between(None, Some(200)),
            RecordFilter::new().between(Some(201), None),
            RecordFilter::new().sink("http").reason_contains("504"),
        ] {
            assert!(!no.matches(&r.envelope, &r.info), "{no:?}");
        }
    }

    #[test]
    fn reason_keys_keep_the_head_and_drop_the_chain() {
        assert_eq!(
            reason_key("HTTP 503 Service Unavailable"),
            "HTTP 503 Service Unavailable"
        );
        assert_eq!(reason_key("connect: 10.0.0.1:443 refused\nmore"), "connect");
        assert_eq!(reason_key("é\u{7}x"), "??x");
        assert_eq!(reason_key(&"a".repeat(500)).len(), 128);
    }
}
