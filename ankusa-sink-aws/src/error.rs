//! Classification: every AWS answer becomes one of the four failure classes.
//!
//! One function per service ([`classify_sqs`], [`classify_sns`]) reads the SDK's typed error
//! first, then the error code (`ProvideErrorMetadata::code()`), then the raw HTTP status.
//! Both end in the one shared code table, [`class_of_code`]. Nothing is decided on error
//! text.

use ankusa_sink_core::Failure;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use std::fmt;

/// What a failure's class will be, before the attempt number is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The operator's to fix: credentials, permissions, a missing queue or topic.
    Config,
    /// The message will never be taken.
    Permanent,
    /// A throttle: the server's delay in ms when it sent one.
    Throttle(Option<u64>),
    /// Anything else.
    Transient,
}

pub use ankusa_sink_core::MAX_REASON_TEXT;
pub(crate) use ankusa_sink_core::printable;

/// Each error of a source chain by its `Display` (never `Debug`), joined with `": "`,
/// skipping text the chain already ends with; escaped and bounded.
fn chain_text(mut next: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut out = String::new();
    while let Some(e) = next {
        let text = e.to_string();
        if !out.ends_with(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        next = e.source();
    }
    printable(&out)
}

/// A request that got no response, in words: the socket failure by its IO kind when the
/// connector's error chain holds one (`connection refused`), else the connector's kind
/// and the innermost error's text (a DNS or TLS failure says more than its kind).
fn dispatch_text(
    connector: Option<&aws_smithy_runtime_api::client::result::ConnectorError>,
) -> String {
    use std::io::ErrorKind as K;
    let Some(c) = connector else {
        return "dispatch failure".to_owned();
    };
    let mut io = None;
    let mut innermost: &(dyn std::error::Error + 'static) = c;
    let mut next = std::error::Error::source(c);
    while let Some(e) = next {
        if io.is_none() {
            io = e.downcast_ref::<std::io::Error>().map(std::io::Error::kind);
        }
        innermost = e;
        next = e.source();
    }
    match io {
        Some(
            k @ (K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::BrokenPipe
            | K::TimedOut
            | K::UnexpectedEof),
        ) => k.to_string(),
        _ if c.is_timeout() => "connection timed out".to_owned(),
        _ => {
            let kind = if c.is_io() {
                "io"
            } else if c.is_user() {
                "user"
            } else {
                "other"
            };
            format!(
                "dispatch failure ({kind}): {}",
                printable(&innermost.to_string())
            )
        }
    }
}

/// Why an AWS call failed: the service's answer, a timeout or a connection error.
///
/// The failure reason of every AWS error; never holds a credential (AWS error messages
/// name key ids at most, and request signatures are not kept). The server's message is
/// kept escaped and bounded ([`MAX_REASON_TEXT`]); errors of the SDK are described in
/// words, never by their `Debug` form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsError {
    /// `sqs` or `sns`.
    pub service: &'static str,
    /// The operation: `SendMessage`, `PublishBatch`, `GetQueueAttributes`, ...
    pub operation: &'static str,
    /// The AWS error code, when the service sent one it could be parsed from.
    pub code: Option<String>,
    /// The HTTP status, when a response arrived.
    pub status: Option<u16>,
    /// The service's message, or what went wrong on the way.
    pub message: Option<String>,
}

impl fmt::Display for AwsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.service, self.operation)?;
        // The code is the server's text too: printed escaped, like the message.
        match (self.code.as_deref().map(printable), self.status) {
            (Some(c), Some(s)) => write!(f, ": {c} (HTTP {s})")?,
            (Some(c), None) => write!(f, ": {c}")?,
            (None, Some(s)) => write!(f, ": HTTP {s}")?,
            (None, None) => {}
        }
        if let Some(m) = &self.message {
            write!(f, ": {m}")?;
        }
        Ok(())
    }
}

impl std::error::Error for AwsError {}

