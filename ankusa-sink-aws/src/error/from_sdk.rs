//! The SDK's errors as an [`AwsError`]: the modeled error's name, the code
//! (`ProvideErrorMetadata::code()`), the HTTP status and the requested pause, with the
//! server's text escaped and bounded; failures without a response in short words, never
//! the SDK's `Debug` dumps.

use super::AwsError;
use ankusa_sink_kit::printable;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::{ConnectorError, SdkError};
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

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
fn dispatch_text(connector: Option<&ConnectorError>) -> String {
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
    match io.and_then(ankusa_sink_kit::socket_failure) {
        Some(text) => text,
        None if c.is_timeout() => "connection timed out".to_owned(),
        None => {
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

/// Whether a request that got no response may have been sent, by the connector's error:
/// refused or never connected (a connect timeout, a request the connector would not take)
/// is `false`; a connection that broke (reset, aborted, closed early) is `true`, as the
/// request may have been written; anything else is unknown.
fn dispatch_sent(connector: Option<&ConnectorError>) -> Option<bool> {
    use std::io::ErrorKind as K;
    let c = connector?;
    let mut next = std::error::Error::source(c);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                K::ConnectionRefused | K::NotConnected | K::AddrNotAvailable => Some(false),
                K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
                    Some(true)
                }
                _ => None,
            };
        }
        next = e.source();
    }
    if c.is_timeout() || c.is_user() {
        return Some(false);
    }
    None
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

/// `err` of `operation`, with the modeled error's name the service's SDK recognized.
fn aws_error<E>(
    service: &'static str,
    operation: &'static str,
    err: &SdkError<E, HttpResponse>,
    modeled: Option<&'static str>,
) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let raw = err.raw_response();
    let no_response = |what: String, sent: Option<bool>| AwsError::NoResponse {
        service,
        operation,
        what,
        sent,
    };
    let message = match err {
        SdkError::ServiceError(s) => s.err().message().map(printable),
        // The operation timeout: the connection was made (its own timeout is the same
        // length and fires as a dispatch failure), so the request may have been read.
        SdkError::TimeoutError(_) => return no_response("timed out".to_owned(), Some(true)),
        SdkError::DispatchFailure(d) => {
            let c = d.as_connector_error();
            return no_response(dispatch_text(c), dispatch_sent(c));
        }
        // The parser's error can quote the body; the status says enough.
        SdkError::ResponseError(_) => Some("the response could not be read".to_owned()),
        SdkError::ConstructionFailure(_) => {
            return no_response(
                format!(
                    "the request could not be built: {}",
                    chain_text(std::error::Error::source(err))
                ),
                Some(false),
            );
        }
        _ if raw.is_none() => {
            return no_response(chain_text(std::error::Error::source(err)), None);
        }
        _ => Some(chain_text(std::error::Error::source(err))),
    };
    AwsError::Refused {
        service,
        operation,
        modeled,
        code: err.code().map(str::to_owned),
        status: raw.map(|r| r.status().as_u16()),
        retry_after_ms: raw.and_then(retry_after_ms),
        message,
    }
}

