//! [`AwsError`]: why a delivery to SQS, SNS, Kinesis or EventBridge failed, and
//! [`classify`], the one pure function from it to a [`Class`].
//!
//! `from_sdk.rs` turns the SDK's errors into an [`AwsError`] (the modeled error's name, the
//! error code, the HTTP status, the server's requested pause), in words, never by the SDK's
//! `Debug`. Nothing is decided on error text. A failed entry of a batch (an SQS or SNS
//! `Failed` entry, a Kinesis record's `ErrorCode`, an EventBridge entry's `ErrorCode`) goes
//! through the same code table.
//!
//! | Error | Class |
//! | --- | --- |
//! | an SNS topic without a confirmed subscription (`check()`, and deliveries with `require_subscriber`); nothing is published | `Config` |
//! | AccessDenied, AccessDeniedException, KmsAccessDenied, KmsDisabled, KmsNotFound (and the other KMS key errors, Kinesis's KMSAccessDeniedException, KMSDisabledException, KMSNotFoundException, KMSInvalidStateException), InvalidClientTokenId, SignatureDoesNotMatch, UnrecognizedClientException, QueueDoesNotExist / AWS.SimpleQueueService.NonExistentQueue, InvalidAddress, InvalidSecurity, SNS AuthorizationError, NotFound, ResourceNotFoundException (a missing stream or event bus), EventBridge NotAuthorizedForSourceException / NotAuthorizedForDetailTypeException, **any 403 without a known code** (moto's XML IAM answers) | `Config` |
//! | InvalidMessageContents, InvalidParameterValue(s), MessageTooLong, SNS InvalidParameter, InvalidAttributeName/Value, ValidationException, Kinesis InvalidArgumentException, EventBridge InvalidArgument / MalformedDetail, over `max_message_bytes` (not sent), a binary-mode CloudEvent whose data is no message body (not UTF-8, empty, or a character SQS refuses; not sent), a value of the hook SQS/SNS/Kinesis cannot carry (a message attribute or the body with a character outside XML's, a FIFO id of other than 1-128 printable ASCII characters, an empty partition key; not sent) | `Permanent` |
//! | Throttling, ThrottlingException, RequestThrottled, KmsThrottled, SNS Throttled, KMSThrottling, Kinesis ProvisionedThroughputExceededException / KMSThrottlingException / LimitExceededException, a bare 429, with `x-amz-retry-after` (ms) or `Retry-After` (s) | `RetryAfter(ms)` |
//! | the same throttles without a stated pause (a per-entry throttle never states one) | `Throttled` |
//! | 5xx, InternalError, InternalFailure, InternalFailureException, EventBridge InternalException, ConcurrentModificationException, ServiceUnavailable, ExpiredToken (credentials being refreshed), timeouts, connection errors, unknown codes, an MD5 mismatch, no message id / sequence number / event id | `Transient` |

mod from_sdk;

#[cfg(feature = "eventbridge")]
pub(crate) use from_sdk::eventbridge;
#[cfg(feature = "kinesis")]
pub(crate) use from_sdk::kinesis;
#[cfg(feature = "sns")]
pub(crate) use from_sdk::sns;
#[cfg(feature = "sqs")]
pub(crate) use from_sdk::sqs;

use ankusa_sink_core::{Class, Failure};
use ankusa_sink_kit::printable;
use std::fmt;
use std::num::NonZeroU64;