/// A classified AWS error, turned into a [`Failure`] once per delivery it concerns (a
/// failed batch request fails every entry of the batch).
#[derive(Debug, Clone)]
pub(crate) struct Verdict {
    pub(crate) kind: Kind,
    pub(crate) error: AwsError,
}

impl Verdict {
    pub(crate) fn new(kind: Kind, error: AwsError) -> Self {
        Verdict { kind, error }
    }

    /// The failure for a delivery at `attempt`.
    pub(crate) fn failure(&self, attempt: u32) -> Failure {
        let reason = self.error.clone();
        match self.kind {
            Kind::Config => Failure::config(reason),
            Kind::Permanent => Failure::permanent(reason),
            Kind::Throttle(Some(ms)) if ms > 0 => Failure::retry_after_ms(ms, reason),
            Kind::Throttle(_) => Failure::throttled(attempt, reason),
            Kind::Transient => Failure::transient(reason),
        }
    }
}

/// The shared table of AWS error codes (SQS JSON/query codes, SNS query codes, IAM and
/// signing codes, KMS codes). `None`: not in the table.
pub(crate) fn class_of_code(code: &str) -> Option<Kind> {
    let kind = match code {
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
        | "NotFoundException" => Kind::Config,
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
        | "ValidationError" => Kind::Permanent,
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
        | "RequestLimitExceeded" => Kind::Throttle(None),
        // The service's trouble, or credentials about to be refreshed.
        "InternalError"
        | "InternalFailure"
        | "InternalErrorException"
        | "ServiceUnavailable"
        | "ServiceUnavailableException"
        | "RequestTimeout"
        | "RequestTimeoutException"
        | "ExpiredToken"
        | "ExpiredTokenException"
        | "RequestExpired" => Kind::Transient,
        _ => return None,
    };
    Some(kind)
}

/// The class of an HTTP status with no usable code: any 403 is config, 429 a throttle,
/// anything else (5xx, other 4xx) transient.
pub(crate) fn class_of_status(status: Option<u16>) -> Kind {
    match status {
        Some(403) => Kind::Config,
        Some(429) => Kind::Throttle(None),
        _ => Kind::Transient,
    }
}

/// The server's requested pause, in ms: `x-amz-retry-after` (ms) or `retry-after`
/// (seconds).
fn retry_after_ms(raw: &HttpResponse) -> Option<u64> {
    let h = raw.headers();
    if let Some(ms) = h
        .get("x-amz-retry-after")
        .and_then(|v| v.trim().parse().ok())
    {
        return Some(ms);
    }
    h.get("retry-after")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| s.saturating_mul(1000))
}

/// Everything classification needs from an `SdkError`, whatever the operation.
struct Parts {
    code: Option<String>,
    status: Option<u16>,
    message: Option<String>,
    retry_after: Option<u64>,
    /// No response: a timeout or a connection failure.
    no_response: bool,
}

fn parts<E>(err: &SdkError<E, HttpResponse>) -> Parts
where
    E: aws_smithy_types::error::metadata::ProvideErrorMetadata + std::error::Error + 'static,
{
    use aws_smithy_types::error::metadata::ProvideErrorMetadata as _;
    let raw = err.raw_response();
    let (message, no_response) = match err {
        SdkError::ServiceError(s) => (s.err().message().map(printable), false),
        SdkError::TimeoutError(_) => (Some("timed out".to_owned()), true),
        SdkError::DispatchFailure(d) => (Some(dispatch_text(d.as_connector_error())), true),
        // The parser's error can quote the body; the status says enough.
        SdkError::ResponseError(_) => (Some("the response could not be read".to_owned()), false),
        SdkError::ConstructionFailure(_) => (
            Some(format!(
                "the request could not be built: {}",
                chain_text(std::error::Error::source(err))
            )),
            true,
        ),
        _ => (
            Some(chain_text(std::error::Error::source(err))),
            raw.is_none(),
        ),
    };
    Parts {
        code: err.code().map(str::to_owned),
        status: raw.map(|r| r.status().as_u16()),
        message,
        retry_after: raw.and_then(retry_after_ms),
        no_response,
    }
}

