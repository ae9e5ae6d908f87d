//! Options of the HTTP sink: the operator's keys (`Repr`), checked once by `TryFrom` into an
//! always-valid [`HttpConfig`]; [`HttpSinkBuilder`] (`builder.rs`) collects the same keys
//! in code; [`ConfigError`] (`error.rs`) says why a config was refused. This file holds the
//! common keys (url, method, headers, timeouts, message options, signing); each feature
//! parses its own keys the same way, `...Repr` then `TryFrom`: `oauth2.rs` (`[oauth2]`),
//! `deny_private.rs` (`deny_private`, `allow_cidrs`) and `tls.rs` (`[tls]`, mutual TLS).
//! `value.rs` is what they share.

mod builder;
mod deny_private;
mod error;
mod oauth2;
mod tls;
mod value;

pub use builder::HttpSinkBuilder;
pub use error::ConfigError;

use deny_private::DenyPrivateRepr;
use oauth2::OAuth2Repr;
use tls::{Tls, TlsRepr};
use value::{Endpoint, Value, WithEndpoint, cleartext, has_host, has_userinfo, http_url};

use ankusa_message::cloudevents::Format;
use ankusa_message::signing::Signer;
use ankusa_message::{MessageOption, MessageOptions};
use ankusa_sink_core::Secret;
use ankusa_sink_kit::timeout_ms;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::num::{NonZeroU64, NonZeroUsize};
use std::time::Duration;
use url::Url;

/// Default whole-request timeout (connect, send, status line, response body): 5 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default connect timeout (TCP plus TLS handshake): 5 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default cap on response bytes read: 64 KiB. Reading stops there and the connection is closed.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 65_536;

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

pub(crate) const WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
pub(crate) const WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
pub(crate) const WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");
/// The signature headers the sink sets when signing; an operator cannot set them.
pub(crate) const SIGNATURE_HEADERS: [HeaderName; 3] =
    [WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE];

/// The request method: `post` (default), `put` or `patch`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpMethod {
    /// `POST`
    #[default]
    Post,
    /// `PUT`
    Put,
    /// `PATCH`
    Patch,
}

impl HttpMethod {
    /// The method as sent on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
        }
    }
}

/// The operator's keys, exactly as written in a sink file (`type` already removed).
#[derive(Clone, Deserialize)]
struct Repr {
    url: Value,
    #[serde(default)]
    method: HttpMethod,
    #[serde(default)]
    headers: BTreeMap<String, Value>,
    timeout_ms: Option<u64>,
    connect_timeout_ms: Option<u64>,
    /// The older spelling of `[signing] secrets` (values may be `{ env = "VAR" }`):
    /// deprecated, still read.
    #[serde(default)]
    secrets: Vec<Value>,
    /// Signing secrets given in code ([`HttpSinkBuilder::secret`]): the builder's own
    /// list, so that using it is not the deprecated `secrets` key.
    #[serde(skip)]
    built_secrets: Vec<Secret>,
    max_response_bytes: Option<usize>,
    #[serde(default)]
    tls: TlsRepr,
    #[serde(default)]
    show_path: bool,
    #[serde(default)]
    allow_insecure: bool,
    proxy: Option<Value>,
    #[serde(default)]
    status_classes: BTreeMap<String, crate::StatusClass>,
    /// `deny_private` and `allow_cidrs` (before `unknown`: a flattened struct takes its
    /// keys first).
    #[serde(flatten)]
    private: DenyPrivateRepr,
    oauth2: Option<OAuth2Repr>,
    /// `format`, `cloudevents_type`, `[signing]` (`inline_max_bytes` is refused: the raw
    /// body always travels inline).
    #[serde(flatten)]
    message: MessageOptions,
    /// `format` and `cloudevents_type` set by [`HttpSinkBuilder::cloudevents`], checked
    /// with the rest.
    #[serde(skip)]
    built_format: Option<(Format, Option<String>)>,
    /// Whatever no option took: refused (`flatten` cannot deny unknown fields itself).
    #[serde(flatten)]
    unknown: BTreeMap<String, IgnoredAny>,
}

