//! [`HttpSinkBuilder`]: the options of a sink file, collected in code.

use super::{ConfigError, HttpConfig, HttpMethod, Repr, Value};
use ankusa_message::cloudevents::Format;
use ankusa_sink_core::Secret;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Collects the options of an [`HttpConfig`] in code; [`build`](Self::build) checks them
/// as a sink file's would be and builds the sink. Start with
/// [`HttpSink::builder`](crate::HttpSink::builder). (Both are in `sink.rs`: the sink
/// depends on its config, never the other way; these are doc links only.)
#[derive(Clone)]
pub struct HttpSinkBuilder {
    repr: Repr,
}

impl fmt::Debug for HttpSinkBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Nothing is checked yet: header names only.
        f.debug_struct("HttpSinkBuilder")
            .field("headers", &self.repr.headers.keys().collect::<Vec<_>>())
            .field("secrets", &self.repr.built_secrets.len())
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
        self.repr.built_secrets.push(secret.into());
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
        self.repr.private.deny_private = deny;
        self
    }

    /// With [`deny_private`](Self::deny_private): networks (`10.0.0.0/8`) or addresses let
    /// through anyway.
    pub fn allow_cidrs<I, S>(mut self, cidrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.repr.private.allow_cidrs = cidrs.into_iter().map(Into::into).collect();
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
        self.repr.built_format = Some((format, event_type.map(str::to_owned)));
        self
    }

    /// Check every option, as a sink file's are checked, into a config.
    pub fn build_config(self) -> Result<HttpConfig, ConfigError> {
        self.repr.try_into()
    }
}
