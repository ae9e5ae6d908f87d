//! [`HttpSink`]: POST (or PUT/PATCH) the raw hook body to an operator's endpoint.

use crate::config::{ConfigError, HttpConfig, HttpSinkBuilder, SecretValue};
use crate::error::{
    HttpError, TransportKind, classify_status, classify_transport, connect_kind, parse_retry_after,
};
use crate::signing::Signer;
use ankusa_sink_core::{
    Check, Ctx, Description, Envelope, Failure, Payload, Sink, Subject, async_trait,
    forwarded_headers, is_loopback_host, redact_url, redact_url_keep_path,
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

/// Name fragments of operator headers that carry credentials (matched on the lowercased
/// name), for the cleartext refusal: `authorization`, `x-auth-token`, `x-api-key`,
/// `x-functions-key`, `cookie`, `x-webhook-secret`, ...
const CREDENTIAL_NAME_PARTS: &[&str] = &[
    "auth",
    "token",
    "secret",
    "password",
    "passwd",
    "key",
    "cookie",
    "session",
    "credential",
];

/// The content type sent when the envelope has none.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// The `user-agent` sent unless the operator sets one.
pub const USER_AGENT: &str = concat!("ankusa-sink-http/", env!("CARGO_PKG_VERSION"));

/// Delivers a hook's raw body over HTTP(S), signed the Standard Webhooks way when secrets
/// are set. Cheap to share: one pooled client per sink, connections are reused.
///
/// `Debug` shows the redacted URL (path hidden unless `show_path`), the redacted proxy,
/// header names and the number of signing keys only.
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
    /// Keep URL paths in everything printed (`show_path`).
    show_path: bool,
    /// The proxy, redacted (no userinfo, no path), when one is set.
    redacted_proxy: Option<String>,
    /// What `check` connects to: the proxy when one is set, else the endpoint.
    reach: Reach,
}

/// A TCP destination for [`HttpSink::check`].
#[derive(Debug, Clone)]
struct Reach {
    host: url::Host<String>,
    port: u16,
    /// `"endpoint"` or `"proxy"`, for the failure reason.
    to: &'static str,
}

impl Reach {
    fn of(url: &Url, to: &'static str) -> Option<Reach> {
        Some(Reach {
            host: url.host()?.to_owned(),
            port: url.port_or_known_default()?,
            to,
        })
    }

    async fn connect(&self) -> std::io::Result<tokio::net::TcpStream> {
        use std::net::{IpAddr, SocketAddr};
        match &self.host {
            url::Host::Ipv4(ip) => {
                tokio::net::TcpStream::connect(SocketAddr::new(IpAddr::V4(*ip), self.port)).await
            }
            url::Host::Ipv6(ip) => {
                tokio::net::TcpStream::connect(SocketAddr::new(IpAddr::V6(*ip), self.port)).await
            }
            url::Host::Domain(name) => {
                tokio::net::TcpStream::connect((name.as_str(), self.port)).await
            }
        }
    }
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
        let show_path = config.show_path;
        let redacted_url = shown(&url, show_path);
        let proxy = config.proxy.as_ref().map(parse_proxy).transpose()?;
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

        let insecure = refuse_cleartext(&config, &url, proxy.as_ref(), signer.is_some())?;

        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .timeout(timeout)
            .connect_timeout(connect_timeout);
        // Only the configured proxy, never one from HTTP(S)_PROXY/NO_PROXY: `proxy()` turns
        // reqwest's system-proxy lookup off, and a proxy built from a URL reads no
        // environment.
        builder = match &proxy {
            Some(p) => builder.proxy(
                reqwest::Proxy::all(p.as_str())
                    .map_err(|e| ConfigError::Client(e.without_url()))?,
            ),
            None => builder.no_proxy(),
        };
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

        let reach = match &proxy {
            Some(p) => Reach::of(p, "proxy"),
            None => Reach::of(&url, "endpoint"),
        }
        .ok_or(ConfigError::NoHost)?;
        let redacted_proxy = proxy.as_ref().map(|p| redact_url(p.as_str()));
        if let Some(what) = insecure {
            tracing::warn!(
                url = %redacted_url,
                credentials = %what,
                "http sink: allow_insecure is set; these credentials will be sent in cleartext"
            );
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
            show_path,
            redacted_proxy,
            reach,
        })
    }

    /// The endpoint, redacted: no userinfo, query values replaced, and the path replaced by
    /// `REDACTED-PATH-<hash>` unless `show_path`.
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

