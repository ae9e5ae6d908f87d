//! `[oauth2]`: OAuth 2.0 client credentials (RFC 6749 §4.4). The sink asks the token
//! endpoint for an access token, sends it as `Authorization: Bearer`, keeps it until 30 s
//! before it expires (one refresh at a time, shared by concurrent deliveries, and so is a
//! refresh that failed) and, when the destination answers 401, gets a new one and retries
//! that delivery once, at most once per [`MIN_TOKEN_LIFETIME`]. The answer is not trusted:
//! read up to [`MAX_ANSWER_BYTES`], its lifetime clamped to [`MAX_TOKEN_LIFETIME`]. A leaf:
//! its [`TokenError`] becomes an `HttpError` in `error.rs`, never the other way.

use ankusa_sink_core::Secret;
use reqwest::header::HeaderValue;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use url::Url;

/// A token is renewed this long before it expires.
const MARGIN: Duration = Duration::from_secs(30);

/// The most of a token endpoint's answer read (64 KiB): a token answer is a few hundred
/// bytes; a larger one is not a token (and is not held in memory).
pub(crate) const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The longest a token is kept, whatever its `expires_in` says (one day): a lifetime near
/// `u64::MAX` seconds cannot be added to a clock.
pub(crate) const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

/// A token the destination refused (401) is replaced at most once per this (60 s): a
/// destination that refuses every token costs one token request a minute, not one per
/// delivery.
pub(crate) const MIN_TOKEN_LIFETIME: Duration = Duration::from_secs(60);

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

/// Why no token could be had. Cloned when a failed refresh is shared by the deliveries that
/// waited for it.
#[derive(Debug, Clone, thiserror::Error)]
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
    /// The token endpoint answered 2xx with more than 64 KiB (`MAX_ANSWER_BYTES`).
    #[error("the token endpoint's answer is over 64 KiB: not a token answer")]
    TooLarge,
    /// `deny_private`: the token endpoint's name resolves only to refused addresses;
    /// nothing was sent to it.
    #[error("the token endpoint: {0}")]
    PrivateEndpoint(String),
    /// The token endpoint could not be reached.
    #[error("the token endpoint could not be reached")]
    Unreachable(#[source] Arc<reqwest::Error>),
}

struct Token {
    bearer: HeaderValue,
    renew_at: Option<Instant>,
}

/// What the token cache holds, behind its lock.
#[derive(Default)]
struct State {
    token: Option<Token>,
    /// How the last refresh failed, for the deliveries that waited on it.
    failed: Option<TokenError>,
    /// When a 401 last made the cache drop a token.
    dropped_at: Option<Instant>,
}

/// The token cache: one refresh at a time (the lock is held across it).
pub(crate) struct OAuth2 {
    config: OAuth2Config,
    timeout: Duration,
    state: tokio::sync::Mutex<State>,
    /// Refreshes finished (each under the lock): a delivery that saw this change while it
    /// waited for the lock takes that refresh's outcome instead of asking again.
    refreshes: AtomicU64,
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
    #[serde(default, deserialize_with = "seconds")]
    expires_in: Option<u64>,
    error: Option<String>,
}

