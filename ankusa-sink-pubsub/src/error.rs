//! Why a publish failed, and the one function that classifies it.
//!
//! | Outcome | Class |
//! | --- | --- |
//! | `PERMISSION_DENIED`, `UNAUTHENTICATED`, `NOT_FOUND` (topic missing); credentials that cannot produce a token; a client that cannot be built; a topic without a subscription (`check()`, and deliveries with `require_subscriber`) | config |
//! | `INVALID_ARGUMENT`; a message over `max_message_bytes` (checked before publishing) | permanent |
//! | `RESOURCE_EXHAUSTED` with a `google.rpc.RetryInfo` delay | retry-after that delay (`Class::RetryAfter`) |
//! | `RESOURCE_EXHAUSTED` without one (or with a zero delay) | throttled (`Class::Throttled`: dispatch draws the pause) |
//! | `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `INTERNAL`, `ABORTED`, `CANCELLED`, `UNKNOWN`, any other code; transport, connect, I/O and timeout errors (of a publish, a check or a subscription listing); a paused ordering key; no message id | transient |

use ankusa_sink_core::{Class, Failure};
use google_cloud_gax::client_builder::Error as BuildError;
use google_cloud_gax::error::Error as GaxError;
use google_cloud_gax::error::rpc::{Code, Status, StatusDetails};
use google_cloud_pubsub::error::PublishError;
use std::num::NonZeroU64;

use ankusa_sink_kit::printable;

/// A client error in words: `CODE: message` for a status from the server (the message
/// escaped and bounded), else the error and its sources by `Display`, each once.
fn gax_text(e: &GaxError) -> String {
    if let Some(status) = e.status() {
        if status.message.is_empty() {
            return status.code.name().to_owned();
        }
        return format!("{}: {}", status.code.name(), printable(&status.message));
    }
    let mut out = e.to_string();
    let mut next = std::error::Error::source(e);
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.ends_with(&text) && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    printable(&out)
}

fn publish_text(e: &PublishError) -> String {
    match e {
        PublishError::Rpc(e) => gax_text(e),
        other => printable(&other.to_string()),
    }
}

/// Why building the sink, a delivery or a check failed.
///
/// The text carries the server's status code and message (escaped and bounded, see
/// [`ankusa_sink_kit::MAX_REASON_TEXT`]) and the client's description, never a credential. The client's
/// error is kept in the variant for typed inspection but is not the `source()`: its own
/// text would print the server's message raw.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PubSubError {
    /// The client could not be built (for example, no Application Default Credentials).
    #[error("the Pub/Sub client could not be built: {0}")]
    Client(BuildError),
    /// The official client's publish failed (an RPC status, a paused ordering key, a
    /// publisher shut down).
    #[error("publish failed: {}", publish_text(.0))]
    Publish(PublishError),
    /// An admin call (`check()`'s get-topic) failed.
    #[error("get topic failed: {}", gax_text(.0))]
    Admin(GaxError),
    /// Listing the topic's subscriptions (`check()`, or a delivery with
    /// `require_subscriber`) failed; nothing was published.
    #[error("listing the topic's subscriptions failed: {}", gax_text(.0))]
    ListSubscriptions(GaxError),
    /// The topic has no subscription: Pub/Sub would accept and drop the message. Nothing
    /// was published.
    #[error(
        "topic {0} has no subscription: Pub/Sub drops what is published to it \
         (nothing was published)"
    )]
    NoSubscriber(String),
    /// Listing the topic's subscriptions had no answer within `timeout_ms`.
    #[error(
        "listing the topic's subscriptions had no answer within {0} ms (nothing was published)"
    )]
    SubscribersTimeout(u128),
    /// The message is over `max_message_bytes`; it was not sent.
    #[error(
        "message of {size} bytes (data + attributes + ordering key) exceeds \
         max_message_bytes {max}; not published"
    )]
    TooLarge {
        /// data + attribute names and values + ordering key, in bytes.
        size: usize,
        /// The configured limit.
        max: usize,
    },
    /// The server answered without a message id.
    #[error("the publish answered without a message id")]
    NoMessageId,
    /// No answer to a publish within `timeout_ms`. The message may still be published
    /// (at least once).
    #[error("no message id within {0} ms")]
    Timeout(u128),
    /// `check()`'s get-topic had no answer within `timeout_ms` (check publishes nothing).
    #[error("check: getting the topic had no answer within {0} ms (nothing was published)")]
    CheckTimeout(u128),
}

