//! `gen`: sample envelopes as JSON lines.

use crate::{GenArgs, UsageError};
use ankusa_sink_core::Envelope;
use std::io::Write as _;

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

pub(crate) fn run(a: &GenArgs) -> Result<(), UsageError> {
    if let Some(t) = &a.tenant {
        ankusa_sink_core::validate_tenant(t)?;
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for n in 0..a.count {
        let (bytes, content_type) = body(n, a.size);
        let env = Envelope::builder(ulid::Ulid::new().to_string(), a.source_id.clone(), bytes)
            .tenant(a.tenant.clone())
            .content_type(content_type)
            .header("X-Sample-Event", "generated")
            .build()?;
        serde_json::to_writer(&mut out, &env)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
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
