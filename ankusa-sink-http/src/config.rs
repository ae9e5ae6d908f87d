//! Options of the HTTP sink: a serde config and a builder over it, validated by
//! [`HttpSink::from_config`](crate::HttpSink::from_config).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Default whole-request timeout (connect, send, status line, response body): 5 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default connect timeout (TCP plus TLS handshake): 5 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default cap on response bytes read: 64 KiB. Reading stops there and the connection is closed.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 65_536;

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

/// A value that may be secret: given literally or read from an environment variable when
/// the sink is built. `Debug` never prints a literal, only the variable name.
///
/// In serde it is either a string or `{ env = "VAR" }`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SecretValue {
    /// The value itself.
    Literal(String),
    /// The name of an environment variable holding the value.
    Env {
        /// The variable name.
        env: String,
    },
}

impl SecretValue {
    /// A literal value.
    pub fn literal(value: impl Into<String>) -> Self {
        SecretValue::Literal(value.into())
    }

    /// A value read from the environment variable `var` at build time.
    pub fn env(var: impl Into<String>) -> Self {
        SecretValue::Env { env: var.into() }
    }

    /// Resolve the value; `what` names it in the error (never the value).
    pub(crate) fn resolve(&self, what: &str) -> Result<String, ConfigError> {
        match self {
            SecretValue::Literal(v) => Ok(v.clone()),
            SecretValue::Env { env } => match std::env::var(env) {
                Ok(v) => Ok(v),
                Err(std::env::VarError::NotPresent) => Err(ConfigError::MissingEnv {
                    what: what.to_owned(),
                    var: env.clone(),
                }),
                Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::NotUnicodeEnv {
                    what: what.to_owned(),
                    var: env.clone(),
                }),
            },
        }
    }
}

impl From<&str> for SecretValue {
    fn from(v: &str) -> Self {
        SecretValue::literal(v)
    }
}

impl From<String> for SecretValue {
    fn from(v: String) -> Self {
        SecretValue::Literal(v)
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretValue::Literal(_) => f.write_str("Literal(REDACTED)"),
            SecretValue::Env { env } => f.debug_struct("Env").field("env", env).finish(),
        }
    }
}

/// Which certificate authorities an `https` endpoint may chain to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct TlsRoots {
    /// PEM files, each holding one or more CA certificates.
    pub ca_files: Vec<PathBuf>,
    /// PEM text, each holding one or more CA certificates.
    pub ca_pem: Vec<String>,
    /// Trust only the certificates above, not the platform's roots.
    pub only: bool,
}

/// The HTTP sink's options. Build a sink with
/// [`HttpSink::from_config`](crate::HttpSink::from_config) or [`HttpSinkBuilder`].
///
/// `Debug` prints the URL redacted, header names without values and the number of secrets.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct HttpConfig {
    /// The endpoint: an absolute `http` or `https` URL. Userinfo becomes basic auth.
    pub url: SecretValue,
    /// `post` (default), `put` or `patch`.
    #[serde(default)]
    pub method: HttpMethod,
    /// Static headers sent with every request (values may come from the environment).
    /// An operator `content-type` replaces the envelope's. Names the sink owns
    /// (`x-ankusa-*`, `webhook-*` when signing) and framing headers (`host`,
    /// `content-length`, `transfer-encoding`, `connection`, ...) are refused.
    #[serde(default)]
    pub headers: BTreeMap<String, SecretValue>,
    /// Whole-request timeout in milliseconds (default 5000).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Connect (TCP + TLS) timeout in milliseconds (default 5000).
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Standard Webhooks signing secrets, in order; several for rotation. `whsec_<base64>`
    /// is base64-decoded (as the official libraries do); any other value is used as its
    /// UTF-8 bytes (raw mode). Either way the key must be at least 24 bytes. Empty: no
    /// signing.
    #[serde(default)]
    pub secrets: Vec<SecretValue>,
    /// Read at most this many response bytes (default 65536), then close the connection.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    /// Extra or exclusive CA roots for `https`.
    #[serde(default)]
    pub tls: TlsRoots,
    /// Print the URL's path in `Debug`, `describe`, logs and failure reasons (default
    /// false). Webhook URLs (Slack, Discord, Zapier) carry their token in the path, so by
    /// default it shows only as `REDACTED-PATH-<8 hex of its SHA-256>`.
    #[serde(default)]
    pub show_path: bool,
    /// Accept credentials in cleartext (default false): URL userinfo (basic auth),
    /// credential-like or `{ env }` headers, signatures, or proxy userinfo over `http://` to
    /// a host that is not loopback. Refused at build time unless this is set; when set,
    /// the sink logs one warning at build.
    #[serde(default)]
    pub allow_insecure: bool,
    /// An egress proxy: an `http` or `https` URL (userinfo becomes the proxy's basic auth;
    /// may be `{ env }`). Default: none, and `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` are never
    /// read. `https` endpoints are tunnelled with `CONNECT`.
    #[serde(default)]
    pub proxy: Option<SecretValue>,
}

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT.as_millis() as u64
}

fn default_connect_timeout_ms() -> u64 {
    DEFAULT_CONNECT_TIMEOUT.as_millis() as u64
}

fn default_max_response_bytes() -> usize {
    DEFAULT_MAX_RESPONSE_BYTES
}

