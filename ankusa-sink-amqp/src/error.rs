//! What went wrong talking to the broker, and the one function that classifies it.

use ankusa_sink_core::{Class, Failure};
use lapin::ErrorKind;
use lapin::protocol::AMQPErrorKind;
use std::fmt;
use std::sync::Arc;

/// AMQP reply codes the classification names (AMQP 0-9-1 spec, section 1.9 "Constants").
pub(crate) mod reply_code {
    /// A mandatory message could not be routed to any queue (basic.return).
    pub(crate) const NO_ROUTE: u16 = 312;
    /// An immediate message had no consumer (basic.return).
    pub(crate) const NO_CONSUMERS: u16 = 313;
    /// A frame larger than allowed.
    pub(crate) const CONTENT_TOO_LARGE: u16 = 311;
    /// The vhost path is invalid.
    pub(crate) const INVALID_PATH: u16 = 402;
    /// The credential or permissions refuse the operation (also a refused login).
    pub(crate) const ACCESS_REFUSED: u16 = 403;
    /// The exchange (or queue) does not exist.
    pub(crate) const NOT_FOUND: u16 = 404;
    /// A declare that contradicts the existing entity, or a publish the broker refuses.
    pub(crate) const PRECONDITION_FAILED: u16 = 406;
    /// The vhost is missing or not allowed for this user.
    pub(crate) const NOT_ALLOWED: u16 = 530;
}

/// Which step of talking to the broker failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Opening the TCP connection and the AMQP handshake (login, vhost).
    Connect,
    /// Opening the channel and enabling publisher confirms.
    Channel,
    /// Declaring (or passively checking) the exchange.
    Declare,
    /// Sending basic.publish.
    Publish,
    /// Waiting for the publisher confirm.
    Confirm,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Connect => "connect",
            Stage::Channel => "channel open",
            Stage::Declare => "exchange declare",
            Stage::Publish => "publish",
            Stage::Confirm => "publisher confirm",
        })
    }
}

pub(crate) use ankusa_sink_kit::printable;

/// A lapin error in words: the broker's reply code and (escaped, bounded) reply text for
/// a close, the IO error kind for a failed socket; lapin's own text otherwise.
pub(crate) fn lapin_text(error: &lapin::Error) -> String {
    match error.kind() {
        ErrorKind::ProtocolError(e) => {
            let closed = match e.kind() {
                AMQPErrorKind::Soft(_) => "channel",
                AMQPErrorKind::Hard(_) => "connection",
            };
            let text = e.get_message().as_str();
            if text.is_empty() {
                format!("broker closed the {closed}: {} {}", e.get_id(), e.kind())
            } else {
                format!(
                    "broker closed the {closed}: {} {}",
                    e.get_id(),
                    printable(text)
                )
            }
        }
        ErrorKind::IOError(io) => io_text(io),
        _ => printable(&error.to_string()),
    }
}

/// The common socket failures by their kind alone (`connection refused`); anything else
/// (DNS, TLS) with its own message, which says more than the kind.
fn io_text(io: &std::io::Error) -> String {
    ankusa_sink_kit::socket_failure(io.kind()).unwrap_or_else(|| printable(&io.to_string()))
}

/// How long ago, in words that never say "0 ms ago".
struct Ago(u128);

impl fmt::Display for Ago {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => f.write_str("less than 1 ms ago"),
            ms => write!(f, "{ms} ms ago"),
        }
    }
}

