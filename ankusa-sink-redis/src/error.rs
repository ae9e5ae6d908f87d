//! [`RedisError`] and the one pure classifier.

use crate::config::NoSubscriber;
use ankusa_sink_core::{Class, Failure};
use ankusa_sink_kit::printable;
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
    /// `CONFIG GET proto-max-bulk-len`, asked before the first message over 1 MiB (nothing
    /// is written).
    ConfigGet,
}

impl Op {
    const fn as_str(self) -> &'static str {
        match self {
            Op::Xadd => "XADD",
            Op::Publish => "PUBLISH",
            Op::Check => "check",
            Op::ConfigGet => "CONFIG GET",
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
    /// `check()` of a sink configured `durable`: the server keeps no append-only file
    /// (`appendonly no`), so an answered `XADD` is lost when it restarts (an RDB snapshot,
    /// `save`, keeps only what came before the last one).
    #[error(
        "redis keeps no append-only file (appendonly no{}): an acknowledged entry does not \
         survive a restart, and the sink is configured durable",
        if *.snapshots { "; RDB snapshots only" } else { "; no RDB snapshots either" }
    )]
    NotPersistent {
        /// Whether the server takes RDB snapshots (`save` is set).
        snapshots: bool,
    },
    /// The encoded message is over `max_message_bytes`, or over the server's
    /// `proto-max-bulk-len`; nothing was sent.
    #[error(
        "message of {size} bytes is over the limit of {max} bytes (max_message_bytes, or the \
         server's proto-max-bulk-len); not sent"
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
/// | `TooLarge` (over `max_message_bytes` or the server's `proto-max-bulk-len`, nothing sent) | `Permanent` |
/// | `ERR Protocol error: invalid bulk length` (a value over the server's `proto-max-bulk-len`, when its limit could not be asked) | `Permanent` |
/// | `ERR max number of clients reached` (`maxclients`: a passing overload) | `Transient` |
/// | `NoSubscriber` | `no_subscriber`: `Config` (default) or `Transient` |
/// | `NotPersistent` (`check()` of a durable stream sink: `appendonly no`) | `Config` |
/// | `WrongType`, code `WRONGTYPE` | `Config` |
/// | authentication failed (`WRONGPASS` at login), codes `NOAUTH`, `WRONGPASS`, `NOPERM` | `Config` |
/// | `MOVED`, `ASK`, `CROSSSLOT` (a cluster node: this sink talks to one server) | `Config` |
/// | `Build`, invalid client config | `Config` |
/// | any other `ERR` (the server refused the command itself: a long command before authentication, an unknown command) | `Config` |
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
        RedisError::WrongType { .. } | RedisError::Build(_) | RedisError::NotPersistent { .. } => {
            Class::Config
        }
        RedisError::Client { source, .. } => classify_client(source),
    }
}

/// The text after `ERR` when `maxclients` is reached (the second with cluster mode on).
const ERR_MAX_CLIENTS: [&str; 2] = [
    "max number of clients reached",
    "max number of clients + cluster connections reached",
];
/// The text after `ERR` for a value over `proto-max-bulk-len` (then Redis closes the
/// connection).
const ERR_BULK_LENGTH: &str = "Protocol error: invalid bulk length";

fn classify_client(e: &redis::RedisError) -> Class {
    match e.kind() {
        ErrorKind::AuthenticationFailed | ErrorKind::InvalidClientConfig => Class::Config,
        ErrorKind::Server(
            ServerErrorKind::NoPerm
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask
            | ServerErrorKind::CrossSlot,
        ) => Class::Config,
        // Redis gives these two no code of their own, only `ERR` and a fixed text
        // (networking.c): the text is the one way to tell them from the `ERR` of a
        // command the server refuses whatever the hook (no login: config).
        ErrorKind::Server(ServerErrorKind::ResponseError) => match e.detail() {
            Some(d) if ERR_MAX_CLIENTS.contains(&d) => Class::Transient,
            Some(ERR_BULK_LENGTH) => Class::Permanent,
            _ => Class::Config,
        },
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
/// | over `max_message_bytes` or the server's limit, a key of another type, a client that cannot be built, a `PUBLISH` that reached no subscriber, a server without persistence (`check()`), any error reply of the server, a refused connection, any failure of `CONFIG GET` | `Some(false)` |
/// | no reply in time, the connection dropped (reset, closed) | `Some(true)` |
/// | another client error | `None` |
pub(crate) fn landed(err: &RedisError) -> Option<bool> {
    match err {
        RedisError::TooLarge { .. }
        | RedisError::WrongType { .. }
        | RedisError::Build(_)
        | RedisError::NotPersistent { .. }
        | RedisError::NoSubscriber { .. } => Some(false),
        // Only asked, nothing written.
        RedisError::Client {
            op: Op::ConfigGet, ..
        } => Some(false),
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
        for snapshots in [false, true] {
            let e = RedisError::NotPersistent { snapshots };
            assert_eq!(classify(&e), Class::Config);
            assert_eq!(landed(&e), Some(false));
        }
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

    /// `ERR` replies Redis gives no code of their own, as the client parses them from the
    /// wire (the text after the code is the detail) and as its connection setup rebuilds
    /// a refused `SELECT` (the server's text kept as the detail).
    #[test]
    fn err_rows_by_the_servers_fixed_text() {
        let parsed = |line: &str| {
            let reply = format!("-{line}\r\n").into_bytes();
            match redis::parse_redis_value(&reply).unwrap() {
                redis::Value::ServerError(e) => redis::RedisError::from(e),
                other => panic!("not an error reply: {other:?}"),
            }
        };
        let rebuilt = |detail: &str| {
            redis::RedisError::from((
                ErrorKind::Server(ServerErrorKind::ResponseError),
                "Redis server refused to switch database",
                detail.to_owned(),
            ))
        };
        for (line, want) in [
            ("ERR max number of clients reached", Class::Transient),
            (
                "ERR max number of clients + cluster connections reached",
                Class::Transient,
            ),
            ("ERR Protocol error: invalid bulk length", Class::Permanent),
            (
                "ERR Protocol error: unauthenticated multibulk length",
                Class::Config,
            ),
            ("ERR unknown command 'XADD'", Class::Config),
            ("ERR max number of clients reached, or not", Class::Config),
        ] {
            let client = |source| RedisError::Client {
                op: Op::Xadd,
                source,
            };
            assert_eq!(classify(&client(parsed(line))), want, "{line}");
            let detail = line.strip_prefix("ERR ").unwrap();
            assert_eq!(classify(&client(rebuilt(detail))), want, "{line}");
        }
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
                RedisError::Client {
                    op: Op::ConfigGet,
                    source: redis::RedisError::from(std::io::Error::from(
                        std::io::ErrorKind::TimedOut,
                    )),
                },
                Some(false),
            ),
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