/// Why a call to SQS, SNS, Kinesis or EventBridge failed, or why its answer did not confirm
/// the message.
///
/// Text never holds a credential (AWS error messages name key ids at most, and request
/// signatures are not kept). Text the server chose (code, message, a returned MD5) is
/// escaped and bounded with `ankusa_sink_kit::printable`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AwsError {
    /// The service answered the call (or one entry of a batch) with an error.
    Refused {
        /// `sqs`, `sns`, `kinesis` or `eventbridge`.
        service: &'static str,
        /// The operation: `SendMessage`, `PublishBatch`, `GetQueueAttributes`, ...
        operation: &'static str,
        /// The name of the SDK's modeled error, when the SDK recognized one
        /// (`QueueDoesNotExist`, `InvalidParameterValueException`, ...).
        modeled: Option<&'static str>,
        /// The AWS error code, when one could be parsed from the answer.
        code: Option<String>,
        /// The HTTP status (`None` for a failed batch entry).
        status: Option<u16>,
        /// The pause the server asked for, in ms (`x-amz-retry-after`, or `Retry-After` in
        /// seconds).
        retry_after_ms: Option<u64>,
        /// The service's message, or what was wrong with the answer.
        message: Option<String>,
    },
    /// The call got no answer: a timeout, a connection failure, a request that could not
    /// be built.
    NoResponse {
        /// `sqs`, `sns`, `kinesis` or `eventbridge`.
        service: &'static str,
        /// The operation.
        operation: &'static str,
        /// What happened, in words.
        what: String,
        /// Whether the request may have been sent: `Some(false)` when it never was
        /// (connection refused, connect timeout, a request that could not be built),
        /// `Some(true)` when it may have been (the operation timed out on an open
        /// connection, the connection broke), `None` when the SDK does not say.
        sent: Option<bool>,
    },
    /// Body plus attributes are over `max_message_bytes`; nothing was sent.
    MessageTooLarge {
        /// The message's size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A binary-mode CloudEvent (`format = "cloudevents"`) whose data SQS and SNS cannot
    /// carry as a message body, which must be a non-empty string of XML characters;
    /// nothing was sent. `format = "cloudevents-structured"` carries any data (as
    /// `data_base64` when it is not JSON).
    BodyNotText {
        /// What is wrong with the data: not UTF-8, empty, a character SQS refuses.
        why: &'static str,
    },
    /// A value derived from the hook (a message attribute, the body, a FIFO id, a partition
    /// key) that the service refuses; it names the field, never the value. Nothing was
    /// sent, and no other hook of a batch is affected.
    Unrepresentable(ankusa_sink_kit::Unrepresentable),
    /// A Kinesis record or EventBridge entry over `max_message_bytes`, counted as the
    /// service counts it; nothing was sent.
    EntryTooLarge {
        /// `kinesis` or `eventbridge`.
        service: &'static str,
        /// What counts toward the limit (`data + partition key`, ...).
        counts: &'static str,
        /// The entry's size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The service's MD5 of the body is not the body's: it got something else.
    Md5Mismatch {
        /// `sqs`.
        service: &'static str,
        /// The MD5 of what was sent.
        expected: String,
        /// The MD5 the service computed.
        got: String,
    },
    /// The service answered without a message id (or MD5, sequence number, event id): not
    /// confirmed.
    Unconfirmed {
        /// `sqs`, `sns`, `kinesis` or `eventbridge`.
        service: &'static str,
        /// The operation.
        operation: &'static str,
    },
    /// The SNS topic has no confirmed subscription: SNS would accept and drop the message.
    /// Nothing was published.
    NoSubscriber {
        /// The topic's name.
        topic: String,
    },
    /// A batch answer named neither success nor failure for this entry (or, for Kinesis and
    /// EventBridge, whose results come by position, did not answer one result per entry).
    NoEntryResult {
        /// `sqs`, `sns`, `kinesis` or `eventbridge`.
        service: &'static str,
        /// The operation.
        operation: &'static str,
    },
}

impl AwsError {
    /// A failed batch entry: the code and message the service reported for it.
    pub(crate) fn entry(
        service: &'static str,
        operation: &'static str,
        code: &str,
        message: Option<&str>,
    ) -> Self {
        AwsError::Refused {
            service,
            operation,
            modeled: None,
            code: Some(code.to_owned()),
            status: None,
            retry_after_ms: None,
            message: message.map(printable),
        }
    }
}

impl fmt::Display for AwsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AwsError::Refused {
                service,
                operation,
                code,
                status,
                message,
                ..
            } => {
                write!(f, "{service} {operation}")?;
                // The code is the server's text too: printed escaped, like the message.
                match (code.as_deref().map(printable), status) {
                    (Some(c), Some(s)) => write!(f, ": {c} (HTTP {s})")?,
                    (Some(c), None) => write!(f, ": {c}")?,
                    (None, Some(s)) => write!(f, ": HTTP {s}")?,
                    (None, None) => {}
                }
                match message {
                    Some(m) => write!(f, ": {m}"),
                    None => Ok(()),
                }
            }
            AwsError::NoResponse {
                service,
                operation,
                what,
                ..
            } => write!(f, "{service} {operation}: {what}"),
            AwsError::MessageTooLarge { size, max } => write!(
                f,
                "message of {size} bytes (body plus attributes) exceeds max_message_bytes {max}"
            ),
            AwsError::BodyNotText { why } => write!(
                f,
                "a binary-mode CloudEvent's data is no SQS/SNS message body ({why}): use \
                 format = \"cloudevents-structured\" for such hooks (nothing was sent)"
            ),
            AwsError::Unrepresentable(u) => write!(f, "{u} (nothing was sent)"),
            AwsError::EntryTooLarge {
                service,
                counts,
                size,
                max,
            } => write!(
                f,
                "{service} entry of {size} bytes ({counts}) exceeds max_message_bytes {max}"
            ),
            AwsError::Md5Mismatch {
                service,
                expected,
                got,
            } => write!(
                f,
                "{service} returned body MD5 {}, expected {expected}",
                printable(got)
            ),
            AwsError::Unconfirmed { service, operation } => write!(
                f,
                "{service} {operation} answered without a message id or body MD5"
            ),
            AwsError::NoEntryResult { service, operation } => {
                write!(f, "{service} {operation} answered nothing for this entry")
            }
            AwsError::NoSubscriber { topic } => write!(
                f,
                "sns topic {topic} has no confirmed subscription: SNS drops what is published \
                 to it (nothing was published)"
            ),
        }
    }
}

