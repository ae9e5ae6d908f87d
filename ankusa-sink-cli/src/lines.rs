//! Reading `forward`'s input: JSON lines, read and parsed on a thread of their own, so
//! decoding the next hooks runs beside delivering the last ones instead of taking turns
//! with them on the runtime's thread.

use ankusa_dispatch::DeadLetterInfo;
use ankusa_sink_core::Envelope;
use std::io::{BufRead, Read};
use std::sync::Arc;
use tokio::sync::mpsc;

/// One line of input, at most `max` bytes (without the newline).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum InputLine {
    /// The line's bytes.
    Bytes(Vec<u8>),
    /// The line was longer than the cap: it was skipped up to its newline, never held.
    TooLong,
}

/// Read the next line, holding at most `max` bytes of it; `None` at the end of the input.
pub(crate) fn read_line<R: BufRead>(r: &mut R, max: usize) -> std::io::Result<Option<InputLine>> {
    let mut line = Vec::new();
    let mut too_long = false;
    let mut any = false;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            break;
        }
        any = true;
        let (chunk, done) = match memchr::memchr(b'\n', buf) {
            Some(i) => (&buf[..i], i + 1),
            None => (buf, buf.len()),
        };
        let found_newline = done > chunk.len();
        if !too_long {
            if line.len() + chunk.len() > max {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        r.consume(done);
        if found_newline {
            break;
        }
    }
    if !any {
        return Ok(None);
    }
    if too_long {
        return Ok(Some(InputLine::TooLong));
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Some(InputLine::Bytes(line)))
}

/// What the reader made of one line (numbered from 1; blank lines are skipped).
#[derive(Debug)]
pub(crate) enum Parsed {
    /// A hook (its line number), and where and why it died when the line was a
    /// dead-letter record.
    Hook(u64, Arc<Envelope>, Option<Box<DeadLetterInfo>>),
    /// Not a hook: why (never quoting the line).
    Invalid(u64, String),
    /// Longer than the cap.
    TooLong(u64),
    /// Reading failed after this many lines; nothing follows.
    Failed(u64, std::io::Error),
}

/// How the reader turns a line into a hook (and the sink a dead-letter record names).
pub(crate) type ParseLine = fn(&[u8]) -> Result<(Envelope, Option<Box<DeadLetterInfo>>), String>;

/// Lines handed over at once: one channel message and one wake-up per batch, not per line.
const BATCH: usize = 64;
/// Batches read ahead of the dispatcher, at most.
const AHEAD: usize = 8;

