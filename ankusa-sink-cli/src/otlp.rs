//! `--otlp-endpoint`: every attempt span (`ankusa.dispatch.attempt`) exported over OTLP/HTTP
//! (protobuf) with `opentelemetry-otlp`, in a batch on the SDK's own thread.
//!
//! Tracing never fails a delivery nor holds up a run: a collector that is down or slow
//! costs dropped spans (the SDK's queue is bounded), counted in
//! `ankusa_otlp_export_errors_total` and logged at most once a minute; the exit waits
//! at most [`SHUTDOWN_TIMEOUT`] for the last batch.

use ankusa_dispatch::ATTEMPT_SPAN;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanExporter};
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
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("--otlp-endpoint: cannot start the exporter: {e}"))?;
        let provider = SdkTracerProvider::builder()
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

/// The OTLP/HTTP traces URL of `raw`: an `http` or `https` URL with a host and without
/// userinfo (collector credentials go in `OTEL_EXPORTER_OTLP_HEADERS`, never in a URL that
/// is printed); without a path, [`TRACES_PATH`] is added, as OTLP's base endpoint says.
///
/// # Errors
/// What is wrong with `raw`, for the usage error (never the userinfo).
pub(crate) fn endpoint(raw: &str) -> Result<String, String> {
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
    if url.path() == "/" || url.path().is_empty() {
        url.set_path(TRACES_PATH);
    }
    Ok(url.into())
}

/// The OTLP exporter, counting what it sends and what fails.
#[derive(Debug)]
struct Counted(opentelemetry_otlp::SpanExporter);

/// When an export failure was last logged.
static LAST_LOGGED: Mutex<Option<Instant>> = Mutex::new(None);

impl SpanExporter for Counted {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
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
    use super::endpoint;

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
