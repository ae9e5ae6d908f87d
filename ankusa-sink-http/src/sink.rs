//! [`HttpSink`]: POST (or PUT/PATCH) the raw hook body to an operator's endpoint.

use crate::config::{ConfigError, HttpConfig, HttpSinkBuilder, SecretValue};
use crate::error::{HttpError, classify_status, classify_transport, parse_retry_after};
use crate::signing::Signer;
use ankusa_sink_core::{
    Ctx, Description, Envelope, Failure, Payload, Sink, Subject, async_trait, forwarded_headers,
    redact_url,
};
use bytes::BytesMut;
use reqwest::header::{
    AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LOCATION, RETRY_AFTER,
};
use reqwest::{Method, Response, Url};
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const X_ANKUSA_ID: HeaderName = HeaderName::from_static("x-ankusa-id");
const X_ANKUSA_SOURCE: HeaderName = HeaderName::from_static("x-ankusa-source");
const X_ANKUSA_TENANT: HeaderName = HeaderName::from_static("x-ankusa-tenant");
const X_ANKUSA_IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("x-ankusa-idempotency-key");
const X_ANKUSA_DEDUPE_KEY: HeaderName = HeaderName::from_static("x-ankusa-dedupe-key");
const X_ANKUSA_REPLAY_ID: HeaderName = HeaderName::from_static("x-ankusa-replay-id");
const WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
const WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
const WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");

/// Framing and hop-by-hop headers HTTP owns; an operator cannot set them.
const FRAMING: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
];

/// The content type sent when the envelope has none.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// The `user-agent` sent unless the operator sets one.
pub const USER_AGENT: &str = concat!("ankusa-sink-http/", env!("CARGO_PKG_VERSION"));

/// Delivers a hook's raw body over HTTP(S), signed the Standard Webhooks way when secrets
/// are set. Cheap to share: one pooled client per sink, connections are reused.
///
/// `Debug` shows the redacted URL, header names and the number of signing keys only.
pub struct HttpSink {
    client: reqwest::Client,
    /// Where requests go: the configured URL without its userinfo (that became `base`'s
    /// basic auth, as reqwest's builder would do per request).
    url: Url,
    redacted_url: String,
    method: Method,
    /// The operator's headers, as configured (names for `Debug`).
    headers: HeaderMap,
    /// What every request starts from, built once: `user-agent`, basic auth from URL
    /// userinfo unless the operator set `authorization`, the operator's headers.
    base: HeaderMap,
    operator_content_type: bool,
    signer: Option<Signer>,
    max_response_bytes: usize,
    timeout: Duration,
    connect_timeout: Duration,
}

impl HttpSink {
    /// A builder for `url`.
    pub fn builder(url: impl Into<SecretValue>) -> HttpSinkBuilder {
        HttpSinkBuilder::new(url)
    }