impl HttpConfig {
    /// A config for `url` with every other option at its default.
    pub fn new(url: impl Into<SecretValue>) -> Self {
        HttpConfig {
            url: url.into(),
            method: HttpMethod::default(),
            headers: BTreeMap::new(),
            timeout_ms: default_timeout_ms(),
            connect_timeout_ms: default_connect_timeout_ms(),
            secrets: Vec::new(),
            max_response_bytes: default_max_response_bytes(),
            tls: TlsRoots::default(),
            show_path: false,
            allow_insecure: false,
            proxy: None,
        }
    }
}

/// How a URL-valued option shows in `Debug`: redacted (the path too unless `keep_path`),
/// or the variable's name.
pub(crate) fn shown_url(value: &SecretValue, keep_path: bool) -> String {
    match value {
        SecretValue::Literal(u) if keep_path => ankusa_sink_core::redact_url_keep_path(u),
        SecretValue::Literal(u) => ankusa_sink_core::redact_url(u),
        SecretValue::Env { env } => format!("${env}"),
    }
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("url", &shown_url(&self.url, self.show_path))
            .field("method", &self.method)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout_ms", &self.timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("secrets", &self.secrets.len())
            .field("max_response_bytes", &self.max_response_bytes)
            .field("tls", &self.tls)
            .field("show_path", &self.show_path)
            .field("allow_insecure", &self.allow_insecure)
            // A proxy's path means nothing; its userinfo is a secret.
            .field("proxy", &self.proxy.as_ref().map(|p| shown_url(p, false)))
            .finish()
    }
}

/// Builds an [`HttpSink`](crate::HttpSink); every value is checked by [`build`](Self::build).
#[derive(Debug, Clone)]
pub struct HttpSinkBuilder {
    config: HttpConfig,
}

impl HttpSinkBuilder {
    /// Start from `url` (a literal or [`SecretValue::env`]).
    pub fn new(url: impl Into<SecretValue>) -> Self {
        HttpSinkBuilder {
            config: HttpConfig::new(url),
        }
    }

    /// Start from a config.
    pub fn from_config(config: HttpConfig) -> Self {
        HttpSinkBuilder { config }
    }

    /// The request method.
    pub fn method(mut self, method: HttpMethod) -> Self {
        self.config.method = method;
        self
    }

    /// A static header (replaces an earlier one of the same name).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<SecretValue>) -> Self {
        self.config.headers.insert(name.into(), value.into());
        self
    }

    /// The whole-request timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout_ms = timeout.as_millis().try_into().unwrap_or(u64::MAX);
        self
    }

    /// The connect (TCP + TLS) timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout_ms = timeout.as_millis().try_into().unwrap_or(u64::MAX);
        self
    }

    /// Add a signing secret (after any earlier ones).
    pub fn secret(mut self, secret: impl Into<SecretValue>) -> Self {
        self.config.secrets.push(secret.into());
        self
    }

    /// The response read cap in bytes.
    pub fn max_response_bytes(mut self, max: usize) -> Self {
        self.config.max_response_bytes = max;
        self
    }

    /// Trust the CA certificates in this PEM text (in addition to the platform's, unless
    /// [`tls_roots_only`](Self::tls_roots_only)).
    pub fn ca_pem(mut self, pem: impl Into<String>) -> Self {
        self.config.tls.ca_pem.push(pem.into());
        self
    }

    /// Trust the CA certificates in this PEM file.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.tls.ca_files.push(path.into());
        self
    }

    /// Trust only the configured CA certificates, not the platform's roots.
    pub fn tls_roots_only(mut self, only: bool) -> Self {
        self.config.tls.only = only;
        self
    }

    /// Show the URL's path in `Debug`, `describe`, logs and failure reasons.
    pub fn show_path(mut self, show: bool) -> Self {
        self.config.show_path = show;
        self
    }

    /// Accept credentials over cleartext `http://` to a non-loopback host (warned at build).
    pub fn allow_insecure(mut self, allow: bool) -> Self {
        self.config.allow_insecure = allow;
        self
    }

    /// Send every request through this egress proxy (`http` or `https` URL; userinfo is
    /// the proxy's basic auth).
    pub fn proxy(mut self, proxy: impl Into<SecretValue>) -> Self {
        self.config.proxy = Some(proxy.into());
        self
    }

    /// The config so far.
    pub fn config(&self) -> &HttpConfig {
        &self.config
    }

    /// Check every option and build the sink.
    pub fn build(self) -> Result<crate::HttpSink, ConfigError> {
        crate::HttpSink::from_config(self.config)
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
    /// An environment variable named for a value is not set.
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
    /// A signing secret is empty.
    #[error("signing secret #{0} is empty")]
    EmptySecret(usize),
    /// A `whsec_` signing secret's base64 does not decode (or decodes to nothing).
    #[error("signing secret #{0} starts with whsec_ but is not valid base64")]
    BadWhsec(usize),
    /// A signing secret is shorter than [`MIN_SECRET_BYTES`](crate::MIN_SECRET_BYTES) once
    /// decoded (the length is not shown either).
    #[error(
        "signing secret #{0} is shorter than {min} bytes (after decoding whsec_ base64); Standard Webhooks keys are 24 to 64 bytes",
        min = crate::MIN_SECRET_BYTES
    )]
    ShortSecret(usize),
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
    /// A timeout of zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
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
    /// `tls.only` without any CA certificate would trust nothing.
    #[error("tls.only is set but no ca_files or ca_pem are configured")]
    NoRoots,
    /// The HTTP client could not be built.
    #[error("http client could not be built")]
    Client(#[source] reqwest::Error),
}
