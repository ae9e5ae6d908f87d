//! `deny_private`: the HTTP sink refuses destinations on loopback, private, link-local
//! (cloud metadata included), CGNAT, benchmarking, site-local, unique-local, local NAT64,
//! IPv4-compatible or unspecified addresses, unless
//! `allow_cidrs` lets a range through. Checked on the addresses the client actually
//! connects to: the resolver itself drops the refused ones, so a name that resolves to a
//! public address at a check and a private one at the connect (DNS rebinding) cannot pass.
//! A literal address in the URL is checked when the sink is built.

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

/// Which addresses a sink may connect to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressGuard {
    allow: Vec<IpNet>,
}

impl AddressGuard {
    /// Refuse every private address but those in `allow`.
    pub fn new(allow: Vec<IpNet>) -> Self {
        AddressGuard { allow }
    }

    /// Whether `ip` is refused.
    pub fn refuses(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        is_private(ip) && !self.allow.iter().any(|n| n.contains(&ip))
    }
}

/// An IPv4 address mapped into IPv6 (`::ffff:a.b.c.d`) is that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Loopback, private, link-local, CGNAT, benchmarking, site-local, unique-local, local
/// NAT64, IPv4-compatible, unspecified (and the rest of `0.0.0.0/8`, broadcast, NAT64 of a
/// private address, Azure's host address).
fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => private_v4(v4),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                // ::/96, IPv4-compatible (`::a.b.c.d`, deprecated by RFC 4291): some stacks
                // still route it to the IPv4 address, whichever that is.
                || s[..6] == [0; 6]
                // fc00::/7, unique local.
                || (s[0] & 0xfe00) == 0xfc00
                // fe80::/10, link-local.
                || (s[0] & 0xffc0) == 0xfe80
                // fec0::/10, site-local (deprecated, still routed inside some networks).
                || (s[0] & 0xffc0) == 0xfec0
                // 64:ff9b:1::/48, NAT64 for local use (RFC 8215): a translator of the
                // operator's network, whatever IPv4 address it embeds.
                || s[..3] == [0x64, 0xff9b, 1]
                // 64:ff9b::/96, NAT64 of an IPv4 address.
                || (s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
                    && private_v4(Ipv4Addr::from(
                        (u32::from(s[6]) << 16) | u32::from(s[7]),
                    )))
        }
    }
}

fn private_v4(v4: Ipv4Addr) -> bool {
    let o = v4.octets();
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_broadcast()
        // 0.0.0.0/8: "this network", the unspecified address included.
        || o[0] == 0
        // 100.64.0.0/10: carrier-grade NAT.
        || (o[0] == 100 && (o[1] & 0xc0) == 64)
        // 198.18.0.0/15: benchmarking (RFC 2544), used inside data centres.
        || (o[0] == 198 && (o[1] & 0xfe) == 18)
        // Azure's virtual host address (DNS, DHCP, the instance's health and metadata).
        || o == [168, 63, 129, 16]
}

/// Why a destination was refused: every address its name resolved to is private. Names the
/// host, never the addresses (they would map the operator's private network for whoever
/// reads the reason).
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves only to refused addresses: deny_private is set")]
pub(crate) struct Refused {
    host: String,
}

/// A [`Refused`] for `name`.
pub(crate) fn refused_error(name: &str) -> Refused {
    Refused {
        host: ankusa_sink_kit::printable(name),
    }
}

/// A resolver that drops the addresses the guard refuses.
#[derive(Debug)]
pub(crate) struct GuardedResolver(pub(crate) Arc<AddressGuard>);

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let allowed: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| !guard.refuses(a.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(Box::new(refused_error(&host)) as Box<_>);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Parse `allow_cidrs` entries: a network (`10.0.0.0/8`) or one address.
pub(crate) fn parse_cidr(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_ranges_are_refused_and_public_ones_pass() {
        let g = AddressGuard::default();
        for ip in [
            "127.0.0.1",
            "127.8.9.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            // Issue 64's gaps: Azure's host, local NAT64, IPv4-compatible, site-local,
            // benchmarking.
            "168.63.129.16",
            "64:ff9b:1::808:808",
            "64:ff9b:1:ffff::1",
            "::127.0.0.1",
            "::8.8.8.8",
            "::a9fe:a9fe",
            "fec0::1",
            "feff:ffff::1",
            "198.18.0.1",
            "198.19.255.254",
            "::ffff:198.18.0.1",
        ] {
            assert!(g.refuses(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "192.169.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "168.63.129.17",
            "198.17.255.255",
            "198.20.0.1",
            "64:ff9b:2::1",
        ] {
            assert!(!g.refuses(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn allow_cidrs_let_chosen_ranges_through() {
        let g = AddressGuard::new(vec![
            parse_cidr("10.20.0.0/16").unwrap(),
            parse_cidr("127.0.0.1").unwrap(),
        ]);
        assert!(!g.refuses("10.20.3.4".parse().unwrap()));
        assert!(g.refuses("10.21.3.4".parse().unwrap()));
        assert!(!g.refuses("127.0.0.1".parse().unwrap()));
        assert!(g.refuses("127.0.0.2".parse().unwrap()));
        assert!(parse_cidr("10.0.0.0/33").is_none());
        assert!(parse_cidr("not a range").is_none());
    }
}