impl Repr {
    fn new(url: Value) -> Self {
        Repr {
            url,
            method: HttpMethod::default(),
            headers: BTreeMap::new(),
            timeout_ms: None,
            connect_timeout_ms: None,
            secrets: Vec::new(),
            built_secrets: Vec::new(),
            max_response_bytes: None,
            tls: TlsRepr::default(),
            show_path: false,
            allow_insecure: false,
            proxy: None,
            status_classes: BTreeMap::new(),
            private: DenyPrivateRepr::default(),
            oauth2: None,
            message: MessageOptions::new(),
            built_format: None,
            unknown: BTreeMap::new(),
        }
    }
}

/// A valid HTTP sink configuration: every option checked, environment variables and CA
/// files read. Parse it from a sink file (serde), build it with [`HttpSinkBuilder`], or start
/// from [`HttpConfig::new`].
///
/// `Debug` prints the URL redacted, header names without values and the number of secrets.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Repr")]
#[non_exhaustive]
pub struct HttpConfig {
    /// The endpoint as configured (userinfo included: it becomes basic auth).
    pub(crate) url: Url,
    pub(crate) method: HttpMethod,
    /// The operator's headers, valid, their values marked sensitive.
    pub(crate) headers: HeaderMap,
    pub(crate) timeout_ms: NonZeroU64,
    pub(crate) connect_timeout_ms: NonZeroU64,
    pub(crate) max_response_bytes: NonZeroUsize,
    /// Each CA source's PEM text (checked to hold certificates).
    pub(crate) ca_pems: Vec<Vec<u8>>,
    pub(crate) tls_only: bool,
    pub(crate) show_path: bool,
    pub(crate) allow_insecure: bool,
    pub(crate) proxy: Option<Url>,
    /// What `allow_insecure` lets travel in cleartext, for the one warning at build.
    pub(crate) insecure: Option<String>,
    /// CloudEvents instead of the raw body (`format`, `cloudevents_type`) and the signer
    /// (`[signing]`, or `secrets`).
    pub(crate) message: MessageOptions,
    /// The operator's classes for statuses (`[status_classes]`).
    pub(crate) status_classes: crate::StatusClasses,
    /// `deny_private`: the addresses the sink may connect to.
    pub(crate) guard: Option<std::sync::Arc<crate::AddressGuard>>,
    /// `tls.client_cert_file` + `tls.client_key_file`: the client certificate chain and its
    /// key, PEM, for mutual TLS (a secret: never printed).
    pub(crate) client_identity: Option<Secret>,
    /// `[oauth2]`: client credentials traded for bearer tokens (boxed: most sinks have
    /// none, and a sink config is a variant of the registry's `SinkConfig`).
    pub(crate) oauth2: Option<Box<crate::oauth2::OAuth2Config>>,
}

impl TryFrom<Repr> for HttpConfig {
    type Error = ConfigError;

