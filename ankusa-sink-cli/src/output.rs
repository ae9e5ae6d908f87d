//! Writing outcome lines and notes without panicking when stdout or stderr is closed or full.
//!
//! `println!` panics when stdout cannot be written (a closed pipe, `/dev/full`), which would
//! lose the outcome lines still to come and exit 101. Here an outcome line that cannot be
//! written is remembered, so the run stops taking hooks and exits with `EXIT_OUTPUT`; a note
//! (a summary, a diagnostic) that cannot be written is dropped.

use std::io::Write as _;

/// Where outcome lines and notes go, and whether an outcome line was lost.
#[derive(Debug, Default)]
pub(crate) struct Output {
    lost: bool,
    /// Outcome lines not yet written (see [`Output::buffer_line`]).
    pending: Vec<u8>,
}

/// Buffered outcome lines are written once they reach this many bytes, at the latest.
const PENDING_MAX: usize = 64 * 1024;

impl Output {
    pub(crate) fn new() -> Self {
        Output::default()
    }

    /// Write an outcome line to stdout; `false` (and remembered) if it could not be.
    pub(crate) fn stdout_line(&mut self, line: &str) -> bool {
        self.buffer_line(line) && self.flush()
    }

    /// Queue an outcome line for stdout: one write per burst of outcomes instead of a
    /// system call per line. `false` (and remembered) if a write it caused failed.
    pub(crate) fn buffer_line(&mut self, line: &str) -> bool {
        self.buffer_line_with(|pending| pending.extend_from_slice(line.as_bytes()))
    }

    /// [`buffer_line`](Self::buffer_line) of the line `write` appends (without its newline)
    /// to the queue itself: no string of its own per line.
    pub(crate) fn buffer_line_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> bool {
        write(&mut self.pending);
        self.pending.push(b'\n');
        self.pending.len() < PENDING_MAX || self.flush()
    }

    /// Write the queued outcome lines; `false` (and remembered) if they could not be.
    pub(crate) fn flush(&mut self) -> bool {
        if self.pending.is_empty() {
            return !self.lost;
        }
        let mut o = std::io::stdout().lock();
        let r = o.write_all(&self.pending).and_then(|()| o.flush());
        self.pending.clear();
        self.outcome(r)
    }

    /// Write an outcome line to stderr (the human form of a failure).
    pub(crate) fn stderr_outcome(&mut self, line: &str) -> bool {
        let mut e = std::io::stderr().lock();
        self.outcome(writeln!(e, "{line}").and_then(|()| e.flush()))
    }

    /// Write a note to stderr; a note that cannot be written is dropped.
    pub(crate) fn note(&mut self, line: &str) {
        note(line);
    }

    /// Whether an outcome line could not be written.
    pub(crate) fn outcome_lost(&self) -> bool {
        self.lost
    }

    fn outcome(&mut self, r: std::io::Result<()>) -> bool {
        if r.is_err() {
            self.lost = true;
        }
        r.is_ok()
    }
}

/// Write a note to stderr, dropping it if stderr cannot be written.
pub(crate) fn note(line: &str) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "{line}").and_then(|()| e.flush());
}

/// Text a destination wrote (AMQP `reply_text`, a service's error message) with control
/// and invisible characters escaped, so it cannot move the cursor or forge log lines.
pub(crate) use ankusa_sink_kit::escape_invisible as escape_control;

#[cfg(test)]
mod tests {
    use super::escape_control;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape_control("plain text: ok"), "plain text: ok");
        assert_eq!(
            escape_control("a\u{1b}[2Jb\nfake line\r\u{7}"),
            "a\\u{1b}[2Jb\\nfake line\\r\\u{7}"
        );
        assert_eq!(escape_control("é ü 中"), "é ü 中");
        // Invisible direction overrides too: they reorder what a terminal shows.
        assert_eq!(escape_control("ok\u{202e}kO"), "ok\\u{202e}kO");
    }
}