/// A failed delivery or check, before classification. Never holds credentials: endpoints
/// are printed as `amqp://host:port/<vhost>`. Text the broker chose (`reply_text`) is
/// printed escaped and bounded ([`MAX_REASON_TEXT`](ankusa_sink_kit::MAX_REASON_TEXT)
/// characters).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AmqpError {
    /// lapin reported an error at `stage` (an AMQP close with its reply code, an IO error,
    /// a closed channel or connection). The text is the sink's own rendering of lapin's
    /// typed error, so lapin's error is not the `source()` (its text would repeat the IO
    /// message and print the broker's reply text raw).
    #[error("{stage} failed on {endpoint}: {}", lapin_text(&error.0))]
    Lapin {
        /// The step that failed.
        stage: Stage,
        /// Where, without credentials.
        endpoint: String,
        /// The client's error (opaque: classify with [`AmqpError::reply_code`] and
        /// the delivery's [`Class`]).
        error: ClientError,
    },
    /// Opening the connection and channel took longer than `connect_timeout`.
    #[error("connecting to {endpoint} did not finish within {ms} ms")]
    ConnectTimeout {
        /// Where, without credentials.
        endpoint: String,
        /// The bound.
        ms: u128,
    },
    /// Another delivery's attempt to connect failed moments ago; this delivery did not
    /// dial again (for 250 ms after a failed attempt).
    #[error(
        "not connected to the broker: the last connection attempt, {}, failed",
        Ago(*ago_ms)
    )]
    NotConnected {
        /// How long ago the failed attempt was.
        ago_ms: u128,
        /// Why it failed.
        #[source]
        source: Arc<AmqpError>,
    },
    /// The broker returned the message (basic.return) before acking it.
    #[error(
        "broker returned the message: {code} {} (exchange {exchange:?}, routing key {routing_key:?})",
        printable(text)
    )]
    Returned {
        /// The reply code, e.g. 312 NO_ROUTE.
        code: u16,
        /// The reply text, as the broker sent it (printed escaped and bounded).
        text: String,
        /// The exchange published to.
        exchange: String,
        /// The routing key used.
        routing_key: String,
    },
    /// The broker nacked the message (e.g. a full queue with `x-overflow=reject-publish`).
    #[error("broker nacked the message (exchange {exchange:?}, routing key {routing_key:?})")]
    Nacked {
        /// The exchange published to.
        exchange: String,
        /// The routing key used.
        routing_key: String,
    },
    /// The broker blocked the connection (connection.blocked: a memory or disk alarm).
    #[error("broker blocked the connection (resource alarm)")]
    Blocked,
    /// No confirm within `confirm_timeout`: the message may or may not have been taken.
    #[error("no publisher confirm within {ms} ms")]
    ConfirmTimeout {
        /// The bound.
        ms: u128,
    },
    /// `max_inflight` publishes awaited confirms and none finished within `confirm_timeout`.
    #[error("{max} publishes already await confirms; none finished within {ms} ms")]
    Busy {
        /// `max_inflight`.
        max: usize,
        /// The bound.
        ms: u128,
    },
    /// Earlier publishes' messages, `bytes` in all, were still waiting to be written to the
    /// socket for all of `confirm_timeout`: this one was not encoded or sent (see
    /// `MAX_UNWRITTEN_BYTES` in the sink).
    #[error(
        "{bytes} bytes of earlier publishes not yet written to the broker; none was within {ms} ms"
    )]
    Unwritten {
        /// The bound on unwritten bytes.
        bytes: usize,
        /// The bound.
        ms: u128,
    },
    /// The encoded message is larger than `max_message_bytes`; it was not sent.
    #[error("message of {size} bytes exceeds max_message_bytes {max}; not sent")]
    TooLarge {
        /// Encoded size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The rendered routing key, the hook id (`message_id`), the hook's content type (a
    /// binary-mode CloudEvent's `content_type`) or a header name is longer than AMQP's
    /// 255-byte short string; nothing was sent.
    #[error("{field} of {len} bytes exceeds AMQP's 255-byte limit; not sent")]
    TooLong {
        /// `routing key`, `message_id`, `content_type` or `header name`.
        field: &'static str,
        /// Its length.
        len: usize,
    },
    /// A value the routing-key template inserts holds `.`, `*` or `#`, which would add a
    /// word or a wildcard to a topic routing key; nothing was sent.
    #[error(
        "routing key: the hook's {placeholder} contains {character:?}, which would change \
         topic routing (words are split on '.', '*' and '#' are wildcards); not sent"
    )]
    RoutingValue {
        /// The placeholder whose value was refused, e.g. `{dedupe_key}`.
        placeholder: &'static str,
        /// The first offending character.
        character: char,
    },
    /// The publish ran on the runtime of the sink's first delivery, which shut down before
    /// the confirm came (the sink was shared with another runtime): the message may or may
    /// not have been taken.
    #[error("the publish was abandoned: the runtime it ran on shut down before its confirm")]
    Abandoned,
    /// The broker confirmed a publish without confirm mode (should never happen).
    #[error("broker did not confirm: the channel is not in confirm mode")]
    NotConfirmed,
    /// `check()`: the queue the default exchange routes the fixed key to is not durable,
    /// so it and its messages are lost when the broker restarts, and the sink is durable.
    #[error(
        "queue {:?} is not durable: it and its messages do not survive a broker restart \
         (declare it durable)",
        printable(queue)
    )]
    QueueNotDurable {
        /// The queue.
        queue: String,
    },
}

