//! Why the log sink failed, and the one function that classifies it.
//!
//! | Error | Class |
//! | --- | --- |
//! | any I/O error writing the Message v1 line to stdout (closed pipe, full disk) | transient |
//!
//! Encoding cannot fail: the log sink has no inline threshold, so every body is inline.

use ankusa_sink_core::{Class, Failure};
use std::fmt;

/// Why a delivery to the log sink failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum LogError {
    /// Writing the Message v1 line to stdout failed.
    Stdout(std::io::Error),
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Stdout(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for LogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // The I/O error's own text is this error's text: its causes come next.
            LogError::Stdout(e) => e.source(),
        }
    }
}

/// What dispatch does with `err`: a pure, deterministic function of the error (see the
/// module table). Writing stdout is transient: a reader may come back or the disk may be
/// freed, and the hook itself is fine.
pub(crate) fn classify(err: &LogError) -> Class {
    match err {
        LogError::Stdout(_) => Class::Transient,
    }
}

impl From<LogError> for Failure {
    fn from(e: LogError) -> Self {
        Failure::new(classify(&e), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    #[test]
    fn io_errors_writing_stdout_are_transient() {
        for kind in [
            ErrorKind::BrokenPipe,
            ErrorKind::StorageFull,
            ErrorKind::Other,
        ] {
            let err = LogError::Stdout(Error::from(kind));
            assert_eq!(classify(&err), Class::Transient);
            let f = Failure::from(LogError::Stdout(Error::from(kind)));
            assert_eq!(f.class(), Class::Transient);
            assert_eq!(
                f.to_string(),
                format!("transient: {}", Error::from(kind)),
                "the reason is the I/O error's text, as before"
            );
        }
    }
}
