//! Where a (hook, sink) that dispatch gave up on goes: a JSON-lines file, or any sink.

use ankusa_sink_core::{Ctx, Envelope, Failure, Sink, safe_deliver};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why and when a (hook, sink) was dead-lettered: the `dead_letter` object of a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeadLetterInfo {
    /// The sink's name in the dispatcher.
    pub sink: String,
    /// The last failure's class (`permanent`, `config`, `retry_after`, `transient`).
    pub class: String,
    /// The error class an operator filters on (`permanent`, `throttled`, `transient`).
    pub error_class: String,
    /// The last failure's reason, with its source chain.
    pub reason: String,
    /// Whether the last attempt may have reached the destination anyway
    /// ([`Failure::may_have_landed`]; `null` when the sink could not tell).
    #[serde(default)]
    pub may_have_landed: Option<bool>,
    /// Attempts made.
    pub attempts: u32,
    /// Unix ms of the first attempt.
    pub first_attempt_ms: i64,
    /// Unix ms of the last attempt.
    pub last_attempt_ms: i64,
}

impl DeadLetterInfo {
    /// The record of `failure` for `sink` after `attempts` attempts.
    pub fn new(
        sink: &str,
        failure: &Failure,
        attempts: u32,
        first_attempt_ms: i64,
        last_attempt_ms: i64,
    ) -> Self {
        DeadLetterInfo {
            sink: sink.to_owned(),
            class: failure.class().as_str().to_owned(),
            error_class: failure.error_class().as_str().to_owned(),
            reason: failure.reason_chain(),
            may_have_landed: failure.may_have_landed(),
            attempts,
            first_attempt_ms,
            last_attempt_ms,
        }
    }
}

/// One dead-letter line: the envelope in its JSON form (the form `ankusa-sink gen` prints
/// and `forward` reads) plus a `dead_letter` object.
pub fn record_line(env: &Envelope, info: &DeadLetterInfo) -> serde_json::Result<String> {
    // The envelope's own serialization, keys in the order `gen` prints them, with the
    // `dead_letter` object added as its last key.
    let mut line = serde_json::to_string(env)?;
    if line.ends_with('}') {
        line.pop();
        if !line.ends_with('{') {
            line.push(',');
        }
        line.push_str("\"dead_letter\":");
        line.push_str(&serde_json::to_string(info)?);
        line.push('}');
    }
    Ok(line)
}

/// Split a dead-letter record into the envelope's JSON and its `dead_letter` object;
/// `None` for a line that is not a record (a plain envelope). An invalid `dead_letter`
/// object is an error naming what is wrong, never a value.
pub fn split_record(
    mut value: serde_json::Value,
) -> Result<(serde_json::Value, Option<DeadLetterInfo>), String> {
    let info = match &mut value {
        serde_json::Value::Object(map) => map.remove("dead_letter"),
        _ => None,
    };
    match info {
        None => Ok((value, None)),
        Some(info) => serde_json::from_value(info)
            .map(|i| (value, Some(i)))
            .map_err(|e| format!("not a valid dead_letter object ({:?} error)", e.classify())),
    }
}

/// The dead-letter destination of a dispatcher.
#[derive(Clone)]
pub struct DeadLetter(Arc<Kind>);

enum Kind {
    File {
        path: PathBuf,
        file: Mutex<std::fs::File>,
    },
    Sink(Arc<dyn Sink>),
}

impl fmt::Debug for DeadLetter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.0 {
            Kind::File { path, .. } => f.debug_tuple("DeadLetter::File").field(path).finish(),
            Kind::Sink(s) => f.debug_tuple("DeadLetter::Sink").field(s).finish(),
        }
    }
}

impl DeadLetter {
    /// Append one JSON line per dead letter to `path` (created if missing). Each line is
    /// written and synced to disk before the dead letter is reported.
    pub fn jsonl(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref().to_owned();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        Ok(DeadLetter(Arc::new(Kind::File {
            path,
            file: Mutex::new(file),
        })))
    }

    /// Deliver each dead-lettered hook to `sink` (its envelope; the sink sees the original
    /// hook, not why it died).
    pub fn sink(sink: Arc<dyn Sink>) -> Self {
        DeadLetter(Arc::new(Kind::Sink(sink)))
    }

    /// Store one dead letter (`ctx` is the context a sink destination delivers it with);
    /// the error says why it could not be stored.
    pub async fn store(
        &self,
        env: &Envelope,
        ctx: &Ctx,
        info: &DeadLetterInfo,
        timeout: Duration,
    ) -> Result<(), String> {
        match &*self.0 {
            Kind::File { .. } => {
                let line = record_line(env, info).map_err(|e| e.to_string())?;
                let this = self.clone();
                tokio::task::spawn_blocking(move || this.append(&line))
                    .await
                    .map_err(|e| e.to_string())?
            }
            Kind::Sink(sink) => {
                let ctx = ctx.clone().with_attempt(1).with_batch(false);
                safe_deliver(&**sink, env, &ctx, Some(timeout))
                    .await
                    .map_err(|f| f.to_string())
            }
        }
    }

    /// Append one line that is not a hook's record (a source record that could not be
    /// decoded, say) to a dead-letter file, synced like the others. A sink destination
    /// takes hooks only: it refuses the line, and the error says so.
    pub async fn store_line(&self, line: String) -> Result<(), String> {
        match &*self.0 {
            Kind::File { .. } => {
                let this = self.clone();
                tokio::task::spawn_blocking(move || this.append(&line))
                    .await
                    .map_err(|e| e.to_string())?
            }
            Kind::Sink(_) => Err("a dead-letter sink takes hooks, not raw records".into()),
        }
    }

    fn append(&self, line: &str) -> Result<(), String> {
        let Kind::File { path, file } = &*self.0 else {
            return Ok(());
        };
        let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        f.write_all(&buf)
            .and_then(|()| f.sync_data())
            .map_err(|e| format!("writing the dead-letter file {}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::Reason;

    #[test]
    fn records_round_trip_through_split() {
        let env = Envelope::builder("h1", "stripe", "body")
            .tenant_id("acme")
            .build()
            .unwrap();
        let f = Failure::permanent(Reason("gone".into()));
        let info = DeadLetterInfo::new("http", &f, 2, 10, 20);
        let line = record_line(&env, &info).unwrap();
        // The envelope exactly as it serializes alone, then the dead_letter object.
        let alone = serde_json::to_string(&env).unwrap();
        assert!(line.starts_with(&alone[..alone.len() - 1]), "{line}");
        assert!(line.ends_with("}}"), "{line}");
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["dead_letter"]["error_class"], "permanent");
        assert_eq!(value["dead_letter"]["sink"], "http");
        let (env_json, got) = split_record(value).unwrap();
        assert_eq!(got, Some(info));
        let back: Envelope = serde_json::from_value(env_json).unwrap();
        assert_eq!(back.id(), "h1");
        let (_, none) = split_record(serde_json::to_value(&env).unwrap()).unwrap();
        assert_eq!(none, None);
        let bad = serde_json::json!({"id": "h", "dead_letter": {"sink": 3}});
        assert!(split_record(bad).unwrap_err().contains("dead_letter"));
    }
}
