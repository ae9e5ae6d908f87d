//! Why the log sink failed, and the one function that classifies it.
//!
//! | Error | Class |
//! | --- | --- |
//! | any I/O error writing the Message v1 line to stdout (closed pipe, full disk) | transient |
//! | any I/O error writing the log line to stderr, where the subscriber reports it ([`ReportingWriter`](crate::ReportingWriter)) | transient |
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
    /// Writing the log line to stderr failed.
    Stderr(std::io::Error),
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Stdout(e) => write!(f, "writing stdout: {e}"),
            LogError::Stderr(e) => write!(f, "writing stderr: {e}"),
        }
    }
}

impl std::error::Error for LogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // The I/O error's own text is in this error's text: its causes come next.
            LogError::Stdout(e) | LogError::Stderr(e) => e.source(),
        }
    }
}

/// What dispatch does with `err`: a pure, deterministic function of the error (see the
/// module table). Writing stdout or stderr is transient: a reader may come back or the disk
/// may be freed, and the hook itself is fine.
pub(crate) fn classify(err: &LogError) -> Class {
    match err {
        LogError::Stdout(_) | LogError::Stderr(_) => Class::Transient,
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
    fn io_errors_writing_stdout_or_stderr_are_transient_and_name_the_stream() {
        for kind in [
            ErrorKind::BrokenPipe,
            ErrorKind::StorageFull,
            ErrorKind::Other,
        ] {
            for (err, stream) in [
                (LogError::Stdout(Error::from(kind)), "stdout"),
                (LogError::Stderr(Error::from(kind)), "stderr"),
            ] {
                assert_eq!(classify(&err), Class::Transient);
                let f = Failure::from(err);
                assert_eq!(f.class(), Class::Transient);
                assert_eq!(
                    f.to_string(),
                    format!("transient: writing {stream}: {}", Error::from(kind))
                );
            }
        }
    }
}
