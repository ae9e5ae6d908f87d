//! `--json` outcome lines and the report of a run's outcomes, written as they come.

use super::*;

/// The exact `--json` outcome line.
#[derive(Serialize)]
pub(super) struct Line<'a> {
    pub(super) id: &'a str,
    pub(super) sink: &'a str,
    pub(super) outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) class: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error_class: Option<&'static str>,
    /// Outer `None`: no key; `Some(None)`: `null` (a failure that asked for no pause).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) retry_after_ms: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reason: Option<String>,
    /// On `failed` and `dead_lettered` lines: whether the hook may have reached the
    /// destination anyway (`null`: the sink cannot tell). Outer `None`: no key (`ok`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) may_have_landed: Option<Option<bool>>,
    pub(super) attempts: u32,
    /// Why the dead letter of a `failed` pair could not be stored (`--dead-letter`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) dead_letter_error: Option<&'a str>,
    /// On `parked` lines: Unix ms before which the pair's next attempt does not start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) not_before_ms: Option<i64>,
}

/// The `--json` line for an input line that is not a valid envelope.
#[derive(Serialize)]
pub(super) struct InvalidLine<'a> {
    pub(super) line: u64,
    pub(super) outcome: &'static str,
    pub(super) reason: &'a str,
}

/// One outcome line's content.
pub(super) struct Report<'a> {
    pub(super) id: &'a str,
    pub(super) sink: &'a str,
    pub(super) outcome: &'static str,
    pub(super) failure: Option<&'a Failure>,
    /// The pause dispatch took for a throttle (capped; drawn when the destination did not
    /// say how long): [`Delivery::retry_after_ms`].
    pub(super) retry_after_ms: Option<u64>,
    pub(super) attempts: u32,
    /// Why its dead letter could not be stored: the pair is `failed`, never
    /// `dead_lettered`.
    pub(super) dead_letter_error: Option<&'a str>,
    /// A parked pair's not-before (Unix ms).
    pub(super) not_before_ms: Option<i64>,
}

impl<'a> Report<'a> {
    /// The line of the dispatcher's final word on a (hook, sink) pair; `stored` (a run
    /// with `--retry` and a dead-letter destination) names a dead letter that was stored
    /// `dead_lettered`; otherwise a pair that gave up is `failed`: with nowhere to store
    /// it, nothing was.
    pub(super) fn of(d: &'a Delivery, stored: bool) -> Self {
        let (outcome, failure, dead_letter_error) = match &d.outcome {
            Outcome::Delivered => ("ok", None, None),
            // A dead letter that was not stored is never reported as one.
            Outcome::DeadLettered {
                failure,
                store_error: Some(e),
                ..
            } => ("failed", Some(failure), Some(e.as_str())),
            Outcome::DeadLettered { failure, .. } => (
                if stored { "dead_lettered" } else { "failed" },
                Some(failure),
                None,
            ),
            // Not finished, not failed: written to the park destination, to resume there.
            Outcome::Parked { failure, .. } => ("parked", Some(failure), None),
            _ => ("failed", None, None),
        };
        let not_before_ms = match &d.outcome {
            Outcome::Parked { not_before_ms, .. } => Some(*not_before_ms),
            _ => None,
        };
        Report {
            id: d.envelope.id(),
            sink: &d.sink,
            outcome,
            failure,
            retry_after_ms: d.retry_after_ms,
            attempts: d.attempts,
            dead_letter_error,
            not_before_ms,
        }
    }

    /// The `--json` line, appended to `out` (without its newline).
    pub(super) fn write_json(&self, out: &mut Vec<u8>) {
        if self.failure.is_none() {
            return self.write_plain_json(out);
        }
        let line = Line {
            id: self.id,
            sink: self.sink,
            outcome: self.outcome,
            class: self.failure.map(|f| f.class().as_str()),
            error_class: self.failure.map(|f| f.class().error_class().as_str()),
            retry_after_ms: self.failure.map(|_| self.retry_after_ms),
            reason: self.failure.map(Failure::reason_chain),
            may_have_landed: self.failure.map(Failure::may_have_landed),
            attempts: self.attempts,
            dead_letter_error: self.dead_letter_error,
            not_before_ms: self.not_before_ms,
        };
        serde_json::to_writer(out, &line).expect("an outcome line serializes");
    }

    /// The line without a failure (`ok`, most of them), written directly: through
    /// `serde_json` it was about 1,500 instructions of a delivery's 28,000 on the delivering
    /// thread. The same bytes as `Line` serializes (a test compares them).
    pub(super) fn write_plain_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"id\":");
        push_json_str(out, self.id);
        out.extend_from_slice(b",\"sink\":");
        push_json_str(out, self.sink);
        // The outcomes are literals that need no escaping. No `write!`: its formatting
        // machinery cost more than the rest of the line.
        out.extend_from_slice(b",\"outcome\":\"");
        out.extend_from_slice(self.outcome.as_bytes());
        out.extend_from_slice(b"\",\"attempts\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.attempts).as_bytes());
        out.push(b'}');
    }

    #[cfg(test)]
    pub(super) fn json(&self) -> String {
        let mut out = Vec::new();
        self.write_json(&mut out);
        String::from_utf8(out).expect("JSON is UTF-8")
    }

    pub(super) fn human(&self) -> String {
        let (id, sink, attempts) = (self.id, self.sink, self.attempts);
        match self.failure {
            None => format!("{} {id} to {sink} (attempts: {attempts})", self.outcome),
            // The reason may hold text the destination wrote: no terminal escapes.
            Some(f) => {
                let dl = self.dead_letter_error.map_or(String::new(), |e| {
                    format!(
                        "; its dead letter could not be stored: {}",
                        escape_control(e)
                    )
                });
                format!(
                    "{} {id} to {sink}: {} (error class: {}, attempts: {attempts}){dl}",
                    self.outcome.to_ascii_uppercase().replace('_', "-"),
                    escape_control(&f.to_string()),
                    f.class().error_class()
                )
            }
        }
    }
}
