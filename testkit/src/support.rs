//! Helpers for a sink's own tests and benches against real brokers: names no other test or
//! run uses ([`unique_name`]), a capture of what code logs through `tracing`
//! ([`LogCapture`]), to check that a warning is given and that no secret reaches a log, and
//! many deliveries in flight at once ([`deliver_all`], [`current_thread_runtime`]), and an
//! outage of a destination on demand ([`TcpProxy`], [`free_port`]). Every conformance case
//! searches the logs of every thread for the planted secrets through the global
//! subscriber of [`install_global`]; a test binary with a global subscriber of its own adds
//! [`global_layer`] to it. [`poison`] runs a table of poison values through a sink (issue
//! 60). [`interop_python`], [`wire_hooks`], [`wait_ready`], [`silent_after_warm_up`] and
//! [`delivers_again`] are fixtures several adapters' tests share.
//!
//! ```
//! use ankusa_sink_testkit::support::{LogCapture, unique_name};
//!
//! let queue = unique_name("orders");
//! assert!(queue.starts_with("orders-") && queue != unique_name("orders"));
//!
//! let logs = LogCapture::new();
//! let guard = logs.set_default();
//! tracing::warn!(queue = %queue, "sending in cleartext");
//! drop(guard);
//! assert_eq!(logs.warnings().len(), 1);
//! assert!(logs.warnings()[0].starts_with("WARN message=sending in cleartext queue=orders-"));
//! ```

mod brokers;
mod fixtures;
mod global;
mod net;
pub mod poison;
pub use brokers::{TEST_BROKERS_VAR, broker_enabled};
pub use fixtures::{delivers_again, interop_python, silent_after_warm_up, wait_ready, wire_hooks};
pub(crate) use global::SecretScan;
pub use global::{GlobalGuard, GlobalLayer, global_layer, install_global};
pub use net::{TcpProxy, free_port};

use ankusa_sink_core::{Ctx, Envelope, Sink};
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::DefaultGuard;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// Headers whoever POSTs to a catch URL can set, which a destination (or a proxy in front
/// of it) would take as credentials or trust: credentials (`Authorization`, tokens, API keys,
/// cookies), client-address and proxy-trust headers (`X-Forwarded-*`, `X-Real-IP`, `Via`),
/// method and URL overrides, auth-proxy identities, and our own `X-Ankusa-*` spelling. A
/// sink that sends provider headers on must never send one of these: the security review's
/// list (issue 15) and the rest of their classes, for a sink's forwarding tests.
pub const UNTRUSTED_HEADERS: &[&str] = &[
    "X-Gitlab-Token",
    "X-Auth-Token",
    "X-Access-Token",
    "Api-Key",
    "Private-Token",
    "X-Webhook-Secret",
    "Set-Cookie",
    "X-Forwarded-For",
    "X-Forwarded-Host",
    "X-Forwarded-Proto",
    "Forwarded",
    "X-Real-IP",
    "Via",
    "X-HTTP-Method-Override",
    "X-Method-Override",
    "X-Original-URL",
    "X-Rewrite-URL",
    "Proxy-Connection",
    "X-Original-Host",
    "True-Client-IP",
    "CF-Connecting-IP",
    "X-Client-IP",
    "X-Cluster-Client-IP",
    "Client-IP",
    "Authorization",
    "Proxy-Authorization",
    "Cookie",
    "X-API-Key",
    "X-Apikey",
    "X-Session-Id",
    "X-Client-Secret",
    "X-Password",
    "X-Amz-Security-Token",
    "X-CSRF-Token",
    "X-Auth-Key",
    "X-Auth-Request-User",
    "X-Remote-User",
    "X-Envoy-Internal",
    "X-Middleware-Subrequest",
    "X-Ankusa-Tenant",
    "X-Auth-Request-Email",
    "X-Goog-IAP-JWT-Assertion",
    "Cf-Access-Jwt-Assertion",
    "CF-Access-Client-Id",
    "CF-Access-Client-Secret",
    "X-Functions-Key",
    "Ocp-Apim-Subscription-Key",
    "X-Original-Forwarded-For",
    "X-Authenticated-Userid",
    "X-Client-Cert",
    "SSL-Client-Cert",
    "X-Amzn-Oidc-Data",
    "X-Amzn-Oidc-Identity",
    "X-Amzn-Oidc-Accesstoken",
];

/// A current-thread runtime with I/O and time, the kind the CLI runs on: for tests that
/// drive a sink from several runtimes in turn.
pub fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
}

/// Deliver every envelope of `envs` at once, each on a task of its own on the current
/// runtime, and panic naming the first hook that failed: for tests that need many
/// deliveries in flight together (a pipelining client, a runtime's first burst).
pub async fn deliver_all<S: Sink + 'static>(sink: &Arc<S>, envs: Vec<Envelope>) {
    let mut set = tokio::task::JoinSet::new();
    for env in envs {
        let sink = Arc::clone(sink);
        set.spawn(async move {
            let res = sink.deliver(&env, &Ctx::for_envelope(&env)).await;
            res.map_err(|f| format!("hook {}: {f}", env.id()))
        });
    }
    while let Some(res) = set.join_next().await {
        if let Err(e) = res.expect("a delivery task panicked") {
            panic!("a delivery failed: {e}");
        }
    }
}

