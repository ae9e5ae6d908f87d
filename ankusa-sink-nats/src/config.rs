//! The operator's keys (`Repr`), validated once into an always-valid [`NatsConfig`].

use crate::connection::NatsConnection;
use ankusa_message::MessageOptions;
use ankusa_message::template::{AbsentTenant, KeyTemplate, TemplateError};
use ankusa_sink_core::Secret;
use ankusa_sink_kit::{is_loopback_host, timeout_ms};
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default wait for the JetStream publish ack: 5 s.
pub const DEFAULT_PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// Default wait for the connection (TCP, TLS, `CONNECT`): 5 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The operator's keys, exactly as written in a sink file (`type` already removed).
#[derive(Deserialize)]
struct Repr {
    #[serde(flatten)]
    conn: NatsConnection,
    subject: Option<String>,
    subject_template: Option<String>,
    subject_values_may_add_tokens: Option<bool>,
    /// `format`, `cloudevents_type`, `[signing]`, `inline_max_bytes`.
    #[serde(flatten)]
    message: MessageOptions,
    /// Whatever no option took: refused (`flatten` cannot deny unknown fields itself).
    #[serde(flatten)]
    unknown: BTreeMap<String, IgnoredAny>,
}

/// How the sink proves who it is. At most one scheme per sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Auth {
    /// No credentials.
    None,
    /// `user` + `password` (or `nats://user:password@host` in the URL).
    UserPassword(String, Secret),
    /// `token` (or `nats://token@host` in the URL).
    Token(Secret),
    /// An NKey seed (`SU...`): the sink signs the server's nonce.
    NkeySeed(Secret),
    /// A `.creds` file (JWT and NKey seed), read at each connection.
    CredentialsFile(PathBuf),
}

/// A valid NATS JetStream sink configuration.
///
/// Built from a sink file (`type = "nats"`, through serde) or with [`NatsConfig::new`] and
/// the `with_*` builders; both refuse what the sink could never use. The URL is kept
/// without its userinfo: credentials written there move to the fields that hold them as
/// [`Secret`]s, so `Debug` never prints one.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Repr")]
#[non_exhaustive]
pub struct NatsConfig {
    pub(crate) url: String,
    pub(crate) tls: bool,
    pub(crate) subject: KeyTemplate,
    pub(crate) auth: Auth,
    pub(crate) tls_ca_file: Option<PathBuf>,
    pub(crate) client_name: Option<String>,
    pub(crate) timeout_ms: NonZeroU64,
    pub(crate) connect_timeout_ms: NonZeroU64,
    pub(crate) allow_insecure: bool,
    pub(crate) subject_values_may_add_tokens: bool,
    pub(crate) message: MessageOptions,
}

