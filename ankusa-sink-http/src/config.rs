//! Options of the HTTP sink: the operator's keys (`Repr`), checked once by `TryFrom` into an
//! always-valid [`HttpConfig`]; [`HttpSinkBuilder`] collects the same keys in code.

use ankusa_sink_core::cloudevents::{CloudEvents, Format};
use ankusa_sink_core::signing::{Signer, SigningError};
use ankusa_sink_core::{Secret, SecretEnvError, is_loopback_host, timeout_ms};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
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
#[serde(deny_unknown_fields)]
struct Repr {
    url: Value,
    #[serde(default)]
    method: HttpMethod,
    #[serde(default)]
    headers: BTreeMap<String, Value>,
    timeout_ms: Option<u64>,
    connect_timeout_ms: Option<u64>,
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
    format: Option<Format>,
    cloudevents_type: Option<String>,
    #[serde(default)]
    status_classes: BTreeMap<String, crate::StatusClass>,
    #[serde(default)]
    deny_private: bool,
    #[serde(default)]
    allow_cidrs: Vec<String>,
    oauth2: Option<OAuth2Repr>,
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
            format: None,
            cloudevents_type: None,
            status_classes: BTreeMap::new(),
            deny_private: false,
            allow_cidrs: Vec::new(),
            oauth2: None,
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
    pub(crate) signer: Option<Signer>,
    pub(crate) max_response_bytes: NonZeroUsize,
    /// Each CA source's PEM text (checked to hold certificates).
    pub(crate) ca_pems: Vec<Vec<u8>>,
    pub(crate) tls_only: bool,
    pub(crate) show_path: bool,
    pub(crate) allow_insecure: bool,
    pub(crate) proxy: Option<Url>,
    /// What `allow_insecure` lets travel in cleartext, for the one warning at build.
    pub(crate) insecure: Option<String>,
    /// CloudEvents instead of the raw body (`format`, `cloudevents_type`).
    pub(crate) cloudevents: Option<CloudEvents>,
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
        let url = parse_url(r.url)?;
        let proxy = r.proxy.map(parse_proxy).transpose()?;
        let signer = signer(r.secrets)?;
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
        if r.format == Some(Format::MessageV1) {
            return Err(ConfigError::Format);
        }
        let cloudevents =
            CloudEvents::from_keys(r.format.unwrap_or_default(), r.cloudevents_type.as_deref())
                .map_err(ConfigError::CloudEventsType)?;
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
            signer,
            max_response_bytes,
            ca_pems,
            client_identity,
            tls_only: r.tls.only,
            show_path: r.show_path,
            allow_insecure: r.allow_insecure,
            proxy,
            insecure,
            cloudevents,
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

    /// Send CloudEvents instead of the raw body (`None`: the raw body, the default): the
    /// `format` (`cloudevents` binary: the raw body with `ce-*` headers;
    /// `cloudevents-structured`: one `application/cloudevents+json` document) and
    /// `cloudevents_type` keys. The `x-ankusa-*` headers and the signature go out as always.
    pub fn with_cloudevents(mut self, events: Option<CloudEvents>) -> Self {
        self.cloudevents = events;
        self
    }

    /// The CloudEvents the sink sends, if any.
    pub fn cloudevents(&self) -> Option<&CloudEvents> {
        self.cloudevents.as_ref()
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
        ankusa_sink_core::redact_url_keep_path(url.as_str())
    } else {
        ankusa_sink_core::redact_url(url.as_str())
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
            .field("secrets", &self.signer.as_ref().map_or(0, Signer::len))
            .field("max_response_bytes", &self.max_response_bytes)
            .field("ca_sources", &self.ca_pems.len())
            .field("client_certificate", &self.client_identity.is_some())
            .field("tls_only", &self.tls_only)
            .field("show_path", &self.show_path)
            .field("allow_insecure", &self.allow_insecure)
            // A proxy's path means nothing; its userinfo is a secret.
            .field("proxy", &self.proxy.as_ref().map(|p| shown(p, false)))
            .field("cloudevents", &self.cloudevents)
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

/// Collects the options of an [`HttpConfig`] in code; [`build`](Self::build) checks them
/// as a sink file's would be and builds the sink. Start with
/// [`HttpSink::builder`](crate::HttpSink::builder).
#[derive(Clone)]
pub struct HttpSinkBuilder {
    repr: Repr,
}

impl fmt::Debug for HttpSinkBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Nothing is checked yet: header names only.
        f.debug_struct("HttpSinkBuilder")
            .field("headers", &self.repr.headers.keys().collect::<Vec<_>>())
            .field("secrets", &self.repr.secrets.len())
            .finish_non_exhaustive()
    }
}

