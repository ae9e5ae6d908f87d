//! Options of the HTTP sink: the operator's keys (`Repr`), checked once by `TryFrom` into an
//! always-valid [`HttpConfig`]; [`HttpSinkBuilder`] (`builder.rs`) collects the same keys
//! in code; [`ConfigError`] (`error.rs`) says why a config was refused.

mod builder;
mod error;

pub use builder::HttpSinkBuilder;
pub use error::ConfigError;

use ankusa_message::cloudevents::Format;
use ankusa_message::signing::Signer;
use ankusa_message::{MessageOption, MessageOptions};
use ankusa_sink_core::{Secret, SecretEnvError};
use ankusa_sink_kit::{is_loopback_host, timeout_ms};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::PathBuf;
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

/// A value in the sink file that may be secret: a plain string, or `{ env = "VAR" }` (read
/// when the file is parsed; kept so existing files work, beside the registry's `${VAR}`).
#[derive(Clone, Deserialize)]
#[serde(untagged)]
enum Value {
    /// The value itself.
    Plain(Secret),
    /// The name of an environment variable holding the value.
    Env { env: String },
    /// A value given in code and marked secret ([`HttpSinkBuilder::secret_header`]).
    #[serde(skip)]
    Marked(Secret),
}

impl Value {
    /// The value, and whether it is marked secret (`{ env }` or [`Value::Marked`]); `what`
    /// names it in the error (never the value).
    fn resolve(self, what: impl FnOnce() -> String) -> Result<(Secret, bool), ConfigError> {
        match self {
            Value::Plain(s) => Ok((s, false)),
            Value::Marked(s) => Ok((s, true)),
            Value::Env { env } => match Secret::from_env(&env) {
                Ok(s) => Ok((s, true)),
                Err(SecretEnvError::NotUnicode(var)) => {
                    Err(ConfigError::NotUnicodeEnv { what: what(), var })
                }
                Err(_) => Err(ConfigError::MissingEnv {
                    what: what(),
                    var: env,
                }),
            },
        }
    }
}

/// `tls` in the sink file.
#[derive(Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct TlsRepr {
    ca_files: Vec<PathBuf>,
    ca_pem: Vec<String>,
    only: bool,
    client_cert_file: Option<PathBuf>,
    client_key_file: Option<PathBuf>,
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
    /// The older spelling of `[signing] secrets` (values may be `{ env = "VAR" }`).
    #[serde(default)]
    secrets: Vec<Value>,
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
    #[serde(default)]
    deny_private: bool,
    #[serde(default)]
    allow_cidrs: Vec<String>,
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