fn verdict(
    service: &'static str,
    operation: &'static str,
    typed: Option<Kind>,
    p: Parts,
) -> Verdict {
    let kind = if p.no_response {
        Kind::Transient
    } else {
        typed
            .or_else(|| p.code.as_deref().and_then(class_of_code))
            .unwrap_or_else(|| class_of_status(p.status))
    };
    let kind = match kind {
        Kind::Throttle(None) => Kind::Throttle(p.retry_after),
        k => k,
    };
    let error = AwsError {
        service,
        operation,
        code: p.code,
        status: p.status,
        message: p.message,
    };
    Verdict::new(kind, error)
}

/// Classify an SQS error: the typed error, then its code, then the HTTP status.
#[cfg(feature = "sqs")]
pub(crate) fn classify_sqs<E>(
    operation: &'static str,
    err: aws_sdk_sqs::error::SdkError<E, aws_sdk_sqs::config::http::HttpResponse>,
) -> Verdict
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    aws_sdk_sqs::Error:
        From<aws_sdk_sqs::error::SdkError<E, aws_sdk_sqs::config::http::HttpResponse>>,
{
    use aws_sdk_sqs::Error as E2;
    let p = parts(&err);
    let typed = match aws_sdk_sqs::Error::from(err) {
        E2::QueueDoesNotExist(_)
        | E2::InvalidAddress(_)
        | E2::InvalidSecurity(_)
        | E2::KmsAccessDenied(_)
        | E2::KmsDisabled(_)
        | E2::KmsNotFound(_)
        | E2::KmsInvalidState(_)
        | E2::KmsInvalidKeyUsage(_)
        | E2::KmsOptInRequired(_) => Some(Kind::Config),
        E2::InvalidMessageContents(_)
        | E2::InvalidAttributeName(_)
        | E2::InvalidAttributeValue(_) => Some(Kind::Permanent),
        E2::RequestThrottled(_) | E2::KmsThrottled(_) => Some(Kind::Throttle(None)),
        _ => None,
    };
    verdict("sqs", operation, typed, p)
}

/// Classify an SNS error: the typed error, then its code, then the HTTP status.
#[cfg(feature = "sns")]
pub(crate) fn classify_sns<E>(
    operation: &'static str,
    err: aws_sdk_sns::error::SdkError<E, aws_sdk_sns::config::http::HttpResponse>,
) -> Verdict
where
    E: aws_sdk_sns::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    aws_sdk_sns::Error:
        From<aws_sdk_sns::error::SdkError<E, aws_sdk_sns::config::http::HttpResponse>>,
{
    use aws_sdk_sns::Error as E2;
    let p = parts(&err);
    let typed = match aws_sdk_sns::Error::from(err) {
        E2::AuthorizationErrorException(_)
        | E2::NotFoundException(_)
        | E2::InvalidSecurityException(_)
        | E2::KmsAccessDeniedException(_)
        | E2::KmsDisabledException(_)
        | E2::KmsNotFoundException(_)
        | E2::KmsInvalidStateException(_)
        | E2::KmsOptInRequired(_) => Some(Kind::Config),
        E2::InvalidParameterException(_)
        | E2::InvalidParameterValueException(_)
        | E2::ValidationException(_) => Some(Kind::Permanent),
        E2::ThrottledException(_) | E2::KmsThrottlingException(_) => Some(Kind::Throttle(None)),
        E2::InternalErrorException(_) => Some(Kind::Transient),
        _ => None,
    };
    verdict("sns", operation, typed, p)
}

/// The class of a failed batch entry, from the code the service reported for it.
pub(crate) fn classify_entry(
    service: &'static str,
    operation: &'static str,
    code: &str,
    message: Option<&str>,
) -> Verdict {
    let kind = class_of_code(code).unwrap_or(Kind::Transient);
    Verdict::new(
        kind,
        AwsError {
            service,
            operation,
            code: Some(code.to_owned()),
            status: None,
            message: message.map(printable),
        },
    )
}