    fn try_from(r: Repr) -> Result<Self, ConfigError> {
        if let Some(k) = r.unknown.keys().next() {
            return Err(ConfigError::UnknownField(k.clone()));
        }
        warn_legacy(&r);
        // The raw body always travels inline: no claim check to size.
        if let Some(k) = r.message.key_set(MessageOption::InlineMaxBytes) {
            return Err(ConfigError::UnknownField(k.to_owned()));
        }
        let url = parse_url(r.url)?;
        let proxy = r.proxy.map(parse_proxy).transpose()?;
        let mut message = match r.built_format {
            Some((format, event_type)) => r
                .message
                .with_format(format, event_type.as_deref())
                .map_err(ConfigError::CloudEventsType)?,
            None => r.message,
        };
        if message.format() == Some(Format::MessageV1) {
            return Err(ConfigError::Format);
        }
        let secrets = r
            .secrets
            .into_iter()
            .chain(r.built_secrets.into_iter().map(Value::Plain))
            .collect();
        match (signer(secrets)?, message.signing()) {
            (Some(_), Some(_)) => return Err(ConfigError::SecretsAndSigning),
            (Some(from_secrets), None) => message = message.with_signing(from_secrets),
            (None, _) => {}
        }
        let signer = message.signing();
        let (headers, marked) = operator_headers(r.headers)?;
        let timeout_ms = positive_ms(r.timeout_ms, DEFAULT_TIMEOUT, "timeout_ms")?;
        let connect_timeout_ms = positive_ms(
            r.connect_timeout_ms,
            DEFAULT_CONNECT_TIMEOUT,
            "connect_timeout_ms",
        )?;
        let max_response_bytes =
            NonZeroUsize::new(r.max_response_bytes.unwrap_or(DEFAULT_MAX_RESPONSE_BYTES))
                .ok_or(ConfigError::Zero("max_response_bytes"))?;
        let exposed = cleartext_credentials(&url, proxy.as_ref(), &marked, signer.is_some());
        let insecure = match exposed {
            None => None,
            Some(what) if r.allow_insecure => Some(what),
            Some(what) => return Err(ConfigError::Insecure(what)),
        };
        let tls = Tls::try_from(r.tls)?;
        let status_classes = crate::StatusClasses::new(r.status_classes)?;
        let endpoint = Endpoint {
            url: &url,
            proxy: proxy.as_ref(),
            headers: &headers,
            allow_insecure: r.allow_insecure,
        };
        let guard: Option<std::sync::Arc<crate::AddressGuard>> = WithEndpoint {
            repr: r.private,
            endpoint: &endpoint,
        }
        .try_into()?;
        let oauth2 = r
            .oauth2
            .map(|repr| {
                crate::oauth2::OAuth2Config::try_from(WithEndpoint {
                    repr,
                    endpoint: &endpoint,
                })
            })
            .transpose()?
            .map(Box::new);
        if let Some(o) = &oauth2 {
            deny_private::token_url_allowed(&o.token_url, guard.as_deref())?;
        }
        Ok(HttpConfig {
            url,
            method: r.method,
            headers,
            timeout_ms,
            connect_timeout_ms,
            max_response_bytes,
            ca_pems: tls.ca_pems,
            client_identity: tls.client_identity,
            tls_only: tls.only,
            show_path: r.show_path,
            allow_insecure: r.allow_insecure,
            proxy,
            insecure,
            message,
            status_classes,
            guard,
            oauth2,
        })
    }
}

impl HttpConfig {
    /// A config for `url` with every other option at its default; fails as `TryFrom` would.
    pub fn new(url: impl Into<Secret>) -> Result<Self, ConfigError> {
        Repr::new(Value::Plain(url.into())).try_into()
    }

    /// Refuse destinations on private addresses (`deny_private`), but for `allow`. For a
    /// sink built from a URL you did not write (a tenant's): a literal private address is
    /// refused here, a name on every connect. Fails as the sink file would.
    pub fn with_deny_private(mut self, allow: Vec<ipnet::IpNet>) -> Result<Self, ConfigError> {
        if self.proxy.is_some() {
            return Err(ConfigError::DenyPrivateBehindProxy);
        }
        let guard = deny_private::guarding(&self.url, crate::AddressGuard::new(allow))?;
        if let Some(o) = &self.oauth2 {
            deny_private::token_url_allowed(&o.token_url, Some(&guard))?;
        }
        self.guard = Some(guard);
        Ok(self)
    }

    /// The operator's classes for answer statuses (`[status_classes]`): the most specific
    /// key wins over the sink's own table.
    pub fn with_status_classes(mut self, classes: crate::StatusClasses) -> Self {
        self.status_classes = classes;
        self
    }

    /// The message options: CloudEvents and the signer (`[signing]`, or `secrets`). Set
    /// them with the sink file's keys or [`HttpSinkBuilder::cloudevents`] and
    /// [`HttpSinkBuilder::secret`]: `format = "cloudevents"` sends the raw body with `ce-*`
    /// headers, `"cloudevents-structured"` one `application/cloudevents+json` document; the
    /// `x-ankusa-*` headers and the signature go out as always.
    pub fn message(&self) -> &MessageOptions {
        &self.message
    }

