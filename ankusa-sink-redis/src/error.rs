//! [`RedisError`] and the one pure classifier.

use crate::config::NoSubscriber;
use ankusa_sink_core::{Class, Failure, printable};
use redis::{ErrorKind, ServerErrorKind};

/// The operation that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// `XADD` (stream mode).
    Xadd,
    /// `PUBLISH` (channel mode).
    Publish,
    /// The preflight (`PING`, `TYPE`, `PUBSUB NUMSUB`).
    Check,
}

impl Op {
    const fn as_str(self) -> &'static str {
        match self {
            Op::Xadd => "XADD",
            Op::Publish => "PUBLISH",
            Op::Check => "check",
        }
    }
}

/// Why a delivery to Redis failed. Text never holds a secret (the URL is never printed);
/// server text goes through [`printable`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisError {
    /// The client could not be built from the config (unusable URL, CA file); the URL is
    /// not printed.
    #[error("redis client: {0}")]
    Build(String),
    /// Redis answered with an error, or the connection failed or timed out.
    #[error("redis {}: {}", .op.as_str(), printable(&.source.to_string()))]
    Client {
        /// What was sent.
        op: Op,
        /// The client's error, with its kind and server code.
        #[source]
        source: redis::RedisError,
    },
    /// The key holds another type than a stream (`TYPE` in `check`).
    #[error("redis key {} holds a {}, not a stream", printable(.key), printable(.found))]
    WrongType {
        /// The key.
        key: String,
        /// What `TYPE` answered.
        found: String,
    },
    /// `PUBLISH` reached no subscriber (or `PUBSUB NUMSUB` counted none in `check`).
    #[error("redis channel {} has no subscriber: the hook reached nobody", printable(.channel))]
    NoSubscriber {
        /// The channel.
        channel: String,
        /// The configured class of this failure.
        class: NoSubscriber,
    },
    /// The encoded message is over `max_message_bytes`; nothing was sent.
    #[error(
        "message of {size} bytes is over max_message_bytes {max} (proto-max-bulk-len); not sent"
    )]
    TooLarge {
        /// Encoded bytes.
        size: usize,
        /// The limit.
        max: usize,
    },
}

/// What dispatch does with `err`: a pure, deterministic function of the error, on the
/// client's [`ErrorKind`] and the server's error code, never on text.
///
/// | Error | Class |
/// | --- | --- |
/// | `TooLarge` (over `max_message_bytes`, nothing sent) | `Permanent` |
/// | `NoSubscriber` | `no_subscriber`: `Config` (default) or `Transient` |
/// | `WrongType`, code `WRONGTYPE` | `Config` |
/// | authentication failed (`WRONGPASS` at login), codes `NOAUTH`, `WRONGPASS`, `NOPERM` | `Config` |
/// | `MOVED`, `ASK`, `CROSSSLOT` (a cluster node: this sink talks to one server) | `Config` |
/// | `Build`, invalid client config | `Config` |
/// | `ERR` (the server refused the command itself: a value over its `proto-max-bulk-len`, which is below `max_message_bytes`; a long command before authentication; an unknown command) | `Config` |
/// | code `OOM` (`maxmemory` reached, no pause stated) | `Throttled` |
/// | `LOADING`, `BUSY`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY` | `Transient` |
/// | I/O: refused, reset, lost connection, timeouts (the write may have landed) | `Transient` |
/// | anything else | `Transient` |
pub(crate) fn classify(err: &RedisError) -> Class {
    match err {
        RedisError::TooLarge { .. } => Class::Permanent,
        RedisError::NoSubscriber { class, .. } => match class {
            NoSubscriber::Config => Class::Config,
            NoSubscriber::Transient => Class::Transient,
        },
        RedisError::WrongType { .. } | RedisError::Build(_) => Class::Config,
        RedisError::Client { source, .. } => classify_client(source),
    }
}

fn classify_client(e: &redis::RedisError) -> Class {
    match e.kind() {
        ErrorKind::AuthenticationFailed | ErrorKind::InvalidClientConfig => Class::Config,
        ErrorKind::Server(
            ServerErrorKind::NoPerm
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask
            | ServerErrorKind::CrossSlot,
        ) => Class::Config,
        // XADD and PUBLISH are well-formed: an ERR answer means the sink's config does not
        // fit the server (no login, max_message_bytes over proto-max-bulk-len).
        ErrorKind::Server(ServerErrorKind::ResponseError) => Class::Config,
        ErrorKind::Server(_) => Class::Transient,
        ErrorKind::Extension => match e.code() {
            Some("NOAUTH" | "WRONGPASS" | "NOPERM" | "WRONGTYPE") => Class::Config,
            Some("OOM") => Class::Throttled,
            // BUSY, and codes this table does not know: retry.
            _ => Class::Transient,
        },
        _ => Class::Transient,
    }
}

impl From<RedisError> for Failure {
    fn from(e: RedisError) -> Self {
        let landed = landed(&e);
        Failure::new(classify(&e), e).with_may_have_landed(landed)
    }
}

/// Whether the entry may have been written: a pure function of the error, like
/// [`classify`].
///
/// | Error | May have landed |
/// | --- | --- |
/// | over `max_message_bytes`, a key of another type, a client that cannot be built, a `PUBLISH` that reached no subscriber, any error reply of the server, a refused connection | `Some(false)` |
/// | no reply in time, the connection dropped (reset, closed) | `Some(true)` |
/// | another client error | `None` |
pub(crate) fn landed(err: &RedisError) -> Option<bool> {
    match err {
        RedisError::TooLarge { .. }
        | RedisError::WrongType { .. }
        | RedisError::Build(_)
        | RedisError::NoSubscriber { .. } => Some(false),
        RedisError::Client { source, .. } => {
            if source.is_connection_refusal()
                || matches!(source.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
            {
                Some(false)
            } else if source.is_timeout() || source.is_connection_dropped() {
                Some(true)
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows no server produces for this sink's commands; every other row is provoked
    /// for real in `tests/it/classify.rs`.
    #[test]
    fn rows_without_a_server() {
        assert_eq!(classify(&RedisError::Build("x".into())), Class::Config);
        let io = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(
            classify(&RedisError::Client {
                op: Op::Xadd,
                source: io
            }),
            Class::Transient
        );
        let cfg = redis::RedisError::from((ErrorKind::InvalidClientConfig, "bad"));
        assert_eq!(
            classify(&RedisError::Client {
                op: Op::Xadd,
                source: cfg
            }),
            Class::Config
        );
    }

    #[test]
    fn landing_rows() {
        let client = |source| RedisError::Client {
            op: Op::Xadd,
            source,
        };
        let io = |kind| client(redis::RedisError::from(std::io::Error::from(kind)));
        for (e, want) in [
            (RedisError::Build("x".into()), Some(false)),
            (io(std::io::ErrorKind::ConnectionRefused), Some(false)),
            (io(std::io::ErrorKind::TimedOut), Some(true)),
            (io(std::io::ErrorKind::ConnectionReset), Some(true)),
            (
                client(redis::RedisError::from((
                    ErrorKind::Server(ServerErrorKind::ResponseError),
                    "ERR",
                ))),
                Some(false),
            ),
        ] {
            assert_eq!(landed(&e), want, "{e}");
        }
    }
}
