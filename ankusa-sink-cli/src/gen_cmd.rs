//! `gen`: sample envelopes as JSON lines.

use crate::{EXIT_OUTPUT, GenArgs, UsageError};
use ankusa_sink_core::Envelope;
use std::io::Write;
use std::process::ExitCode;

/// A JSON body of exactly `size` bytes when `size` allows one, else `size` letters; with
/// its content type.
fn body(n: u64, size: usize) -> (Vec<u8>, &'static str) {
    let head = format!("{{\"n\":{n},\"p\":\"");
    if size < head.len() + 2 {
        return (
            (0..size).map(|i| b'a' + (i % 26) as u8).collect(),
            "text/plain",
        );
    }
    let mut b = head.into_bytes();
    let pad = size - b.len() - 2;
    b.extend((0..pad).map(|i| b'a' + (i % 26) as u8));
    b.extend_from_slice(b"\"}");
    (b, "application/json")
}

/// The largest `--size`: a body is built in memory, and its JSON line is 4/3 of it.
const MAX_SIZE: u64 = 1 << 30;

pub(crate) fn run(a: &GenArgs) -> Result<ExitCode, UsageError> {
    if let Some(t) = &a.tenant {
        ankusa_sink_core::validate_tenant(t)?;
    }
    if a.size > MAX_SIZE {
        return Err(UsageError(format!(
            "--size {} is over the limit of {MAX_SIZE} bytes (1 GiB)",
            a.size
        )));
    }
    let size = usize::try_from(a.size).map_err(|_| UsageError("--size is too large".into()))?;
    // Fail with a message, not an abort, where the machine cannot hold one body.
    let mut probe = Vec::<u8>::new();
    probe
        .try_reserve_exact(size.saturating_mul(2))
        .map_err(|_| UsageError(format!("cannot allocate a body of {size} bytes")))?;
    drop(probe);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match write_all(a, size, &mut out).and_then(|()| out.flush().map_err(|_| GenError::Io)) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(GenError::Io) => Ok(ExitCode::from(EXIT_OUTPUT)),
        Err(GenError::Usage(u)) => Err(u),
    }
}

/// Why writing the envelopes stopped.
enum GenError {
    /// stdout could not be written (closed pipe, full disk).
    Io,
    Usage(UsageError),
}

fn write_all(a: &GenArgs, size: usize, out: &mut impl Write) -> Result<(), GenError> {
    for n in 0..a.count {
        let (bytes, content_type) = body(n, size);
        let env = Envelope::builder(ulid::Ulid::new().to_string(), a.source_id.clone(), bytes)
            .tenant(a.tenant.clone())
            .content_type(content_type)
            .header("X-Sample-Event", "generated")
            .build()
            .map_err(|e| GenError::Usage(e.into()))?;
        serde_json::to_writer(&mut *out, &env).map_err(|_| GenError::Io)?;
        out.write_all(b"\n").map_err(|_| GenError::Io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::body;

    #[test]
    fn bodies_have_the_exact_size() {
        for size in [0, 1, 5, 12, 13, 100, 65_536] {
            let (b, ct) = body(7, size);
            assert_eq!(b.len(), size);
            let json = serde_json::from_slice::<serde_json::Value>(&b).is_ok();
            assert_eq!(json, ct == "application/json", "size {size}");
            assert_eq!(json, size >= 14, "size {size}");
        }
    }
}