    /// Set the request method.
    pub fn with_method(mut self, method: HttpMethod) -> Self {
        self.method = method;
        self
    }

    /// Set the whole-request timeout (rounded down to whole ms, at least 1).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout_ms = timeout_ms(timeout);
        self
    }

    /// Set the connect (TCP + TLS) timeout (rounded down to whole ms, at least 1).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout_ms = timeout_ms(timeout);
        self
    }

    /// Set the response read cap in bytes.
    pub fn with_max_response_bytes(mut self, max: NonZeroUsize) -> Self {
        self.max_response_bytes = max;
        self
    }

    /// Show the URL's path in `Debug`, `describe`, logs and failure reasons.
    pub fn with_show_path(mut self, show: bool) -> Self {
        self.show_path = show;
        self
    }

    /// The endpoint, redacted as everything printed shows it (path hidden unless
    /// `show_path`).
    pub fn redacted_url(&self) -> String {
        shown(&self.url, self.show_path)
    }
}

/// `url` as printed: redacted, the path hidden unless `show_path`.
pub(crate) fn shown(url: &Url, show_path: bool) -> String {
    if show_path {
        ankusa_sink_kit::redact_url_keep_path(url.as_str())
    } else {
        ankusa_sink_kit::redact_url(url.as_str())
    }
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("url", &self.redacted_url())
            .field("method", &self.method)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout_ms", &self.timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("secrets", &self.message.signing().map_or(0, Signer::len))
            .field("max_response_bytes", &self.max_response_bytes)
            .field("ca_sources", &self.ca_pems.len())
            .field("client_certificate", &self.client_identity.is_some())
            .field("tls_only", &self.tls_only)
            .field("show_path", &self.show_path)
            .field("allow_insecure", &self.allow_insecure)
            // A proxy's path means nothing; its userinfo is a secret.
            .field("proxy", &self.proxy.as_ref().map(|p| shown(p, false)))
            .field("cloudevents", &self.message.cloudevents())
            .finish()
    }
}

/// The endpoint, checked: absolute, `http` or `https`, with a host.
fn parse_url(value: Value) -> Result<Url, ConfigError> {
    let url = http_url(value, "url", ConfigError::InvalidUrl)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ConfigError::UnsupportedScheme(url.scheme().to_owned()));
    }
    has_host(url, ConfigError::NoHost)
}

/// The proxy URL, checked: absolute, `http` or `https`, with a host.
fn parse_proxy(value: Value) -> Result<Url, ConfigError> {
    let url = http_url(value, "proxy", ConfigError::InvalidProxy)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ConfigError::UnsupportedProxyScheme(url.scheme().to_owned()));
    }
    has_host(url, ConfigError::NoProxyHost)
}

/// The deprecated spellings in `r`, one WARN each per load: what to write instead, never
/// a value (a variable's name is not one).
fn warn_legacy(r: &Repr) {
    if !r.secrets.is_empty() {
        tracing::warn!(
            "the top-level `secrets` key is deprecated: write the same list as `secrets` in a `[signing]` table"
        );
    }
    let mut env = Vec::new();
    let mut note = |key: String, v: &Value| {
        if let Some(var) = v.env_var() {
            env.push(format!("{key} = \"${{{var}}}\""));
        }
    };
    note("url".into(), &r.url);
    if let Some(p) = &r.proxy {
        note("proxy".into(), p);
    }
    for (name, v) in &r.headers {
        note(format!("headers.{name}"), v);
    }
    for (i, v) in r.secrets.iter().enumerate() {
        note(format!("secrets[{i}]"), v);
    }
    if let Some(o) = &r.oauth2 {
        note("oauth2.token_url".into(), &o.token_url);
        note("oauth2.client_secret".into(), &o.client_secret);
    }
    if !env.is_empty() {
        tracing::warn!(
            "`{{ env = \"VAR\" }}` tables are deprecated: write the registry's expansion instead, {}",
            env.join(", ")
        );
    }
}