/// Why a message was refused or not confirmed, before or after the service answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// Body plus attributes are over `max_message_bytes`; nothing was sent (permanent).
    #[error("message of {size} bytes (body plus attributes) exceeds max_message_bytes {max}")]
    MessageTooLarge {
        /// The message's size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The service's MD5 of the body is not the body's: it got something else (transient).
    #[error("{service} returned body MD5 {}, expected {expected}", printable(got))]
    Md5Mismatch {
        /// `sqs`.
        service: &'static str,
        /// The MD5 of what was sent.
        expected: String,
        /// The MD5 the service computed.
        got: String,
    },
    /// The service answered without a message id (or MD5): not confirmed (transient).
    #[error("{service} {operation} answered without a message id or body MD5")]
    Unconfirmed {
        /// `sqs` or `sns`.
        service: &'static str,
        /// The operation.
        operation: &'static str,
    },
    /// A batch answer named neither success nor failure for this entry (transient).
    #[error("{service} {operation} answered nothing for this entry")]
    NoEntryResult {
        /// `sqs` or `sns`.
        service: &'static str,
        /// The operation.
        operation: &'static str,
    },
}

#[cfg(test)]
mod tests {
    //! One test per row of the classification table, on the SDK's own error values (the
    //! integration tests produce the same rows on the wire).
    use super::*;
    use ankusa_sink_core::Class;
    #[cfg(feature = "sqs")]
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    fn resp(status: u16, headers: &[(&'static str, &'static str)]) -> HttpResponse {
        let mut r = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
        for (k, v) in headers {
            r.headers_mut().insert(*k, *v);
        }
        r
    }

    fn meta(code: &str) -> ErrorMetadata {
        ErrorMetadata::builder()
            .code(code)
            .message("scripted")
            .build()
    }

    #[cfg(feature = "sqs")]
    mod sqs {
        use super::*;
        use aws_sdk_sqs::operation::send_message::SendMessageError as E;
        use aws_sdk_sqs::types::error as t;

        pub(super) fn code(code: &str, status: u16) -> Class {
            class(E::generic(meta(code)), status, &[])
        }

        pub(super) fn class(e: E, status: u16, headers: &[(&'static str, &'static str)]) -> Class {
            let err = SdkError::service_error(e, resp(status, headers));
            classify_sqs("SendMessage", err).failure(1).class()
        }

        pub(super) fn typed_config() -> Vec<E> {
            vec![
                E::QueueDoesNotExist(
                    t::QueueDoesNotExist::builder()
                        .meta(meta("QueueDoesNotExist"))
                        .build(),
                ),
                E::KmsAccessDenied(
                    t::KmsAccessDenied::builder()
                        .meta(meta("KmsAccessDenied"))
                        .build(),
                ),
                E::KmsDisabled(t::KmsDisabled::builder().meta(meta("KmsDisabled")).build()),
                E::KmsNotFound(t::KmsNotFound::builder().meta(meta("KmsNotFound")).build()),
                E::InvalidAddress(
                    t::InvalidAddress::builder()
                        .meta(meta("InvalidAddress"))
                        .build(),
                ),
            ]
        }

        pub(super) fn typed_permanent() -> E {
            E::InvalidMessageContents(
                t::InvalidMessageContents::builder()
                    .meta(meta("InvalidMessageContents"))
                    .build(),
            )
        }

        pub(super) fn typed_throttles() -> Vec<E> {
            vec![
                E::RequestThrottled(
                    t::RequestThrottled::builder()
                        .meta(meta("RequestThrottled"))
                        .build(),
                ),
                E::KmsThrottled(
                    t::KmsThrottled::builder()
                        .meta(meta("KmsThrottled"))
                        .build(),
                ),
            ]
        }

        pub(super) fn other(err: SdkError<E, HttpResponse>) -> Class {
            classify_sqs("SendMessage", err).failure(1).class()
        }
    }