/// What dispatch does with `err`: a pure, deterministic function of the error (see the
/// module table).
pub(crate) fn classify(err: &PubSubError) -> Class {
    match err {
        PubSubError::Client(_) => Class::Config,
        PubSubError::TooLarge { .. } => Class::Permanent,
        PubSubError::NoSubscriber(_) => Class::Config,
        PubSubError::NoMessageId
        | PubSubError::Timeout(_)
        | PubSubError::CheckTimeout(_)
        | PubSubError::SubscribersTimeout(_) => Class::Transient,
        PubSubError::Publish(PublishError::Rpc(e)) => rpc_class(e),
        PubSubError::Publish(_) => Class::Transient,
        PubSubError::Admin(e) | PubSubError::ListSubscriptions(e) => rpc_class(e),
    }
}

impl From<PubSubError> for Failure {
    fn from(e: PubSubError) -> Self {
        let landed = landed(&e);
        Failure::new(classify(&e), e).with_may_have_landed(landed)
    }
}

/// Whether the message may have reached Pub/Sub: a pure function of the error, like
/// [`classify`].
///
/// | Error | May have landed |
/// | --- | --- |
/// | a client that cannot be built; over `max_message_bytes`; any admin call (check, subscription listing, no subscription); a paused ordering key; a publisher shut down; a status the server answered other than the next row; a connect, binding, serialization or credentials error (before the RPC) | `Some(false)` |
/// | no message id within `timeout_ms`; an answer without a message id; `DEADLINE_EXCEEDED`, `INTERNAL`, `UNKNOWN` from the server; a client timeout; an I/O error mid-request | `Some(true)` |
/// | anything else | `None` |
pub(crate) fn landed(err: &PubSubError) -> Option<bool> {
    match err {
        PubSubError::Client(_)
        | PubSubError::TooLarge { .. }
        | PubSubError::Admin(_)
        | PubSubError::ListSubscriptions(_)
        | PubSubError::NoSubscriber(_)
        | PubSubError::CheckTimeout(_)
        | PubSubError::SubscribersTimeout(_) => Some(false),
        PubSubError::Timeout(_) | PubSubError::NoMessageId => Some(true),
        PubSubError::Publish(PublishError::Rpc(e)) => rpc_landed(e),
        PubSubError::Publish(PublishError::OrderingKeyPaused | PublishError::Shutdown) => {
            Some(false)
        }
        PubSubError::Publish(_) => None,
    }
}

fn rpc_landed(e: &GaxError) -> Option<bool> {
    if let Some(status) = e.status() {
        // The server may have stored the message before failing to say so.
        return Some(matches!(
            status.code,
            Code::DeadlineExceeded | Code::Internal | Code::Unknown
        ));
    }
    if e.is_connect()
        || e.is_transient_and_before_rpc()
        || e.is_binding()
        || e.is_serialization()
        || e.is_authentication()
    {
        return Some(false);
    }
    if e.is_timeout() || e.is_io() {
        return Some(true);
    }
    None
}

/// The class of one client error: by gRPC status code when the server answered, else by
/// the error's kind.
fn rpc_class(e: &GaxError) -> Class {
    if let Some(status) = e.status() {
        return match status.code {
            Code::PermissionDenied | Code::Unauthenticated | Code::NotFound => Class::Config,
            Code::InvalidArgument => Class::Permanent,
            Code::ResourceExhausted => {
                retry_delay_ms(status).map_or(Class::Throttled, Class::RetryAfter)
            }
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Internal
            | Code::Aborted
            | Code::Cancelled
            | Code::Unknown => Class::Transient,
            _ => Class::Transient,
        };
    }
    if e.is_authentication() && !e.is_transient_and_before_rpc() {
        // The credentials cannot produce a token at all (no ADC, a revoked key): the
        // operator's to fix, like UNAUTHENTICATED.
        return Class::Config;
    }
    if e.is_binding() || e.is_serialization() {
        // The request cannot be formed from this configuration or message.
        return Class::Permanent;
    }
    Class::Transient
}

