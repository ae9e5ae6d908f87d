//! [`HttpSink`]: POST (or PUT/PATCH) the raw hook body to an operator's endpoint.

use crate::config::{ConfigError, HttpConfig, HttpSinkBuilder, shown};
use crate::error::{HttpError, TransportKind, connect_kind, parse_retry_after};
use crate::outgoing::{self, Target};
use ankusa_message::signing::Signer;
use ankusa_message::{EmptyValues, Layout, Outgoing};
use ankusa_sink_core::{
    Check, Ctx, Description, Envelope, Failure, Payload, Secret, Sink, Subject, async_trait,
};
use ankusa_sink_kit::redact_url;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, LOCATION, RETRY_AFTER};
use reqwest::{Method, Response, StatusCode, Url};
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    /// Method, URL, prebuilt headers and signer of every request.
    target: Target,
    layout: Layout,
    redacted_url: String,
    /// The operator's headers, as configured (names for `Debug`).
    headers: HeaderMap,
    max_response_bytes: usize,
    timeout: Duration,
    connect_timeout: Duration,
    /// Keep URL paths in everything printed (`show_path`).
    show_path: bool,
    /// The proxy, redacted (no userinfo, no path), when one is set.
    redacted_proxy: Option<String>,
    /// What `check` connects to: the proxy when one is set, else the endpoint.
    reach: Reach,
    /// The operator's classes for statuses (`[status_classes]`).
    status_classes: crate::StatusClasses,
    /// `[oauth2]`: bearer tokens, cached.
    oauth2: Option<crate::oauth2::OAuth2>,
}

/// A TCP destination for [`HttpSink::check`] (behind `deny_private`'s guard, if set).
#[derive(Debug, Clone)]
struct Reach {
    guard: Option<std::sync::Arc<crate::AddressGuard>>,
    host: url::Host<String>,
    port: u16,
    /// `"endpoint"` or `"proxy"`, for the failure reason.
    to: &'static str,
}

impl Reach {
    fn of(url: &Url, to: &'static str) -> Option<Reach> {
        Some(Reach {
            guard: None,
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
            url::Host::Domain(name) => match &self.guard {
                None => tokio::net::TcpStream::connect((name.as_str(), self.port)).await,
                // The addresses a delivery would connect to: the refused ones dropped.
                Some(guard) => {
                    let allowed: Vec<std::net::SocketAddr> =
                        tokio::net::lookup_host((name.as_str(), self.port))
                            .await?
                            .filter(|a| !guard.refuses(a.ip()))
                            .collect();
                    if allowed.is_empty() {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::PermissionDenied,
                            crate::guard::refused_error(name),
                        ));
                    }
                    tokio::net::TcpStream::connect(allowed.as_slice()).await
                }
            },
        }
    }
}

impl HttpSinkBuilder {
    /// Check every option and build the sink.
    pub fn build(self) -> Result<HttpSink, ConfigError> {
        HttpSink::new(self.build_config()?)
    }
}

impl HttpSink {
    /// A builder for `url`: collects options in code, checked when it builds.
    pub fn builder(url: impl Into<Secret>) -> HttpSinkBuilder {
        HttpSinkBuilder::new(url.into())
    }

    /// Build the sink's client from a valid config (the config checked everything; this
    /// only builds). Logs one warning when `allow_insecure` lets credentials travel in
    /// cleartext.
    pub fn new(config: HttpConfig) -> Result<Self, ConfigError> {
        let client = build_client(&config)?;
        let target = target(&client, &config)?;
        let mut reach = match &config.proxy {
            Some(p) => Reach::of(p, "proxy"),
            None => Reach::of(&target.url, "endpoint"),
        }
        .ok_or(ConfigError::NoHost)?;
        reach.guard = config.guard.clone();
        let redacted_url = config.redacted_url();
        if let Some(what) = &config.insecure {
            tracing::warn!(
                url = %redacted_url,
                credentials = %what,
                "http sink: allow_insecure is set; these credentials will be sent in cleartext"
            );
        }
        Ok(HttpSink {
            client,
            target,
            // No signer in the layout: the sink signs the request itself (its `webhook-id` is
            // the hook id, and the headers are its own).
            layout: Layout::raw_body(EmptyValues::Drop)
                .with_cloudevents(config.message.cloudevents().cloned()),
            redacted_url,
            redacted_proxy: config.proxy.as_ref().map(|p| redact_url(p.as_str())),
            headers: config.headers,
            max_response_bytes: config.max_response_bytes.get(),
            timeout: Duration::from_millis(config.timeout_ms.get()),
            connect_timeout: Duration::from_millis(config.connect_timeout_ms.get()),
            show_path: config.show_path,
            reach,
            status_classes: config.status_classes,
            oauth2: config.oauth2.map(|o| {
                crate::oauth2::OAuth2::new(*o, Duration::from_millis(config.timeout_ms.get()))
            }),
        })
    }

