//! Where a (hook, sink) that dispatch gave up on goes: a JSON-lines file, or any sink.

use crate::record::PairState;
use ankusa_claimcheck::ClaimStore;
use ankusa_sink_core::{Ctx, Envelope, Failure, Sink, safe_deliver};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::Write as _;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why and when a (hook, sink) was dead-lettered: the `dead_letter` object of a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeadLetterInfo {
    /// The sink's name in the dispatcher.
    pub sink: String,
    /// The last failure's class (`permanent`, `config`, `retry_after`, `transient`).
    pub class: String,
    /// The error class an operator filters on (`permanent`, `throttled`, `transient`).
    pub error_class: String,
    /// The last failure's reason, with its source chain.
    pub reason: String,
    /// Whether the last attempt may have reached the destination anyway
    /// ([`Failure::may_have_landed`]; `null` when the sink could not tell).
    #[serde(default)]
    pub may_have_landed: Option<bool>,
    /// Attempts made.
    pub attempts: u32,
    /// Unix ms of the first attempt.
    pub first_attempt_ms: i64,
    /// Unix ms of the last attempt.
    pub last_attempt_ms: i64,
}

impl DeadLetterInfo {
    /// The record of `failure` for `sink` after `attempts` attempts.
    pub fn new(
        sink: &str,
        failure: &Failure,
        attempts: u32,
        first_attempt_ms: i64,
        last_attempt_ms: i64,
    ) -> Self {
        DeadLetterInfo {
            sink: sink.to_owned(),
            class: failure.class().as_str().to_owned(),
            error_class: failure.class().error_class().as_str().to_owned(),
            reason: failure.reason_chain(),
            may_have_landed: failure.may_have_landed(),
            attempts,
            first_attempt_ms,
            last_attempt_ms,
        }
    }
}

/// One dead-letter line: the envelope in its JSON form (the form `ankusa-sink gen` prints
/// and `forward` reads) plus a `dead_letter` object: the record of
/// [`crate::record`](mod@crate::record) in its dead state.
///
/// Only the headers a sink would forward are stored
/// ([`is_forwardable`](ankusa_message::is_forwardable)): credentials a provider
/// sent (an `Authorization`, an API key) never land on disk, and the path's query values
/// are masked (`?token=REDACTED`).
pub fn record_line(env: &Envelope, info: &DeadLetterInfo) -> serde_json::Result<String> {
    crate::record::pair_line(env, info, &PairState::Dead)
}

/// Split a dead-letter record into the envelope's JSON and its `dead_letter` object;
/// `None` for a line that is not a record (a plain envelope). An invalid `dead_letter`
/// object is an error naming what is wrong, never a value.
pub fn split_record(
    mut value: serde_json::Value,
) -> Result<(serde_json::Value, Option<DeadLetterInfo>), String> {
    let info = match &mut value {
        serde_json::Value::Object(map) => map.remove("dead_letter"),
        _ => None,
    };
    match info {
        None => Ok((value, None)),
        Some(info) => serde_json::from_value(info)
            .map(|i| (value, Some(i)))
            .map_err(|e| format!("not a valid dead_letter object ({:?} error)", e.classify())),
    }
}

/// The dead-letter destination of a dispatcher.
#[derive(Clone)]
pub struct DeadLetter(Arc<Kind>, Option<ClaimStore>);

enum Kind {
    File {
        path: PathBuf,
        file: Mutex<DeadLetterFile>,
    },
    Sink(Arc<dyn Sink>),
}

impl fmt::Debug for DeadLetter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.0 {
            Kind::File { path, .. } => f.debug_tuple("DeadLetter::File").field(path).finish(),
            Kind::Sink(s) => f.debug_tuple("DeadLetter::Sink").field(s).finish(),
        }
    }
}