/// `<prefix>-<ulid>-<n>`: a name unique to this run and this process. The ULID (26
/// lowercase letters and digits: the time in ms and 80 random bits) keeps runs and
/// processes apart; `n`, a counter of this process, keeps two calls in one millisecond
/// apart.
///
/// The suffix is `-`, `[0-9a-z]` and at most 36 characters long, so with a prefix of at most
/// 44 characters of `[A-Za-z0-9_-]` that starts with a letter the name is a valid Kafka
/// topic, AMQP exchange or queue, SQS queue (80 characters at most), SNS topic, Pub/Sub
/// topic or subscription id, NATS stream or subject token, and Redis key; with a lowercase
/// prefix of at most 27 characters, an S3 bucket (63 characters at most). A prefix with
/// other characters (say `sink.` for a permission pattern) is kept as given.
pub fn unique_name(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        ulid::Ulid::new().to_string().to_lowercase(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One captured event, span, or span record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// The event's or span's level.
    pub level: Level,
    /// The event's or span's target (the module path, or `librdkafka`, ...).
    pub target: String,
    /// Every field as `name=value`, space separated (`message=...` first for events); a
    /// span's line starts `span <name>`. String fields appear as they are, others as their
    /// `Debug`.
    pub text: String,
}

impl fmt::Display for LogLine {
    /// `LEVEL text`, as in `WARN message=sending in cleartext`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.level, self.text)
    }
}

/// The fields of one captured span: those given when it was opened and any recorded later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanFields {
    /// The span's name.
    pub name: String,
    /// Each field's latest value (strings as they are, others as their `Debug`).
    pub fields: BTreeMap<String, String>,
}

#[derive(Debug, Default)]
struct Captured {
    lines: Vec<LogLine>,
    /// Spans by id, in the order they were opened.
    spans: Vec<(u64, SpanFields)>,
}

/// Captures what code logs through `tracing`: every event and span (with their fields) of
/// the targets it is given, at every level. A [`Layer`]: make it this thread's subscriber
/// with [`set_default`](Self::set_default), or add it to a global subscriber (for logs
/// written on other threads) with `tracing_subscriber::registry().with(capture.clone())`.
/// Clones share what was captured.
///
/// `tracing` caches whether a callsite is wanted for the whole process, and rebuilds that
/// cache whenever a subscriber starts or ends on any thread. Where other tests in the same
/// binary install and drop their own subscribers at the same time, a thread capture may miss
/// an event that fired in that moment. A test that must see one particular line (not just
/// "no secret in what was logged") runs in a test binary of its own with the capture on a
/// global subscriber, as the log sink's `tests/structured_line.rs` does.
#[derive(Debug, Clone, Default)]
pub struct LogCapture {
    captured: Arc<Mutex<Captured>>,
    /// Target prefixes to keep; empty: all.
    targets: Arc<[String]>,
}

impl LogCapture {
    /// A capture of every target.
    pub fn new() -> Self {
        Self::default()
    }

    /// A capture of the targets that start with one of `prefixes` (`["librdkafka",
    /// "ankusa_sink_kafka"]`, say): a process-wide capture stays small.
    pub fn for_targets(prefixes: &[&str]) -> Self {
        LogCapture {
            captured: Arc::default(),
            targets: prefixes.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    /// Capture on the current thread until the guard is dropped (a `#[tokio::test]` runs
    /// its runtime on this one thread).
    #[must_use = "capturing stops when the guard is dropped"]
    pub fn set_default(&self) -> DefaultGuard {
        let guard =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()));
        // Callsite interest is cached process-wide: a test on another thread without a
        // subscriber may have cached "never" for a callsite this one needs.
        tracing::callsite::rebuild_interest_cache();
        guard
    }

    /// Every captured line, in order.
    pub fn lines(&self) -> Vec<LogLine> {
        self.lock().lines.clone()
    }

    /// The captured lines whose text contains `needle` (a sink's unique client id, say).
    pub fn lines_with(&self, needle: &str) -> Vec<LogLine> {
        let captured = self.lock();
        let found = captured.lines.iter().filter(|l| l.text.contains(needle));
        found.cloned().collect()
    }

    /// Every captured line as `LEVEL text`, one per line.
    pub fn text(&self) -> String {
        let captured = self.lock();
        let lines: Vec<String> = captured.lines.iter().map(LogLine::to_string).collect();
        lines.join("\n")
    }

    /// The captured lines at `WARN`, as `WARN text`.
    pub fn warnings(&self) -> Vec<String> {
        let captured = self.lock();
        let warnings = captured.lines.iter().filter(|l| l.level == Level::WARN);
        warnings.map(LogLine::to_string).collect()
    }

