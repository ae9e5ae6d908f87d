//! `forward --from SOURCE.toml`: hooks from a durable source (a Kafka consumer group, a
//! RabbitMQ queue, a NATS JetStream consumer), each acknowledged to its source only after
//! every sink has delivered it or dead-lettered it.

use crate::UsageError;
use crate::hooks::{NamedSink, Stop, hook_of};
use ankusa_claimcheck::ClaimStore;
use ankusa_dispatch::{DeadLetter, Hook};
use ankusa_message::MessageBody;
use ankusa_sink_core::{Claim, Envelope};
use ankusa_sinks::SourceConfig;
use ankusa_source::{Ack, Record, Source, SourceOptions};
use serde::Serialize;
use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

/// Open the source of a `--from` file.
pub(crate) async fn open(
    path: &Path,
    options: &SourceOptions,
) -> Result<Box<dyn Source>, UsageError> {
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| UsageError(format!("cannot read --from {}: {e}", path.display())))?;
    let config = SourceConfig::from_toml_str(&text)
        .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    config
        .open(options)
        .await
        .map_err(|e| UsageError(format!("{}: {e}", path.display())))
}

/// `--from` acknowledges a record once every sink took it: a sink that keeps nothing
/// (`Capabilities::durable` false: the log, a Redis channel) would make that acknowledgement
/// remove the only stored copy. Refused (exit 2, each such sink named) unless `allow`; with
/// it, one WARN line says which sinks.
pub(crate) fn refuse_non_durable(sinks: &[NamedSink], allow: bool) -> Result<(), UsageError> {
    let names: Vec<&str> = sinks
        .iter()
        .filter(|s| !ankusa_sink_core::safe_capabilities(&*s.sink).is_ok_and(|c| c.durable))
        .map(|s| s.name.as_str())
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    let list = names.join(", ");
    if !allow {
        return Err(UsageError(format!(
            "--from acknowledges each record to its source once every sink took it, and              these sinks keep nothing: {list}; the source would lose those records. Use              durable sinks, or pass --allow-non-durable to accept that"
        )));
    }
    tracing::warn!(
        sinks = %list,
        "--allow-non-durable: records are acknowledged to the source once these sinks, which          keep nothing, took them: {list}"
    );
    Ok(())
}

/// The options every source is opened with.
pub(crate) fn options(
    max_unacked: u64,
    max_unacked_bytes: u64,
    attempt_timeout: Duration,
    concurrency: usize,
) -> SourceOptions {
    let nonzero = |n: u64| {
        NonZeroUsize::new(usize::try_from(n).unwrap_or(usize::MAX)).unwrap_or(NonZeroUsize::MIN)
    };
    SourceOptions::new(
        nonzero(max_unacked),
        attempt_timeout,
        NonZeroUsize::new(concurrency).unwrap_or(NonZeroUsize::MIN),
    )
    .with_max_unacked_bytes(nonzero(max_unacked_bytes))
}

/// Why a record of `len` bytes is not decoded: longer than `--max-line-bytes`. Such a
/// record is reported invalid and dead-lettered raw like an undecodable one.
pub(crate) fn too_long(len: usize, max_line: usize) -> Option<String> {
    (len > max_line).then(|| format!("longer than --max-line-bytes ({max_line} bytes)"))
}

/// What a record turned out to be.
pub(crate) enum Decoded {
    /// A hook to submit.
    Hook(Box<Hook>),
    /// Not a hook: report it, dead-letter its bytes, acknowledge it.
    Invalid(String),
    /// A claimed body could not be redeemed now (the store is down): give the record back
    /// to the source rather than file a good hook as undecodable.
    Later(String),
}