/// Read and parse `input` on a thread of its own; the batches end with the input (or its
/// first read error). Dropping the receiver stops the thread at its next batch. With
/// `digest`, each body's SHA-256 (Message v1's `sha256`, kept by the envelope) is
/// computed here too, off the delivering thread. The first `skip` lines are read past
/// unparsed (`--skip-lines`: resuming a stopped run); numbering still counts them.
pub(crate) fn spawn_reader(
    input: Box<dyn Read + Send>,
    max_line: usize,
    parse: ParseLine,
    digest: bool,
    skip: u64,
) -> std::io::Result<mpsc::Receiver<Vec<Parsed>>> {
    let (tx, rx) = mpsc::channel(AHEAD);
    std::thread::Builder::new()
        .name("ankusa-reader".into())
        .spawn(move || {
            let mut reader = std::io::BufReader::with_capacity(64 * 1024, input);
            let mut batch = Vec::with_capacity(BATCH);
            // `false` once the receiver is gone: nobody reads further lines.
            let hand_over = |batch: &mut Vec<Parsed>| {
                let full = std::mem::replace(batch, Vec::with_capacity(BATCH));
                tx.blocking_send(full).is_ok()
            };
            let mut n = 0u64;
            loop {
                // Hand over what is parsed before a read that may wait (a pipe, a
                // terminal): a slow stream's lines go at once, a file's in batches.
                if reader.buffer().is_empty() && !batch.is_empty() && !hand_over(&mut batch) {
                    return;
                }
                let parsed = match read_line(&mut reader, max_line) {
                    Ok(None) => break,
                    Err(e) => {
                        batch.push(Parsed::Failed(n, e));
                        break;
                    }
                    Ok(Some(InputLine::TooLong)) => {
                        n += 1;
                        if n <= skip {
                            continue;
                        }
                        Parsed::TooLong(n)
                    }
                    Ok(Some(InputLine::Bytes(b))) => {
                        n += 1;
                        if n <= skip || b.iter().all(u8::is_ascii_whitespace) {
                            continue;
                        }
                        match parse(&b) {
                            Ok((env, sink)) => {
                                if digest {
                                    env.body_sha256();
                                }
                                Parsed::Hook(n, Arc::new(env), sink)
                            }
                            Err(reason) => Parsed::Invalid(n, reason),
                        }
                    }
                };
                batch.push(parsed);
                if batch.len() == BATCH && !hand_over(&mut batch) {
                    return;
                }
            }
            if !batch.is_empty() {
                hand_over(&mut batch);
            }
        })?;
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<InputLine> {
        let mut r = std::io::BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        while let Some(l) = read_line(&mut r, max).unwrap() {
            out.push(l);
        }
        out
    }

    #[test]
    fn lines_are_capped_without_holding_them() {
        assert_eq!(
            lines(b"ab\n0123456789\r\nxyz", 5),
            [
                InputLine::Bytes(b"ab".to_vec()),
                InputLine::TooLong,
                InputLine::Bytes(b"xyz".to_vec()),
            ]
        );
        assert_eq!(lines(b"", 5), []);
        assert_eq!(lines(b"\n\n", 5).len(), 2);
        assert_eq!(lines(b"12345\n", 5), [InputLine::Bytes(b"12345".to_vec())]);
    }

    #[tokio::test]
    async fn lines_of_a_slow_stream_are_handed_over_before_the_next_read() {
        // A pipe that has sent two lines and then waits: both arrive without more input.
        let (r, mut w) = std::io::pipe().unwrap();
        std::io::Write::write_all(&mut w, b"a\nb\n").unwrap();
        let parse = |b: &[u8]| {
            Ok((
                Envelope::builder("h", "s", b.to_vec()).build().unwrap(),
                None,
            ))
        };
        let mut rx = spawn_reader(Box::new(r), 100, parse, false, 0).unwrap();
        let mut got = 0;
        while got < 2 {
            let batch = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
                .await
                .expect("lines handed over while the writer waits")
                .unwrap();
            got += batch.len();
        }
        drop(w);
        assert!(rx.recv().await.is_none(), "the input ended");
    }

    #[tokio::test]
    async fn the_reader_numbers_lines_batches_them_and_ends_with_a_read_error() {
        struct FailsAfter(&'static [u8], bool);
        impl Read for FailsAfter {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.1 {
                    return Err(std::io::Error::other("disk gone"));
                }
                self.1 = true;
                let n = self.0.len().min(buf.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                Ok(n)
            }
        }
        let parse = |b: &[u8]| match b {
            b"bad" => Err("bad line".to_owned()),
            _ => Ok((
                Envelope::builder("h", "s", b.to_vec()).build().unwrap(),
                None,
            )),
        };
        let run = |skip: u64| async move {
            let input = FailsAfter(b"a\n\n  \nbad\n0123456789\nb\n", false);
            let mut rx = spawn_reader(Box::new(input), 5, parse, true, skip).unwrap();
            let mut got = Vec::new();
            while let Some(b) = rx.recv().await {
                got.extend(b);
            }
            got.iter()
                .map(|p| match p {
                    Parsed::Hook(n, e, _) => {
                        format!("hook {n} {}", String::from_utf8_lossy(e.body()))
                    }
                    Parsed::Invalid(n, r) => format!("invalid {n} {r}"),
                    Parsed::TooLong(n) => format!("too long {n}"),
                    Parsed::Failed(n, e) => format!("failed after {n}: {e}"),
                })
                .collect::<Vec<String>>()
        };
        assert_eq!(
            run(0).await,
            [
                "hook 1 a",
                "invalid 4 bad line",
                "too long 5",
                "hook 6 b",
                "failed after 6: disk gone"
            ]
        );
        // `--skip-lines 5`: read past, still counted.
        assert_eq!(run(5).await, ["hook 6 b", "failed after 6: disk gone"]);
    }
}
