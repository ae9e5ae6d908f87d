//! The log sink's classification table.
//!
//! | Error | Class |
//! | --- | --- |
//! | any I/O error writing the Message v1 line to stdout (closed pipe, full disk) | transient |
//!
//! Encoding cannot fail: the log sink has no inline threshold, so every body is inline.

use ankusa_sink_core::Failure;

/// Classify a failure to write to stdout: always transient, since a reader may come back
/// or the disk may be freed, and the hook itself is fine.
pub fn classify(err: std::io::Error) -> Failure {
    Failure::transient(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::Class;
    use std::io::{Error, ErrorKind};

    #[test]
    fn io_errors_are_transient() {
        for kind in [
            ErrorKind::BrokenPipe,
            ErrorKind::StorageFull,
            ErrorKind::Other,
        ] {
            assert_eq!(classify(Error::from(kind)).class(), Class::Transient);
        }
    }
}