impl std::error::Error for AwsError {}

/// What dispatch does with `err`: a pure, deterministic function of the error (the table
/// in the module docs). The modeled error's name first, then the error code, both through
/// the one code table ([`class_of_code`]); then the HTTP status ([`class_of_status`]).
pub(crate) fn classify(err: &AwsError) -> Class {
    match err {
        AwsError::Refused {
            modeled,
            code,
            status,
            retry_after_ms,
            ..
        } => {
            let class = modeled
                .and_then(class_of_code)
                .or_else(|| code.as_deref().and_then(class_of_code))
                .unwrap_or_else(|| class_of_status(*status));
            match class {
                Class::Throttled => retry_after_ms
                    .and_then(NonZeroU64::new)
                    .map_or(Class::Throttled, Class::RetryAfter),
                other => other,
            }
        }
        AwsError::MessageTooLarge { .. }
        | AwsError::EntryTooLarge { .. }
        | AwsError::BodyNotText { .. }
        | AwsError::Unrepresentable(_) => Class::Permanent,
        AwsError::NoSubscriber { .. } => Class::Config,
        AwsError::NoResponse { .. }
        | AwsError::Md5Mismatch { .. }
        | AwsError::Unconfirmed { .. }
        | AwsError::NoEntryResult { .. } => Class::Transient,
    }
}

impl From<ankusa_sink_kit::Unrepresentable> for AwsError {
    fn from(u: ankusa_sink_kit::Unrepresentable) -> Self {
        AwsError::Unrepresentable(u)
    }
}

impl From<AwsError> for Failure {
    fn from(e: AwsError) -> Self {
        let landed = landed(&e);
        Failure::new(classify(&e), e).with_may_have_landed(landed)
    }
}

/// Whether the message may have reached the service: a pure function of the error, like
/// [`classify`].
///
/// | Error | May have landed |
/// | --- | --- |
/// | the service answered an error other than a `5xx` (a failed batch entry included), `503`; over `max_message_bytes`; a binary-mode CloudEvent's data that is no message body; a hook value the service cannot carry; an SNS topic without a subscriber; no response because the request was never sent | `Some(false)` |
/// | a `5xx` other than `503` (the service may have stored it); no response after the request may have been sent; a body MD5 mismatch; no message id, sequence number or event id; no entry result | `Some(true)` |
/// | no response, and the SDK does not say whether the request left | `None` |
pub(crate) fn landed(err: &AwsError) -> Option<bool> {
    match err {
        AwsError::Refused { status, .. } => Some(status.is_some_and(|s| s >= 500 && s != 503)),
        AwsError::NoResponse { sent, .. } => *sent,
        AwsError::MessageTooLarge { .. }
        | AwsError::EntryTooLarge { .. }
        | AwsError::BodyNotText { .. }
        | AwsError::Unrepresentable(_)
        | AwsError::NoSubscriber { .. } => Some(false),
        AwsError::Md5Mismatch { .. }
        | AwsError::Unconfirmed { .. }
        | AwsError::NoEntryResult { .. } => Some(true),
    }
}