    #[cfg(feature = "sns")]
    mod sns {
        use super::*;
        use aws_sdk_sns::operation::publish::PublishError as E;
        use aws_sdk_sns::types::error as t;

        pub(super) fn code(code: &str, status: u16) -> Class {
            class(E::generic(meta(code)), status)
        }

        pub(super) fn class(e: E, status: u16) -> Class {
            let err = SdkError::service_error(e, resp(status, &[]));
            classify_sns("Publish", err).failure(1).class()
        }

        pub(super) fn typed(code: &str) -> E {
            match code {
                "AuthorizationError" => E::AuthorizationErrorException(
                    t::AuthorizationErrorException::builder()
                        .meta(meta(code))
                        .build(),
                ),
                "NotFound" => {
                    E::NotFoundException(t::NotFoundException::builder().meta(meta(code)).build())
                }
                "KMSAccessDenied" => E::KmsAccessDeniedException(
                    t::KmsAccessDeniedException::builder()
                        .meta(meta(code))
                        .build(),
                ),
                "InvalidParameter" => E::InvalidParameterException(
                    t::InvalidParameterException::builder()
                        .meta(meta(code))
                        .build(),
                ),
                "ParameterValueInvalid" => E::InvalidParameterValueException(
                    t::InvalidParameterValueException::builder()
                        .meta(meta(code))
                        .build(),
                ),
                "KMSThrottling" => E::KmsThrottlingException(
                    t::KmsThrottlingException::builder()
                        .meta(meta(code))
                        .build(),
                ),
                "InternalError" => E::InternalErrorException(
                    t::InternalErrorException::builder()
                        .meta(meta(code))
                        .build(),
                ),
                _ => unreachable!("{code}"),
            }
        }
    }

    fn is_retry_after(c: Class) -> bool {
        matches!(c, Class::RetryAfter(_))
    }

    #[test]
    fn row_config_credentials_permissions_missing_destinations_any_bare_403() {
        for code in [
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
            assert_eq!(class_of_code(code), Some(Kind::Config), "{code}");
            #[cfg(feature = "sqs")]
            assert_eq!(sqs::code(code, 400), Class::Config, "sqs {code}");
            #[cfg(feature = "sns")]
            assert_eq!(sns::code(code, 400), Class::Config, "sns {code}");
        }
        #[cfg(feature = "sqs")]
        {
            for e in sqs::typed_config() {
                assert_eq!(sqs::class(e, 400, &[]), Class::Config);
            }
            // moto's XML 403 on a JSON service: no code, an unparsable body.
            let err = SdkError::response_error("not JSON", resp(403, &[]));
            assert_eq!(sqs::other(err), Class::Config);
            assert_eq!(sqs::code("SomethingNew", 403), Class::Config);
        }
        #[cfg(feature = "sns")]
        for code in ["AuthorizationError", "NotFound", "KMSAccessDenied"] {
            assert_eq!(sns::class(sns::typed(code), 403), Class::Config, "{code}");
        }
    }

    #[test]
    fn row_permanent_the_message_is_refused() {
        for code in [
            "InvalidMessageContents",
            "InvalidParameterValue",
            "InvalidParameterValues",
            "InvalidParameterValueException",
            "MessageTooLong",
            "InvalidParameter",
        ] {
            assert_eq!(class_of_code(code), Some(Kind::Permanent), "{code}");
            #[cfg(feature = "sqs")]
            assert_eq!(sqs::code(code, 400), Class::Permanent, "sqs {code}");
            #[cfg(feature = "sns")]
            assert_eq!(sns::code(code, 400), Class::Permanent, "sns {code}");
        }
        #[cfg(feature = "sqs")]
        assert_eq!(
            sqs::class(sqs::typed_permanent(), 400, &[]),
            Class::Permanent
        );
        #[cfg(feature = "sns")]
        for code in ["InvalidParameter", "ParameterValueInvalid"] {
            assert_eq!(
                sns::class(sns::typed(code), 400),
                Class::Permanent,
                "{code}"
            );
        }
        // Over the size limit: the sink's own pre-check.
        let f = Failure::permanent(SinkError::MessageTooLarge { size: 2, max: 1 });
        assert_eq!(f.class(), Class::Permanent);
    }