/// The AMQP client's own error, kept opaque so that the client library is not part of this
/// crate's API; its rendering is the sink's ([`AmqpError`]'s `Display`).
#[derive(Clone)]
pub struct ClientError(pub(crate) lapin::Error);

impl std::fmt::Debug for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ClientError")
            .field(&lapin_text(&self.0))
            .finish()
    }
}

impl AmqpError {
    pub(crate) fn lapin(stage: Stage, endpoint: &str, error: lapin::Error) -> Self {
        AmqpError::Lapin {
            stage,
            endpoint: endpoint.to_owned(),
            error: ClientError(error),
        }
    }

    /// The AMQP reply code behind this error, if the broker sent one.
    pub fn reply_code(&self) -> Option<u16> {
        match self {
            AmqpError::Lapin { error, .. } => match error.0.kind() {
                ErrorKind::ProtocolError(e) => Some(e.get_id()),
                _ => None,
            },
            AmqpError::Returned { code, .. } => Some(*code),
            AmqpError::NotConnected { source, .. } => source.reply_code(),
            _ => None,
        }
    }
}

impl From<AmqpError> for Failure {
    fn from(e: AmqpError) -> Self {
        let landed = landed(&e);
        Failure::new(classify(&e), e).with_may_have_landed(landed)
    }
}

/// Whether the message may have reached the broker: a pure function of the error, like
/// [`classify`].
///
/// | Error | May have landed |
/// | --- | --- |
/// | connect, channel or declare failed; a queue that is not durable (`check()`); not connected; connect timeout; busy; over a limit or a bad routing value; the publish itself failed; basic.return; basic.nack; the broker closed the channel over this publish (a reply code at the confirm) | `Some(false)` |
/// | no confirm within `confirm_timeout`; the connection lost (IO, heartbeat) while the confirm was awaited; a publish without a confirm | `Some(true)` |
/// | connection.blocked (before or after the publish left); abandoned | `None` |
pub(crate) fn landed(err: &AmqpError) -> Option<bool> {
    match err {
        AmqpError::Lapin { stage, error, .. } => match stage {
            Stage::Confirm => Some(!matches!(error.0.kind(), ErrorKind::ProtocolError(_))),
            Stage::Connect | Stage::Channel | Stage::Declare | Stage::Publish => Some(false),
        },
        AmqpError::ConnectTimeout { .. }
        | AmqpError::NotConnected { .. }
        | AmqpError::Returned { .. }
        | AmqpError::Nacked { .. }
        | AmqpError::Busy { .. }
        | AmqpError::Unwritten { .. }
        | AmqpError::TooLarge { .. }
        | AmqpError::TooLong { .. }
        | AmqpError::RoutingValue { .. }
        | AmqpError::QueueNotDurable { .. } => Some(false),
        AmqpError::ConfirmTimeout { .. } | AmqpError::NotConfirmed => Some(true),
        AmqpError::Blocked | AmqpError::Abandoned => None,
    }
}