    /// Check every option of `config` (reading environment variables and CA files now) and
    /// build the sink. Errors name the option, never a secret.
    pub fn from_config(config: HttpConfig) -> Result<Self, ConfigError> {
        let raw_url = config.url.resolve("url")?;
        let url = Url::parse(&raw_url).map_err(ConfigError::InvalidUrl)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ConfigError::UnsupportedScheme(url.scheme().to_owned()));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(ConfigError::NoHost);
        }
        let redacted_url = redact_url(url.as_str());
        let method = Method::from_bytes(config.method.as_str().as_bytes()).expect("static method");

        let signer = if config.secrets.is_empty() {
            None
        } else {
            let secrets = config
                .secrets
                .iter()
                .enumerate()
                .map(|(i, s)| s.resolve(&format!("signing secret #{i}")))
                .collect::<Result<Vec<_>, _>>()?;
            Some(Signer::new(secrets)?)
        };

        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ConfigError::InvalidHeaderName(name.clone()))?;
            if is_sink_owned(&header) || FRAMING.contains(&header.as_str()) {
                return Err(ConfigError::ReservedHeader(name.clone()));
            }
            let mut v = HeaderValue::from_str(&value.resolve(&format!("header {name}"))?)
                .map_err(|_| ConfigError::InvalidHeaderValue(name.clone()))?;
            v.set_sensitive(true);
            headers.insert(header, v);
        }
        let operator_content_type = headers.contains_key(CONTENT_TYPE);

        let timeout = positive_ms(config.timeout_ms, "timeout_ms")?;
        let connect_timeout = positive_ms(config.connect_timeout_ms, "connect_timeout_ms")?;
        if config.max_response_bytes == 0 {
            return Err(ConfigError::Zero("max_response_bytes"));
        }

        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(connect_timeout);
        let roots = load_roots(&config)?;
        if config.tls.only {
            if roots.is_empty() {
                return Err(ConfigError::NoRoots);
            }
            builder = builder.tls_certs_only(roots);
        } else if !roots.is_empty() {
            builder = builder.tls_certs_merge(roots);
        }
        let client = builder
            .build()
            .map_err(|e| ConfigError::Client(e.without_url()))?;

        // reqwest's request builder turns URL userinfo into sensitive basic auth and strips
        // it from the URL, on every request it builds. Let it do that once, here: requests
        // are then assembled directly from `url` and `base`.
        let template = client
            .request(method.clone(), url)
            .build()
            .map_err(|e| ConfigError::Client(e.without_url()))?;
        let url = template.url().clone();
        let mut base = HeaderMap::with_capacity(headers.len() + 2);
        base.insert(
            reqwest::header::USER_AGENT,
            HeaderValue::from_static(USER_AGENT),
        );
        if let Some(auth) = template.headers().get(AUTHORIZATION)
            && !headers.contains_key(AUTHORIZATION)
        {
            base.insert(AUTHORIZATION, auth.clone());
        }
        for (name, v) in &headers {
            base.insert(name.clone(), v.clone());
        }

        Ok(HttpSink {
            client,
            url,
            redacted_url,
            method,
            headers,
            base,
            operator_content_type,
            signer,
            max_response_bytes: config.max_response_bytes,
            timeout,
            connect_timeout,
        })
    }

    /// The endpoint, redacted (no userinfo, query values replaced).
    pub fn redacted_url(&self) -> &str {
        &self.redacted_url
    }

    /// Every header of one attempt: the prebuilt `base` (user-agent, basic auth, the
    /// operator's), then `x-ankusa-id`, `x-ankusa-source`, `content-type` (unless the
    /// operator set one), `x-ankusa-tenant`, `x-ankusa-idempotency-key`,
    /// `x-ankusa-dedupe-key`, `x-ankusa-replay-id`, forwarded provider headers whose names
    /// are not taken yet, then the signature headers for `timestamp`.
    fn request_headers(
        &self,
        env: &Envelope,
        ctx: &Ctx,
        timestamp: u64,
    ) -> Result<HeaderMap, Failure> {
        let forwarded = forwarded_headers(env, ctx);
        // Sized once for everything below; the prebuilt values are shared, not copied
        // (cloning `base` and growing it would reallocate its tables on every request).
        let mut h = HeaderMap::with_capacity(self.base.len() + 10 + forwarded.len());
        for (name, v) in &self.base {
            h.insert(name.clone(), v.clone());
        }
        let idempotency_key = env.idempotency_key();
        let content_type = (!self.operator_content_type)
            .then(|| env.content_type().unwrap_or(DEFAULT_CONTENT_TYPE));
        let fields: [(HeaderName, &'static str, Option<&str>); 7] = [
            (X_ANKUSA_ID, "x-ankusa-id", Some(env.id())),
            (X_ANKUSA_SOURCE, "x-ankusa-source", Some(env.source_id())),
            (CONTENT_TYPE, "content-type", content_type),
            (X_ANKUSA_TENANT, "x-ankusa-tenant", env.tenant_id()),
            (
                X_ANKUSA_IDEMPOTENCY_KEY,
                "x-ankusa-idempotency-key",
                Some(&idempotency_key),
            ),
            (
                X_ANKUSA_DEDUPE_KEY,
                "x-ankusa-dedupe-key",
                env.dedupe_key().filter(|d| !d.is_empty()),
            ),
            (
                X_ANKUSA_REPLAY_ID,
                "x-ankusa-replay-id",
                ctx.replay_id.as_deref().filter(|r| !r.is_empty()),
            ),
        ];
        // One buffer holds every value taken from the hook (forwarded ones after the sink's),
        // and each header value is a shared slice of it: one allocation per request instead
        // of one per header (allocations were most of this sink's cost over a raw client).
        let len = fields
            .iter()
            .filter_map(|f| f.2)
            .map(str::len)
            .sum::<usize>()
            + forwarded.iter().map(|(_, v)| v.len()).sum::<usize>();
        let mut buf = BytesMut::with_capacity(len);
        for (_, _, text) in &fields {
            buf.extend_from_slice(text.unwrap_or_default().as_bytes());
        }
        for (_, v) in &forwarded {
            buf.extend_from_slice(v.as_bytes());
        }
        let buf = buf.freeze();
        let mut start = 0;
        for (name, label, text) in fields {
            let Some(text) = text else { continue };
            let end = start + text.len();
            // Validated envelopes always fit; a replay id need not.
            let v = HeaderValue::from_maybe_shared(buf.slice(start..end))
                .map_err(|_| Failure::permanent(HttpError::HeaderValue(label)))?;
            h.insert(name, v);
            start = end;
        }
        for (name, v) in &forwarded {
            let end = start + v.len();
            let value = buf.slice(start..end);
            start = end;
            let (Ok(name), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_maybe_shared(value),
            ) else {
                continue;
            };
            let signature_header =
                [&WEBHOOK_ID, &WEBHOOK_TIMESTAMP, &WEBHOOK_SIGNATURE].contains(&&name);
            if h.contains_key(&name) || (self.signer.is_some() && signature_header) {
                continue;
            }
            h.insert(name, v);
        }
        if let Some(signer) = &self.signer {
            let signature = signer.signature(env.id(), timestamp, env.body());
            // The same value as x-ankusa-id (a shared slice, no copy).
            if let Some(id) = h.get(X_ANKUSA_ID).cloned() {
                h.insert(WEBHOOK_ID, id);
            }
            h.insert(WEBHOOK_TIMESTAMP, HeaderValue::from(timestamp));
            h.insert(
                WEBHOOK_SIGNATURE,
                HeaderValue::from_str(&signature).expect("base64 is a valid header value"),
            );
        }
        Ok(h)
    }

    /// Read at most `max_response_bytes` of the answer, then drop it (closing the connection
    /// when the answer was longer). A body that fails mid-way changes nothing: the status
    /// decides.
    async fn drain(&self, mut resp: Response) -> usize {
        let mut read = 0usize;
        while read < self.max_response_bytes {
            match resp.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e.without_url(), read, "response body ended early");
                    break;
                }
            }
        }
        read.min(self.max_response_bytes)
    }
}

