//! Knowing whether the log sink's line was written.
//!
//! The sink logs through `tracing`, which cannot say whether a line reached its writer.
//! A subscriber that writes the sink's events ([`TARGET`]) through a [`ReportingWriter`],
//! synchronously on the delivering thread, lets the sink see a failed write and fail the
//! delivery (transient, naming stderr) instead of reporting a line nobody got. Without
//! one (another writer, a filter that drops the event, no subscriber) nothing is known
//! and the delivery succeeds, as the line was handed to the logger.

use std::cell::RefCell;
use std::io;

/// The `tracing` target of the log sink's line.
pub const TARGET: &str = "ankusa::sink::log";

thread_local! {
    /// The last write error a [`ReportingWriter`] saw on this thread, as (kind, OS code).
    static FAILED: RefCell<Option<(io::ErrorKind, Option<i32>)>> = const { RefCell::new(None) };
}

/// An [`io::Write`] that remembers, on the calling thread, that a write failed: the log
/// sink reads it right after logging its line. Use it for [`TARGET`]'s events only, with a
/// subscriber that writes synchronously (`tracing_subscriber::fmt` does).
#[derive(Debug)]
pub struct ReportingWriter<W>(pub W);

impl<W: io::Write> ReportingWriter<W> {
    fn seen<T>(r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r {
            let failed = (e.kind(), e.raw_os_error());
            FAILED.with(|f| *f.borrow_mut() = Some(failed));
        }
        r
    }
}

impl<W: io::Write> io::Write for ReportingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Self::seen(self.0.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        Self::seen(self.0.write_all(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        Self::seen(self.0.flush())
    }
}

/// Forget any failure seen on this thread (before logging a line).
pub(crate) fn clear() {
    FAILED.with(|f| f.borrow_mut().take());
}

/// The failure seen on this thread since [`clear`], if any.
pub(crate) fn take() -> Option<io::Error> {
    FAILED
        .with(|f| f.borrow_mut().take())
        .map(|(kind, code)| match code {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::from(kind),
        })
}