/// The class of a failed delivery or check. The one place the sink decides classes.
///
/// | Broker event | Class |
/// | --- | --- |
/// | basic.return 312 NO_ROUTE (or 313 NO_CONSUMERS) | config |
/// | 403 ACCESS_REFUSED, 530 NOT_ALLOWED, 402 INVALID_PATH, login refused (403) | config |
/// | 404 NOT_FOUND (exchange missing) | config |
/// | `check()`: the default exchange's queue is not durable | config |
/// | 406 PRECONDITION_FAILED at connect, channel open or declare | config |
/// | 406 PRECONDITION_FAILED on publish (e.g. over the broker's `max_message_size`), 311 | permanent |
/// | over `max_message_bytes`, routing key, hook id or a binary-mode CloudEvent's content type over 255 bytes (nothing sent) | permanent |
/// | a routing-key placeholder value with `.`, `*` or `#` on a topic exchange (nothing sent) | permanent |
/// | basic.nack; connection.blocked | throttled (dispatch draws the pause) |
/// | confirm timeout, busy, earlier messages still unwritten, abandoned, connection lost or refused, 320 CONNECTION_FORCED, other codes | transient |
///
/// lapin errors are matched on their typed kind and the AMQP reply code, never on text.
pub(crate) fn classify(err: &AmqpError) -> Class {
    match err {
        AmqpError::Lapin { stage, error, .. } => match error.0.kind() {
            ErrorKind::ProtocolError(e) => classify_code(*stage, e.get_id()),
            // The broker speaks another protocol version (wrong port) or the credential
            // provider failed: the operator's to fix.
            ErrorKind::InvalidProtocolVersion(_)
            | ErrorKind::AuthProviderError(_)
            | ErrorKind::NoDefaultRuntime => Class::Config,
            // IO errors (refused, reset), closed channels and connections, heartbeats.
            _ => Class::Transient,
        },
        AmqpError::NotConnected { source, .. } => classify(source),
        AmqpError::Returned { code, .. } => classify_code(Stage::Confirm, *code),
        AmqpError::Nacked { .. } | AmqpError::Blocked => Class::Throttled,
        AmqpError::QueueNotDurable { .. } => Class::Config,
        AmqpError::TooLarge { .. } | AmqpError::TooLong { .. } | AmqpError::RoutingValue { .. } => {
            Class::Permanent
        }
        AmqpError::ConnectTimeout { .. }
        | AmqpError::ConfirmTimeout { .. }
        | AmqpError::Busy { .. }
        | AmqpError::Unwritten { .. }
        | AmqpError::Abandoned
        | AmqpError::NotConfirmed => Class::Transient,
    }
}