/// Why a configuration was refused: names the option, never a secret value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key the sink does not know.
    #[error("unknown field `{0}`")]
    UnknownField(String),
    /// The URL is not a `nats://` or `tls://` URL with a host.
    #[error("url: not a nats:// or tls:// URL with a host ({0})")]
    Url(&'static str),
    /// Neither `subject` nor `subject_template`, or both.
    #[error("exactly one of subject and subject_template is required")]
    Subject,
    /// A subject NATS would refuse for a publish.
    #[error("{key}: {reason}")]
    BadSubject {
        /// `subject` or `subject_template`.
        key: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `subject_template` does not parse.
    #[error("subject_template: {0}")]
    Template(#[from] TemplateError),
    /// More than one authentication scheme.
    #[error(
        "credentials: give one of user + password, token, nkey_seed, credentials_file \
         (URL userinfo counts as user + password or token)"
    )]
    TwoCredentials,
    /// `user` without `password` or the other way round.
    #[error("user and password go together")]
    UserPassword,
    /// The NKey seed is not a valid user seed (`SU...`).
    #[error("nkey_seed: not a valid NKey user seed")]
    NkeySeed,
    /// An empty `client_name`, token or password.
    #[error("{0} must not be empty")]
    Empty(&'static str),
    /// A user + password or a token over `nats://` to a host that is not loopback: the
    /// login would cross the network unencrypted.
    #[error(
        "credentials: nats:// sends the password or token unencrypted to a host that is not \
         loopback; use tls://, or set allow_insecure = true to accept that"
    )]
    Insecure,
    /// A source option NATS or the source would refuse (`stream`, `consumer`, ...).
    #[error("{key}: {reason}")]
    Value {
        /// The option.
        key: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl TryFrom<Repr> for NatsConfig {
    type Error = ConfigError;

    fn try_from(r: Repr) -> Result<Self, ConfigError> {
        if let Some(k) = r.unknown.keys().next() {
            return Err(ConfigError::UnknownField(k.clone()));
        }
        let mut c = NatsConfig::from_connection(r.conn)?;
        c.subject = match (r.subject, r.subject_template) {
            (Some(s), None) => literal_subject(&s)?,
            (None, Some(t)) => template_subject(&t)?,
            _ => return Err(ConfigError::Subject),
        };
        c.subject_values_may_add_tokens = r.subject_values_may_add_tokens.unwrap_or(false);
        c.message = r.message;
        Ok(c)
    }
}

impl NatsConfig {
    /// The defaults for `url` (`nats://host:port` or `tls://host:port`; userinfo is taken
    /// as user + password, or as a token when it has no password) and a fixed `subject`.
    /// Fails as `TryFrom` would.
    pub fn new(url: impl AsRef<str>, subject: impl AsRef<str>) -> Result<Self, ConfigError> {
        let mut c = NatsConfig::parse_url(url.as_ref(), false)?;
        c.subject = literal_subject(subject.as_ref())?;
        c.cleartext_checked()
    }

    /// Set every message option at once, as the sink file's keys do:
    /// - `format`/`cloudevents_type`: CloudEvents instead of Message v1, by the CloudEvents
    ///   NATS binding (binary mode as `ce-` headers beside the data, structured mode as the
    ///   JSON event).
    /// - `[signing]`: Standard Webhooks signing over the exact Message v1 bytes
    ///   (`webhook-id`, `webhook-timestamp`, `webhook-signature` as message headers);
    ///   consumers check it with `ankusa_message::verify`.
    /// - `inline_max_bytes` (default 65,536 bytes, used as it is): bodies over it travel by
    ///   `ctx.claim`.
    pub fn with_message(mut self, message: MessageOptions) -> Self {
        self.message = message;
        self
    }

    /// The message options.
    pub fn message(&self) -> &MessageOptions {
        &self.message
    }

    /// The connection part of a sink or source file, validated (the subject a
    /// placeholder until the caller sets one).
    pub(crate) fn from_connection(k: NatsConnection) -> Result<Self, ConfigError> {
        let mut c = NatsConfig::parse_url(&k.url, k.allow_insecure.unwrap_or(false))?;
        let mut schemes = Vec::new();
        match (k.user, k.password) {
            (Some(u), Some(p)) => schemes.push(Auth::UserPassword(u, p)),
            (None, None) => {}
            _ => return Err(ConfigError::UserPassword),
        }
        schemes.extend(k.token.map(Auth::Token));
        schemes.extend(k.nkey_seed.map(Auth::NkeySeed));
        schemes.extend(k.credentials_file.map(Auth::CredentialsFile));
        for auth in schemes {
            c = c.with_auth(auth)?;
        }
        c.tls_ca_file = k.tls_ca_file;
        if let Some(name) = k.client_name {
            c = c.with_client_name(name)?;
        }
        if let Some(ms) = k.timeout_ms {
            c.timeout_ms = ms;
        }
        if let Some(ms) = k.connect_timeout_ms {
            c.connect_timeout_ms = ms;
        }
        c.cleartext_checked()
    }

    /// The URL with a placeholder subject, before the subject is set; `allow_insecure` as
    /// the key says (userinfo in the URL is checked against it).
    pub(crate) fn parse_url(raw: &str, allow_insecure: bool) -> Result<Self, ConfigError> {
        let mut url = url::Url::parse(raw).map_err(|_| ConfigError::Url("does not parse"))?;
        let tls = match url.scheme() {
            "nats" => false,
            "tls" => true,
            _ => return Err(ConfigError::Url("scheme must be nats or tls")),
        };
        if url.host_str().is_none_or(str::is_empty) {
            return Err(ConfigError::Url("no host"));
        }
        if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
            return Err(ConfigError::Url("no path, query or fragment"));
        }
        let user = percent_decode(url.username());
        let password = url.password().map(percent_decode);
        let auth = match (user.is_empty(), password) {
            (true, None) => Auth::None,
            (false, None) => Auth::Token(Secret::new(user)),
            (false, Some(p)) => Auth::UserPassword(user, Secret::new(p)),
            (true, Some(_)) => return Err(ConfigError::UserPassword),
        };
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let mut url = url.to_string();
        if url.ends_with('/') {
            url.pop();
        }
        let c = NatsConfig {
            url,
            tls,
            subject: KeyTemplate::literal("ankusa", AbsentTenant::Default),
            auth: Auth::None,
            tls_ca_file: None,
            client_name: None,
            timeout_ms: timeout_ms(DEFAULT_PUBLISH_TIMEOUT),
            connect_timeout_ms: timeout_ms(DEFAULT_CONNECT_TIMEOUT),
            allow_insecure,
            subject_values_may_add_tokens: false,
            message: MessageOptions::new(),
        };
        c.with_auth(auth)
    }

    /// Set one authentication scheme; refuses a second one.
    fn with_auth(mut self, auth: Auth) -> Result<Self, ConfigError> {
        match &auth {
            Auth::None => return Ok(self),
            Auth::UserPassword(u, p) if u.is_empty() || p.expose().is_empty() => {
                return Err(ConfigError::Empty("user and password"));
            }
            Auth::Token(t) if t.expose().is_empty() => return Err(ConfigError::Empty("token")),
            Auth::NkeySeed(seed) => {
                let ok = seed.expose().starts_with("SU")
                    && nkeys::KeyPair::from_seed(seed.expose()).is_ok();
                if !ok {
                    return Err(ConfigError::NkeySeed);
                }
            }
            _ => {}
        }
        if self.auth != Auth::None {
            return Err(ConfigError::TwoCredentials);
        }
        self.auth = auth;
        Ok(self)
    }

    /// `self`, unless a password or token would go over `nats://` to a host that is not
    /// loopback without `allow_insecure`. An NKey seed or a `.creds` file never crosses the
    /// wire (the server's nonce is signed), so they pass. A `nats://` server that requires
    /// TLS is upgraded by the client, but that is not known before connecting: `tls://`
    /// states it.
    pub(crate) fn cleartext_checked(self) -> Result<Self, ConfigError> {
        let secret_on_wire = matches!(self.auth, Auth::UserPassword(..) | Auth::Token(_));
        let remote = url::Url::parse(&self.url)
            .ok()
            .and_then(|u| u.host_str().map(|h| !is_loopback_host(h)))
            .unwrap_or(true);
        if secret_on_wire && !self.tls && remote && !self.allow_insecure {
            return Err(ConfigError::Insecure);
        }
        Ok(self)
    }

    /// Accept a password or token over `nats://` to a host that is not loopback (the
    /// `allow_insecure` key; default `false`: such a config is refused).
    ///
    /// # Errors
    /// [`ConfigError::Insecure`] for `false` when the config already holds such a login.
    pub fn with_allow_insecure(mut self, allow: bool) -> Result<Self, ConfigError> {
        self.allow_insecure = allow;
        self.cleartext_checked()
    }

    /// Let a value the subject template inserts hold `.` and so add subject tokens (the
    /// `subject_values_may_add_tokens` key; default `false`: such a hook fails permanent,
    /// nothing sent, so a hook's value cannot move it past a subscriber's `*`).
    pub fn with_subject_values_may_add_tokens(mut self, allow: bool) -> Self {
        self.subject_values_may_add_tokens = allow;
        self
    }

    /// Whether a value the subject template inserts may hold `.`.
    pub fn subject_values_may_add_tokens(&self) -> bool {
        self.subject_values_may_add_tokens
    }

    /// Whether a cleartext login to a remote host was accepted (`allow_insecure`).
    pub fn allow_insecure(&self) -> bool {
        self.allow_insecure
    }

    /// Publish every hook to `subject` (taken as it is: braces are text).
    pub fn with_subject(mut self, subject: &str) -> Result<Self, ConfigError> {
        self.subject = literal_subject(subject)?;
        Ok(self)
    }

    /// Publish each hook to the subject `template` renders for it: `{source_id}`,
    /// `{tenant_id}` (`default` without a tenant: NATS refuses an empty token), `{id}`,
    /// `{dedupe_key}`.
    pub fn with_subject_template(mut self, template: &str) -> Result<Self, ConfigError> {
        self.subject = template_subject(template)?;
        Ok(self)
    }

    /// Log in with `user` and `password`.
    pub fn with_user_password(
        self,
        user: impl Into<String>,
        password: Secret,
    ) -> Result<Self, ConfigError> {
        self.with_auth(Auth::UserPassword(user.into(), password))?
            .cleartext_checked()
    }

    /// Log in with a token.
    pub fn with_token(self, token: Secret) -> Result<Self, ConfigError> {
        self.with_auth(Auth::Token(token))?.cleartext_checked()
    }

    /// Log in with an NKey user seed (`SU...`).
    pub fn with_nkey_seed(self, seed: Secret) -> Result<Self, ConfigError> {
        self.with_auth(Auth::NkeySeed(seed))
    }

    /// Log in with a `.creds` file (user JWT and NKey seed), read at each connection.
    pub fn with_credentials_file(self, path: impl Into<PathBuf>) -> Result<Self, ConfigError> {
        self.with_auth(Auth::CredentialsFile(path.into()))
    }

    /// Trust the PEM certificates in `path` (besides the system's) for `tls://`.
    pub fn with_tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls_ca_file = Some(path.into());
        self
    }

    /// The client name the server shows for this connection.
    pub fn with_client_name(mut self, name: impl Into<String>) -> Result<Self, ConfigError> {
        let name = name.into();
        if name.is_empty() {
            return Err(ConfigError::Empty("client_name"));
        }
        self.client_name = Some(name);
        Ok(self)
    }

    /// Set the wait for the JetStream publish ack (rounded down to whole ms, at least 1).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout_ms = timeout_ms(timeout);
        self
    }

    /// Set the connection timeout (rounded down to whole ms, at least 1).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout_ms = timeout_ms(timeout);
        self
    }

    /// The server URL, without userinfo.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The subject or subject template, as configured.
    pub fn subject(&self) -> &str {
        self.subject.as_str()
    }

    /// The wait for the JetStream publish ack.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.get())
    }

    /// The connection timeout.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms.get())
    }

    /// The CA file trusted for `tls://`, if any.
    pub fn tls_ca_file(&self) -> Option<&Path> {
        self.tls_ca_file.as_deref()
    }
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

