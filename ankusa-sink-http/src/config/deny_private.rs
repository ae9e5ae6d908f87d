//! `deny_private` and `allow_cidrs`: the keys of [`AddressGuard`], checked against the
//! destination.

use super::error::ConfigError;
use super::value::WithEndpoint;
use crate::AddressGuard;
use serde::Deserialize;
use std::sync::Arc;
use url::Url;

/// `deny_private` and `allow_cidrs`, top-level keys of the sink file (flattened into it).
#[derive(Clone, Default, Deserialize)]
#[serde(default)]
pub(super) struct DenyPrivateRepr {
    pub(super) deny_private: bool,
    pub(super) allow_cidrs: Vec<String>,
}

/// The guard, `None` without `deny_private`: a literal address in the URL is refused here;
/// a name is checked on every connect (the resolver). Behind a proxy the destination is
/// resolved by the proxy, where no guard of ours can see it: refused, not ignored.
impl TryFrom<WithEndpoint<'_, DenyPrivateRepr>> for Option<Arc<AddressGuard>> {
    type Error = ConfigError;

    fn try_from(w: WithEndpoint<'_, DenyPrivateRepr>) -> Result<Self, ConfigError> {
        let r = w.repr;
        if !r.deny_private {
            return match r.allow_cidrs.is_empty() {
                true => Ok(None),
                false => Err(ConfigError::AllowWithoutDeny),
            };
        }
        if w.endpoint.proxy.is_some() {
            return Err(ConfigError::DenyPrivateBehindProxy);
        }
        let nets = r
            .allow_cidrs
            .iter()
            .map(|c| crate::guard::parse_cidr(c).ok_or_else(|| ConfigError::Cidr(c.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        guarding(w.endpoint.url, AddressGuard::new(nets)).map(Some)
    }
}

/// `guard` for a sink to `url`: a literal address in it that the guard refuses is a config
/// error now (no resolver ever sees it).
pub(super) fn guarding(url: &Url, guard: AddressGuard) -> Result<Arc<AddressGuard>, ConfigError> {
    if let Some(ip) = refused_literal(url, &guard) {
        return Err(ConfigError::PrivateDestination(ip.to_string()));
    }
    Ok(Arc::new(guard))
}

/// `[oauth2]`'s token endpoint under the destination's guard: its name goes through the
/// same resolver (the sink's one client), a literal address is checked here.
pub(super) fn token_url_allowed(
    token_url: &Url,
    guard: Option<&AddressGuard>,
) -> Result<(), ConfigError> {
    match guard.and_then(|g| refused_literal(token_url, g)) {
        Some(ip) => Err(ConfigError::PrivateTokenUrl(ip.to_string())),
        None => Ok(()),
    }
}

/// The literal address of `url` when `guard` refuses it.
fn refused_literal(url: &Url, guard: &AddressGuard) -> Option<std::net::IpAddr> {
    let ip = match url.host()? {
        url::Host::Ipv4(ip) => std::net::IpAddr::V4(ip),
        url::Host::Ipv6(ip) => std::net::IpAddr::V6(ip),
        url::Host::Domain(_) => return None,
    };
    guard.refuses(ip).then_some(ip)
}
