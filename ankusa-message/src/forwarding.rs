//! Which provider headers leave with a delivery: the never-forwarded names, the
//! [`HeaderPolicy`] of an attempt, and [`forwarded_headers`], the rule every sink shares.

use ankusa_sink_core::{Ctx, Envelope, EnvelopeError};
use std::borrow::Cow;
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::LazyLock;

/// Which provider headers a queue sink forwards (see [`forwarded_headers`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ForwardHeaders {
    /// Every header except the never-forwarded list.
    #[default]
    Default,
    /// Only these names (lowercase); an empty list forwards nothing. The never-forwarded
    /// list still applies.
    Only(Vec<String>),
}

impl ForwardHeaders {
    /// An allow-list; names are lowercased. Empty names are refused.
    pub fn only<I, S>(names: I) -> Result<Self, EnvelopeError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = Vec::new();
        for n in names {
            let n = n.as_ref();
            if n.is_empty() {
                return Err(EnvelopeError::Empty("forward_headers name"));
            }
            out.push(n.to_ascii_lowercase());
        }
        Ok(ForwardHeaders::Only(out))
    }
}

/// Default [`HeaderPolicy::max_headers`]: at most 100 forwarded header names.
pub const DEFAULT_MAX_HEADERS: NonZeroUsize = NonZeroUsize::new(100).unwrap();

/// Default [`HeaderPolicy::max_bytes`]: at most 16 KiB of forwarded names plus values.
pub const DEFAULT_FORWARD_HEADERS_MAX_BYTES: NonZeroUsize = NonZeroUsize::new(16 * 1024).unwrap();

/// Which provider headers leave with a delivery, and how many: the header policy of one
/// attempt.
///
/// A dispatcher that wants other than the default sets it as a context extension
/// (`ctx.with_extension(policy)`); [`forwarded_headers`] reads it with
/// [`HeaderPolicy::of`]. `None` in a cap lifts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderPolicy {
    /// Which names are forwarded (the never-forwarded list applies in every mode).
    pub forward: ForwardHeaders,
    /// At most this many forwarded header names (default [`DEFAULT_MAX_HEADERS`], 100).
    pub max_headers: Option<NonZeroUsize>,
    /// At most this many bytes of forwarded names plus values (default
    /// [`DEFAULT_FORWARD_HEADERS_MAX_BYTES`], 16 KiB).
    pub max_bytes: Option<NonZeroUsize>,
}

/// The policy of a context that sets none.
static DEFAULT_POLICY: HeaderPolicy = HeaderPolicy {
    forward: ForwardHeaders::Default,
    max_headers: Some(DEFAULT_MAX_HEADERS),
    max_bytes: Some(DEFAULT_FORWARD_HEADERS_MAX_BYTES),
};

impl Default for HeaderPolicy {
    fn default() -> Self {
        DEFAULT_POLICY.clone()
    }
}

/// The default caps with this forwarding mode.
impl From<ForwardHeaders> for HeaderPolicy {
    fn from(forward: ForwardHeaders) -> Self {
        HeaderPolicy {
            forward,
            ..HeaderPolicy::default()
        }
    }
}

impl HeaderPolicy {
    /// The policy `ctx` carries, or the default one.
    pub fn of(ctx: &Ctx) -> &HeaderPolicy {
        ctx.extension().unwrap_or(&DEFAULT_POLICY)
    }

    /// Every header the never-forwarded list allows, with neither cap.
    pub fn uncapped() -> Self {
        HeaderPolicy {
            forward: ForwardHeaders::Default,
            max_headers: None,
            max_bytes: None,
        }
    }
}

// Whoever can POST to a catch URL chooses the hook's headers, and forwarded headers reach
// outbound HTTP requests and every Message v1. So three classes never leave: credentials
// (by name: the provider's signature headers are not secrets and stay), headers HTTP or a
// proxy owns (framing, hop-by-hop), and headers a proxy or auth gateway in front of the
// destination would trust (client address, original host/URL/method, asserted identity).