impl HttpSinkBuilder {
    /// Start from `url`.
    pub(crate) fn new(url: Secret) -> Self {
        HttpSinkBuilder {
            repr: Repr::new(Value::Plain(url)),
        }
    }

    /// The request method.
    pub fn method(mut self, method: HttpMethod) -> Self {
        self.repr.method = method;
        self
    }

    /// A static header (replaces an earlier one of the same name).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Secret>) -> Self {
        self.repr
            .headers
            .insert(name.into(), Value::Plain(value.into()));
        self
    }

    /// A static header whose value is a credential whatever its name (as a sink file's
    /// `{ env = "VAR" }`): refused over cleartext unless [`allow_insecure`](Self::allow_insecure).
    pub fn secret_header(mut self, name: impl Into<String>, value: Secret) -> Self {
        self.repr.headers.insert(name.into(), Value::Marked(value));
        self
    }

    /// The whole-request timeout (zero is refused by [`build`](Self::build)).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.repr.timeout_ms = Some(timeout.as_millis().try_into().unwrap_or(u64::MAX));
        self
    }

    /// The connect (TCP + TLS) timeout (zero is refused by [`build`](Self::build)).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.repr.connect_timeout_ms = Some(timeout.as_millis().try_into().unwrap_or(u64::MAX));
        self
    }

    /// Add a signing secret (after any earlier ones).
    pub fn secret(mut self, secret: impl Into<Secret>) -> Self {
        self.repr.secrets.push(Value::Plain(secret.into()));
        self
    }

    /// The response read cap in bytes (zero is refused by [`build`](Self::build)).
    pub fn max_response_bytes(mut self, max: usize) -> Self {
        self.repr.max_response_bytes = Some(max);
        self
    }

    /// Trust the CA certificates in this PEM text (in addition to the platform's, unless
    /// [`tls_roots_only`](Self::tls_roots_only)).
    pub fn ca_pem(mut self, pem: impl Into<String>) -> Self {
        self.repr.tls.ca_pem.push(pem.into());
        self
    }

    /// Trust the CA certificates in this PEM file.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.repr.tls.ca_files.push(path.into());
        self
    }

    /// Trust only the configured CA certificates, not the platform's roots.
    pub fn tls_roots_only(mut self, only: bool) -> Self {
        self.repr.tls.only = only;
        self
    }

    /// Refuse destinations on loopback, private, link-local, CGNAT, unique-local or
    /// unspecified addresses (see the sink file's `deny_private`): for URLs you did not
    /// write.
    pub fn deny_private(mut self, deny: bool) -> Self {
        self.repr.deny_private = deny;
        self
    }

    /// With [`deny_private`](Self::deny_private): networks (`10.0.0.0/8`) or addresses let
    /// through anyway.
    pub fn allow_cidrs<I, S>(mut self, cidrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.repr.allow_cidrs = cidrs.into_iter().map(Into::into).collect();
        self
    }

    /// Show the URL's path in `Debug`, `describe`, logs and failure reasons.
    pub fn show_path(mut self, show: bool) -> Self {
        self.repr.show_path = show;
        self
    }

    /// Accept credentials over cleartext `http://` to a non-loopback host (warned at build).
    pub fn allow_insecure(mut self, allow: bool) -> Self {
        self.repr.allow_insecure = allow;
        self
    }

    /// Send every request through this egress proxy (`http` or `https` URL; userinfo is
    /// the proxy's basic auth).
    pub fn proxy(mut self, proxy: impl Into<Secret>) -> Self {
        self.repr.proxy = Some(Value::Plain(proxy.into()));
        self
    }

    /// Send CloudEvents (`format`: binary or structured) of this `type` (the
    /// `cloudevents_type` key; `None`: `ankusa.hook.received`).
    pub fn cloudevents(mut self, format: Format, event_type: Option<&str>) -> Self {
        self.repr.format = Some(format);
        self.repr.cloudevents_type = event_type.map(str::to_owned);
        self
    }

    /// Check every option, as a sink file's are checked, into a config.
    pub fn build_config(self) -> Result<HttpConfig, ConfigError> {
        self.repr.try_into()
    }

    /// Check every option and build the sink.
    pub fn build(self) -> Result<crate::HttpSink, ConfigError> {
        crate::HttpSink::new(self.build_config()?)
    }
}