impl DeadLetter {
    /// Append one JSON line per dead letter to `path`. Each line is written in one
    /// `write` and synced to disk before the dead letter is reported stored.
    ///
    /// The file is created with mode 0600 (dead letters hold hook bodies) and opened
    /// without following a symbolic link: a link there is refused
    /// ([`DeadLetterOpenError::Symlink`]), since whoever placed it would choose where
    /// bodies are written. A file whose last line is torn (a crash or a full disk cut it)
    /// is first ended with a newline, so the next record starts on a line of its own and
    /// a replay reports the torn one `invalid` and goes on.
    pub fn jsonl(path: impl AsRef<Path>) -> Result<Self, DeadLetterOpenError> {
        let path = path.as_ref().to_owned();
        let file = DeadLetterFile::open(&path)?;
        Ok(DeadLetter(
            Arc::new(Kind::File {
                path,
                file: Mutex::new(file),
            }),
            None,
        ))
    }

    /// Deliver each dead letter to `sink` as a message whose body is its record line and
    /// whose headers say where and why it died ([`carrier`](crate::record::carrier)). Give
    /// a sink that keeps what it takes (a topic, a queue, a stream): a dead letter counts
    /// as stored when the sink said ok.
    pub fn sink(sink: Arc<dyn Sink>) -> Self {
        DeadLetter(Arc::new(Kind::Sink(sink)), None)
    }

    /// Check a record larger than the dead-letter sink's inline threshold into `store`
    /// first, and send it by claim (a record holds the hook's whole body, and more): without
    /// a store such a record cannot be sent to a queue sink. The dispatcher gives its own
    /// claim store to a dead-letter sink that has none.
    pub fn with_claim_store(mut self, store: ClaimStore) -> Self {
        self.1 = Some(store);
        self
    }

    /// Whether a claim store is set ([`with_claim_store`](Self::with_claim_store)).
    pub fn has_claim_store(&self) -> bool {
        self.1.is_some()
    }

    /// Store one dead letter (a sink destination has `timeout` to answer); the error says
    /// why it could not be stored.
    pub async fn store(
        &self,
        env: &Envelope,
        info: &DeadLetterInfo,
        timeout: Duration,
    ) -> Result<(), String> {
        match &*self.0 {
            Kind::File { .. } => {
                let line = record_line(env, info).map_err(|e| e.to_string())?;
                let this = self.clone();
                tokio::task::spawn_blocking(move || this.append(&line))
                    .await
                    .map_err(|e| e.to_string())?
            }
            Kind::Sink(sink) => {
                let carrier = crate::record::carrier(env, info, &PairState::Dead)
                    .map_err(|e| format!("the dead letter's record is not a valid message: {e}"))?;
                let attrs = crate::record::record_attrs(info, &PairState::Dead);
                deliver_carrier(&**sink, &carrier, attrs, self.1.as_ref(), timeout).await
            }
        }
    }

    /// Store one line that is not a hook's record (a source record that could not be
    /// decoded, say): appended to a dead-letter file, synced like the others, or sent to a
    /// dead-letter sink as the body of a message `invalid.<digest>` (the line's SHA-256,
    /// 16 hex digits: the same bytes are the same message) whose `ankusa_record` attribute
    /// is `invalid`.
    pub async fn store_line(&self, line: String) -> Result<(), String> {
        match &*self.0 {
            Kind::File { .. } => {
                let this = self.clone();
                tokio::task::spawn_blocking(move || this.append(&line))
                    .await
                    .map_err(|e| e.to_string())?
            }
            Kind::Sink(sink) => {
                let digest = ankusa_message::sha256_hex(line.as_bytes());
                let carrier =
                    Envelope::builder(format!("invalid.{}", &digest[..16]), "ankusa-forward", line)
                        .content_type("application/json")
                        .build()
                        .map_err(|e| e.to_string())?;
                let attrs = ankusa_message::RecordAttrs {
                    state: "invalid".to_owned(),
                    sink: String::new(),
                    class: "permanent".to_owned(),
                    reason: "not a hook".to_owned(),
                };
                deliver_carrier(
                    &**sink,
                    &carrier,
                    attrs,
                    self.1.as_ref(),
                    Duration::from_secs(30),
                )
                .await
            }
        }
    }

    fn append(&self, line: &str) -> Result<(), String> {
        let Kind::File { path, file } = &*self.0 else {
            return Ok(());
        };
        let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
        f.append(line)
            .map_err(|e| format!("writing the dead-letter file {}: {e}", path.display()))
    }
}

