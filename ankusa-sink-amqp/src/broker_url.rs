//! The broker URL: parsed once, its password kept apart as a core [`Secret`], printed only
//! as `scheme://host:port/<vhost>`.

use crate::config_error::ConfigError;
use ankusa_sink_core::Secret;
use ankusa_sink_kit::is_loopback_host;
use lapin::uri::{AMQPScheme, AMQPUri};
use lapin::{Connection, ConnectionProperties};
use std::fmt;
use std::str::FromStr;

/// A parsed broker URL. The URI it holds has no password; [`connect_uri`](Self::connect_uri)
/// puts it back for the one place that dials.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct BrokerUrl {
    /// The URI without its password.
    uri: AMQPUri,
    password: Secret,
    /// `host:port`, for descriptions and error text.
    pub(crate) host_port: String,
    pub(crate) tls: bool,
}

impl BrokerUrl {
    pub(crate) fn parse(raw: &str) -> Result<Self, ConfigError> {
        // Neither parser's error text is kept: amq-protocol's can echo the whole URL.
        let url = url::Url::parse(raw).map_err(|_| ConfigError::Url("unparsable"))?;
        let tls = match url.scheme() {
            "amqp" => false,
            "amqps" => true,
            _ => return Err(ConfigError::Url("scheme must be amqp or amqps")),
        };
        let host = match url.host() {
            Some(url::Host::Domain(d)) if !d.is_empty() => d.to_owned(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            _ => return Err(ConfigError::Url("no host")),
        };
        if url.fragment().is_some() {
            return Err(ConfigError::Url("a fragment is not allowed"));
        }
        let mut uri = AMQPUri::from_str(raw).map_err(|_| ConfigError::Url("invalid AMQP URI"))?;
        // amq-protocol takes only DNS names from the URL and falls back to "localhost" for
        // IP literals; connect to exactly the host written.
        uri.authority.host = host.clone();
        let password = Secret::new(std::mem::take(&mut uri.authority.userinfo.password));
        let port = uri.authority.port;
        let host_port = match url.host() {
            Some(url::Host::Ipv6(_)) => format!("[{host}]:{port}"),
            _ => format!("{host}:{port}"),
        };
        debug_assert_eq!(matches!(uri.scheme, AMQPScheme::AMQPS), tls);
        Ok(BrokerUrl {
            uri,
            password,
            host_port,
            tls,
        })
    }

    /// [`parse`](Self::parse), then the cleartext-login rule shared by the sink and the
    /// source: `amqp://` to a host that is not loopback needs `allow_insecure` (and is
    /// logged at warn, as `who`).
    pub(crate) fn checked(raw: &str, allow_insecure: bool, who: &str) -> Result<Self, ConfigError> {
        let url = Self::parse(raw)?;
        if !url.tls && !is_loopback_host(url.host()) {
            if !allow_insecure {
                return Err(ConfigError::Insecure);
            }
            tracing::warn!(
                endpoint = %url.redacted(),
                "{who}: allow_insecure: the login (user name and password) goes to the \
                 broker unencrypted (amqp://); use amqps:// to protect it"
            );
        }
        Ok(url)
    }

    /// Dial the broker: one connection, named `name` (what the broker's management shows).
    pub(crate) async fn connect(&self, name: String) -> Result<Connection, lapin::Error> {
        let props = ConnectionProperties::default().with_connection_name(name.into());
        Connection::connect_uri(self.connect_uri(), props).await
    }

    /// The URI to dial, password included.
    pub(crate) fn connect_uri(&self) -> AMQPUri {
        let mut uri = self.uri.clone();
        uri.authority.userinfo.password = self.password.expose().to_owned();
        uri
    }

    /// The host as written (IP literals without brackets).
    pub(crate) fn host(&self) -> &str {
        &self.uri.authority.host
    }

    pub(crate) fn scheme(&self) -> &'static str {
        if self.tls { "amqps" } else { "amqp" }
    }

    pub(crate) fn vhost(&self) -> &str {
        &self.uri.vhost
    }

    /// `amqp://host:port/<vhost>`, percent-encoding the vhost; no credentials, no query.
    pub(crate) fn redacted(&self) -> String {
        let mut vhost = String::new();
        for b in self.vhost().bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                vhost.push(char::from(b));
            } else {
                vhost.push_str(&format!("%{b:02X}"));
            }
        }
        format!("{}://{}/{}", self.scheme(), self.host_port, vhost)
    }
}

impl fmt::Debug for BrokerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_kept_apart_and_put_back_to_dial() {
        let u = BrokerUrl::parse("amqps://u:s3cr3t@broker.example/prod").unwrap();
        assert_eq!(u.host_port, "broker.example:5671");
        assert_eq!(u.vhost(), "prod");
        assert_eq!(u.uri.authority.userinfo.password, "");
        assert!(!format!("{u:?}").contains("s3cr3t"));
        let dial = u.connect_uri();
        assert_eq!(dial.authority.userinfo.username, "u");
        assert_eq!(dial.authority.userinfo.password, "s3cr3t");
        assert_eq!(dial.authority.host, "broker.example");
        let v6 = BrokerUrl::parse("amqp://u:p@[::1]:5673/%2f").unwrap();
        assert_eq!(v6.host_port, "[::1]:5673");
        assert_eq!(v6.host(), "::1");
        assert_eq!(v6.redacted(), "amqp://[::1]:5673/%2F");
    }

    #[test]
    fn bad_urls_are_refused_without_their_text() {
        for bad in [
            "http://u:s3cr3t@h/",
            "amqp://u:s3cr3t@/x",
            "not a url s3cr3t",
            "amqp://u:s3cr3t@h/v#frag",
        ] {
            let err = BrokerUrl::parse(bad).unwrap_err();
            assert!(!err.to_string().contains("s3cr3t"), "{err}");
            assert!(matches!(err, ConfigError::Url(_)), "{bad}: {err}");
        }
    }
}