/// Decode one record: an envelope as JSON (the `gen` format) or a Message v1, told apart
/// by the message's `"v"` key. A Message v1 whose body is a claim is redeemed from
/// `claims` (and keeps its claim, so no sink checks it in again).
pub(crate) async fn decode(payload: &[u8], claims: Option<&ClaimStore>) -> Decoded {
    // Fast path, no JSON tree: an envelope refuses unknown keys, so a Message v1 (its
    // `"v"`) never parses as one and what does parse is what the slow path would find.
    if let Ok(env) = serde_json::from_slice::<Envelope>(payload) {
        return Decoded::Hook(Box::new(hook_of(env)));
    }
    let value: serde_json::Value = match serde_json::from_slice(payload) {
        Ok(v) => v,
        Err(e) => {
            return Decoded::Invalid(format!(
                "not JSON ({:?} error at line {}, column {})",
                e.classify(),
                e.line(),
                e.column()
            ));
        }
    };
    let is_message = value.get("v").is_some() && value.get("idempotency_key").is_some();
    if !is_message {
        return match ankusa_sinks::from_json_value::<Envelope>(value) {
            Ok(env) => Decoded::Hook(Box::new(hook_of(env))),
            Err(e) => Decoded::Invalid(format!("neither an envelope nor a Message v1: {e}")),
        };
    }
    let m = match ankusa_message::decode(payload) {
        Ok(m) => m,
        Err(e) => return Decoded::Invalid(format!("not a valid Message v1: {e}")),
    };
    let (body, claim) = match &m.body {
        MessageBody::Inline(b) => (b.clone(), None),
        MessageBody::Claim(reference) => {
            let Some(store) = claims else {
                return Decoded::Invalid(
                    "a Message v1 whose body is a claim needs --claim-store to redeem it".into(),
                );
            };
            match store.redeem_message(&m).await {
                Ok(b) => (b, Claim::new(reference.clone(), m.sha256.as_str()).ok()),
                Err(e) if e.class() == ankusa_sink_core::Class::Transient => {
                    return Decoded::Later(format!("redeeming the claim: {e}"));
                }
                Err(e) => return Decoded::Invalid(format!("redeeming the claim: {e}")),
            }
        }
    };
    let mut b = Envelope::builder(m.id, m.source_id, body)
        .received_at(m.received_at)
        .headers(m.headers);
    if let Some(t) = m.tenant_id {
        b = b.tenant_id(t);
    }
    if let Some(ct) = m.content_type {
        b = b.content_type(ct);
    }
    if let Some(k) = m.dedupe_key {
        b = b.dedupe_key(k);
    }
    let env = match b.build() {
        Ok(env) => env,
        Err(e) => return Decoded::Invalid(format!("not a valid hook: {e}")),
    };
    let mut hook = hook_of(env);
    if let Some(r) = m.replay_id {
        hook = hook.replay_id(r);
    }
    if let Some(c) = claim {
        hook = hook.claim(c);
    }
    Decoded::Hook(Box::new(hook))
}

/// The `--json` line of a record that is not a hook.
#[derive(Serialize)]
pub(crate) struct InvalidRecordLine<'a> {
    pub(crate) position: &'a str,
    pub(crate) outcome: &'static str,
    pub(crate) reason: &'a str,
}

/// The dead-letter line of a record that is not a hook: its bytes, and why.
#[derive(Serialize)]
struct RawDeadLetter<'a> {
    raw_base64: String,
    position: &'a str,
    dead_letter: RawInfo<'a>,
}

#[derive(Serialize)]
struct RawInfo<'a> {
    sink: Option<&'a str>,
    class: &'static str,
    error_class: &'static str,
    reason: &'a str,
}

/// File an undecodable record in the dead-letter file, then acknowledge it: it is never
/// retried forever, never skipped without a trace. Not filed (a full disk), it is held,
/// unacknowledged, and written again with backoff (1 s doubling to 60 s) until it is, then
/// acknowledged; a stop releases it. Given back to the broker it would only come back at
/// once and fail the same way, for ever (logged, at most once a minute).
pub(crate) async fn dead_letter_invalid(
    dl: Option<&DeadLetter>,
    record: InvalidRecord,
    mut stop: tokio::sync::watch::Receiver<Option<Stop>>,
) {
    let InvalidRecord {
        position,
        reason,
        raw,
        ack,
    } = record;
    let Some(dl) = dl else {
        return ack.ack();
    };
    use base64::Engine as _;
    let line = RawDeadLetter {
        raw_base64: base64::engine::general_purpose::STANDARD.encode(&raw),
        position: &position,
        dead_letter: RawInfo {
            sink: None,
            class: "permanent",
            error_class: "permanent",
            reason: &reason,
        },
    };
    // Strings and `None` only: it serializes.
    let Ok(line) = serde_json::to_string(&line) else {
        return ack.release();
    };
    let Err(first) = dl.store_line(line.clone()).await else {
        return ack.ack();
    };
    log_unstored(&position, &first);
    let dl = dl.clone();
    tokio::spawn(async move {
        let mut failures = 1;
        loop {
            tokio::select! {
                _ = stop.wait_for(Option::is_some) => return ack.release(),
                () = tokio::time::sleep(ankusa_dispatch::dead_letter_backoff(failures)) => {}
            }
            match dl.store_line(line.clone()).await {
                Ok(()) => return ack.ack(),
                Err(e) => {
                    failures += 1;
                    log_unstored(&position, &e);
                }
            }
        }
    });
}