/// `expires_in` as a number or a string of one (`"3599"`: Azure AD v1), whole or not;
/// anything else (negative, not a number) is as if absent. Saturates at `u64::MAX`.
fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::Deserialize as _;
    let v = Option::<serde_json::Value>::deserialize(d)?;
    let n = match v {
        Some(serde_json::Value::Number(n)) => n.as_f64(),
        Some(serde_json::Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    // `as` saturates a float; it is exact far beyond the one day a lifetime is clamped to.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(n.filter(|f| f.is_finite() && *f >= 0.0).map(|f| f as u64))
}

impl OAuth2 {
    pub(crate) fn new(config: OAuth2Config, timeout: Duration) -> Self {
        OAuth2 {
            config,
            timeout,
            state: tokio::sync::Mutex::new(State::default()),
            refreshes: AtomicU64::new(0),
        }
    }

    /// The `Authorization` value to send: the cached token, or a new one. A refresh that
    /// failed while this call waited for the lock is this call's failure too: one request
    /// to the token endpoint per wave of deliveries, not one per delivery.
    pub(crate) async fn bearer(&self, client: &reqwest::Client) -> Result<HeaderValue, TokenError> {
        let seen = self.refreshes.load(Ordering::Acquire);
        let mut state = self.state.lock().await;
        if let Some(t) = state.token.as_ref()
            && t.renew_at.is_none_or(|at| Instant::now() < at)
        {
            return Ok(t.bearer.clone());
        }
        if self.refreshes.load(Ordering::Acquire) != seen
            && let Some(e) = &state.failed
        {
            return Err(e.clone());
        }
        let fetched = self.fetch(client).await;
        self.refreshes.fetch_add(1, Ordering::AcqRel);
        match fetched {
            Ok(token) => {
                let bearer = token.bearer.clone();
                state.token = Some(token);
                state.failed = None;
                Ok(bearer)
            }
            Err(e) => {
                state.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    /// The destination refused `used` (401). Whether the delivery may try once more with
    /// what [`bearer`](Self::bearer) gives next: yes when a newer token replaced `used`, or
    /// when `used` is dropped now; no when a 401 already dropped a token less than
    /// [`MIN_TOKEN_LIFETIME`] ago (`used` is kept, and the 401 is the answer).
    pub(crate) async fn refused(&self, used: &HeaderValue) -> bool {
        let mut state = self.state.lock().await;
        if state.token.as_ref().is_none_or(|t| t.bearer != *used) {
            return true;
        }
        let now = Instant::now();
        if state
            .dropped_at
            .is_some_and(|at| now.duration_since(at) < MIN_TOKEN_LIFETIME)
        {
            return false;
        }
        state.token = None;
        state.dropped_at = Some(now);
        true
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
        let unreachable = |e: reqwest::Error| match crate::error::guard_refusal(&e) {
            Some(refused) => TokenError::PrivateEndpoint(refused),
            None => TokenError::Unreachable(Arc::new(e.without_url())),
        };
        let mut resp = client
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
            .map_err(unreachable)?;
        let status = resp.status().as_u16();
        let body = read_capped(&mut resp).await;
        match status {
            200..=299 => {}
            400 | 401 | 403 => {
                let error = body
                    .ok()
                    .flatten()
                    .and_then(|b| serde_json::from_slice::<Answer>(&b).ok())
                    .and_then(|a| a.error)
                    .filter(|e| e.len() <= 64 && e.bytes().all(|b| b.is_ascii_graphic()));
                return Err(TokenError::Refused { status, error });
            }
            _ => return Err(TokenError::Unavailable { status }),
        }
        let body = body.map_err(unreachable)?.ok_or(TokenError::TooLarge)?;
        let a: Answer = serde_json::from_slice(&body).map_err(|_| TokenError::Malformed)?;
        let bearer_type = a
            .token_type
            .as_deref()
            .is_none_or(|t| t.eq_ignore_ascii_case("bearer"));
        let value = a.access_token.filter(|t| !t.is_empty() && bearer_type);
        let mut bearer = value
            .and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok())
            .ok_or(TokenError::Malformed)?;
        bearer.set_sensitive(true);
        let renew_at = a.expires_in.map(|s| {
            let lifetime = Duration::from_secs(s).min(MAX_TOKEN_LIFETIME);
            asked + lifetime.saturating_sub(MARGIN)
        });
        Ok(Token { bearer, renew_at })
    }
}

/// The answer's body, or `None` when it is longer than [`MAX_ANSWER_BYTES`] (read no
/// further: the connection is dropped with the response).
async fn read_capped(resp: &mut reqwest::Response) -> Result<Option<Vec<u8>>, reqwest::Error> {
    if resp
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
    {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lifetime(json: &str) -> Option<u64> {
        serde_json::from_str::<Answer>(json).unwrap().expires_in
    }

    #[test]
    fn expires_in_is_a_number_or_a_string_of_one() {
        assert_eq!(lifetime(r#"{"expires_in":3599}"#), Some(3599));
        assert_eq!(lifetime(r#"{"expires_in":"3599"}"#), Some(3599));
        assert_eq!(lifetime(r#"{"expires_in":" 3599 "}"#), Some(3599));
        assert_eq!(lifetime(r#"{"expires_in":3599.7}"#), Some(3599));
        assert_eq!(
            lifetime(r#"{"expires_in":18446744073709551615}"#),
            Some(u64::MAX)
        );
        assert_eq!(
            lifetime(r#"{"expires_in":"99999999999999999999999"}"#),
            Some(u64::MAX)
        );
        for absent in [
            r#"{}"#,
            r#"{"expires_in":null}"#,
            r#"{"expires_in":-5}"#,
            r#"{"expires_in":"soon"}"#,
            r#"{"expires_in":"NaN"}"#,
            r#"{"expires_in":"inf"}"#,
            r#"{"expires_in":[1]}"#,
        ] {
            assert_eq!(lifetime(absent), None, "{absent}");
        }
    }
}