/// The delay of the status's `google.rpc.RetryInfo`, rounded up to whole milliseconds;
/// `None` without one, or when it is zero or negative.
fn retry_delay_ms(status: &Status) -> Option<NonZeroU64> {
    let delay = status.details.iter().find_map(|d| match d {
        StatusDetails::RetryInfo(info) => info.retry_delay.as_ref(),
        _ => None,
    })?;
    let (secs, nanos) = (delay.seconds(), delay.nanos());
    if secs < 0 || nanos < 0 {
        return None;
    }
    let ms = (secs as u64)
        .saturating_mul(1_000)
        .saturating_add((nanos as u64).div_ceil(1_000_000));
    NonZeroU64::new(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_kit::MAX_REASON_TEXT;
    use google_cloud_gax::error::CredentialsError;
    use google_cloud_gax::error::rpc::Status;
    use std::sync::Arc;

    fn rpc(code: Code) -> PubSubError {
        PubSubError::Publish(PublishError::Rpc(Arc::new(GaxError::service(
            Status::default().set_code(code).set_message("scripted"),
        ))))
    }

    fn exhausted(delay: Option<wkt::Duration>) -> PubSubError {
        let mut status = Status::default().set_code(Code::ResourceExhausted);
        if let Some(d) = delay {
            let info = google_cloud_rpc::model::RetryInfo::new().set_retry_delay(d);
            status = status.set_details([StatusDetails::RetryInfo(info)]);
        }
        PubSubError::Publish(PublishError::Rpc(Arc::new(GaxError::service(status))))
    }

    fn class(err: PubSubError) -> Class {
        classify(&err)
    }

    #[test]
    fn permission_denied_is_config() {
        assert_eq!(class(rpc(Code::PermissionDenied)), Class::Config);
    }

    #[test]
    fn unauthenticated_is_config() {
        assert_eq!(class(rpc(Code::Unauthenticated)), Class::Config);
    }

    #[test]
    fn not_found_is_config() {
        assert_eq!(class(rpc(Code::NotFound)), Class::Config);
        let admin = PubSubError::Admin(GaxError::service(
            Status::default().set_code(Code::NotFound),
        ));
        assert_eq!(class(admin), Class::Config);
    }

    #[test]
    fn credentials_without_a_token_are_config() {
        let e = GaxError::authentication(CredentialsError::from_msg(false, "no ADC"));
        assert_eq!(class(PubSubError::Admin(e)), Class::Config);
        // A token that could not be fetched this time is transient.
        let e = GaxError::authentication(CredentialsError::from_msg(true, "metadata slow"));
        assert_eq!(class(PubSubError::Admin(e)), Class::Transient);
    }

    #[test]
    fn a_client_that_cannot_be_built_is_config() {
        let f = Failure::from(PubSubError::Client(BuildError::cred("no ADC found")));
        assert_eq!(f.class(), Class::Config);
        assert!(f.to_string().contains("could not be built"), "{f}");
    }

    #[test]
    fn invalid_argument_is_permanent() {
        assert_eq!(class(rpc(Code::InvalidArgument)), Class::Permanent);
        let binding = PubSubError::Admin(GaxError::binding("no topic in the request"));
        assert_eq!(class(binding), Class::Permanent);
    }

    #[test]
    fn over_the_size_limit_is_permanent() {
        let f = Failure::from(PubSubError::TooLarge { size: 11, max: 10 });
        assert_eq!(f.class(), Class::Permanent);
        assert!(
            f.to_string().contains("exceeds max_message_bytes 10"),
            "{f}"
        );
    }

    #[test]
    fn resource_exhausted_with_retry_info_waits_that_long() {
        let err = exhausted(Some(wkt::Duration::clamp(2, 500_000_001)));
        assert_eq!(class(err).retry_after_ms(), Some(2_501));
    }

    #[test]
    fn resource_exhausted_without_retry_info_is_throttled() {
        assert_eq!(class(rpc(Code::ResourceExhausted)), Class::Throttled);
        assert_eq!(class(exhausted(None)), Class::Throttled);
        // A zero delay states no pause.
        let zero = exhausted(Some(wkt::Duration::clamp(0, 0)));
        assert_eq!(class(zero), Class::Throttled);
    }

    // The server-side transient codes are provoked through a real client by a scripted
    // gRPC server: tests/it/scripted.rs, server_side_transient_codes_are_transient.

    #[test]
    fn transport_errors_are_transient() {
        for e in [
            GaxError::io("connection reset"),
            GaxError::connect("connection refused"),
            GaxError::timeout("deadline"),
            GaxError::transport(Default::default(), "h2 protocol error"),
        ] {
            let err = PubSubError::Publish(PublishError::Rpc(Arc::new(e)));
            assert_eq!(class(err), Class::Transient);
        }
        assert_eq!(class(PubSubError::Timeout(10)), Class::Transient);
    }

    #[test]
    fn client_side_states_are_transient() {
        assert_eq!(
            class(PubSubError::Publish(PublishError::OrderingKeyPaused)),
            Class::Transient
        );
        assert_eq!(
            class(PubSubError::Publish(PublishError::Shutdown)),
            Class::Transient
        );
        assert_eq!(class(PubSubError::NoMessageId), Class::Transient);
    }

    #[test]
    fn server_text_is_escaped_and_bounded() {
        let hostile = format!("bad\u{1b}[2J\r\nINFO forged\u{202e}{}", "x".repeat(5000));
        let status = Status::default()
            .set_code(Code::InvalidArgument)
            .set_message(hostile);
        for err in [
            PubSubError::Publish(PublishError::Rpc(Arc::new(GaxError::service(
                status.clone(),
            )))),
            PubSubError::Admin(GaxError::service(status)),
        ] {
            let text = Failure::from(err).to_string();
            assert!(!text.chars().any(char::is_control), "{text:?}");
            assert!(!text.contains('\u{202e}'), "{text:?}");
            assert!(
                text.contains(r"INVALID_ARGUMENT: bad\u{1b}[2J\r\nINFO forged\u{202e}x"),
                "{text}"
            );
            assert!(
                text.chars().count() < MAX_REASON_TEXT + 100,
                "{}",
                text.len()
            );
        }
    }

    #[test]
    fn check_timeout_says_what_check_did() {
        let f = Failure::from(PubSubError::CheckTimeout(300));
        assert_eq!(f.class(), Class::Transient);
        assert_eq!(
            f.to_string(),
            "transient: check: getting the topic had no answer within 300 ms (nothing was published)"
        );
    }

    #[test]
    fn a_topic_without_a_subscription_is_config() {
        let f = Failure::from(PubSubError::NoSubscriber("projects/p/topics/t".into()));
        assert_eq!(f.class(), Class::Config);
        assert_eq!(
            f.to_string(),
            "config: topic projects/p/topics/t has no subscription: Pub/Sub drops what is \
             published to it (nothing was published)"
        );
    }

    #[test]
    fn a_failed_subscription_listing_is_classified_by_its_status() {
        let list = |code| {
            PubSubError::ListSubscriptions(GaxError::service(Status::default().set_code(code)))
        };
        assert_eq!(class(list(Code::NotFound)), Class::Config);
        assert_eq!(class(list(Code::PermissionDenied)), Class::Config);
        assert_eq!(class(list(Code::Unavailable)), Class::Transient);
        let f = Failure::from(PubSubError::SubscribersTimeout(300));
        assert_eq!(f.class(), Class::Transient);
        assert!(f.to_string().contains("nothing was published"), "{f}");
    }

    #[test]
    fn reason_carries_the_status_message() {
        let text = Failure::from(rpc(Code::InvalidArgument)).to_string();
        assert!(text.starts_with("permanent: publish failed"), "{text}");
        assert!(text.contains("scripted"), "{text}");
    }

    #[test]
    fn landing_rows() {
        let publish = |e| PubSubError::Publish(PublishError::Rpc(Arc::new(e)));
        let status = |code| GaxError::service(Status::default().set_code(code));
        for (e, want) in [
            (PubSubError::TooLarge { size: 2, max: 1 }, Some(false)),
            (PubSubError::NoSubscriber("t".into()), Some(false)),
            (PubSubError::SubscribersTimeout(1), Some(false)),
            (
                PubSubError::Publish(PublishError::OrderingKeyPaused),
                Some(false),
            ),
            (PubSubError::Publish(PublishError::Shutdown), Some(false)),
            (publish(status(Code::PermissionDenied)), Some(false)),
            (publish(status(Code::Unavailable)), Some(false)),
            (publish(status(Code::DeadlineExceeded)), Some(true)),
            (publish(status(Code::Internal)), Some(true)),
            (publish(GaxError::connect("refused")), Some(false)),
            (publish(GaxError::timeout("deadline")), Some(true)),
            (PubSubError::Timeout(1), Some(true)),
            (PubSubError::NoMessageId, Some(true)),
        ] {
            assert_eq!(landed(&e), want, "{e}");
        }
    }
}