/// Deliver a record's carrier to a dead-letter sink, once (the dispatcher stores it again
/// if this fails), in a context of its own (the hook's, its claim, its attempt, describes
/// another message) that says what it carries ([`ankusa_message::RecordAttrs`]).
pub(crate) async fn deliver_carrier(
    sink: &dyn Sink,
    carrier: &Envelope,
    attrs: ankusa_message::RecordAttrs,
    claims: Option<&ClaimStore>,
    timeout: Duration,
) -> Result<(), String> {
    let mut ctx = Ctx::for_envelope(carrier)
        .with_batch(false)
        .with_extension(attrs);
    // A record over the sink's inline threshold travels by claim, as a hook would.
    if let Some(store) = claims {
        let threshold = ankusa_sink_core::safe_capabilities(sink)
            .map_or(NonZeroUsize::new(1), |c| c.inline_max_bytes);
        match store.claim_for(carrier, [threshold]).await {
            Ok(Some(claim)) => ctx = ctx.with_claim(claim),
            Ok(None) => {}
            Err(e) => return Err(format!("checking the record in: {e}")),
        }
    }
    safe_deliver(sink, carrier, &ctx, Some(timeout))
        .await
        .map_err(|f| f.to_string())
}

/// How long a dead letter that could not be stored waits before it is written again, after
/// `failures` failed stores: 1 s doubling to 60 s.
pub fn dead_letter_backoff(failures: u32) -> Duration {
    let secs = 1u64 << failures.saturating_sub(1).min(6);
    Duration::from_secs(secs.min(60))
}

/// Why a dead-letter file could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeadLetterOpenError {
    /// The path is a symbolic link: refused, never followed.
    #[error("the dead-letter file {0} is a symbolic link: give the file's own path")]
    Symlink(PathBuf),
    /// Opening, reading or repairing the file failed.
    #[error("cannot open the dead-letter file {0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    /// Another run (or another [`DeadLetter`] of this one) holds the file: two writers
    /// would cut back each other's lines after a failed write.
    #[error(
        "the dead-letter file {path} is in use by another run{}: give each run a file of \
         its own",
        holder.map_or(String::new(), |pid| format!(" (pid {pid})"))
    )]
    Locked {
        /// The file.
        path: PathBuf,
        /// The holder's process id, when the system says.
        holder: Option<u32>,
    },
    /// The existing file can be read or written by others (group or world bits): its
    /// records hold hook bodies. Not used while a group or other bit is set (chmod 600).
    #[error(
        "the dead-letter file {} has mode {mode:04o}, readable or writable by others: \
         dead letters hold hook bodies; chmod 600 it or give a new path",
        path.display()
    )]
    Mode {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The existing file belongs to another user.
    #[error(
        "the dead-letter file {} belongs to uid {uid}, not this process's user: give a file \
         of your own",
        path.display()
    )]
    Owner {
        /// The file.
        path: PathBuf,
        /// Its owner.
        uid: u32,
    },
}

/// The process holding an `flock` on the file of `meta`, from `/proc/locks`
/// (`N: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF`), if it is listed.
fn flock_holder(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let dev = meta.dev();
    let want = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev),
        libc::minor(dev),
        meta.ino()
    );
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // A waiter's line has "->" after the number: only the holder's counts.
        (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&want.as_str()))
            .then(|| f.get(4)?.parse().ok())
            .flatten()
    })
}

/// Refuses a dead-letter file others could read or that another user owns: its records
/// hold hook bodies. A file this run creates is 0600 already; one found in place is taken
/// only as private as that.
fn private_file(path: &Path, meta: &std::fs::Metadata) -> Result<(), DeadLetterOpenError> {
    use std::os::unix::fs::MetadataExt as _;
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(DeadLetterOpenError::Mode {
            path: path.to_owned(),
            mode,
        });
    }
    // `/proc/self` belongs to the process's effective user (no `unsafe` geteuid needed);
    // without /proc the owner is not checked.
    if let Ok(me) = std::fs::metadata("/proc/self")
        && meta.uid() != me.uid()
    {
        return Err(DeadLetterOpenError::Owner {
            path: path.to_owned(),
            uid: meta.uid(),
        });
    }
    Ok(())
}

/// An open dead-letter file and what is known of its end.
#[derive(Debug)]
struct DeadLetterFile {
    file: std::fs::File,
    /// The file's length after the last complete line: a failed write is cut back to it.
    len: u64,
    /// A failed write could not be cut back: the next record first ends the torn line.
    torn: bool,
}