fn is_sink_owned(name: &HeaderName) -> bool {
    name.as_str().starts_with("x-ankusa-")
        || [WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE].contains(name)
}

fn positive_ms(ms: u64, what: &'static str) -> Result<Duration, ConfigError> {
    if ms == 0 {
        return Err(ConfigError::Zero(what));
    }
    Ok(Duration::from_millis(ms))
}

fn load_roots(config: &HttpConfig) -> Result<Vec<reqwest::Certificate>, ConfigError> {
    let mut roots = Vec::new();
    let parse = |pem: &[u8], what: String| match reqwest::Certificate::from_pem_bundle(pem) {
        Ok(certs) if !certs.is_empty() => Ok(certs),
        _ => Err(ConfigError::CaPem(what)),
    };
    for path in &config.tls.ca_files {
        let pem = std::fs::read(path).map_err(|source| ConfigError::CaFile {
            path: path.clone(),
            source,
        })?;
        roots.extend(parse(&pem, format!("ca file {path:?}"))?);
    }
    for (i, pem) in config.tls.ca_pem.iter().enumerate() {
        roots.extend(parse(pem.as_bytes(), format!("ca_pem #{i}"))?);
    }
    Ok(roots)
}

fn unix_seconds(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[async_trait]
impl Sink for HttpSink {
    /// One request per call; classification per [`crate::error`]'s table.
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let headers = self.request_headers(env, ctx, unix_seconds(SystemTime::now()))?;
        // The request is assembled directly: the builder would re-parse the URL's userinfo
        // and copy every header into a map of its own on each call. Both were done once, in
        // `base`, at config time.
        let mut req = reqwest::Request::new(self.method.clone(), self.url.clone());
        *req.headers_mut() = headers;
        *req.body_mut() = Some(env.body().clone().into());
        let resp = self.client.execute(req).await.map_err(classify_transport)?;
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| parse_retry_after(v.as_bytes(), SystemTime::now()));
        let location = matches!(status.as_u16(), 301 | 308)
            .then(|| resp.headers().get(LOCATION)?.to_str().ok())
            .flatten()
            .and_then(|l| self.url.join(l).ok())
            .map(|u| redact_url(u.as_str()));
        let read = self.drain(resp).await;
        tracing::debug!(
            url = %self.redacted_url,
            status = status.as_u16(),
            response_bytes_read = read,
            attempt = ctx.attempt(),
            "http sink answer"
        );
        classify_status(status, retry_after, location, ctx.attempt())
    }

    /// A 2xx from the endpoint is the endpoint's acceptance.
    fn durable(&self) -> bool {
        true
    }

    /// Never: the raw body always travels (no claim check).
    fn inline_max_bytes(&self) -> Option<std::num::NonZeroUsize> {
        None
    }

    fn describe(&self, _subject: &Subject) -> Option<Description> {
        let redacted = Url::parse(&self.redacted_url).ok()?;
        let mut d = Description::new(redacted.scheme(), Payload::Body);
        d.host = redacted.host_str().map(|h| match redacted.port() {
            Some(p) => format!("{h}:{p}"),
            None => h.to_owned(),
        });
        d.address = Some(match redacted.query() {
            Some(q) => format!("{}?{q}", redacted.path()),
            None => redacted.path().to_owned(),
        });
        d.bindings.insert(
            "http".into(),
            serde_json::json!({ "method": self.method.as_str(), "bindingVersion": "0.3.0" }),
        );
        let mut computed = vec![
            "headers.x-ankusa-id",
            "headers.x-ankusa-source",
            "headers.x-ankusa-tenant",
            "headers.x-ankusa-idempotency-key",
            "headers.x-ankusa-dedupe-key",
            "headers.x-ankusa-replay-id",
            "headers.forwarded",
        ];
        if !self.operator_content_type {
            computed.insert(2, "headers.content-type");
        }
        if self.signer.is_some() {
            computed.extend([
                "headers.webhook-id",
                "headers.webhook-timestamp",
                "headers.webhook-signature",
            ]);
        }
        d.computed = computed.into_iter().map(str::to_owned).collect();
        Some(d)
    }
}