/// `pub(crate) fn $name(operation, err) -> AwsError` for one service's SDK: the error with
/// the name of its modeled error, for the modeled errors the code table knows.
macro_rules! from_service {
    ($(#[$doc:meta])* $feature:literal, $name:ident, $sdk:ident, [$($modeled:ident),* $(,)?]) => {
        $(#[$doc])*
        #[cfg(feature = $feature)]
        pub(crate) fn $name<E>(
            operation: &'static str,
            err: $sdk::error::SdkError<E, $sdk::config::http::HttpResponse>,
        ) -> AwsError
        where
            E: $sdk::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
            $sdk::Error: From<$sdk::error::SdkError<E, $sdk::config::http::HttpResponse>>,
        {
            let mut e = aws_error(stringify!($name), operation, &err, None);
            if let AwsError::Refused { modeled, .. } = &mut e {
                *modeled = match $sdk::Error::from(err) {
                    $($sdk::Error::$modeled(_) => Some(stringify!($modeled)),)*
                    _ => None,
                };
            }
            e
        }
    };
}

from_service!(
    /// An SQS error of `operation`.
    "sqs", sqs, aws_sdk_sqs, [
        QueueDoesNotExist, InvalidAddress, InvalidSecurity, KmsAccessDenied, KmsDisabled,
        KmsNotFound, KmsInvalidState, KmsInvalidKeyUsage, KmsOptInRequired,
        InvalidMessageContents, InvalidAttributeName, InvalidAttributeValue,
        RequestThrottled, KmsThrottled,
    ]
);

from_service!(
    /// An SNS error of `operation`.
    "sns", sns, aws_sdk_sns, [
        AuthorizationErrorException, NotFoundException, InvalidSecurityException,
        KmsAccessDeniedException, KmsDisabledException, KmsNotFoundException,
        KmsInvalidStateException, KmsOptInRequired, InvalidParameterException,
        InvalidParameterValueException, ValidationException, ThrottledException,
        KmsThrottlingException, InternalErrorException,
    ]
);

from_service!(
    /// A Kinesis error of `operation`.
    "kinesis", kinesis, aws_sdk_kinesis, [
        ResourceNotFoundException, AccessDeniedException, KmsAccessDeniedException,
        KmsDisabledException, KmsInvalidStateException, KmsNotFoundException, KmsOptInRequired,
        KmsThrottlingException, ProvisionedThroughputExceededException,
        InvalidArgumentException, LimitExceededException, InternalFailureException,
        ValidationException,
    ]
);

from_service!(
    /// An EventBridge error of `operation`.
    "eventbridge", eventbridge, aws_sdk_eventbridge, [
        ResourceNotFoundException, InternalException,
    ]
);

#[cfg(test)]
mod tests {
    //! The SDK's own error values become the `AwsError` the table classifies.
    use super::*;
    use crate::error::classify;
    use ankusa_sink_core::Class;
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

        fn class(e: E, status: u16, headers: &[(&'static str, &'static str)]) -> Class {
            classify(&super::super::sqs(
                "SendMessage",
                SdkError::service_error(e, resp(status, headers)),
            ))
        }

        fn other(err: SdkError<E, HttpResponse>) -> AwsError {
            super::super::sqs("SendMessage", err)
        }

        #[test]
        fn typed_errors_are_classified_by_their_model() {
            // The code is none the table knows: the modeled error decides.
            let m = || meta("Odd");
            for e in [
                E::QueueDoesNotExist(t::QueueDoesNotExist::builder().meta(m()).build()),
                E::KmsAccessDenied(t::KmsAccessDenied::builder().meta(m()).build()),
                E::KmsDisabled(t::KmsDisabled::builder().meta(m()).build()),
                E::KmsNotFound(t::KmsNotFound::builder().meta(m()).build()),
                E::InvalidAddress(t::InvalidAddress::builder().meta(m()).build()),
            ] {
                assert_eq!(class(e, 400, &[]), Class::Config);
            }
            let e =
                E::InvalidMessageContents(t::InvalidMessageContents::builder().meta(m()).build());
            assert_eq!(class(e, 400, &[]), Class::Permanent);
            for e in [
                E::RequestThrottled(t::RequestThrottled::builder().meta(m()).build()),
                E::KmsThrottled(t::KmsThrottled::builder().meta(m()).build()),
            ] {
                assert_eq!(class(e, 400, &[]), Class::Throttled);
            }
        }

        #[test]
        fn codes_statuses_and_pauses_come_from_the_answer() {
            assert_eq!(
                class(E::generic(meta("AccessDenied")), 400, &[]),
                Class::Config
            );
            assert_eq!(
                class(E::generic(meta("Throttling")), 400, &[]),
                Class::Throttled
            );
            let c = class(E::generic(meta("Throttling")), 400, &[("retry-after", "7")]);
            assert_eq!(c.retry_after_ms(), Some(7_000));
            let c = class(
                E::generic(meta("RequestThrottled")),
                400,
                &[("x-amz-retry-after", "250")],
            );
            assert_eq!(c.retry_after_ms(), Some(250));
            // moto's XML 403 on a JSON service: no code, an unparsable body.
            let xml = other(SdkError::response_error("not JSON", resp(403, &[])));
            assert_eq!(classify(&xml), Class::Config);
            let bare = other(SdkError::response_error("?", resp(429, &[])));
            assert_eq!(classify(&bare), Class::Throttled);
            let html = other(SdkError::response_error("html", resp(502, &[])));
            assert_eq!(classify(&html), Class::Transient);
            for e in [
                other(SdkError::timeout_error("slow")),
                other(SdkError::construction_failure("no credentials")),
                other(SdkError::dispatch_failure(ConnectorError::io(
                    "connection refused".into(),
                ))),
            ] {
                assert!(matches!(e, AwsError::NoResponse { .. }), "{e:?}");
                assert_eq!(classify(&e), Class::Transient);
            }
        }

        #[test]
        fn reasons_are_short_words_not_debug_dumps() {
            use std::io;
            let reason = |err| other(err).to_string();
            let refused = ConnectorError::io(io::Error::from_raw_os_error(111).into());
            assert_eq!(
                reason(SdkError::dispatch_failure(refused)),
                "sqs SendMessage: connection refused"
            );
            let reset = ConnectorError::io(io::Error::from(io::ErrorKind::ConnectionReset).into());
            assert_eq!(
                reason(SdkError::dispatch_failure(reset)),
                "sqs SendMessage: connection reset"
            );
            let slow = ConnectorError::timeout("connect timeout".into());
            assert_eq!(
                reason(SdkError::dispatch_failure(slow)),
                "sqs SendMessage: connection timed out"
            );
            let tls = ConnectorError::other("invalid peer certificate: UnknownIssuer".into(), None);
            assert_eq!(
                reason(SdkError::dispatch_failure(tls)),
                "sqs SendMessage: dispatch failure (other): invalid peer certificate: UnknownIssuer"
            );
            assert_eq!(
                reason(SdkError::timeout_error("slow")),
                "sqs SendMessage: timed out"
            );
            assert_eq!(
                reason(SdkError::response_error("not JSON <html>", resp(502, &[]))),
                "sqs SendMessage: HTTP 502: the response could not be read"
            );
            assert_eq!(
                reason(SdkError::construction_failure("no credentials")),
                "sqs SendMessage: the request could not be built: no credentials"
            );
            for text in [
                reason(SdkError::dispatch_failure(ConnectorError::io(
                    io::Error::from_raw_os_error(111).into(),
                ))),
                reason(SdkError::construction_failure("x")),
            ] {
                for dump in ["DispatchFailure", "ConnectorError", "{", "Some("] {
                    assert!(!text.contains(dump), "{text}");
                }
            }
        }

        #[test]
        fn server_text_is_escaped_and_bounded() {
            let hostile = format!(
                "denied\u{1b}[2J\r\nINFO fake line\u{202e}{}",
                "x".repeat(5000)
            );
            let e = E::generic(
                ErrorMetadata::builder()
                    .code("Odd\u{7}Code")
                    .message(&hostile)
                    .build(),
            );
            let text = other(SdkError::service_error(e, resp(400, &[]))).to_string();
            assert!(!text.chars().any(char::is_control), "{text:?}");
            assert!(
                text.contains(
                    r"Odd\u{7}Code (HTTP 400): denied\u{1b}[2J\r\nINFO fake line\u{202e}x"
                ),
                "{text}"
            );
            assert!(text.chars().count() < 2 * ankusa_sink_kit::MAX_REASON_TEXT + 100);
        }
    }

    #[cfg(feature = "kinesis")]
    mod kinesis {
        use super::*;
        use aws_sdk_kinesis::operation::put_records::PutRecordsError as E;
        use aws_sdk_kinesis::types::error as t;

        fn class(e: E, status: u16) -> Class {
            classify(&super::super::kinesis(
                "PutRecords",
                SdkError::service_error(e, resp(status, &[])),
            ))
        }

        #[test]
        fn typed_errors_are_classified_by_their_model() {
            // The code is none the table knows: the modeled error decides.
            let m = || meta("Odd");
            for e in [
                E::ResourceNotFoundException(
                    t::ResourceNotFoundException::builder().meta(m()).build(),
                ),
                E::AccessDeniedException(t::AccessDeniedException::builder().meta(m()).build()),
                E::KmsAccessDeniedException(
                    t::KmsAccessDeniedException::builder().meta(m()).build(),
                ),
                E::KmsDisabledException(t::KmsDisabledException::builder().meta(m()).build()),
                E::KmsNotFoundException(t::KmsNotFoundException::builder().meta(m()).build()),
            ] {
                assert_eq!(class(e, 400), Class::Config);
            }
            let e = E::InvalidArgumentException(
                t::InvalidArgumentException::builder().meta(m()).build(),
            );
            assert_eq!(class(e, 400), Class::Permanent);
            for e in [
                E::ProvisionedThroughputExceededException(
                    t::ProvisionedThroughputExceededException::builder()
                        .meta(m())
                        .build(),
                ),
                E::KmsThrottlingException(t::KmsThrottlingException::builder().meta(m()).build()),
            ] {
                assert_eq!(class(e, 400), Class::Throttled);
            }
            let e = E::InternalFailureException(
                t::InternalFailureException::builder().meta(m()).build(),
            );
            assert_eq!(class(e, 500), Class::Transient);
            // Kinesis's JSON codes arrive as codes too.
            assert_eq!(
                class(E::generic(meta("KMSThrottlingException")), 400),
                Class::Throttled
            );
        }
    }

    #[cfg(feature = "eventbridge")]
    mod eventbridge {
        use super::*;
        use aws_sdk_eventbridge::operation::put_events::PutEventsError as E;
        use aws_sdk_eventbridge::types::error as t;

        fn class(e: E, status: u16) -> Class {
            classify(&super::super::eventbridge(
                "PutEvents",
                SdkError::service_error(e, resp(status, &[])),
            ))
        }

        #[test]
        fn typed_and_coded_errors_are_classified() {
            let e = E::InternalException(t::InternalException::builder().meta(meta("Odd")).build());
            assert_eq!(class(e, 500), Class::Transient);
            for (code, want) in [
                ("ResourceNotFoundException", Class::Config),
                ("AccessDeniedException", Class::Config),
                ("ThrottlingException", Class::Throttled),
                ("ValidationException", Class::Permanent),
            ] {
                assert_eq!(class(E::generic(meta(code)), 400), want, "{code}");
            }
        }
    }

    #[cfg(feature = "sns")]
    mod sns {
        use super::*;
        use aws_sdk_sns::operation::publish::PublishError as E;
        use aws_sdk_sns::types::error as t;

        fn class(e: E, status: u16) -> Class {
            classify(&super::super::sns(
                "Publish",
                SdkError::service_error(e, resp(status, &[])),
            ))
        }

        #[test]
        fn typed_errors_are_classified_by_their_model() {
            let m = || meta("Odd");
            for e in [
                E::AuthorizationErrorException(
                    t::AuthorizationErrorException::builder().meta(m()).build(),
                ),
                E::NotFoundException(t::NotFoundException::builder().meta(m()).build()),
                E::KmsAccessDeniedException(
                    t::KmsAccessDeniedException::builder().meta(m()).build(),
                ),
            ] {
                assert_eq!(class(e, 403), Class::Config);
            }
            for e in [
                E::InvalidParameterException(
                    t::InvalidParameterException::builder().meta(m()).build(),
                ),
                E::InvalidParameterValueException(
                    t::InvalidParameterValueException::builder()
                        .meta(meta("ParameterValueInvalid"))
                        .build(),
                ),
            ] {
                assert_eq!(class(e, 400), Class::Permanent);
            }
            let e =
                E::KmsThrottlingException(t::KmsThrottlingException::builder().meta(m()).build());
            assert_eq!(class(e, 400), Class::Throttled);
            let e =
                E::InternalErrorException(t::InternalErrorException::builder().meta(m()).build());
            assert_eq!(class(e, 500), Class::Transient);
            // SNS models no throttle on Publish but KMS's; `Throttled` arrives as a code.
            assert_eq!(class(E::generic(meta("Throttled")), 400), Class::Throttled);
            assert_eq!(class(E::generic(meta("NotFound")), 404), Class::Config);
        }
    }
}
