//! `--otlp-endpoint`: every attempt span (`ankusa.dispatch.attempt`) exported over OTLP/HTTP
//! (protobuf) with `opentelemetry-otlp`, in a batch on the SDK's own thread.
//!
//! Tracing never fails a delivery nor holds up a run: a collector that is down or slow
//! costs dropped spans (the SDK's queue is bounded), counted in
//! `ankusa_otlp_export_errors_total` and logged at most once a minute; the exit waits
//! at most [`SHUTDOWN_TIMEOUT`] for the last batch.
//!
//! The collector is a destination like a sink's, under the sinks' rules: the client is ours
//! ([`Client`]: no proxy from the environment, no redirects, an answer read up to
//! [`MAX_ANSWER_BYTES`]), headers (`OTEL_EXPORTER_OTLP_HEADERS`, usually a credential) go
//! to an `http://` collector beyond loopback only with `--otlp-allow-insecure`, and a
//! span attribute (a hook id) is cut at [`MAX_ATTRIBUTE_BYTES`], so one hook cannot make a
//! collector refuse the batch it is in. Every attempt span is exported, whatever sampled
//! flag the hook's `traceparent` carries ([`Sampler::AlwaysOn`]): that header is written
//! by whoever sent the hook, and the operator who set `--otlp-endpoint` asked for every
//! attempt; the span still joins the hook's trace.

use ankusa_dispatch::ATTEMPT_SPAN;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{KeyValue, Value};
use opentelemetry_http::{Bytes, HttpError, Request, Response, ResponseBodyTooLarge};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, SpanData, SpanExporter};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one export may take before it is abandoned.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the exit waits for the last batch.
pub(crate) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// The OTLP/HTTP path of traces, added to an endpoint given without a path.
const TRACES_PATH: &str = "/v1/traces";
/// Failed exports, as a metric.
const EXPORT_ERRORS: &str = "ankusa_otlp_export_errors_total";
/// Spans the collector accepted, as a metric.
const EXPORTED: &str = "ankusa_otlp_spans_exported_total";
/// The most of a collector's answer read (64 KiB): an OTLP answer is empty or a short
/// partial-success message; a longer one fails the export, unread past this.
pub(crate) const MAX_ANSWER_BYTES: u64 = 64 * 1024;
/// The longest string attribute exported (bytes, UTF-8): longer ones are cut at a
/// character boundary and end with `…`.
pub(crate) const MAX_ATTRIBUTE_BYTES: usize = 256;
/// The environment variables whose headers the exporter sends.
const HEADER_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_HEADERS",
];

/// The exporter of one run.
pub(crate) struct Otlp {
    provider: SdkTracerProvider,
}

impl Otlp {
    /// Start exporting to `endpoint` (checked with [`endpoint`]).
    ///
    /// # Errors
    /// The exporter cannot be built (its HTTP client), as text for the usage error.
    pub(crate) fn start(endpoint: &str) -> Result<Self, String> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(Client::new()?)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("--otlp-endpoint: cannot start the exporter: {e}"))?;
        let provider = SdkTracerProvider::builder()
            .with_sampler(Sampler::AlwaysOn)
            .with_batch_exporter(Counted(exporter))
            .with_resource(Resource::builder().with_service_name("ankusa-sink").build())
            .build();
        Ok(Otlp { provider })
    }

    /// The tracer the `tracing` layer records attempt spans with.
    pub(crate) fn tracer(&self) -> SdkTracer {
        self.provider.tracer("ankusa-sink")
    }

    /// Export what is left, waiting at most [`SHUTDOWN_TIMEOUT`].
    pub(crate) fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::warn!(error = %e, "OTLP: the last spans were not exported");
        }
    }
}

/// Describe the exporter's counters and show them at 0 (the recorder is installed after
/// the exporter starts).
pub(crate) fn register_metrics() {
    metrics::describe_counter!(EXPORT_ERRORS, "OTLP span exports that failed.");
    metrics::describe_counter!(EXPORTED, "Attempt spans the OTLP collector accepted.");
    metrics::counter!(EXPORT_ERRORS).increment(0);
    metrics::counter!(EXPORTED).increment(0);
}

/// Whether a span is one this exporter sends: the attempt spans only.
pub(crate) fn exported(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_span() && meta.name() == ATTEMPT_SPAN
}

/// Whether the exporter will send headers of the environment (a credential, usually).
pub(crate) fn headers_set() -> bool {
    HEADER_VARS
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|h| !h.is_empty()))
}

/// The OTLP/HTTP traces URL of `raw`: an `http` or `https` URL with a host and without
/// userinfo (collector credentials go in `OTEL_EXPORTER_OTLP_HEADERS`, never in a URL that
/// is printed); without a path, [`TRACES_PATH`] is added, as OTLP's base endpoint says.
/// With `headers` (the environment sets some), an `http://` URL to a host that is not
/// loopback is refused unless `allow_insecure` (`--otlp-allow-insecure`), as the HTTP sink
/// refuses credentials in cleartext.
///
/// # Errors
/// What is wrong with `raw`, for the usage error (never the userinfo, never a header).
pub(crate) fn endpoint(raw: &str, headers: bool, allow_insecure: bool) -> Result<String, String> {
    let mut url = url::Url::parse(raw).map_err(|e| format!("--otlp-endpoint: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "--otlp-endpoint: an http:// or https:// URL (OTLP/HTTP), not {}://",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "--otlp-endpoint: no credentials in the URL; give the collector's headers in \
             OTEL_EXPORTER_OTLP_HEADERS"
                .into(),
        );
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("--otlp-endpoint: the URL has no host".into());
    }
    if headers && !allow_insecure && url.scheme() == "http" && !loopback(&url) {
        return Err(
            "--otlp-endpoint: the collector's headers (OTEL_EXPORTER_OTLP_HEADERS) would be \
             sent in cleartext (http:// to a host that is not loopback); use https, or pass \
             --otlp-allow-insecure"
                .into(),
        );
    }
    if url.path() == "/" || url.path().is_empty() {
        url.set_path(TRACES_PATH);
    }
    Ok(url.into())
}

