//! [`ConfigError`]: why an HTTP sink config was refused.

use ankusa_message::signing::SigningError;
use std::path::PathBuf;

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
    CloudEventsType(ankusa_message::cloudevents::TypeError),
    /// Both `secrets` and `[signing]`: two lists of signing keys, one of which would be
    /// ignored.
    #[error(
        "secrets and [signing] both set: `secrets` is the older spelling of `[signing] secrets`, set one of them"
    )]
    SecretsAndSigning,
    /// A key the sink does not know.
    #[error("unknown field `{0}`")]
    UnknownField(String),
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
    /// `deny_private` refuses the literal address of `oauth2.token_url`.
    #[error(
        "oauth2.token_url address {0} is private and deny_private is set (allow_cidrs can let it through)"
    )]
    PrivateTokenUrl(String),
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