/// Log that a record's dead letter could not be stored, at most once a minute: a full
/// disk fails every one, and the log may be on it.
fn log_unstored(position: &str, error: &str) {
    static LAST: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    if crate::logging::due(&LAST, Duration::from_secs(60)) {
        tracing::error!(
            position,
            error,
            "an undecodable record's dead letter cannot be stored: it is held unacknowledged \
             and written again with backoff"
        );
    }
}

/// A record that is not a hook, on its way to the dead-letter file.
pub(crate) struct InvalidRecord {
    pub(crate) position: String,
    pub(crate) reason: String,
    pub(crate) raw: Vec<u8>,
    pub(crate) ack: Ack,
}

impl InvalidRecord {
    pub(crate) fn new(record: Record, reason: String) -> Self {
        InvalidRecord {
            position: record.position,
            reason,
            raw: record.payload,
            ack: record.ack,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_longer_than_max_line_is_not_decoded() {
        assert_eq!(too_long(10, 10), None);
        assert_eq!(
            too_long(11, 10).as_deref(),
            Some("longer than --max-line-bytes (10 bytes)")
        );
    }

    #[tokio::test]
    async fn non_durable_sinks_are_named_and_refused_unless_allowed() {
        let log = ankusa_sinks::SinkConfig::log().build().await.unwrap();
        let named = |name: &str| NamedSink {
            name: name.into(),
            sink: log.clone(),
            dispatch: ankusa_sinks::DispatchTable::default(),
        };
        let sinks = [named("log"), named("audit")];
        let e = refuse_non_durable(&sinks, false).unwrap_err().0;
        assert!(
            e.contains("log, audit") && e.contains("--allow-non-durable"),
            "{e}"
        );
        assert!(refuse_non_durable(&sinks, true).is_ok());
        assert!(refuse_non_durable(&[], false).is_ok());
    }

    #[tokio::test]
    async fn envelopes_and_messages_are_told_apart_per_record() {
        let env = Envelope::builder("h1", "stripe", &b"{\"a\":1}"[..])
            .tenant_id("acme")
            .dedupe_key("evt_1")
            .header("Stripe-Signature", "t=1")
            .build()
            .unwrap();
        let json = serde_json::to_vec(&env).unwrap();
        let Decoded::Hook(h) = decode(&json, None).await else {
            panic!("an envelope")
        };
        assert_eq!(h.envelope().id(), "h1");
        let ctx = ankusa_sink_core::Ctx::for_envelope(&env).with_replay_id("r9");
        let msg = ankusa_message::encode(&env, &ctx, None).unwrap();
        let Decoded::Hook(h) = decode(&msg, None).await else {
            panic!("a Message v1")
        };
        let back = h.envelope();
        assert_eq!(back.id(), "h1");
        assert_eq!(back.tenant_id(), Some("acme"));
        assert_eq!(back.dedupe_key(), Some("evt_1"));
        assert_eq!(back.body().as_ref(), b"{\"a\":1}");
        assert_eq!(back.header("stripe-signature"), Some("t=1"));
        for (bad, why) in [
            (&b"\xff\xfe"[..], "not JSON"),
            (b"[1,2]", "neither an envelope nor a Message v1"),
            (
                b"{\"v\":2,\"idempotency_key\":\"k\"}",
                "not a valid Message v1",
            ),
        ] {
            match decode(bad, None).await {
                Decoded::Invalid(r) => assert!(r.contains(why), "{r}"),
                _ => panic!("{why}"),
            }
        }
    }
}