/// Header names never forwarded, whatever the mode (lowercase, exact). See also
/// [`NEVER_FORWARDED_PREFIXES`] and [`NEVER_FORWARDED_PATTERNS`].
pub const NEVER_FORWARDED: &[&str] = &[
    // Credentials not caught by a pattern.
    "authorization",
    "x-authorization",
    "x-functions-key",
    "ocp-apim-subscription-key",
    // Framing and hop-by-hop: HTTP and the sink own them.
    "host",
    "content-length",
    "content-type",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "http2-settings",
    // Proxy trust: the client's address and the request's path through proxies.
    "forwarded",
    "x-forwarded",
    "via",
    "x-real-ip",
    "true-client-ip",
    "cf-connecting-ip",
    "cf-connecting-ipv6",
    "fastly-client-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "client-ip",
    "x-originating-ip",
    "x-remote-ip",
    "x-remote-addr",
    "x-proxyuser-ip",
    "x-azure-clientip",
    "x-azure-socketip",
    "x-original-forwarded-for",
    "fly-client-ip",
    // Proxy trust: the original host, URL and method a front end may route or act on.
    "x-host",
    "x-original-host",
    "x-original-url",
    "x-original-uri",
    "x-rewrite-url",
    "x-original-method",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-middleware-subrequest",
    // Identity asserted by an auth proxy in front of the destination: a user, a signed
    // assertion, a client certificate the proxy verified.
    "remote-user",
    "x-remote-user",
    "x-webauth-user",
    "x-authenticated-userid",
    "x-goog-iap-jwt-assertion",
    "x-client-cert",
    "ssl-client-cert",
    // IIS Application Request Routing's verified client certificate; WSO2's signed
    // assertion; Sentry's key (`sentry_key=...`); oauth2-proxy's `GAP-Auth` user.
    "x-arr-clientcert",
    "x-jwt-assertion",
    "x-sentry-auth",
    "gap-auth",
];

/// Name prefixes never forwarded: ours (`x-ankusa-`), proxy-owned (`proxy-`: proxy
/// credentials and `proxy-connection`), proxy trust (`x-forwarded-`, `x-envoy-`) and
/// identity or credentials of an auth proxy (`x-auth-`, `x-amzn-oidc-`,
/// `x-ms-client-principal`, `x-goog-authenticated-user-`, `cf-access-`: Cloudflare
/// Access's `cf-access-jwt-assertion`, `cf-access-client-id`, `cf-access-client-secret`;
/// `x-consumer-`: Kong's authenticated consumer; `x-ssl-client-`: nginx's verified client
/// certificate; `tailscale-user-`: Tailscale Serve's user; `x-pomerium-`: Pomerium's
/// signed assertion and claims).
pub const NEVER_FORWARDED_PREFIXES: &[&str] = &[
    "x-ankusa-",
    "proxy-",
    "x-forwarded-",
    "x-envoy-",
    "x-auth-",
    "x-amzn-oidc-",
    "x-ms-client-principal",
    "x-goog-authenticated-user-",
    "cf-access-",
    "x-consumer-",
    "x-ssl-client-",
    "tailscale-user-",
    "x-pomerium-",
];

/// Substrings that mark a credential: a name containing any is never forwarded
/// (`x-gitlab-token`, `private-token`, `x-webhook-secret`, `api-key`, `set-cookie`, ...).
/// None of them occurs in a provider's signature header name (`stripe-signature`,
/// `x-hub-signature-256`, `webhook-signature`, `x-slack-signature`, ...), which stay.
pub const NEVER_FORWARDED_PATTERNS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "api-key",
    "apikey",
    "api_key",
    "access-key",
    "accesskey",
    "session",
    "credential",
    "cookie",
];