    #[test]
    fn row_retry_after_throttles_with_the_servers_delay_when_sent() {
        for code in [
            "Throttling",
            "ThrottlingException",
            "RequestThrottled",
            "KmsThrottled",
            "Throttled",
        ] {
            assert_eq!(class_of_code(code), Some(Kind::Throttle(None)), "{code}");
            #[cfg(feature = "sqs")]
            {
                let c = sqs::code(code, 400);
                assert!(is_retry_after(c), "sqs {code}: {c}");
                // No delay from the server: throttle_after_ms(1) is at most 500 ms.
                assert!(c.retry_after_ms().unwrap() <= 500);
            }
            #[cfg(feature = "sns")]
            assert!(is_retry_after(sns::code(code, 400)), "sns {code}");
        }
        #[cfg(feature = "sqs")]
        {
            for e in sqs::typed_throttles() {
                assert!(is_retry_after(sqs::class(e, 400, &[])));
            }
            let c = sqs::class(
                E2::generic(meta("Throttling")),
                400,
                &[("retry-after", "7")],
            );
            assert_eq!(c.retry_after_ms(), Some(7_000));
            let c = sqs::class(
                E2::generic(meta("RequestThrottled")),
                400,
                &[("x-amz-retry-after", "250")],
            );
            assert_eq!(c.retry_after_ms(), Some(250));
            // A bare 429.
            assert!(is_retry_after(sqs::other(SdkError::response_error(
                "?",
                resp(429, &[])
            ))));
        }
        // SNS models no throttle on Publish but KMS's; `Throttled` arrives as a code.
        #[cfg(feature = "sns")]
        assert!(is_retry_after(sns::class(sns::typed("KMSThrottling"), 400)));
    }

    #[cfg(feature = "sqs")]
    use aws_sdk_sqs::operation::send_message::SendMessageError as E2;

    #[test]
    fn row_transient_5xx_internal_timeouts_connections_expired_credentials() {
        for code in [
            "InternalError",
            "InternalFailure",
            "ServiceUnavailable",
            "ExpiredToken",
        ] {
            assert_eq!(class_of_code(code), Some(Kind::Transient), "{code}");
            #[cfg(feature = "sqs")]
            assert_eq!(sqs::code(code, 500), Class::Transient, "sqs {code}");
            #[cfg(feature = "sns")]
            assert_eq!(sns::code(code, 500), Class::Transient, "sns {code}");
        }
        #[cfg(feature = "sqs")]
        {
            assert_eq!(
                sqs::other(SdkError::response_error("html", resp(502, &[]))),
                Class::Transient
            );
            assert_eq!(
                sqs::other(SdkError::timeout_error("slow")),
                Class::Transient
            );
            let refused = ConnectorError::io("connection refused".into());
            assert_eq!(
                sqs::other(SdkError::dispatch_failure(refused)),
                Class::Transient
            );
            assert_eq!(
                sqs::other(SdkError::construction_failure("no credentials")),
                Class::Transient
            );
            // An unknown code that is not a 403: the retry policy decides.
            assert_eq!(sqs::code("SomethingNew", 400), Class::Transient);
        }
        #[cfg(feature = "sns")]
        assert_eq!(
            sns::class(sns::typed("InternalError"), 500),
            Class::Transient
        );
    }

    #[test]
    fn failed_batch_entries_use_the_same_table() {
        let c = |code| {
            classify_entry("sqs", "SendMessageBatch", code, None)
                .failure(1)
                .class()
        };
        assert_eq!(c("InvalidMessageContents"), Class::Permanent);
        assert_eq!(c("AccessDenied"), Class::Config);
        assert!(is_retry_after(c("RequestThrottled")));
        assert_eq!(c("InternalError"), Class::Transient);
        assert_eq!(c("Unknown"), Class::Transient);
    }