/// `url` as printed: redacted, the path hidden unless `show_path`.
fn shown(url: &Url, show_path: bool) -> String {
    if show_path {
        redact_url_keep_path(url.as_str())
    } else {
        redact_url(url.as_str())
    }
}

/// The proxy URL, checked: absolute, `http` or `https`, with a host.
fn parse_proxy(value: &SecretValue) -> Result<Url, ConfigError> {
    let url = Url::parse(&value.resolve("proxy")?).map_err(ConfigError::InvalidProxy)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ConfigError::UnsupportedProxyScheme(url.scheme().to_owned()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ConfigError::NoProxyHost);
    }
    Ok(url)
}

fn has_userinfo(url: &Url) -> bool {
    !url.username().is_empty() || url.password().is_some()
}

/// Whether talking to `url` crosses the network in cleartext: plain `http` to a host that
/// is not loopback.
fn cleartext(url: &Url) -> bool {
    url.scheme() == "http" && !url.host_str().is_some_and(is_loopback_host)
}

/// Refuse credentials that would travel in cleartext, unless `allow_insecure`: then the
/// list of them, for the one warning at build. Names what would leak
/// (`header "authorization"`), never a value.
fn refuse_cleartext(
    config: &HttpConfig,
    url: &Url,
    proxy: Option<&Url>,
    signing: bool,
) -> Result<Option<String>, ConfigError> {
    let mut exposed = Vec::new();
    // Through a proxy the first hop is the proxy: a loopback endpoint does not make the
    // link to a remote plain-http proxy safe.
    let endpoint_clear = url.scheme() == "http" && (cleartext(url) || proxy.is_some_and(cleartext));
    if endpoint_clear {
        if has_userinfo(url) {
            exposed.push("the URL's userinfo (basic auth)".to_owned());
        }
        for (name, value) in &config.headers {
            let lower = name.to_ascii_lowercase();
            let credential_name = CREDENTIAL_NAME_PARTS.iter().any(|p| lower.contains(p));
            // `{ env = "VAR" }` is how an operator marks a value as secret.
            if credential_name || matches!(value, SecretValue::Env { .. }) {
                exposed.push(format!("header {name:?}"));
            }
        }
        if signing {
            exposed.push("the Standard Webhooks signature".to_owned());
        }
    }
    if let Some(p) = proxy
        && cleartext(p)
        && has_userinfo(p)
    {
        exposed.push("the proxy's userinfo (basic auth)".to_owned());
    }
    if exposed.is_empty() {
        return Ok(None);
    }
    let what = exposed.join(", ");
    if !config.allow_insecure {
        return Err(ConfigError::Insecure(what));
    }
    Ok(Some(what))
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
            .map(|u| shown(&u, self.show_path));
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

    /// A reachability check that sends nothing to the endpoint's application: a TCP
    /// connect to the endpoint's host and port (to the proxy's, when one is set) within the
    /// connect timeout, then the connection is closed. Refused, unreachable or timed out is
    /// transient, as a delivery would be. Reachable answers `Unsupported`, not `Passed`:
    /// `Passed` promises the destination exists and takes the credentials, which a
    /// connect cannot show (an endpoint answering 404 or 401 accepts connections too).
    async fn check(&self) -> Result<Check, Failure> {
        let unreachable = |kind, source| {
            Failure::transient(HttpError::Unreachable {
                kind,
                to: self.reach.to,
                source,
            })
        };
        match tokio::time::timeout(self.connect_timeout, self.reach.connect()).await {
            Ok(Ok(stream)) => {
                drop(stream);
                Ok(Check::Reachable)
            }
            Ok(Err(e)) => Err(unreachable(connect_kind(e.kind()), Some(e))),
            Err(_) => Err(unreachable(TransportKind::Timeout, None)),
        }
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
            .field("proxy", &self.redacted_proxy)
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