/// The shared table of AWS error codes and modeled error names (SQS JSON/query codes, SNS
/// query codes, Kinesis and EventBridge JSON codes and per-entry codes, IAM and signing
/// codes, KMS codes). `None`: not in the table. A throttle is
/// [`Class::Throttled`] here; [`classify`] gives it the server's pause when it stated one.
fn class_of_code(code: &str) -> Option<Class> {
    let class = match code {
        // Credentials, permissions, missing destinations: the operator's to fix.
        "AccessDenied"
        | "AccessDeniedException"
        | "KmsAccessDenied"
        | "KmsAccessDeniedException"
        | "KMS.AccessDeniedException"
        | "KmsDisabled"
        | "KmsDisabledException"
        | "KMS.DisabledException"
        | "KmsNotFound"
        | "KmsNotFoundException"
        | "KMS.NotFoundException"
        | "KmsInvalidState"
        | "KmsInvalidStateException"
        | "KMS.KMSInvalidStateException"
        | "KmsInvalidKeyUsage"
        | "KMS.InvalidKeyUsageException"
        | "KmsOptInRequired"
        | "KMS.OptInRequired"
        | "KMSAccessDenied"
        | "KMSDisabled"
        | "KMSNotFound"
        | "KMSInvalidState"
        | "KMSOptInRequired"
        | "InvalidClientTokenId"
        | "SignatureDoesNotMatch"
        | "UnrecognizedClientException"
        | "MissingAuthenticationToken"
        | "IncompleteSignature"
        | "OptInRequired"
        | "InvalidSecurity"
        | "InvalidSecurityException"
        | "QueueDoesNotExist"
        | "AWS.SimpleQueueService.NonExistentQueue"
        | "InvalidAddress"
        | "AuthorizationError"
        | "AuthorizationErrorException"
        | "NotFound"
        | "NotFoundException"
        // Kinesis (a missing stream, its KMS key) and EventBridge (a missing bus, a source
        // or detail type the caller may not put).
        | "ResourceNotFoundException"
        | "KMSAccessDeniedException"
        | "KMSDisabledException"
        | "KMSNotFoundException"
        | "KMSInvalidStateException"
        | "NotAuthorizedForSourceException"
        | "NotAuthorizedForDetailTypeException" => Class::Config,
        // The message itself is refused.
        "InvalidMessageContents"
        | "InvalidParameterValue"
        | "InvalidParameterValues"
        | "InvalidParameterValueException"
        | "MessageTooLong"
        | "InvalidParameter"
        | "InvalidParameterException"
        | "InvalidAttributeName"
        | "InvalidAttributeValue"
        | "ValidationError"
        | "ValidationException"
        | "InvalidArgumentException"
        | "InvalidArgument"
        | "MalformedDetail" => Class::Permanent,
        // Throttles.
        "Throttling"
        | "ThrottlingException"
        | "RequestThrottled"
        | "KmsThrottled"
        | "KmsThrottlingException"
        | "KMS.ThrottlingException"
        | "KMSThrottling"
        | "Throttled"
        | "ThrottledException"
        | "TooManyRequestsException"
        | "RequestLimitExceeded"
        // Kinesis: a shard's write limit, the KMS key's, the stream's request rate.
        | "ProvisionedThroughputExceededException"
        | "KMSThrottlingException"
        | "LimitExceededException" => Class::Throttled,
        // The service's trouble, or credentials about to be refreshed.
        "InternalError"
        | "InternalFailure"
        | "InternalErrorException"
        | "InternalFailureException"
        | "InternalException"
        | "ConcurrentModificationException"
        | "ServiceUnavailable"
        | "ServiceUnavailableException"
        | "RequestTimeout"
        | "RequestTimeoutException"
        | "ExpiredToken"
        | "ExpiredTokenException"
        | "RequestExpired" => Class::Transient,
        _ => return None,
    };
    Some(class)
}