/// The signer of `secrets`, `None` without any.
fn signer(secrets: Vec<Value>) -> Result<Option<Signer>, ConfigError> {
    if secrets.is_empty() {
        return Ok(None);
    }
    let secrets = secrets
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.resolve(|| format!("signing secret #{i}")).map(|v| v.0))
        .collect::<Result<Vec<_>, _>>()?;
    Signer::new(secrets.iter().map(Secret::expose))
        .map(Some)
        .map_err(ConfigError::from)
}

/// The operator's headers, checked, and the names of those whose value is marked secret.
fn operator_headers(
    headers: BTreeMap<String, Value>,
) -> Result<(HeaderMap, Vec<String>), ConfigError> {
    let mut map = HeaderMap::new();
    let mut marked = Vec::new();
    for (name, value) in headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ConfigError::InvalidHeaderName(name.clone()))?;
        let sink_owned =
            header.as_str().starts_with("x-ankusa-") || SIGNATURE_HEADERS.contains(&header);
        if sink_owned || FRAMING.contains(&header.as_str()) {
            return Err(ConfigError::ReservedHeader(name));
        }
        let (value, secret) = value.resolve(|| format!("header {name}"))?;
        let mut v = HeaderValue::from_str(value.expose())
            .map_err(|_| ConfigError::InvalidHeaderValue(name.clone()))?;
        v.set_sensitive(true);
        map.insert(header, v);
        let lower = name.to_ascii_lowercase();
        if secret || CREDENTIAL_NAME_PARTS.iter().any(|p| lower.contains(p)) {
            marked.push(name);
        }
    }
    Ok((map, marked))
}

/// A timeout in whole ms: the default when absent, zero refused by the option's name.
fn positive_ms(
    ms: Option<u64>,
    default: Duration,
    what: &'static str,
) -> Result<NonZeroU64, ConfigError> {
    match ms {
        None => Ok(timeout_ms(default)),
        Some(ms) => NonZeroU64::new(ms).ok_or(ConfigError::Zero(what)),
    }
}