    /// The endpoint, redacted: no userinfo, query values replaced, and the path replaced by
    /// `REDACTED-PATH-<hash>` unless `show_path`.
    pub fn redacted_url(&self) -> &str {
        &self.redacted_url
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

/// The pooled client: no redirects, no retries, only the configured proxy, the configured
/// CA roots.
fn build_client(config: &HttpConfig) -> Result<reqwest::Client, ConfigError> {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        // No retry and none held ready: with a retry limit above 0 reqwest clones every
        // request (its header map included) in case it retries it.
        .retry(reqwest::retry::never().max_retries_per_request(0))
        .timeout(Duration::from_millis(config.timeout_ms.get()))
        .connect_timeout(Duration::from_millis(config.connect_timeout_ms.get()));
    // Only the configured proxy, never one from HTTP(S)_PROXY/NO_PROXY: `proxy()` turns
    // reqwest's system-proxy lookup off, and a proxy built from a URL reads no
    // environment.
    if let Some(guard) = &config.guard {
        builder = builder.dns_resolver(crate::guard::GuardedResolver(guard.clone()));
    }
    builder = match &config.proxy {
        Some(p) => builder.proxy(reqwest::Proxy::all(p.as_str()).map_err(client_error)?),
        None => builder.no_proxy(),
    };
    let mut roots = Vec::new();
    for pem in &config.ca_pems {
        roots.extend(reqwest::Certificate::from_pem_bundle(pem).map_err(client_error)?);
    }
    if let Some(pem) = &config.client_identity {
        let identity =
            reqwest::Identity::from_pem(pem.expose().as_bytes()).map_err(client_error)?;
        builder = builder.identity(identity);
    }
    if config.tls_only {
        builder = builder.tls_certs_only(roots);
    } else if !roots.is_empty() {
        builder = builder.tls_certs_merge(roots);
    }
    builder.build().map_err(client_error)
}

fn client_error(e: reqwest::Error) -> ConfigError {
    ConfigError::Client(e.without_url())
}

/// What every request shares. reqwest's request builder turns URL userinfo into sensitive
/// basic auth and strips it from the URL, on every request it builds. Let it do that once,
/// here: requests are then assembled directly from `url` and `base`.
fn target(client: &reqwest::Client, config: &HttpConfig) -> Result<Target, ConfigError> {
    let method = Method::from_bytes(config.method.as_str().as_bytes()).expect("static method");
    let template = client
        .request(method.clone(), config.url.clone())
        .build()
        .map_err(client_error)?;
    let mut base = HeaderMap::with_capacity(config.headers.len() + 2);
    base.insert(
        reqwest::header::USER_AGENT,
        HeaderValue::from_static(USER_AGENT),
    );
    if let Some(auth) = template.headers().get(AUTHORIZATION)
        && !config.headers.contains_key(AUTHORIZATION)
    {
        base.insert(AUTHORIZATION, auth.clone());
    }
    for (name, v) in &config.headers {
        base.insert(name.clone(), v.clone());
    }
    Ok(Target {
        method,
        url: template.url().clone(),
        base,
        operator_content_type: config.headers.contains_key(CONTENT_TYPE),
        signer: config.message.signing().cloned(),
    })
}

fn unix_seconds(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[async_trait]
impl Sink for HttpSink {
    /// One request per call; each answer classified as the crate's Classification table says.
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let out = Outgoing::new(env, ctx, &self.layout)?;
        outgoing::check(&out, &self.target)
            .map_err(|u| Failure::from(u).with_may_have_landed(Some(false)))?;
        let req = outgoing::to_request(out, &self.target, unix_seconds(SystemTime::now()))?;
        let resp = match &self.oauth2 {
            None => self
                .client
                .execute(req)
                .await
                .map_err(HttpError::from_transport)?,
            Some(oauth2) => self.with_token(oauth2, req).await?,
        };
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| parse_retry_after(v.as_bytes(), SystemTime::now()));
        let location = matches!(status.as_u16(), 301 | 308)
            .then(|| resp.headers().get(LOCATION)?.to_str().ok())
            .flatten()
            .and_then(|l| self.target.url.join(l).ok())
            .map(|u| shown(&u, self.show_path));
        let read = self.drain(resp).await;
        tracing::debug!(
            url = %self.redacted_url,
            status = status.as_u16(),
            response_bytes_read = read,
            attempt = ctx.attempt.get(),
            "http sink answer"
        );
        match HttpError::from_answer(status, retry_after, location, &self.status_classes) {
            None => Ok(()),
            Some(e) => Err(e.into()),
        }
    }

    /// Stored (a 2xx is the endpoint's acceptance); the raw body always travels (no claim
    /// check); no size limit but the endpoint's (a `413` is permanent); no order; an
    /// `authorization` header (URL userinfo or the operator's), Standard Webhooks signing,
    /// TLS for `https://`.
    fn capabilities(&self) -> ankusa_sink_core::Capabilities {
        let mut auth = Vec::new();
        if self
            .target
            .base
            .contains_key(reqwest::header::AUTHORIZATION)
        {
            auth.push("authorization_header");
        }
        if self.target.signer.is_some() {
            auth.push("standard_webhooks_signing");
        }
        if self.target.url.scheme() == "https" {
            auth.push("tls");
        }
        ankusa_sink_core::Capabilities::new(true, None).with_auth(auth)
    }

    /// A reachability check that sends nothing to the endpoint's application: a TCP
    /// connect to the endpoint's host and port (to the proxy's, when one is set) within the
    /// connect timeout, then the connection is closed. Refused, unreachable or timed out is
    /// transient, as a delivery would be. Reachable answers `Unsupported`, not `Passed`:
    /// `Passed` promises the destination exists and takes the credentials, which a
    /// connect cannot show (an endpoint answering 404 or 401 accepts connections too).
    async fn check(&self) -> Result<Check, Failure> {
        let unreachable = |kind, source| {
            Failure::from(HttpError::Unreachable {
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
            Ok(Err(e)) if e.get_ref().is_some_and(|r| r.is::<crate::guard::Refused>()) => {
                Err(HttpError::PrivateDestination(e.to_string()).into())
            }
            Ok(Err(e)) => Err(unreachable(connect_kind(e.kind()), Some(e))),
            Err(_) => Err(unreachable(TransportKind::Timeout, None)),
        }
    }

    fn describe(&self, _subject: &Subject) -> Option<Description> {
        let redacted = Url::parse(&self.redacted_url).ok()?;
        let payload = match self.layout.cloudevents() {
            Some(_) => Payload::CloudEvent,
            None => Payload::Body,
        };
        let mut d = Description::new(redacted.scheme(), payload);
        d.host = redacted.host_str().map(|h| match redacted.port() {
            Some(p) => format!("{h}:{p}"),
            None => h.to_owned(),
        });
        d.address = Some(match redacted.query() {
            Some(q) => format!("{}?{q}", redacted.path()),
            None => redacted.path().to_owned(),
        });
        d.operation_bindings.insert(
            "http".into(),
            serde_json::json!({ "method": self.target.method.as_str(), "bindingVersion": "0.3.0" }),
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
        if !self.target.operator_content_type {
            computed.insert(2, "headers.content-type");
        }
        if self.target.signer.is_some() {
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

impl HttpSink {
    /// Send `req` with the bearer token; a 401 gets a new token and one more try (the token
    /// may have been revoked or rotated before it expired), unless a 401 replaced a token
    /// less than `MIN_TOKEN_LIFETIME` ago: then this 401 is the answer.
    async fn with_token(
        &self,
        oauth2: &crate::oauth2::OAuth2,
        mut req: reqwest::Request,
    ) -> Result<reqwest::Response, HttpError> {
        let again = req.try_clone();
        let bearer = oauth2.bearer(&self.client).await?;
        req.headers_mut().insert(AUTHORIZATION, bearer.clone());
        let resp = self
            .client
            .execute(req)
            .await
            .map_err(HttpError::from_transport)?;
        let Some(mut again) = again.filter(|_| resp.status() == StatusCode::UNAUTHORIZED) else {
            return Ok(resp);
        };
        if !oauth2.refused(&bearer).await {
            return Ok(resp);
        }
        drop(resp);
        let bearer = oauth2.bearer(&self.client).await?;
        again.headers_mut().insert(AUTHORIZATION, bearer);
        self.client
            .execute(again)
            .await
            .map_err(HttpError::from_transport)
    }
}

impl fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSink")
            .field("url", &self.redacted_url)
            .field("proxy", &self.redacted_proxy)
            .field("method", &self.target.method)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field(
                "signing_keys",
                &self.target.signer.as_ref().map_or(0, Signer::len),
            )
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
        let out = Outgoing::new(&env, &ctx, &sink.layout).unwrap();
        let req = outgoing::to_request(out, &sink.target, 1).unwrap();
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
        assert_eq!(values(req.headers()), want);
        assert_eq!(
            req.body().and_then(reqwest::Body::as_bytes),
            Some(&b"{}"[..])
        );
    }
}