impl DeadLetterFile {
    fn open(path: &Path) -> Result<Self, DeadLetterOpenError> {
        use std::io::{Read as _, Seek as _, SeekFrom};
        use std::os::unix::fs::OpenOptionsExt as _;
        let io = |e| DeadLetterOpenError::Io(path.to_owned(), e);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    DeadLetterOpenError::Symlink(path.to_owned())
                } else {
                    io(e)
                }
            })?;
        // One writer per regular file, for the life of the run (the lock goes with the
        // descriptor; `flock` on Linux): a second writer would cut back the other's lines
        // after a failed write. A device (`/dev/null`) is never cut back: not locked.
        let meta = file.metadata().map_err(io)?;
        let regular = meta.file_type().is_file();
        if regular {
            private_file(path, &meta)?;
        }
        match if regular { file.try_lock() } else { Ok(()) } {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(DeadLetterOpenError::Locked {
                    path: path.to_owned(),
                    holder: file.metadata().ok().as_ref().and_then(flock_holder),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        let len = file.metadata().map_err(io)?.len();
        let mut this = DeadLetterFile {
            file,
            len,
            torn: false,
        };
        if len > 0 {
            let mut last = [0u8; 1];
            (&this.file).seek(SeekFrom::Start(len - 1)).map_err(io)?;
            (&this.file).read_exact(&mut last).map_err(io)?;
            this.torn = last[0] != b'\n';
        }
        if this.torn {
            this.write_synced(b"\n").map_err(io)?;
            this.torn = false;
        }
        Ok(this)
    }

    /// Append `line` and its newline in one write, synced. On failure the file is cut
    /// back to its last complete line (or, if even that fails, the next append ends the
    /// torn line first): a record is whole or absent, never glued to the next one.
    fn append(&mut self, line: &str) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(line.len() + 2);
        if self.torn {
            buf.push(b'\n');
        }
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        let r = self.write_synced(&buf);
        if r.is_ok() {
            self.torn = false;
        }
        r
    }

    fn write_synced(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let r = self.write_once(buf).and_then(|()| self.file.sync_data());
        match r {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Whatever part of the line reached the file goes (truncating frees space,
                // so it works on a full disk); the file ends on its last whole line.
                let cut = self
                    .file
                    .set_len(self.len)
                    .and_then(|()| self.file.sync_data());
                if cut.is_err() {
                    self.torn = true;
                }
                Err(e)
            }
        }
    }

    /// One `write` of the whole buffer: on a regular file a short write only happens when
    /// the device is full or a limit is hit, and then the rest would fail too.
    fn write_once(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let n = self.file.write(buf)?;
        if n == buf.len() {
            Ok(())
        } else {
            // What `write` reports for the rest: the device is full.
            Err(std::io::Error::from(std::io::ErrorKind::StorageFull))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::Reason;

    #[test]
    fn records_round_trip_through_split() {
        let env = Envelope::builder("h1", "stripe", "body")
            .tenant_id("acme")
            .build()
            .unwrap();
        let f = Failure::permanent(Reason("gone".into()));
        let info = DeadLetterInfo::new("http", &f, 2, 10, 20);
        let line = record_line(&env, &info).unwrap();
        // The envelope exactly as it serializes alone, then the dead_letter object.
        let alone = serde_json::to_string(&env).unwrap();
        assert!(line.starts_with(&alone[..alone.len() - 1]), "{line}");
        assert!(line.ends_with("}}"), "{line}");
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["dead_letter"]["error_class"], "permanent");
        assert_eq!(value["dead_letter"]["sink"], "http");
        let (env_json, got) = split_record(value).unwrap();
        assert_eq!(got, Some(info));
        let back: Envelope = serde_json::from_value(env_json).unwrap();
        assert_eq!(back.id(), "h1");
        let (_, none) = split_record(serde_json::to_value(&env).unwrap()).unwrap();
        assert_eq!(none, None);
        let bad = serde_json::json!({"id": "h", "dead_letter": {"sink": 3}});
        assert!(split_record(bad).unwrap_err().contains("dead_letter"));
    }
}