/// Whether a (lowercase) header name may ever be forwarded: not in [`NEVER_FORWARDED`],
/// not starting with one of [`NEVER_FORWARDED_PREFIXES`], not containing one of
/// [`NEVER_FORWARDED_PATTERNS`].
pub fn is_forwardable(lower_name: &str) -> bool {
    let name = lower_name.as_bytes();
    NEVER_FORWARDED_SORTED
        .binary_search_by(|n| by_length_then_bytes(n, name))
        .is_err()
        && !NEVER_FORWARDED_PREFIXES
            .iter()
            .any(|p| name.starts_with(p.as_bytes()))
        && !contains_pattern(name)
}

/// [`NEVER_FORWARDED`] sorted by length, then bytes, for a binary search in which most
/// steps compare lengths only (every header of every delivery is looked up here).
static NEVER_FORWARDED_SORTED: LazyLock<Vec<&'static [u8]>> = LazyLock::new(|| {
    let mut names: Vec<&[u8]> = NEVER_FORWARDED.iter().map(|n| n.as_bytes()).collect();
    names.sort_unstable_by(|a, b| by_length_then_bytes(a, b));
    names
});

fn by_length_then_bytes(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Which bytes start one of [`NEVER_FORWARDED_PATTERNS`].
const PATTERN_FIRST_BYTES: [bool; 256] = first_bytes(NEVER_FORWARDED_PATTERNS);

const fn first_bytes(needles: &[&str]) -> [bool; 256] {
    let mut table = [false; 256];
    let mut i = 0;
    while i < needles.len() {
        if let Some(&b) = needles[i].as_bytes().first() {
            table[b as usize] = true;
        }
        i += 1;
    }
    table
}

/// Whether `hay` contains one of [`NEVER_FORWARDED_PATTERNS`], in one pass over `hay`: a
/// position whose byte starts no pattern costs one table lookup, and only at the others are
/// the patterns compared. `str::contains` set up a searcher per pattern, ten times the
/// search itself on header-sized names, and comparing every pattern's first byte at every
/// position was most of what is left (every header of every delivery goes through here).
fn contains_pattern(hay: &[u8]) -> bool {
    hay.iter().enumerate().any(|(i, &b)| {
        PATTERN_FIRST_BYTES[usize::from(b)]
            && NEVER_FORWARDED_PATTERNS
                .iter()
                .any(|n| n.as_bytes().first() == Some(&b) && hay[i..].starts_with(n.as_bytes()))
    })
}

/// A header name compared and hashed without regard to ASCII case, so merging looks names
/// up in a map without lowercasing a copy first.
struct Folded<'a>(&'a str);

impl PartialEq for Folded<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq_ignore_ascii_case(other.0)
    }
}

impl Eq for Folded<'_> {}

impl std::hash::Hash for Folded<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for b in self.0.bytes() {
            state.write_u8(b.to_ascii_lowercase());
        }
        state.write_u8(0xff);
    }
}