/// The class of an HTTP status with no usable code: any 403 is config, 429 a throttle,
/// anything else (5xx, other 4xx, none) transient.
fn class_of_status(status: Option<u16>) -> Class {
    match status {
        Some(403) => Class::Config,
        Some(429) => Class::Throttled,
        _ => Class::Transient,
    }
}

#[cfg(test)]
mod tests {
    //! One test per row of the table, on `AwsError` values; `from_sdk.rs` tests that the
    //! SDK's errors (typed, by code, by status, without a response) become these values,
    //! and the integration tests produce the same rows on the wire.
    use super::*;

    fn refused(code: Option<&str>, status: Option<u16>, retry_after_ms: Option<u64>) -> AwsError {
        AwsError::Refused {
            service: "sqs",
            operation: "SendMessage",
            modeled: None,
            code: code.map(str::to_owned),
            status,
            retry_after_ms,
            message: Some("scripted".into()),
        }
    }

    fn code(code: &str) -> Class {
        classify(&refused(Some(code), Some(400), None))
    }

    fn modeled(name: &'static str, code: &str) -> Class {
        let mut e = refused(Some(code), Some(400), None);
        if let AwsError::Refused { modeled, .. } = &mut e {
            *modeled = Some(name);
        }
        classify(&e)
    }

    #[test]
    fn row_config_credentials_permissions_missing_destinations_any_bare_403() {
        for c in [
            "AccessDenied",
            "KmsAccessDenied",
            "KmsDisabled",
            "KmsNotFound",
            "InvalidClientTokenId",
            "SignatureDoesNotMatch",
            "UnrecognizedClientException",
            "QueueDoesNotExist",
            "AWS.SimpleQueueService.NonExistentQueue",
            "InvalidAddress",
            "AuthorizationError",
            "NotFound",
        ] {
            assert_eq!(code(c), Class::Config, "{c}");
        }
        // The modeled error decides before a code the table does not know.
        assert_eq!(modeled("KmsAccessDeniedException", "Odd"), Class::Config);
        // moto's XML 403 on a JSON service: no code, or one not in the table.
        assert_eq!(classify(&refused(None, Some(403), None)), Class::Config);
        assert_eq!(
            classify(&refused(Some("SomethingNew"), Some(403), None)),
            Class::Config
        );
        assert_eq!(
            classify(&AwsError::entry(
                "sqs",
                "SendMessageBatch",
                "AccessDenied",
                None
            )),
            Class::Config
        );
    }

    #[test]
    fn row_permanent_the_message_is_refused() {
        for c in [
            "InvalidMessageContents",
            "InvalidParameterValue",
            "InvalidParameterValues",
            "InvalidParameterValueException",
            "MessageTooLong",
            "InvalidParameter",
            "InvalidAttributeName",
            "InvalidAttributeValue",
        ] {
            assert_eq!(code(c), Class::Permanent, "{c}");
        }
        assert_eq!(
            modeled("InvalidParameterValueException", "ParameterValueInvalid"),
            Class::Permanent
        );
        assert_eq!(modeled("ValidationException", "Odd"), Class::Permanent);
        // Over the size limit: the sink's own pre-check.
        let e = AwsError::MessageTooLarge { size: 2, max: 1 };
        assert_eq!(classify(&e), Class::Permanent);
        assert_eq!(Failure::from(e).class(), Class::Permanent);
        // A hook value the service cannot carry: the sink's own pre-check, per hook.
        let e = AwsError::Unrepresentable(ankusa_sink_kit::Unrepresentable::new(
            "message attribute \"ankusa_dedupe_key\"",
            "holds a character the protocol refuses",
        ));
        assert_eq!(classify(&e), Class::Permanent);
        assert!(e.to_string().contains("\"ankusa_dedupe_key\""), "{e}");
        assert_eq!(Failure::from(e).class(), Class::Permanent);
    }

    #[test]
    fn row_config_a_topic_without_a_confirmed_subscription() {
        let e = AwsError::NoSubscriber {
            topic: "events".into(),
        };
        assert_eq!(classify(&e), Class::Config);
        assert_eq!(
            e.to_string(),
            "sns topic events has no confirmed subscription: SNS drops what is published to \
             it (nothing was published)"
        );
    }