/// Why a config was refused. Never holds a secret, a header value or a URL's userinfo.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The URL does not parse (the parser's reason; the URL is not repeated).
    #[error("url is not a valid absolute URL: {0}")]
    InvalidUrl(url::ParseError),
    /// The URL's scheme is not `http` or `https`.
    #[error("url scheme {0:?} is not http or https")]
    UnsupportedScheme(String),
    /// The URL has no host.
    #[error("url has no host")]
    NoHost,
    /// An environment variable named for a value (`{ env = "VAR" }`) is not set.
    #[error("{what}: environment variable {var} is not set")]
    MissingEnv {
        /// Which option.
        what: String,
        /// The variable.
        var: String,
    },
    /// An environment variable named for a value is not UTF-8.
    #[error("{what}: environment variable {var} is not valid UTF-8")]
    NotUnicodeEnv {
        /// Which option.
        what: String,
        /// The variable.
        var: String,
    },
    /// The signing secrets were refused (empty, bad `whsec_` base64, too short); the
    /// message names the secret by position, never its value.
    #[error(transparent)]
    Signing(#[from] SigningError),
    /// `format = "message-v1"`: the HTTP sink sends the raw body, or a CloudEvent.
    #[error(
        "format: the HTTP sink sends the raw body (no format) or a CloudEvent (\"cloudevents\", \"cloudevents-structured\"), never Message v1"
    )]
    Format,
    /// `cloudevents_type` cannot name an event type.
    #[error(transparent)]
    CloudEventsType(ankusa_sink_core::cloudevents::TypeError),
    /// The proxy URL does not parse (the parser's reason; the URL is not repeated).
    #[error("proxy is not a valid absolute URL: {0}")]
    InvalidProxy(url::ParseError),
    /// The proxy URL's scheme is not `http` or `https`.
    #[error("proxy scheme {0:?} is not http or https")]
    UnsupportedProxyScheme(String),
    /// The proxy URL has no host.
    #[error("proxy has no host")]
    NoProxyHost,
    /// Credentials would cross the network in cleartext and `allow_insecure` is not set.
    /// Names what (e.g. `header "authorization"`), never a value.
    #[error(
        "{0} would be sent in cleartext (http:// to a host that is not loopback); use https, or set allow_insecure = true"
    )]
    Insecure(String),
    /// A static header name is not a valid HTTP header name.
    #[error("header name {0:?} is not a valid HTTP header name")]
    InvalidHeaderName(String),
    /// A static header value is not a valid HTTP header value (the value is not shown).
    #[error("the value of header {0:?} is not a valid HTTP header value")]
    InvalidHeaderValue(String),
    /// A static header name belongs to the sink or to HTTP framing.
    #[error("header {0:?} is set by the sink or by HTTP framing and cannot be configured")]
    ReservedHeader(String),
    /// A timeout or cap of zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// A `[status_classes]` key is not a status or a range.
    #[error(transparent)]
    StatusKey(#[from] crate::BadStatusKey),
    /// `deny_private` refuses the URL's literal address.
    #[error("url address {0} is private and deny_private is set (allow_cidrs can let it through)")]
    PrivateDestination(String),
    /// An `allow_cidrs` entry is not a network or an address.
    #[error("allow_cidrs entry {0:?} is not a network (10.0.0.0/8) or an address")]
    Cidr(String),
    /// `oauth2.token_url` is not a valid absolute URL.
    #[error("oauth2.token_url is not a valid absolute URL: {0}")]
    InvalidTokenUrl(url::ParseError),
    /// `[oauth2]` and another `Authorization` (a header, URL userinfo) both set.
    #[error("[oauth2] sets Authorization: remove the authorization header or the URL's userinfo")]
    TwoAuthorizations,
    /// `allow_cidrs` without `deny_private` would change nothing.
    #[error("allow_cidrs goes with deny_private = true")]
    AllowWithoutDeny,
    /// Behind a proxy the destination's address is the proxy's to resolve.
    #[error("deny_private cannot check a destination behind a proxy: remove one of them")]
    DenyPrivateBehindProxy,
    /// A CA file could not be read.
    #[error("tls ca file {path:?} could not be read")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A CA PEM holds no certificate or does not parse.
    #[error("tls {0} holds no valid PEM certificate")]
    CaPem(String),
    /// `tls.client_cert_file`/`client_key_file` cannot make a client identity (the files'
    /// contents are never shown).
    #[error("tls client certificate: {0}")]
    ClientIdentity(String),
    /// `tls.only` without any CA certificate would trust nothing.
    #[error("tls.only is set but no ca_files or ca_pem are configured")]
    NoRoots,
    /// The HTTP client could not be built.
    #[error("http client could not be built")]
    Client(#[source] reqwest::Error),
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
        assert_eq!(c.signer.as_ref().map(Signer::len), Some(2));
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
}