/// Whether `url`'s host is loopback (`localhost`, `127.0.0.0/8`, `::1`).
fn loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => {
            d.eq_ignore_ascii_case("localhost") || d.to_ascii_lowercase().ends_with(".localhost")
        }
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// The exporter's HTTP client: a blocking reqwest client (the SDK's batch thread calls it)
/// that reads no proxy from the environment, follows no redirect and reads at most
/// [`MAX_ANSWER_BYTES`] of an answer.
#[derive(Debug)]
struct Client(reqwest::blocking::Client);

impl Client {
    fn new() -> Result<Self, String> {
        // Built on a thread of its own: a blocking client must not be built (nor dropped)
        // on a runtime's thread, and a library caller may be on one.
        std::thread::spawn(|| {
            reqwest::blocking::Client::builder()
                .no_proxy()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(EXPORT_TIMEOUT)
                .build()
        })
        .join()
        .map_err(|_| "--otlp-endpoint: building the HTTP client panicked".to_owned())?
        .map(Client)
        .map_err(|e| format!("--otlp-endpoint: cannot build the HTTP client: {e}"))
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        use std::io::Read as _;
        let mut response = self.0.execute(request.try_into()?)?;
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        let mut body = Vec::new();
        (&mut response)
            .take(MAX_ANSWER_BYTES + 1)
            .read_to_end(&mut body)?;
        if body.len() as u64 > MAX_ANSWER_BYTES {
            return Err(Box::new(ResponseBodyTooLarge::new()));
        }
        let mut answer = Response::builder().status(status).body(Bytes::from(body))?;
        *answer.headers_mut() = headers;
        Ok(answer)
    }
}

/// `span` with every string attribute cut to [`MAX_ATTRIBUTE_BYTES`].
fn capped(mut span: SpanData) -> SpanData {
    for kv in &mut span.attributes {
        if let Value::String(v) = &kv.value
            && v.as_str().len() > MAX_ATTRIBUTE_BYTES
        {
            *kv = KeyValue::new(kv.key.clone(), cut(v.as_str()));
        }
    }
    span
}

/// `text` cut to at most [`MAX_ATTRIBUTE_BYTES`] bytes, at a character boundary, ending
/// with `…` (3 bytes).
fn cut(text: &str) -> String {
    let mut end = MAX_ATTRIBUTE_BYTES - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The OTLP exporter, counting what it sends and what fails.
#[derive(Debug)]
struct Counted(opentelemetry_otlp::SpanExporter);

/// When an export failure was last logged.
static LAST_LOGGED: Mutex<Option<Instant>> = Mutex::new(None);

impl SpanExporter for Counted {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let batch = batch.into_iter().map(capped).collect();
        let res = self.0.export(batch).await;
        match &res {
            Ok(()) => metrics::counter!(EXPORTED).increment(n),
            Err(e) => {
                metrics::counter!(EXPORT_ERRORS).increment(1);
                if crate::logging::due(&LAST_LOGGED, Duration::from_secs(60)) {
                    tracing::warn!(
                        error = %e,
                        spans = n,
                        "OTLP: spans not exported (logged at most once a minute; counted in \
                         ankusa_otlp_export_errors_total)"
                    );
                }
            }
        }
        res
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(raw: &str) -> Result<String, String> {
        super::endpoint(raw, false, false)
    }

    #[test]
    fn headers_go_to_a_remote_http_collector_only_when_allowed() {
        for raw in [
            "http://collector.example:4318",
            "http://10.0.0.5:4318",
            "http://[2001:db8::1]:4318",
        ] {
            let e = super::endpoint(raw, true, false).unwrap_err();
            assert!(e.contains("--otlp-allow-insecure"), "{raw}: {e}");
            super::endpoint(raw, true, true).unwrap();
            super::endpoint(raw, false, false).unwrap();
        }
        for raw in [
            "https://collector.example:4318",
            "http://127.0.0.1:4318",
            "http://[::1]:4318",
            "http://localhost:4318",
        ] {
            super::endpoint(raw, true, false).unwrap();
        }
    }

    #[test]
    fn long_attribute_values_are_cut_at_a_character_boundary() {
        assert_eq!(cut(&"a".repeat(1000)).len(), MAX_ATTRIBUTE_BYTES);
        let cut_multi = cut(&"é".repeat(1000));
        assert!(
            cut_multi.len() <= MAX_ATTRIBUTE_BYTES,
            "{}",
            cut_multi.len()
        );
        assert!(cut_multi.ends_with('…'));
    }

    #[test]
    fn endpoints_are_checked_and_completed() {
        assert_eq!(
            endpoint("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            endpoint("https://collector.example:4318/").unwrap(),
            "https://collector.example:4318/v1/traces"
        );
        assert_eq!(
            endpoint("http://127.0.0.1:4318/custom/traces").unwrap(),
            "http://127.0.0.1:4318/custom/traces"
        );
        for bad in [
            "127.0.0.1:4318",
            "grpc://x:4317",
            "file:///tmp/x",
            "http://",
        ] {
            assert!(endpoint(bad).is_err(), "{bad}");
        }
        let e = endpoint("http://user:hunter2@127.0.0.1:4318").unwrap_err();
        assert!(!e.contains("hunter2") && !e.contains("user"), "{e}");
    }
}