    #[test]
    fn row_retry_after_throttles_with_the_servers_pause() {
        for c in [
            "Throttling",
            "RequestThrottled",
            "KMSThrottling",
            "Throttled",
        ] {
            let e = refused(Some(c), Some(400), Some(7_000));
            assert_eq!(
                classify(&e),
                Class::RetryAfter(NonZeroU64::new(7_000).unwrap()),
                "{c}"
            );
        }
        assert_eq!(
            classify(&refused(None, Some(429), Some(250))).retry_after_ms(),
            Some(250)
        );
    }

    #[test]
    fn row_throttled_throttles_without_a_stated_pause() {
        for c in [
            "Throttling",
            "ThrottlingException",
            "RequestThrottled",
            "KmsThrottled",
            "KMSThrottling",
            "Throttled",
        ] {
            assert_eq!(code(c), Class::Throttled, "{c}");
        }
        assert_eq!(modeled("KmsThrottlingException", "Odd"), Class::Throttled);
        // A bare 429; a stated pause of 0 is no pause.
        assert_eq!(classify(&refused(None, Some(429), None)), Class::Throttled);
        assert_eq!(
            classify(&refused(Some("Throttled"), Some(400), Some(0))),
            Class::Throttled
        );
        let entry = AwsError::entry("sqs", "SendMessageBatch", "RequestThrottled", None);
        assert_eq!(classify(&entry), Class::Throttled);
    }

    #[test]
    fn row_transient_5xx_internal_timeouts_connections_unconfirmed() {
        for c in [
            "InternalError",
            "InternalFailure",
            "ServiceUnavailable",
            "ExpiredToken",
            "SomethingNew",
        ] {
            assert_eq!(code(c), Class::Transient, "{c}");
        }
        assert_eq!(classify(&refused(None, Some(502), None)), Class::Transient);
        assert_eq!(classify(&refused(None, None, None)), Class::Transient);
        let no_response = AwsError::NoResponse {
            service: "sqs",
            operation: "SendMessage",
            what: "timed out".into(),
            sent: Some(true),
        };
        let md5 = AwsError::Md5Mismatch {
            service: "sqs",
            expected: "a".into(),
            got: "b".into(),
        };
        let unconfirmed = AwsError::Unconfirmed {
            service: "sns",
            operation: "Publish",
        };
        let missing = AwsError::NoEntryResult {
            service: "sns",
            operation: "PublishBatch",
        };
        for e in [no_response, md5, unconfirmed, missing] {
            assert_eq!(classify(&e), Class::Transient, "{e}");
        }
        let entry = AwsError::entry("sqs", "SendMessageBatch", "Unknown", None);
        assert_eq!(classify(&entry), Class::Transient);
    }

    /// The Kinesis and EventBridge codes of each row, as a request's answer and as a
    /// failed batch entry (a `PutRecords` record's or a `PutEvents` entry's `ErrorCode`).
    #[test]
    fn rows_of_the_kinesis_and_eventbridge_codes() {
        let entry = |service, code| classify(&AwsError::entry(service, "Put", code, None));
        for (codes, want) in [
            (
                &[
                    "ResourceNotFoundException",
                    "AccessDeniedException",
                    "KMSAccessDeniedException",
                    "KMSDisabledException",
                    "KMSNotFoundException",
                    "KMSInvalidStateException",
                    "KMSOptInRequired",
                    "NotAuthorizedForSourceException",
                    "NotAuthorizedForDetailTypeException",
                ][..],
                Class::Config,
            ),
            (
                &[
                    "ValidationException",
                    "InvalidArgumentException",
                    "InvalidArgument",
                    "MalformedDetail",
                ][..],
                Class::Permanent,
            ),
            (
                &[
                    "ProvisionedThroughputExceededException",
                    "KMSThrottlingException",
                    "LimitExceededException",
                    "ThrottlingException",
                ][..],
                Class::Throttled,
            ),
            (
                &[
                    "InternalFailure",
                    "InternalFailureException",
                    "InternalException",
                    "ConcurrentModificationException",
                ][..],
                Class::Transient,
            ),
        ] {
            for c in codes {
                assert_eq!(code(c), want, "{c}");
                assert_eq!(entry("kinesis", c), want, "kinesis entry {c}");
                assert_eq!(entry("eventbridge", c), want, "eventbridge entry {c}");
            }
        }
        // A request-level throttle with the server's pause.
        let e = refused(
            Some("ProvisionedThroughputExceededException"),
            Some(400),
            Some(900),
        );
        assert_eq!(classify(&e).retry_after_ms(), Some(900));
        // Over the service's limit, counted as it counts: refused here, never sent.
        let big = AwsError::EntryTooLarge {
            service: "kinesis",
            counts: "data + partition key",
            size: 9,
            max: 8,
        };
        assert_eq!(classify(&big), Class::Permanent);
        assert_eq!(landed(&big), Some(false));
        assert_eq!(
            big.to_string(),
            "kinesis entry of 9 bytes (data + partition key) exceeds max_message_bytes 8"
        );
    }

