//! `[oauth2]`: OAuth 2.0 client credentials (RFC 6749 §4.4). The sink asks the token
//! endpoint for an access token, sends it as `Authorization: Bearer`, keeps it until 30 s
//! before it expires (one refresh at a time, shared by concurrent deliveries) and, when the
//! destination answers 401, gets a new one and retries that delivery once. A leaf: its
//! [`TokenError`] becomes an `HttpError` in `error.rs`, never the other way.

use ankusa_sink_core::Secret;
use reqwest::header::HeaderValue;
use std::fmt;
use std::time::Duration;
use tokio::time::Instant;
use url::Url;

/// A token is renewed this long before it expires.
const MARGIN: Duration = Duration::from_secs(30);

/// The client's credentials and where to trade them for a token.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct OAuth2Config {
    pub(crate) token_url: Url,
    pub(crate) client_id: String,
    pub(crate) client_secret: Secret,
    pub(crate) scope: Option<String>,
    pub(crate) audience: Option<String>,
}

impl fmt::Debug for OAuth2Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuth2")
            .field(
                "token_url",
                &ankusa_sink_kit::redact_url(self.token_url.as_str()),
            )
            .field("client_id", &self.client_id)
            .field("client_secret", &ankusa_sink_kit::REDACTED)
            .field("scope", &self.scope)
            .field("audience", &self.audience)
            .finish()
    }
}

/// Why no token could be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The token endpoint refused the client (400, 401, 403): its `error` code
    /// (`invalid_client`, `unauthorized_client`, `invalid_scope`, ...) when it gave one.
    #[error("the token endpoint refused the client (HTTP {status}{})", .error.as_deref().map(|e| format!(", {e}")).unwrap_or_default())]
    Refused {
        /// The status.
        status: u16,
        /// The OAuth error code (a token of RFC 6749 §5.2), printable ASCII only.
        error: Option<String>,
    },
    /// The token endpoint answered another error (5xx, 429, ...).
    #[error("the token endpoint answered HTTP {status}")]
    Unavailable {
        /// The status.
        status: u16,
    },
    /// The token endpoint answered 2xx without a usable bearer token.
    #[error("the token endpoint's answer holds no bearer access_token")]
    Malformed,
    /// The token endpoint could not be reached.
    #[error("the token endpoint could not be reached")]
    Unreachable(#[source] reqwest::Error),
}

struct Token {
    bearer: HeaderValue,
    renew_at: Option<Instant>,
}

/// The token cache: one refresh at a time (the lock is held across it).
pub(crate) struct OAuth2 {
    config: OAuth2Config,
    timeout: Duration,
    cache: tokio::sync::Mutex<Option<Token>>,
}

impl fmt::Debug for OAuth2 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.config, f)
    }
}

#[derive(serde::Deserialize)]
struct Answer {
    access_token: Option<String>,
    token_type: Option<String>,
    expires_in: Option<u64>,
    error: Option<String>,
}

impl OAuth2 {
    pub(crate) fn new(config: OAuth2Config, timeout: Duration) -> Self {
        OAuth2 {
            config,
            timeout,
            cache: tokio::sync::Mutex::new(None),
        }
    }

    /// The `Authorization` value to send: the cached token, or a new one.
    pub(crate) async fn bearer(&self, client: &reqwest::Client) -> Result<HeaderValue, TokenError> {
        let mut cache = self.cache.lock().await;
        if let Some(t) = cache.as_ref()
            && t.renew_at.is_none_or(|at| Instant::now() < at)
        {
            return Ok(t.bearer.clone());
        }
        let token = self.fetch(client).await?;
        let bearer = token.bearer.clone();
        *cache = Some(token);
        Ok(bearer)
    }

    /// The destination refused `used` (401): forget it, unless a newer one replaced it.
    pub(crate) async fn refused(&self, used: &HeaderValue) {
        let mut cache = self.cache.lock().await;
        if cache.as_ref().is_some_and(|t| t.bearer == *used) {
            *cache = None;
        }
    }

    async fn fetch(&self, client: &reqwest::Client) -> Result<Token, TokenError> {
        // Built before any await: the serializer is not `Send`.
        let body = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "client_credentials");
            if let Some(s) = &self.config.scope {
                form.append_pair("scope", s);
            }
            if let Some(a) = &self.config.audience {
                form.append_pair("audience", a);
            }
            form.finish()
        };
        let asked = Instant::now();
        let resp = client
            .post(self.config.token_url.clone())
            .basic_auth(
                &self.config.client_id,
                Some(self.config.client_secret.expose()),
            )
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(reqwest::header::ACCEPT, "application/json")
            .body(body)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| TokenError::Unreachable(e.without_url()))?;
        let status = resp.status().as_u16();
        // A token answer is small; a huge one is not a token.
        let body = resp
            .bytes()
            .await
            .map_err(|e| TokenError::Unreachable(e.without_url()))?;
        let answer: Option<Answer> = serde_json::from_slice(&body).ok();
        match status {
            200..=299 => {}
            400 | 401 | 403 => {
                let error = answer
                    .and_then(|a| a.error)
                    .filter(|e| e.len() <= 64 && e.bytes().all(|b| b.is_ascii_graphic()));
                return Err(TokenError::Refused { status, error });
            }
            _ => return Err(TokenError::Unavailable { status }),
        }
        let a = answer.ok_or(TokenError::Malformed)?;
        let bearer_type = a
            .token_type
            .as_deref()
            .is_none_or(|t| t.eq_ignore_ascii_case("bearer"));
        let value = a.access_token.filter(|t| !t.is_empty() && bearer_type);
        let mut bearer = value
            .and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok())
            .ok_or(TokenError::Malformed)?;
        bearer.set_sensitive(true);
        let renew_at = a
            .expires_in
            .map(|s| asked + Duration::from_secs(s).saturating_sub(MARGIN));
        Ok(Token { bearer, renew_at })
    }
}
