//! `[oauth2]`: the client credentials, checked into the token cache's
//! [`OAuth2Config`].

use super::error::ConfigError;
use super::value::{Value, WithEndpoint, cleartext, has_host, has_userinfo, http_url};
use crate::oauth2::OAuth2Config;
use reqwest::header::AUTHORIZATION;
use serde::Deserialize;
use url::Url;

/// `[oauth2]` in the sink file.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OAuth2Repr {
    pub(super) token_url: Value,
    pub(super) client_id: String,
    pub(super) client_secret: Value,
    pub(super) scope: Option<String>,
    pub(super) audience: Option<String>,
}

/// An `http`/`https` token URL with a host, one source of `Authorization` only, and
/// neither the client secret nor the bearer token in cleartext unless `allow_insecure`.
impl TryFrom<WithEndpoint<'_, OAuth2Repr>> for OAuth2Config {
    type Error = ConfigError;

    fn try_from(w: WithEndpoint<'_, OAuth2Repr>) -> Result<Self, ConfigError> {
        let (o, e) = (w.repr, w.endpoint);
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
        if e.headers.contains_key(AUTHORIZATION) || has_userinfo(e.url) {
            return Err(ConfigError::TwoAuthorizations);
        }
        let clear =
            |u: &Url| u.scheme() == "http" && (cleartext(u) || e.proxy.is_some_and(cleartext));
        if !e.allow_insecure {
            if clear(&token_url) {
                return Err(ConfigError::Insecure("the oauth2 client secret".into()));
            }
            if clear(e.url) {
                return Err(ConfigError::Insecure("the oauth2 bearer token".into()));
            }
        }
        let (client_secret, _) = o
            .client_secret
            .resolve(|| "oauth2.client_secret".to_owned())?;
        if o.client_id.is_empty() || client_secret.expose().is_empty() {
            return Err(ConfigError::Zero("oauth2 client_id and client_secret"));
        }
        Ok(OAuth2Config {
            token_url,
            client_id: o.client_id,
            client_secret,
            scope: o.scope,
            audience: o.audience,
        })
    }
}