fn literal_subject(subject: &str) -> Result<KeyTemplate, ConfigError> {
    if let Some(reason) = subject_problem(subject) {
        return Err(ConfigError::BadSubject {
            key: "subject",
            reason,
        });
    }
    Ok(KeyTemplate::literal(subject, AbsentTenant::Default))
}

fn template_subject(template: &str) -> Result<KeyTemplate, ConfigError> {
    let t = KeyTemplate::parse(template, AbsentTenant::Default)?;
    if t.literal_text().chars().any(refused_char) {
        return Err(ConfigError::BadSubject {
            key: "subject_template",
            reason: "whitespace or control characters",
        });
    }
    // A literal `$` start would make every rendered subject one the sink refuses.
    if template.starts_with('$') {
        return Err(ConfigError::BadSubject {
            key: "subject_template",
            reason: "it starts with `$` (the server's own APIs: $JS, $SYS, $KV, ...)",
        });
    }
    if t.is_static()
        && let Some(reason) = subject_problem(&t.literal_text())
    {
        return Err(ConfigError::BadSubject {
            key: "subject_template",
            reason,
        });
    }
    Ok(t)
}

/// A character no publish subject may hold.
pub(crate) fn refused_char(c: char) -> bool {
    c.is_whitespace() || c.is_control()
}