/// The credentials that would travel in cleartext, if any, listed by what they are
/// (`header "authorization"`), never by value. `credential_headers` are the operator
/// headers that carry credentials (by name, or marked secret).
fn cleartext_credentials(
    url: &Url,
    proxy: Option<&Url>,
    credential_headers: &[String],
    signing: bool,
) -> Option<String> {
    let mut exposed = Vec::new();
    // Through a proxy the first hop is the proxy: a loopback endpoint does not make the
    // link to a remote plain-http proxy safe.
    let endpoint_clear = url.scheme() == "http" && (cleartext(url) || proxy.is_some_and(cleartext));
    if endpoint_clear {
        if has_userinfo(url) {
            exposed.push("the URL's userinfo (basic auth)".to_owned());
        }
        exposed.extend(credential_headers.iter().map(|n| format!("header {n:?}")));
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
    (!exposed.is_empty()).then(|| exposed.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: serde_json::Value) -> Result<HttpConfig, String> {
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    #[test]
    fn secret_values_are_plain_strings_or_env_references() {
        // PATH is set wherever tests run; tests cannot set variables (no unsafe).
        let path = std::env::var("PATH").expect("PATH is set");
        let c = parse(serde_json::json!({
            "url": "http://127.0.0.1:9/in",
            "headers": { "x-plain": "ops", "x-from-env": { "env": "PATH" } },
            "secrets": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", { "env": "PATH" }],
        }))
        .unwrap();
        assert_eq!(c.headers["x-plain"], "ops");
        assert_eq!(c.headers["x-from-env"], path.as_str());
        assert_eq!(c.message.signing().map(Signer::len), Some(2));
        let from_env = parse(serde_json::json!({ "url": { "env": "PATH" } }));
        // PATH is no URL: the error names the option, never the value.
        let e = from_env.unwrap_err();
        assert!(e.starts_with("url is not a valid absolute URL"), "{e}");
        assert!(!e.contains(&path), "{e}");

        let missing = "ANKUSA_HTTP_TEST_SURELY_UNSET_51C2";
        for (json, what) in [
            (serde_json::json!({ "url": { "env": missing } }), "url"),
            (
                serde_json::json!({ "url": "http://x/", "proxy": { "env": missing } }),
                "proxy",
            ),
            (
                serde_json::json!({ "url": "http://x/", "headers": { "a": { "env": missing } } }),
                "header a",
            ),
            (
                serde_json::json!({ "url": "http://x/", "secrets": [{ "env": missing }] }),
                "signing secret #0",
            ),
        ] {
            assert_eq!(
                parse(json).unwrap_err(),
                format!("{what}: environment variable {missing} is not set")
            );
        }
    }

    #[test]
    fn an_env_reference_with_another_key_is_refused_not_read() {
        for json in [
            serde_json::json!({ "url": { "env": "PATH", "pad": 1 } }),
            serde_json::json!({ "url": "http://x/", "headers": { "a": { "env": "PATH", "x": 1 } } }),
        ] {
            let e = parse(json.clone()).unwrap_err();
            assert!(!e.contains(&std::env::var("PATH").unwrap()), "{json}: {e}");
        }
    }

    #[test]
    fn an_env_header_is_a_credential_over_cleartext() {
        let remote = |value: serde_json::Value| {
            parse(serde_json::json!({
                "url": "http://192.0.2.1/in",
                "headers": { "x-team": value },
            }))
        };
        assert!(remote(serde_json::json!("ops")).is_ok());
        let e = remote(serde_json::json!({ "env": "PATH" })).unwrap_err();
        assert!(e.contains("header \"x-team\""), "{e}");
    }

    #[test]
    fn builders_keep_the_config_valid() {
        let c = HttpConfig::new("http://127.0.0.1:9/in")
            .unwrap()
            .with_method(HttpMethod::Put)
            .with_timeout(Duration::ZERO)
            .with_connect_timeout(Duration::from_micros(2_500))
            .with_max_response_bytes(NonZeroUsize::MIN)
            .with_show_path(true);
        assert_eq!(c.method, HttpMethod::Put);
        assert_eq!((c.timeout_ms.get(), c.connect_timeout_ms.get()), (1, 2));
        assert_eq!(c.max_response_bytes, NonZeroUsize::MIN);
        assert_eq!(c.redacted_url(), "http://127.0.0.1:9/in");
        assert!(HttpConfig::new("ftp://x/").is_err());
    }

    #[test]
    fn signing_is_read_as_secrets_or_the_signing_table_never_both() {
        const KEY: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let old =
            parse(serde_json::json!({ "url": "http://127.0.0.1/", "secrets": [KEY] })).unwrap();
        let table = parse(
            serde_json::json!({ "url": "http://127.0.0.1/", "signing": { "secrets": [KEY] } }),
        )
        .unwrap();
        assert_eq!(old, table, "`secrets` is `[signing] secrets`");
        assert_eq!(table.message().signing().map(Signer::len), Some(1));
        let e = parse(serde_json::json!({
            "url": "http://127.0.0.1/", "secrets": [KEY], "signing": { "secrets": [KEY] }
        }))
        .unwrap_err();
        assert_eq!(e, ConfigError::SecretsAndSigning.to_string());
        assert!(!e.contains("MfKQ9r8"), "{e}");
        // The raw body always travels inline: nothing to size, the key stays unknown.
        let e = parse(serde_json::json!({ "url": "http://127.0.0.1/", "inline_max_bytes": 10 }))
            .unwrap_err();
        assert_eq!(e, "unknown field `inline_max_bytes`");
        let e =
            parse(serde_json::json!({ "url": "http://127.0.0.1/", "methodd": "put" })).unwrap_err();
        assert_eq!(e, "unknown field `methodd`");
    }
}
