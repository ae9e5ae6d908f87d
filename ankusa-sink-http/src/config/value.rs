//! What the feature modules share: a value that may be secret ([`Value`]) and the URL
//! checks. A leaf of `config`: it uses nothing of it but [`ConfigError`].

use super::error::ConfigError;
use ankusa_sink_core::{Secret, SecretEnvError};
use ankusa_sink_kit::is_loopback_host;
use serde::Deserialize;
use url::Url;

/// A value in the sink file that may be secret: a plain string, or `{ env = "VAR" }` (read
/// when the file is parsed; deprecated beside the registry's `${VAR}`, still read so
/// existing files work).
#[derive(Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum Value {
    /// The value itself.
    Plain(Secret),
    /// The name of an environment variable holding the value.
    Env(EnvRef),
    /// A value given in code and marked secret
    /// ([`HttpSinkBuilder::secret_header`](super::HttpSinkBuilder::secret_header)).
    #[serde(skip)]
    Marked(Secret),
}

/// `{ env = "VAR" }` and nothing else: a stray key is an error, not ignored, so what the
/// file says is what is read.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EnvRef {
    env: String,
}

impl Value {
    /// The value, and whether it is marked secret (`{ env }` or [`Value::Marked`]); `what`
    /// names it in the error (never the value).
    pub(super) fn resolve(
        self,
        what: impl FnOnce() -> String,
    ) -> Result<(Secret, bool), ConfigError> {
        match self {
            Value::Plain(s) => Ok((s, false)),
            Value::Marked(s) => Ok((s, true)),
            Value::Env(EnvRef { env }) => match Secret::from_env(&env) {
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

    /// The variable named by the deprecated `{ env = "VAR" }` form, for its warning.
    pub(super) fn env_var(&self) -> Option<&str> {
        match self {
            Value::Env(EnvRef { env }) => Some(env),
            Value::Plain(_) | Value::Marked(_) => None,
        }
    }
}

/// `value` parsed as an absolute URL; `what` names the option in an environment error.
pub(super) fn http_url(
    value: Value,
    what: &'static str,
    invalid: fn(url::ParseError) -> ConfigError,
) -> Result<Url, ConfigError> {
    let (raw, _) = value.resolve(|| what.to_owned())?;
    Url::parse(raw.expose()).map_err(invalid)
}

pub(super) fn has_host(url: Url, none: ConfigError) -> Result<Url, ConfigError> {
    if url.host_str().is_none_or(str::is_empty) {
        return Err(none);
    }
    Ok(url)
}

pub(super) fn has_userinfo(url: &Url) -> bool {
    !url.username().is_empty() || url.password().is_some()
}

/// Whether talking to `url` crosses the network in cleartext: plain `http` to a host that
/// is not loopback.
pub(super) fn cleartext(url: &Url) -> bool {
    url.scheme() == "http" && !url.host_str().is_some_and(is_loopback_host)
}

/// What a feature's checks need from the rest of the file: where the sink sends, through
/// what, with which headers.
pub(super) struct Endpoint<'a> {
    pub(super) url: &'a Url,
    pub(super) proxy: Option<&'a Url>,
    pub(super) headers: &'a reqwest::header::HeaderMap,
    pub(super) allow_insecure: bool,
}

/// A feature's `...Repr` with the [`Endpoint`] its `TryFrom` checks it against.
pub(super) struct WithEndpoint<'a, R> {
    pub(super) repr: R,
    pub(super) endpoint: &'a Endpoint<'a>,
}