/// `[oauth2]` in the sink file.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct OAuth2Repr {
    token_url: Value,
    client_id: String,
    client_secret: Value,
    scope: Option<String>,
    audience: Option<String>,
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
            max_response_bytes: None,
            tls: TlsRepr::default(),
            show_path: false,
            allow_insecure: false,
            proxy: None,
            status_classes: BTreeMap::new(),
            deny_private: false,
            allow_cidrs: Vec::new(),
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
        match (signer(r.secrets)?, message.signing()) {
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
        let ca_pems = load_pems(&r.tls)?;
        let client_identity = client_identity(&r.tls)?;
        if r.tls.only && ca_pems.is_empty() {
            return Err(ConfigError::NoRoots);
        }
        let status_classes = crate::StatusClasses::new(r.status_classes)?;
        let guard = address_guard(r.deny_private, &r.allow_cidrs, &url, proxy.as_ref())?;
        let oauth2 = r
            .oauth2
            .map(|o| oauth2_config(o, &url, proxy.as_ref(), &headers, r.allow_insecure))
            .transpose()?
            .map(Box::new);
        Ok(HttpConfig {
            url,
            method: r.method,
            headers,
            timeout_ms,
            connect_timeout_ms,
            max_response_bytes,
            ca_pems,
            client_identity,
            tls_only: r.tls.only,
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

/// `[oauth2]`, checked: an `http`/`https` token URL with a host, one source of
/// `Authorization` only, and neither the client secret nor the bearer token in cleartext
/// unless `allow_insecure`.
fn oauth2_config(
    o: OAuth2Repr,
    url: &Url,
    proxy: Option<&Url>,
    headers: &HeaderMap,
    allow_insecure: bool,
) -> Result<crate::oauth2::OAuth2Config, ConfigError> {
    let token_url = http_url(
        o.token_url,
        "oauth2.token_url",
        ConfigError::InvalidTokenUrl,
    )?;
    if !matches!(token_url.scheme(), "http" | "https") {
        return Err(ConfigError::UnsupportedScheme(
            token_url.scheme().to_owned(),
        ));
    }
    let token_url = has_host(token_url, ConfigError::NoHost)?;
    if headers.contains_key(AUTHORIZATION) || has_userinfo(url) {
        return Err(ConfigError::TwoAuthorizations);
    }
    let clear = |u: &Url| u.scheme() == "http" && (cleartext(u) || proxy.is_some_and(cleartext));
    if !allow_insecure {
        if clear(&token_url) {
            return Err(ConfigError::Insecure("the oauth2 client secret".into()));
        }
        if clear(url) {
            return Err(ConfigError::Insecure("the oauth2 bearer token".into()));
        }
    }
    let (client_secret, _) = o
        .client_secret
        .resolve(|| "oauth2.client_secret".to_owned())?;
    if o.client_id.is_empty() || client_secret.expose().is_empty() {
        return Err(ConfigError::Zero("oauth2 client_id and client_secret"));
    }
    Ok(crate::oauth2::OAuth2Config {
        token_url,
        client_id: o.client_id,
        client_secret,
        scope: o.scope,
        audience: o.audience,
    })
}

/// `deny_private` and `allow_cidrs`, checked: a literal address in the URL is refused here;
/// a name is checked on every connect (the resolver). Behind a proxy the destination is
/// resolved by the proxy, where no guard of ours can see it: refused, not ignored.
fn address_guard(
    deny: bool,
    allow: &[String],
    url: &Url,
    proxy: Option<&Url>,
) -> Result<Option<std::sync::Arc<crate::AddressGuard>>, ConfigError> {
    if !deny {
        return match allow.is_empty() {
            true => Ok(None),
            false => Err(ConfigError::AllowWithoutDeny),
        };
    }
    if proxy.is_some() {
        return Err(ConfigError::DenyPrivateBehindProxy);
    }
    let nets = allow
        .iter()
        .map(|c| crate::guard::parse_cidr(c).ok_or_else(|| ConfigError::Cidr(c.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    guarding(url, crate::AddressGuard::new(nets)).map(Some)
}

/// `guard` for a sink to `url`: a literal address in it that the guard refuses is a config
/// error now (no resolver ever sees it).
fn guarding(
    url: &Url,
    guard: crate::AddressGuard,
) -> Result<std::sync::Arc<crate::AddressGuard>, ConfigError> {
    let literal = match url.host() {
        Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
        _ => None,
    };
    if let Some(ip) = literal
        && guard.refuses(ip)
    {
        return Err(ConfigError::PrivateDestination(ip.to_string()));
    }
    Ok(std::sync::Arc::new(guard))
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
        self.guard = Some(guarding(&self.url, crate::AddressGuard::new(allow))?);
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

/// `value` parsed as an absolute URL; `what` names the option in an environment error.
fn http_url(
    value: Value,
    what: &'static str,
    invalid: fn(url::ParseError) -> ConfigError,
) -> Result<Url, ConfigError> {
    let (raw, _) = value.resolve(|| what.to_owned())?;
    Url::parse(raw.expose()).map_err(invalid)
}

fn has_host(url: Url, none: ConfigError) -> Result<Url, ConfigError> {
    if url.host_str().is_none_or(str::is_empty) {
        return Err(none);
    }
    Ok(url)
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

fn has_userinfo(url: &Url) -> bool {
    !url.username().is_empty() || url.password().is_some()
}

/// Whether talking to `url` crosses the network in cleartext: plain `http` to a host that
/// is not loopback.
fn cleartext(url: &Url) -> bool {
    url.scheme() == "http" && !url.host_str().is_some_and(is_loopback_host)
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

/// The client certificate chain and key for mutual TLS, read and checked (PEM, the chain
/// then the key), or `None` without them. Both or neither.
fn client_identity(tls: &TlsRepr) -> Result<Option<Secret>, ConfigError> {
    let (cert, key) = match (&tls.client_cert_file, &tls.client_key_file) {
        (None, None) => return Ok(None),
        (Some(c), Some(k)) => (c, k),
        _ => {
            return Err(ConfigError::ClientIdentity(
                "give both client_cert_file and client_key_file".into(),
            ));
        }
    };
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|source| ConfigError::CaFile {
            path: path.clone(),
            source,
        })
    };
    let mut pem = read(cert)?;
    pem.push(b'\n');
    pem.extend(read(key)?);
    let pem = String::from_utf8(pem)
        .map_err(|_| ConfigError::ClientIdentity("the files are not PEM text".into()))?;
    // Checked now, so a bad pair is a config error at build, not a failure per delivery.
    reqwest::Identity::from_pem(pem.as_bytes()).map_err(|_| {
        ConfigError::ClientIdentity("the files hold no certificate and private key in PEM".into())
    })?;
    Ok(Some(Secret::from(pem)))
}

/// Each CA source's PEM text, read and checked to hold at least one certificate.
fn load_pems(tls: &TlsRepr) -> Result<Vec<Vec<u8>>, ConfigError> {
    let check = |pem: Vec<u8>, what: String| match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        _ => Err(ConfigError::CaPem(what)),
    };
    let mut pems = Vec::new();
    for path in &tls.ca_files {
        let pem = std::fs::read(path).map_err(|source| ConfigError::CaFile {
            path: path.clone(),
            source,
        })?;
        pems.push(check(pem, format!("ca file {path:?}"))?);
    }
    for (i, pem) in tls.ca_pem.iter().enumerate() {
        pems.push(check(pem.as_bytes().to_vec(), format!("ca_pem #{i}"))?);
    }
    Ok(pems)
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