/// The longest subject published: the server reads a publish's whole control line
/// (`HPUB <subject> <reply inbox> <header bytes> <total bytes>`) into `max_control_line`,
/// 4,096 bytes by default, and closes the connection over it (`-ERR 'maximum control line
/// exceeded'`), failing every publish in flight. The rest of the line takes at most 96
/// bytes here (the 52-byte `_INBOX.<nuid>.<nuid>` reply, two sizes, spaces).
pub(crate) const MAX_SUBJECT_BYTES: usize = 4_000;

/// What makes `subject` unusable for a publish, if anything: empty, starting with `$`,
/// empty tokens, whitespace or control characters, wildcard tokens, over
/// [`MAX_SUBJECT_BYTES`].
pub(crate) fn subject_problem(subject: &str) -> Option<&'static str> {
    if subject.is_empty() {
        return Some("empty");
    }
    // `$JS.API.>`, `$SYS.>`, `$KV.>` ... are the server's own APIs: a hook whose value
    // starts a subject template must not be able to purge or delete a stream.
    if subject.starts_with('$') {
        return Some("it starts with `$` (the server's own APIs: $JS, $SYS, $KV, ...)");
    }
    if subject.chars().any(refused_char) {
        return Some("whitespace or control characters");
    }
    if subject.len() > MAX_SUBJECT_BYTES {
        return Some(
            "longer than 4000 bytes (the server closes the connection over its 4096-byte control line)",
        );
    }
    for token in subject.split('.') {
        match token {
            "" => return Some("an empty token (leading, trailing or double dot)"),
            "*" | ">" => return Some("a wildcard token (* or >) cannot be published to"),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_message::cloudevents::CloudEvents;
    use ankusa_message::signing::Signer;

    fn parse(toml: &str) -> Result<NatsConfig, String> {
        let v: serde_json::Value = toml_like(toml);
        serde_json::from_value::<NatsConfig>(v).map_err(|e| e.to_string())
    }

    /// The tests write JSON objects; the registry feeds TOML through the same serde path.
    fn toml_like(json: &str) -> serde_json::Value {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn defaults_and_keys() {
        let c = parse(r#"{"url": "nats://127.0.0.1:4222", "subject": "hooks.in"}"#).unwrap();
        assert_eq!(c.url(), "nats://127.0.0.1:4222");
        assert_eq!(c.subject(), "hooks.in");
        assert_eq!(c.timeout(), DEFAULT_PUBLISH_TIMEOUT);
        assert_eq!(c.message().inline_max_bytes().get(), 65_536);
        assert_eq!(c.auth, Auth::None);
        assert!(!c.tls);
        let c = parse(
            r#"{"url": "tls://h:4443", "subject_template": "hooks.{tenant_id}.{source_id}",
                "timeout_ms": 250, "inline_max_bytes": 1000000, "client_name": "a"}"#,
        )
        .unwrap();
        assert!(c.tls);
        assert_eq!(c.timeout(), Duration::from_millis(250));
        assert_eq!(c.message().inline_max_bytes().get(), 1_000_000);
        assert!(parse(r#"{"url": "nats://h", "subject": "a", "nope": 1}"#).is_err());
    }

    #[test]
    fn url_userinfo_moves_to_secrets() {
        let c = NatsConfig::new("nats://alice:s3cr%40t@127.0.0.1:4222", "a").unwrap();
        assert_eq!(c.url(), "nats://127.0.0.1:4222");
        assert_eq!(
            c.auth,
            Auth::UserPassword("alice".into(), Secret::new("s3cr@t"))
        );
        let debug = format!("{c:?}");
        assert!(!debug.contains("s3cr"), "{debug}");
        let c = NatsConfig::new("nats://tok3n@127.0.0.1:4222", "a").unwrap();
        assert_eq!(c.auth, Auth::Token(Secret::new("tok3n")));
        assert!(!format!("{c:?}").contains("tok3n"));
        assert_eq!(
            c.with_token(Secret::new("x")),
            Err(ConfigError::TwoCredentials)
        );
    }

    #[test]
    fn refusals_name_the_key_not_the_value() {
        for (json, want) in [
            (r#"{"url": "http://h", "subject": "a"}"#, "url"),
            (r#"{"url": "nats://h/x", "subject": "a"}"#, "url"),
            (r#"{"url": "nats://h"}"#, "exactly one"),
            (
                r#"{"url": "nats://h", "subject": "a", "subject_template": "b"}"#,
                "exactly one",
            ),
            (r#"{"url": "nats://h", "subject": "a..b"}"#, "empty token"),
            (r#"{"url": "nats://h", "subject": "a.>"}"#, "wildcard"),
            (r#"{"url": "nats://h", "subject": "a b"}"#, "whitespace"),
            (
                r#"{"url": "nats://h", "subject": "$JS.API.STREAM.PURGE.X"}"#,
                "subject: it starts with `$`",
            ),
            (
                r#"{"url": "nats://h", "subject_template": "$KV.hooks.{id}"}"#,
                "subject_template: it starts with `$`",
            ),
            (
                r#"{"url": "nats://h", "subject_template": "${source_id}"}"#,
                "subject_template: it starts with `$`",
            ),
            (
                r#"{"url": "nats://h", "subject_template": "a.{nope}"}"#,
                "subject_template",
            ),
            (
                r#"{"url": "nats://h", "subject": "a", "user": "u"}"#,
                "together",
            ),
            (
                r#"{"url": "nats://h", "subject": "a", "token": "hunter2", "user": "u", "password": "hunter2"}"#,
                "one of",
            ),
            (
                r#"{"url": "nats://h", "subject": "a", "nkey_seed": "hunter2"}"#,
                "nkey_seed",
            ),
        ] {
            let err = parse(json).unwrap_err();
            assert!(err.contains(want), "{json}: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn a_cleartext_login_to_a_remote_host_needs_allow_insecure() {
        for (json, ok) in [
            (r#""url": "nats://u:hunter2@nats.example""#, false),
            (r#""url": "nats://hunter2@nats.example""#, false),
            (
                r#""url": "nats://nats.example", "user": "u", "password": "hunter2""#,
                false,
            ),
            (r#""url": "nats://nats.example", "token": "hunter2""#, false),
            (
                r#""url": "nats://u:hunter2@nats.example", "allow_insecure": true"#,
                true,
            ),
            (
                r#""url": "nats://nats.example", "token": "hunter2", "allow_insecure": true"#,
                true,
            ),
            (r#""url": "tls://u:hunter2@nats.example""#, true),
            (r#""url": "nats://u:hunter2@127.0.0.1""#, true),
            (
                r#""url": "nats://nats.example", "credentials_file": "/x.creds""#,
                true,
            ),
        ] {
            let r = parse(&format!(r#"{{{json}, "subject": "a"}}"#));
            match (r, ok) {
                (Ok(_), true) => {}
                (Err(e), false) => {
                    assert!(
                        e.starts_with("credentials:") && e.contains("allow_insecure"),
                        "{e}"
                    );
                    assert!(!e.contains("hunter2"), "{e}");
                }
                (r, _) => panic!("{json}: {r:?}"),
            }
        }
        assert_eq!(
            NatsConfig::new("nats://u:p@nats.example", "a").unwrap_err(),
            ConfigError::Insecure
        );
        let remote = NatsConfig::new("nats://nats.example", "a").unwrap();
        assert_eq!(
            remote.clone().with_token(Secret::new("t")).unwrap_err(),
            ConfigError::Insecure
        );
        let allowed = remote.with_allow_insecure(true).unwrap();
        let c = allowed.with_token(Secret::new("t")).unwrap();
        assert!(c.allow_insecure());
        assert_eq!(
            c.with_allow_insecure(false).unwrap_err(),
            ConfigError::Insecure
        );
    }

    #[test]
    fn a_subject_over_the_control_line_is_refused() {
        let at = format!("a.{}", "x".repeat(MAX_SUBJECT_BYTES - 2));
        assert_eq!(subject_problem(&at), None);
        let over = format!("{at}x");
        assert!(
            subject_problem(&over)
                .unwrap()
                .contains("longer than 4000 bytes")
        );
        assert_eq!(subject_problem("a.é.😀.\u{FFFD}.\u{FFFF}"), None);
    }

    #[test]
    fn nkey_seed_is_checked() {
        let kp = nkeys::KeyPair::new_user();
        let seed = kp.seed().unwrap();
        let c = NatsConfig::new("nats://h", "a")
            .unwrap()
            .with_nkey_seed(Secret::new(seed.clone()))
            .unwrap();
        assert!(!format!("{c:?}").contains(&seed));
    }

    #[test]
    fn message_keys_are_read_and_unknown_keys_refused() {
        let c = parse(
            r#"{"url": "nats://127.0.0.1", "subject": "s", "inline_max_bytes": 10,
                "signing": {"secrets": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}}"#,
        )
        .unwrap();
        assert_eq!(c.message().inline_max_bytes().get(), 10);
        assert_eq!(c.message().signing().map(Signer::len), Some(1));
        let ce = parse(
            r#"{"url": "nats://127.0.0.1", "subject": "s", "format": "cloudevents-structured",
                "cloudevents_type": "t.x"}"#,
        )
        .unwrap();
        assert_eq!(
            ce.message().cloudevents().map(CloudEvents::event_type),
            Some("t.x")
        );
        let e = parse(r#"{"url": "nats://127.0.0.1", "subject": "s", "bogus": 1}"#).unwrap_err();
        assert!(e.contains("unknown field `bogus`"), "{e}");
    }
}
