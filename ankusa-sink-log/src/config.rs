//! Options of the log sink.

use serde::{Deserialize, Serialize};

/// Options of [`LogSink`](crate::LogSink).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct LogConfig {
    /// Also write each hook's Message v1 JSON as one line on stdout.
    pub messages: bool,
}

impl LogConfig {
    /// Write Message v1 lines on stdout (or not).
    pub fn with_messages(mut self, messages: bool) -> Self {
        self.messages = messages;
        self
    }
}