impl fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSink")
            .field("url", &self.redacted_url)
            .field("method", &self.method)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("signing_keys", &self.signer.as_ref().map_or(0, Signer::len))
            .field("max_response_bytes", &self.max_response_bytes)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(h: &HeaderMap) -> Vec<(String, String)> {
        h.iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect()
    }

    /// Every value is a slice of one shared buffer: with fields absent in between (no
    /// tenant, no dedupe key) and forwarded values after them, each must still be its own.
    #[test]
    fn header_values_are_the_right_slices() {
        let sink = HttpSink::builder("http://127.0.0.1:9/in").build().unwrap();
        let env = Envelope::builder("hook-1", "src-22", "{}")
            .header("X-First", "one")
            .header("x-second", "two-2")
            .header("X-Multi", "a")
            .header("X-Multi", "bb")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env).with_replay_id("replay-333");
        let got = values(&sink.request_headers(&env, &ctx, 1).unwrap());
        let want = [
            ("user-agent", USER_AGENT),
            ("x-ankusa-id", "hook-1"),
            ("x-ankusa-source", "src-22"),
            ("content-type", DEFAULT_CONTENT_TYPE),
            ("x-ankusa-idempotency-key", "hook-1"),
            ("x-ankusa-replay-id", "replay-333"),
            ("x-first", "one"),
            ("x-second", "two-2"),
            ("x-multi", "a, bb"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(got, want);
    }
}