    #[cfg(feature = "sqs")]
    fn sqs_reason(err: SdkError<E2, HttpResponse>) -> String {
        classify_sqs("SendMessage", err).failure(1).reason_chain()
    }

    #[cfg(feature = "sqs")]
    #[test]
    fn reasons_are_short_words_not_debug_dumps() {
        use std::io;
        let refused = ConnectorError::io(io::Error::from_raw_os_error(111).into());
        assert_eq!(
            sqs_reason(SdkError::dispatch_failure(refused)),
            "sqs SendMessage: connection refused"
        );
        let reset = ConnectorError::io(io::Error::from(io::ErrorKind::ConnectionReset).into());
        assert_eq!(
            sqs_reason(SdkError::dispatch_failure(reset)),
            "sqs SendMessage: connection reset"
        );
        let slow = ConnectorError::timeout("connect timeout".into());
        assert_eq!(
            sqs_reason(SdkError::dispatch_failure(slow)),
            "sqs SendMessage: connection timed out"
        );
        let tls = ConnectorError::other("invalid peer certificate: UnknownIssuer".into(), None);
        assert_eq!(
            sqs_reason(SdkError::dispatch_failure(tls)),
            "sqs SendMessage: dispatch failure (other): invalid peer certificate: UnknownIssuer"
        );
        assert_eq!(
            sqs_reason(SdkError::timeout_error("slow")),
            "sqs SendMessage: timed out"
        );
        assert_eq!(
            sqs_reason(SdkError::response_error("not JSON <html>", resp(502, &[]))),
            "sqs SendMessage: HTTP 502: the response could not be read"
        );
        assert_eq!(
            sqs_reason(SdkError::construction_failure("no credentials")),
            "sqs SendMessage: the request could not be built: no credentials"
        );
        for text in [
            sqs_reason(SdkError::dispatch_failure(ConnectorError::io(
                io::Error::from_raw_os_error(111).into(),
            ))),
            sqs_reason(SdkError::construction_failure("x")),
        ] {
            for dump in ["DispatchFailure", "ConnectorError", "{", "Some("] {
                assert!(!text.contains(dump), "{text}");
            }
        }
    }

    #[cfg(feature = "sqs")]
    #[test]
    fn server_text_is_escaped_and_bounded() {
        let hostile = format!(
            "denied\u{1b}[2J\r\nINFO fake line\u{202e}{}",
            "x".repeat(5000)
        );
        let e = E2::generic(
            ErrorMetadata::builder()
                .code("Odd\u{7}Code")
                .message(&hostile)
                .build(),
        );
        let text = sqs_reason(SdkError::service_error(e, resp(400, &[])));
        let entry = classify_entry("sqs", "SendMessageBatch", "Odd\u{7}Code", Some(&hostile))
            .failure(1)
            .reason_chain();
        let md5 = SinkError::Md5Mismatch {
            service: "sqs",
            expected: "0".repeat(32),
            got: hostile.clone(),
        }
        .to_string();
        for text in [text, entry, md5] {
            assert!(!text.chars().any(char::is_control), "{text:?}");
            assert!(!text.contains('\u{202e}'), "{text:?}");
            assert!(
                text.contains(r"denied\u{1b}[2J\r\nINFO fake line\u{202e}x"),
                "{text}"
            );
            assert!(
                text.chars().count() < 2 * MAX_REASON_TEXT + 100,
                "{}",
                text.len()
            );
        }
    }

    #[test]
    fn display_names_service_operation_code_status_message() {
        let e = AwsError {
            service: "sqs",
            operation: "SendMessage",
            code: Some("AccessDenied".into()),
            status: Some(403),
            message: Some("no".into()),
        };
        assert_eq!(
            e.to_string(),
            "sqs SendMessage: AccessDenied (HTTP 403): no"
        );
    }
}
