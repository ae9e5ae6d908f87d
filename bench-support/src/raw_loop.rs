//! What the pipeline bench's raw-client loops (each adapter's `examples/raw_loop.rs`, run
//! by `scripts/bench_pipeline.py`) share: the input's lines, the Message v1 a loop sends
//! with `--encode`, and the process around `run`.

use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{Ctx, Envelope};
use std::fmt::Display;
use std::fs::File;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::ExitCode;

/// The lines of a file, each handed out without its `\n`, through a 1 MiB buffer and one
/// reused line buffer (the loops send each line as is).
#[derive(Debug)]
pub struct Lines {
    reader: BufReader<File>,
    line: Vec<u8>,
}

impl Lines {
    /// Open `path`.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(Lines {
            reader: BufReader::with_capacity(1 << 20, File::open(path)?),
            line: Vec::new(),
        })
    }

    /// The next line, `None` at the end of the file.
    ///
    /// # Errors
    /// A read error.
    pub fn next_line(&mut self) -> std::io::Result<Option<&[u8]>> {
        self.line.clear();
        if self.reader.read_until(b'\n', &mut self.line)? == 0 {
            return Ok(None);
        }
        if self.line.last() == Some(&b'\n') {
            self.line.pop();
        }
        Ok(Some(&self.line))
    }
}

/// A loop's `--encode` mode: each line sent as `forward`'s Message v1 sinks send a hook,
/// the work any sender of the format pays, done the plainest way a user would (no
/// dispatcher, no retries, no outcome lines).
///
/// Per line: the line parsed into an [`Envelope`] (serde, as `forward` parses it), then
/// [`Outgoing::new`] with the sink's [`Layout`] (the body's SHA-256 and Message v1), whose
/// body and attributes the loop maps to its client's message as the sink does.
#[derive(Debug)]
pub struct Encoder {
    layout: Layout,
}

impl Encoder {
    /// An encoder for `layout` (the one the loop's sink builds with its default config).
    pub fn new(layout: Layout) -> Self {
        Encoder { layout }
    }

    /// An encoder for the default layout of a queue sink: Message v1, bodies inline up to
    /// the default threshold, empty attribute values as `empty` says.
    pub fn message(empty: EmptyValues) -> Self {
        Encoder::new(Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), empty))
    }

    /// `send`'s result for the Message v1 of `line`.
    ///
    /// # Errors
    /// The line is not a valid envelope, or it cannot be encoded.
    pub fn encode<R>(
        &self,
        line: &[u8],
        send: impl FnOnce(Outgoing<'_>, &Envelope) -> R,
    ) -> Result<R, String> {
        let env: Envelope =
            serde_json::from_slice(line).map_err(|e| format!("not an envelope: {e}"))?;
        let ctx = Ctx::for_envelope(&env);
        let out = Outgoing::new(&env, &ctx, &self.layout).map_err(|e| e.to_string())?;
        Ok(send(out, &env))
    }
}

/// Whether `--encode` is among `args`, and `args` without it.
pub fn encode_flag(mut args: Vec<String>) -> (bool, Vec<String>) {
    let before = args.len();
    args.retain(|a| a != "--encode");
    (args.len() != before, args)
}

/// The runtime of a loop: `threads <= 1` a current-thread runtime, else that many workers.
///
/// # Panics
/// When tokio cannot build it.
pub fn runtime(threads: usize) -> tokio::runtime::Runtime {
    let mut b = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    b.enable_all().build().expect("a tokio runtime")
}

/// Run `run` with the process's arguments on `rt`: its exit code, or 1 after printing
/// `<name>: <error>` on stderr.
pub fn main<F, Fut, E>(name: &str, rt: tokio::runtime::Runtime, run: F) -> ExitCode
where
    F: FnOnce(Vec<String>) -> Fut,
    Fut: Future<Output = Result<ExitCode, E>>,
    E: Display,
{
    let args: Vec<String> = std::env::args().skip(1).collect();
    match rt.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}