/// The provider headers a sink forwards, by the rules every sink shares.
///
/// # Behavior
/// - Names are lowercased; the never-forwarded names ([`NEVER_FORWARDED`],
///   [`NEVER_FORWARDED_PREFIXES`], [`NEVER_FORWARDED_PATTERNS`]) are always removed;
///   [`ForwardHeaders::Only`] keeps only the listed names.
/// - A repeated name is one entry, its values joined with `", "` in arrival order, placed
///   where the name first arrived (merged through a map past 16 names: linear in the
///   header count).
/// - Then the limits, deterministically, in first-arrival order: an entry is kept while
///   fewer than the policy's `max_headers` (default [`DEFAULT_MAX_HEADERS`], 100) are kept and its
///   name plus value bytes fit in what is left of its `max_bytes` (default
///   [`DEFAULT_FORWARD_HEADERS_MAX_BYTES`], 16 KiB); an entry that does not fit is dropped
///   and later, smaller ones may still be kept. `None` in either field lifts that cap.
/// - Borrowed from the envelope where it can be (a name already lowercase, a value that
///   was not joined): forwarding allocates only for what it changes.
pub fn forwarded_headers<'a>(env: &'a Envelope, ctx: &Ctx) -> Vec<(Cow<'a, str>, Cow<'a, str>)> {
    // Up to this many distinct names, a repeated name is found by a scan of a stack array
    // (no allocation for a typical hook); past it, through a map (linear in the headers,
    // whatever an attacker sends).
    const SCAN_MAX: usize = 16;
    let policy = HeaderPolicy::of(ctx);
    let mut out: Vec<(Cow<'a, str>, Cow<'a, str>)> = Vec::new();
    // The envelope's spelling of each entry's name, for the first SCAN_MAX entries.
    let mut first: [&'a str; SCAN_MAX] = [""; SCAN_MAX];
    let mut index: Option<HashMap<Folded<'a>, usize>> = None;
    for (name, value) in env.headers() {
        let seen = match &index {
            Some(map) => map.get(&Folded(name)).copied(),
            None => first[..out.len()]
                .iter()
                .position(|n| n.eq_ignore_ascii_case(name)),
        };
        if let Some(at) = seen {
            let joined = out[at].1.to_mut();
            joined.push_str(", ");
            joined.push_str(value);
            continue;
        }
        let lower = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(name.to_ascii_lowercase())
        } else {
            Cow::Borrowed(name.as_str())
        };
        if !is_forwardable(&lower) {
            continue;
        }
        if let ForwardHeaders::Only(allow) = &policy.forward
            && !allow.iter().any(|a| *a == *lower)
        {
            continue;
        }
        match &mut index {
            Some(map) => {
                map.insert(Folded(name), out.len());
            }
            None if out.len() < SCAN_MAX => first[out.len()] = name,
            None => {
                let mut map: HashMap<Folded<'a>, usize> = first
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (Folded(n), i))
                    .collect();
                map.insert(Folded(name), out.len());
                index = Some(map);
            }
        }
        out.push((lower, Cow::Borrowed(value.as_str())));
    }
    let max_count = policy.max_headers.map_or(usize::MAX, NonZeroUsize::get);
    let mut budget = policy.max_bytes.map_or(usize::MAX, NonZeroUsize::get);
    let mut kept = 0usize;
    out.retain(|(n, v)| {
        let cost = n.len() + v.len();
        if kept < max_count && cost <= budget {
            kept += 1;
            budget -= cost;
            true
        } else {
            false
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{env, nz};

    #[test]
    fn allow_list_lowercases_and_refuses_empty() {
        assert_eq!(
            ForwardHeaders::only(["X-A", "b"]).unwrap(),
            ForwardHeaders::Only(vec!["x-a".into(), "b".into()])
        );
        assert!(ForwardHeaders::only([""]).is_err());
    }

    #[test]
    fn the_one_pass_pattern_search_decides_as_str_contains_does() {
        let by_contains = |name: &str| {
            !NEVER_FORWARDED.contains(&name)
                && !NEVER_FORWARDED_PREFIXES.iter().any(|p| name.starts_with(p))
                && !NEVER_FORWARDED_PATTERNS.iter().any(|p| name.contains(p))
        };
        let mut names: Vec<String> = ["", "t", "x", "stripe-signature", "x-hub-signature-256"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for p in NEVER_FORWARDED_PATTERNS
            .iter()
            .chain(NEVER_FORWARDED_PREFIXES)
            .chain(NEVER_FORWARDED)
        {
            let cut = &p[..p.len() - 1];
            for (a, b) in [("", ""), ("x-", ""), ("", "-v"), ("a-", "-b"), ("tt", "ss")] {
                names.push(format!("{a}{p}{b}"));
                names.push(format!("{a}{cut}{b}"));
                names.push(format!("{a}{cut}{cut}{b}"));
            }
        }
        for name in &names {
            assert_eq!(is_forwardable(name), by_contains(name), "{name:?}");
        }
        assert!(names.iter().any(|n| is_forwardable(n)));
        assert!(names.iter().any(|n| !is_forwardable(n)));
    }

    #[test]
    fn auth_gateway_credentials_and_identities_are_never_forwarded() {
        // Headers a gateway in front of the destination (Google IAP, Cloudflare Access,
        // Azure Functions and API Management, Kong, nginx ingress, an mTLS terminator, AWS
        // ALB) trusts or takes as the caller's key: whoever POSTs a hook may set them.
        for name in [
            "x-goog-iap-jwt-assertion",
            "cf-access-jwt-assertion",
            "cf-access-client-id",
            "cf-access-client-secret",
            "cf-access-authenticated-user-email",
            "x-functions-key",
            "ocp-apim-subscription-key",
            "x-original-forwarded-for",
            "x-authenticated-userid",
            "x-client-cert",
            "ssl-client-cert",
            "x-amzn-oidc-data",
            "x-amzn-oidc-identity",
            "x-amzn-oidc-accesstoken",
            // Issue 64: Kong, nginx, IIS ARR, WSO2, Tailscale, Sentry, oauth2-proxy,
            // Pomerium, Fly.io.
            "x-consumer-id",
            "x-consumer-username",
            "x-consumer-custom-id",
            "x-ssl-client-cert",
            "x-ssl-client-verify",
            "x-ssl-client-s-dn",
            "x-arr-clientcert",
            "x-jwt-assertion",
            "tailscale-user-login",
            "tailscale-user-name",
            "x-sentry-auth",
            "gap-auth",
            "x-pomerium-jwt-assertion",
            "x-pomerium-claim-email",
            "fly-client-ip",
        ] {
            assert!(!is_forwardable(name), "{name}");
            let e = Envelope::builder("h", "s", &b""[..])
                .header(name.to_ascii_uppercase(), "planted")
                .build()
                .unwrap();
            assert!(
                forwarded_headers(&e, &Ctx::for_envelope(&e)).is_empty(),
                "{name}"
            );
        }
        // Near misses stay forwardable: the prefixes are whole words.
        for name in [
            "cf-access",
            "cf-ray",
            "x-client-certainty-score",
            "x-amzn-trace-id",
            "x-consumer",
            "tailscale-user",
            "fly-region",
            "x-sentry-trace",
        ] {
            assert!(is_forwardable(name), "{name}");
        }
    }

    #[test]
    fn forwarding_rules() {
        let e = env();
        let ctx = Ctx::for_envelope(&e);
        assert_eq!(
            forwarded_headers(&e, &ctx),
            vec![
                ("stripe-signature".into(), "t=1".into()),
                ("x-multi".into(), "a, b".into())
            ]
        );
        for name in NEVER_FORWARDED {
            assert!(!is_forwardable(name));
        }
        assert!(!is_forwardable("x-ankusa-anything"));

        let only = ctx.clone().with_extension(HeaderPolicy::from(
            ForwardHeaders::only(["X-MULTI", "authorization"]).unwrap(),
        ));
        assert_eq!(
            forwarded_headers(&e, &only),
            vec![("x-multi".into(), "a, b".into())]
        );
        let none = ctx
            .clone()
            .with_extension(HeaderPolicy::from(ForwardHeaders::Only(vec![])));
        assert!(forwarded_headers(&e, &none).is_empty());
    }

    #[test]
    fn forwarding_borrows_what_it_does_not_change() {
        let e = env();
        let ctx = Ctx::for_envelope(&e);
        let h = forwarded_headers(&e, &ctx);
        // "Stripe-Signature" had to be lowercased; its single value is the envelope's own.
        assert!(matches!(h[0].0, Cow::Owned(_)));
        assert!(matches!(h[0].1, Cow::Borrowed("t=1")));
        // "X-Multi" arrived twice: the joined value is new.
        assert!(matches!(h[1].1, Cow::Owned(_)));
        let lower = Envelope::builder("h", "s", "")
            .header("x-a", "1")
            .build()
            .unwrap();
        let h = forwarded_headers(&lower, &Ctx::for_envelope(&lower));
        assert!(matches!(h[0], (Cow::Borrowed("x-a"), Cow::Borrowed("1"))));
    }

    #[test]
    fn forwarding_limits_are_deterministic() {
        let e = Envelope::builder("h", "s", "")
            .header("a", "1234567890")
            .header("b", "1")
            .header("c", "12")
            .header("d", "1")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&e);
        let count = ctx.clone().with_extension(HeaderPolicy {
            max_headers: Some(nz(2)),
            ..HeaderPolicy::default()
        });
        let names = |h: Vec<(Cow<str>, Cow<str>)>| {
            h.into_iter()
                .map(|(n, _)| n.into_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(forwarded_headers(&e, &count)), ["a", "b"]);
        // "a" (11 bytes) does not fit in 6; b (2) and c (3) do; d (2) no longer fits (1 left).
        let bytes = ctx.clone().with_extension(HeaderPolicy {
            max_bytes: Some(nz(6)),
            ..HeaderPolicy::default()
        });
        assert_eq!(names(forwarded_headers(&e, &bytes)), ["b", "c"]);
        for _ in 0..3 {
            assert_eq!(names(forwarded_headers(&e, &bytes)), ["b", "c"]);
        }
    }

    #[test]
    fn forwarded_headers_are_capped_by_default() {
        let many = Envelope::builder("h", "s", "")
            .headers(
                (0..150)
                    .map(|i| (format!("x-h{i:03}"), "v".into()))
                    .collect(),
            )
            .build()
            .unwrap();
        let h = forwarded_headers(&many, &Ctx::for_envelope(&many));
        assert_eq!(h.len(), 100);
        assert_eq!(h[99].0, "x-h099");

        // 20 headers of 1 KiB: 16 KiB holds 15 of them (name + value 1029 bytes each).
        let big = Envelope::builder("h", "s", "")
            .headers(
                (0..20)
                    .map(|i| (format!("x-b{i:02}"), "v".repeat(1024)))
                    .collect(),
            )
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&big);
        let h = forwarded_headers(&big, &ctx);
        let bytes: usize = h.iter().map(|(n, v)| n.len() + v.len()).sum();
        assert_eq!(h.len(), 15);
        assert!(bytes <= 16 * 1024, "{bytes}");
        // The caps stay changeable: raised, or lifted with None.
        let raised = ctx.clone().with_extension(HeaderPolicy {
            max_bytes: Some(nz(64 * 1024)),
            ..HeaderPolicy::default()
        });
        assert_eq!(forwarded_headers(&big, &raised).len(), 20);
        let lifted = Ctx::for_envelope(&many).with_extension(HeaderPolicy::uncapped());
        assert_eq!(forwarded_headers(&many, &lifted).len(), 150);
    }

    #[test]
    fn merging_joins_every_case_of_a_name_in_arrival_order() {
        let mut b = Envelope::builder("h", "s", "");
        for i in 0..500 {
            b = b.header(format!("x-n{i}"), "a");
        }
        for i in 0..500 {
            b = b.header(format!("X-N{i}"), "b");
        }
        let e = b.build().unwrap();
        let ctx = Ctx::for_envelope(&e).with_extension(HeaderPolicy::uncapped());
        let h = forwarded_headers(&e, &ctx);
        // Names found by the scan (the first 16) and through the map (the rest) alike.
        assert_eq!(h.len(), 500);
        for i in [0, 7, 15, 16, 17, 499] {
            assert_eq!(h[i], (format!("x-n{i}").into(), "a, b".into()), "{i}");
        }
        assert!(h.iter().all(|(_, v)| v == "a, b"));
    }
}