fn classify_code(stage: Stage, code: u16) -> Class {
    use reply_code::*;
    match code {
        NO_ROUTE | NO_CONSUMERS => Class::Config,
        ACCESS_REFUSED | NOT_ALLOWED | INVALID_PATH | NOT_FOUND => Class::Config,
        PRECONDITION_FAILED => match stage {
            Stage::Connect | Stage::Channel | Stage::Declare => Class::Config,
            Stage::Publish | Stage::Confirm => Class::Permanent,
        },
        CONTENT_TOO_LARGE => Class::Permanent,
        // 320 CONNECTION_FORCED, 405 RESOURCE_LOCKED, 506 RESOURCE_ERROR, 541 INTERNAL_ERROR
        // and the protocol-violation codes: retrying on a fresh channel may help.
        _ => Class::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_kit::MAX_REASON_TEXT;
    use lapin::protocol::AMQPError;
    use std::io;

    fn amqp(stage: Stage, code: u16) -> AmqpError {
        let e = AMQPError::from_id(code, "text".into()).expect("a known reply code");
        AmqpError::lapin(
            stage,
            "amqp://h:5672/%2F",
            ErrorKind::ProtocolError(e).into(),
        )
    }

    fn io_err(stage: Stage, kind: io::ErrorKind) -> AmqpError {
        AmqpError::lapin(stage, "amqp://h:5672/%2F", io::Error::from(kind).into())
    }

    fn c(e: &AmqpError) -> Class {
        classify(e)
    }

    fn failure(e: AmqpError) -> Failure {
        Failure::from(e)
    }

    #[test]
    fn row_ack_not_returned_is_ok() {
        // Ok is not an error: the sink returns Ok(()) for Confirmation::Ack(None) (see
        // sink::outcome); nothing to classify here beyond the absence of an error.
        assert!(crate::sink::outcome(lapin::Confirmation::Ack(None), "x", "k").is_ok());
    }

    #[test]
    fn row_no_route_is_config() {
        let e = AmqpError::Returned {
            code: 312,
            text: "NO_ROUTE".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
        };
        assert_eq!(c(&e), Class::Config);
        assert_eq!(e.reply_code(), Some(312));
    }

    #[test]
    fn row_access_refused_not_allowed_login_are_config() {
        for stage in [
            Stage::Connect,
            Stage::Channel,
            Stage::Declare,
            Stage::Confirm,
        ] {
            assert_eq!(c(&amqp(stage, 403)), Class::Config, "{stage}");
        }
        assert_eq!(c(&amqp(Stage::Connect, 530)), Class::Config);
        assert_eq!(c(&amqp(Stage::Connect, 402)), Class::Config);
        let auth = AmqpError::lapin(
            Stage::Connect,
            "e",
            ErrorKind::AuthProviderError("no token".into()).into(),
        );
        assert_eq!(c(&auth), Class::Config);
    }

    #[test]
    fn row_not_found_and_precondition_on_declare_are_config() {
        assert_eq!(c(&amqp(Stage::Declare, 404)), Class::Config);
        assert_eq!(c(&amqp(Stage::Confirm, 404)), Class::Config);
        assert_eq!(c(&amqp(Stage::Declare, 406)), Class::Config);
        assert_eq!(c(&amqp(Stage::Confirm, 406)), Class::Permanent);
    }

    #[test]
    fn row_too_large_is_permanent() {
        assert_eq!(
            c(&AmqpError::TooLarge { size: 2, max: 1 }),
            Class::Permanent
        );
        assert_eq!(
            c(&AmqpError::TooLong {
                field: "routing key",
                len: 300
            }),
            Class::Permanent
        );
    }

    #[test]
    fn row_nack_and_blocked_are_throttled() {
        let nack = AmqpError::Nacked {
            exchange: "x".into(),
            routing_key: "k".into(),
        };
        assert_eq!(c(&nack), Class::Throttled);
        assert_eq!(c(&AmqpError::Blocked), Class::Throttled);
    }

    #[test]
    fn row_timeouts_lost_and_refused_are_transient() {
        assert_eq!(c(&AmqpError::ConfirmTimeout { ms: 5 }), Class::Transient);
        assert_eq!(
            c(&AmqpError::ConnectTimeout {
                endpoint: "e".into(),
                ms: 5
            }),
            Class::Transient
        );
        assert_eq!(c(&AmqpError::Busy { max: 1, ms: 5 }), Class::Transient);
        assert_eq!(
            c(&AmqpError::Unwritten { bytes: 1, ms: 5 }),
            Class::Transient
        );
        assert_eq!(c(&AmqpError::Abandoned), Class::Transient);
        assert_eq!(
            c(&io_err(Stage::Connect, io::ErrorKind::ConnectionRefused)),
            Class::Transient
        );
        assert_eq!(
            c(&io_err(Stage::Confirm, io::ErrorKind::ConnectionReset)),
            Class::Transient
        );
        assert_eq!(c(&amqp(Stage::Confirm, 320)), Class::Transient);
        assert_eq!(c(&amqp(Stage::Confirm, 541)), Class::Transient);
        let closed = AmqpError::lapin(
            Stage::Publish,
            "e",
            ErrorKind::InvalidConnectionState(lapin::ConnectionState::Closed).into(),
        );
        assert_eq!(c(&closed), Class::Transient);
        let hb = AmqpError::lapin(Stage::Confirm, "e", ErrorKind::MissingHeartbeatError.into());
        assert_eq!(c(&hb), Class::Transient);
    }

    #[test]
    fn reasons_say_each_cause_once_in_words() {
        let refused = AmqpError::lapin(
            Stage::Connect,
            "amqp://h:5672/%2F",
            io::Error::from_raw_os_error(111).into(),
        );
        let f = failure(refused.clone());
        assert_eq!(
            f.reason_chain(),
            "connect failed on amqp://h:5672/%2F: connection refused"
        );
        let later = AmqpError::NotConnected {
            ago_ms: 0,
            source: Arc::new(refused),
        };
        let text = failure(later).reason_chain();
        assert_eq!(
            text,
            "not connected to the broker: the last connection attempt, less than 1 ms ago, \
             failed: connect failed on amqp://h:5672/%2F: connection refused"
        );
        assert!(!text.contains(" 0 ms ago"), "{text}");
        let f = failure(amqp(Stage::Declare, 404));
        assert_eq!(
            f.reason_chain(),
            "exchange declare failed on amqp://h:5672/%2F: broker closed the channel: 404 text"
        );
        let hard = failure(amqp(Stage::Connect, 530)).reason_chain();
        assert!(
            hard.ends_with("broker closed the connection: 530 text"),
            "{hard}"
        );
    }

    #[test]
    fn broker_text_is_escaped_and_bounded() {
        let hostile = format!(
            "NOT_FOUND\u{1b}[2J\r\nfake log line\u{202e}{}",
            "x".repeat(220)
        );
        let e = AMQPError::from_id(404, hostile.as_str().into()).unwrap();
        let err = AmqpError::lapin(Stage::Declare, "e", ErrorKind::ProtocolError(e).into());
        let returned = AmqpError::Returned {
            code: 312,
            text: hostile.clone(),
            exchange: "x".into(),
            routing_key: "k".into(),
        };
        for text in [err.to_string(), returned.to_string()] {
            assert!(!text.chars().any(char::is_control), "{text:?}");
            assert!(!text.contains('\u{202e}'), "{text:?}");
            assert!(
                text.contains(r"NOT_FOUND\u{1b}[2J\r\nfake log line\u{202e}x"),
                "{text}"
            );
            assert!(
                text.chars().count() < MAX_REASON_TEXT + 100,
                "{}",
                text.len()
            );
            assert!(text.contains('…'), "{text}");
        }
        assert_eq!(
            printable("plain 'quoted' \\ text"),
            "plain 'quoted' \\ text"
        );
        assert_eq!(printable("é"), "é");
    }

    #[test]
    fn routing_value_is_permanent() {
        let e = AmqpError::RoutingValue {
            placeholder: "{dedupe_key}",
            character: '#',
        };
        assert_eq!(c(&e), Class::Permanent);
        assert!(e.to_string().contains("{dedupe_key} contains '#'"), "{e}");
    }

    #[test]
    fn not_connected_keeps_the_cause_class() {
        let e = AmqpError::NotConnected {
            ago_ms: 3,
            source: Arc::new(amqp(Stage::Connect, 403)),
        };
        assert_eq!(c(&e), Class::Config);
        assert_eq!(e.reply_code(), Some(403));
        let f = failure(e);
        assert_eq!(f.class(), Class::Config);
        assert!(f.to_string().contains("connect failed"), "{f}");
    }

    #[test]
    fn landing_rows() {
        let no = Some(false);
        for e in [
            io_err(Stage::Connect, io::ErrorKind::ConnectionRefused),
            amqp(Stage::Channel, 403),
            amqp(Stage::Declare, 404),
            io_err(Stage::Publish, io::ErrorKind::BrokenPipe),
            amqp(Stage::Confirm, 406),
            AmqpError::ConnectTimeout {
                endpoint: "e".into(),
                ms: 1,
            },
            AmqpError::Busy { max: 1, ms: 1 },
            AmqpError::Unwritten { bytes: 1, ms: 1 },
            AmqpError::TooLarge { size: 2, max: 1 },
            AmqpError::Nacked {
                exchange: "x".into(),
                routing_key: "k".into(),
            },
            AmqpError::Returned {
                code: 312,
                text: "NO_ROUTE".into(),
                exchange: "x".into(),
                routing_key: "k".into(),
            },
            AmqpError::QueueNotDurable { queue: "q".into() },
        ] {
            assert_eq!(landed(&e), no, "{e}");
        }
        for e in [
            io_err(Stage::Confirm, io::ErrorKind::ConnectionReset),
            AmqpError::lapin(Stage::Confirm, "e", ErrorKind::MissingHeartbeatError.into()),
            AmqpError::ConfirmTimeout { ms: 1 },
            AmqpError::NotConfirmed,
        ] {
            assert_eq!(landed(&e), Some(true), "{e}");
        }
        for e in [AmqpError::Blocked, AmqpError::Abandoned] {
            assert_eq!(landed(&e), None, "{e}");
        }
        let f = Failure::from(AmqpError::ConfirmTimeout { ms: 1 });
        assert_eq!(f.may_have_landed(), Some(true));
    }
}