    #[test]
    fn display_names_service_operation_code_status_message() {
        let mut e = refused(Some("AccessDenied"), Some(403), None);
        assert_eq!(
            e.to_string(),
            "sqs SendMessage: AccessDenied (HTTP 403): scripted"
        );
        if let AwsError::Refused { code, message, .. } = &mut e {
            *code = None;
            *message = None;
        }
        assert_eq!(e.to_string(), "sqs SendMessage: HTTP 403");
        let entry = AwsError::entry("sns", "PublishBatch", "Odd\u{7}Code", Some("no"));
        assert_eq!(entry.to_string(), r"sns PublishBatch: Odd\u{7}Code: no");
        assert_eq!(
            AwsError::MessageTooLarge { size: 9, max: 8 }.to_string(),
            "message of 9 bytes (body plus attributes) exceeds max_message_bytes 8"
        );
    }

    #[test]
    fn server_text_is_escaped_and_bounded() {
        let hostile = format!(
            "denied\u{1b}[2J\r\nINFO fake line\u{202e}{}",
            "x".repeat(5000)
        );
        let entry = AwsError::entry("sqs", "SendMessageBatch", "Odd\u{7}Code", Some(&hostile));
        let md5 = AwsError::Md5Mismatch {
            service: "sqs",
            expected: "0".repeat(32),
            got: hostile.clone(),
        };
        for text in [entry.to_string(), md5.to_string()] {
            assert!(!text.chars().any(char::is_control), "{text:?}");
            assert!(!text.contains('\u{202e}'), "{text:?}");
            assert!(
                text.contains(r"denied\u{1b}[2J\r\nINFO fake line\u{202e}x"),
                "{text}"
            );
            let max = ankusa_sink_kit::MAX_REASON_TEXT;
            assert!(text.chars().count() < 2 * max + 100, "{}", text.len());
        }
    }

    #[test]
    fn landing_rows() {
        let no_response = |sent| AwsError::NoResponse {
            service: "sqs",
            operation: "SendMessage",
            what: "x".into(),
            sent,
        };
        for (e, want) in [
            (refused(Some("AccessDenied"), Some(403), None), Some(false)),
            (
                refused(Some("InvalidParameterValue"), None, None),
                Some(false),
            ),
            (
                refused(Some("ServiceUnavailable"), Some(503), None),
                Some(false),
            ),
            (refused(Some("InternalError"), Some(500), None), Some(true)),
            (refused(None, Some(502), None), Some(true)),
            (AwsError::MessageTooLarge { size: 2, max: 1 }, Some(false)),
            (
                AwsError::Unrepresentable(ankusa_sink_kit::Unrepresentable::new("x", "y")),
                Some(false),
            ),
            (AwsError::NoSubscriber { topic: "t".into() }, Some(false)),
            (no_response(Some(false)), Some(false)),
            (no_response(Some(true)), Some(true)),
            (no_response(None), None),
            (
                AwsError::Md5Mismatch {
                    service: "sqs",
                    expected: "a".into(),
                    got: "b".into(),
                },
                Some(true),
            ),
            (
                AwsError::Unconfirmed {
                    service: "sns",
                    operation: "Publish",
                },
                Some(true),
            ),
            (
                AwsError::NoEntryResult {
                    service: "sqs",
                    operation: "SendMessageBatch",
                },
                Some(true),
            ),
        ] {
            assert_eq!(landed(&e), want, "{e}");
            assert_eq!(Failure::from(e).may_have_landed(), want);
        }
    }
}