    /// The captured spans, in the order they were opened.
    pub fn spans(&self) -> Vec<SpanFields> {
        let captured = self.lock();
        captured.spans.iter().map(|(_, s)| s.clone()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Captured> {
        // A failed assertion while capturing must not hide what was captured.
        self.captured.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wants(&self, meta: &Metadata<'_>) -> bool {
        self.targets.is_empty() || self.targets.iter().any(|t| meta.target().starts_with(&**t))
    }

    fn push(&self, meta: &Metadata<'_>, text: String) {
        self.lock().lines.push(LogLine {
            level: *meta.level(),
            target: meta.target().to_owned(),
            text,
        });
    }
}

/// Writes fields as ` name=value` onto a line and into a span's map.
struct Fields<'a> {
    line: &'a mut String,
    map: Option<&'a mut BTreeMap<String, String>>,
}

impl<'a> Fields<'a> {
    /// Fields written onto `line` only.
    fn line(line: &'a mut String) -> Self {
        Fields { line, map: None }
    }

    fn put(&mut self, field: &Field, value: String) {
        let sep = if self.line.is_empty() { "" } else { " " };
        let _ = write!(self.line, "{sep}{}={value}", field.name());
        if let Some(map) = self.map.as_deref_mut() {
            map.insert(field.name().to_owned(), value);
        }
    }
}

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for LogCapture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let meta = attrs.metadata();
        if !self.wants(meta) {
            return;
        }
        let mut line = format!("span {}", meta.name());
        let mut span = SpanFields {
            name: meta.name().to_owned(),
            fields: BTreeMap::new(),
        };
        attrs.record(&mut Fields {
            line: &mut line,
            map: Some(&mut span.fields),
        });
        self.push(meta, line);
        self.lock().spans.push((id.into_u64(), span));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(meta) = ctx.metadata(id) else {
            return;
        };
        if !self.wants(meta) {
            return;
        }
        let mut line = format!("span {}", meta.name());
        let mut fields = BTreeMap::new();
        values.record(&mut Fields {
            line: &mut line,
            map: Some(&mut fields),
        });
        self.push(meta, line);
        let mut captured = self.lock();
        // Span ids are reused once a span closes: the latest span with this id is this one.
        if let Some((_, span)) = captured
            .spans
            .iter_mut()
            .rev()
            .find(|(i, _)| *i == id.into_u64())
        {
            span.fields.extend(fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if !self.wants(meta) {
            return;
        }
        let mut line = String::new();
        event.record(&mut Fields {
            line: &mut line,
            map: None,
        });
        self.push(meta, line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_valid_everywhere() {
        let a = unique_name("ankusa-it-orders");
        let b = unique_name("ankusa-it-orders");
        assert_ne!(a, b);
        let suffix = a.strip_prefix("ankusa-it-orders-").unwrap();
        assert!(suffix.len() <= 36, "{suffix}");
        assert!(
            suffix
                .chars()
                .all(|c| c == '-' || c.is_ascii_digit() || c.is_ascii_lowercase()),
            "{suffix}"
        );
        // SQS: 80 characters at most, with the longest documented prefix.
        assert!(unique_name(&"q".repeat(44)).len() <= 80);
    }

    #[test]
    fn events_and_spans_are_captured_with_their_fields() {
        let logs = LogCapture::new();
        let guard = logs.set_default();
        let span = tracing::info_span!(
            "attempt",
            hook_id = "h1",
            attempt = 3_u64,
            class = tracing::field::Empty
        );
        span.record("class", "permanent");
        tracing::debug!(url = ?"http://host/", "sent");
        drop(span);
        drop(guard);
        tracing::warn!("not captured: no longer the default");

        let lines: Vec<String> = logs.lines().iter().map(LogLine::to_string).collect();
        assert_eq!(
            lines,
            [
                "INFO span attempt hook_id=h1 attempt=3",
                "INFO span attempt class=permanent",
                "DEBUG message=sent url=\"http://host/\"",
            ]
        );
        let spans = logs.spans();
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].name, "attempt");
        assert_eq!(spans[0].fields["hook_id"], "h1");
        assert_eq!(spans[0].fields["attempt"], "3");
        assert_eq!(spans[0].fields["class"], "permanent");
        assert!(logs.warnings().is_empty());
        assert_eq!(logs.lines_with("url=").len(), 1);
        assert!(
            logs.text()
                .ends_with("DEBUG message=sent url=\"http://host/\"")
        );
    }

    #[test]
    fn targets_filter_what_is_kept() {
        let logs = LogCapture::for_targets(&["librdkafka", "ankusa_sink_kafka"]);
        let guard = logs.set_default();
        tracing::warn!(target: "librdkafka", "kept");
        tracing::warn!(target: "ankusa_sink_kafka::sink", "kept too");
        tracing::warn!(target: "lapin", "dropped");
        drop(guard);
        assert_eq!(
            logs.warnings(),
            ["WARN message=kept", "WARN message=kept too"]
        );
        assert_eq!(logs.lines()[0].target, "librdkafka");
    }
}
