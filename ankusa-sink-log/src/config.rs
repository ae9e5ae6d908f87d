//! Options of the log sink: the operator's keys ([`Repr`]) into an always-valid
//! [`LogConfig`] (nothing to refuse: every value of its one key is valid).

use serde::Deserialize;

/// The operator's keys, exactly as written in a sink file (`type` already removed).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Repr {
    #[serde(default)]
    messages: bool,
}

/// Options of [`LogSink`](crate::LogSink).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "Repr")]
#[non_exhaustive]
pub struct LogConfig {
    pub(crate) messages: bool,
}

impl From<Repr> for LogConfig {
    fn from(r: Repr) -> Self {
        LogConfig {
            messages: r.messages,
        }
    }
}

impl LogConfig {
    /// Write Message v1 lines on stdout (or not).
    pub fn with_messages(mut self, messages: bool) -> Self {
        self.messages = messages;
        self
    }

    /// Whether each hook's Message v1 JSON is also written as one line on stdout.
    pub fn messages(&self) -> bool {
        self.messages
    }
}
