//! URL redaction for logs, errors and descriptions, and the loopback test the cleartext
//! refusals share.

/// Placeholder written over redacted parts.
pub const REDACTED: &str = "REDACTED";

/// A URL fit for logs, errors and descriptions: userinfo removed, every query value
/// replaced by `REDACTED` (webhook URLs carry tokens there), fragment dropped, and the
/// path replaced by a stable short hash of it (Slack, Discord and Zapier webhook URLs
/// carry their token in the path): `https://hooks.example/REDACTED-PATH-1a2b3c4d`. A path
/// of `/` or nothing is kept. Text that is not an absolute URL is returned as `REDACTED`
/// rather than risk printing a secret.
///
/// Use [`redact_url_keep_path`] only where the path is known not to be a secret (an AMQP
/// vhost, a queue URL) or the operator asked to see it.
pub fn redact_url(raw: &str) -> String {
    redact(raw, false)
}

/// [`redact_url`], but the path is kept verbatim: for paths that are not secrets (an AMQP
/// vhost, an SQS queue URL) or when the operator asked to see it (`show_path = true`).
pub fn redact_url_keep_path(raw: &str) -> String {
    redact(raw, true)
}

/// The placeholder [`redact_url`] writes over a path: `REDACTED-PATH-` and the first 8 hex
/// digits of the path's SHA-256, so two configs can be told apart without showing either.
pub fn redacted_path(path: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(path.as_bytes());
    let mut out = format!("{REDACTED}-PATH-");
    for b in &digest[..4] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn redact(raw: &str, keep_path: bool) -> String {
    let Ok(mut url) = url::Url::parse(raw) else {
        return REDACTED.to_owned();
    };
    // Setting fails only for URLs that cannot have userinfo (data:, mailto:), which have none.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_fragment(None);
    if url.query().is_some() {
        let keys: Vec<String> = url.query_pairs().map(|(k, _)| k.into_owned()).collect();
        let mut q = url.query_pairs_mut();
        q.clear();
        for k in keys {
            q.append_pair(&k, REDACTED);
        }
    }
    if !keep_path && !url.cannot_be_a_base() && !matches!(url.path(), "" | "/") {
        let hidden = redacted_path(url.path());
        url.set_path(&format!("/{hidden}"));
    }
    url.to_string()
}

/// A request `path` with every query value replaced by [`REDACTED`] (names kept, a
/// fragment dropped), as [`redact_url`] treats a URL's query: a webhook's query often
/// carries its token (`/in/stripe?token=...`). Borrowed when there is no query.
///
/// ```
/// use ankusa_sink_kit::redact_path_query;
/// assert_eq!(redact_path_query("/in/s?token=t0k&x"), "/in/s?token=REDACTED&x=REDACTED");
/// assert_eq!(redact_path_query("/in/s"), "/in/s");
/// ```
pub fn redact_path_query(path: &str) -> std::borrow::Cow<'_, str> {
    let path = path.split_once('#').map_or(path, |(p, _)| p);
    let Some((before, query)) = path.split_once('?') else {
        return std::borrow::Cow::Borrowed(path);
    };
    let mut out = String::with_capacity(path.len() + 16);
    out.push_str(before);
    out.push('?');
    for (i, pair) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        if pair.is_empty() {
            continue;
        }
        let name = pair.split_once('=').map_or(pair, |(n, _)| n);
        out.push_str(name);
        out.push('=');
        out.push_str(REDACTED);
    }
    std::borrow::Cow::Owned(out)
}

/// The `host[:port]` of a URL, for `Description::host`: the port only when the URL
/// names one that is not its scheme's default, IPv6 in brackets, never userinfo, path or
/// query. `None` for text that is not an absolute URL with a host.
///
/// ```
/// use ankusa_sink_kit::host_port;
/// assert_eq!(host_port("https://u:p@sqs.example:443/1/q").as_deref(), Some("sqs.example"));
/// assert_eq!(host_port("http://127.0.0.1:8085").as_deref(), Some("127.0.0.1:8085"));
/// assert_eq!(host_port("http://[::1]:9324/").as_deref(), Some("[::1]:9324"));
/// assert_eq!(host_port("not a url"), None);
/// ```
pub fn host_port(url: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    let host = url.host_str()?;
    Some(match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    })
}

/// Whether `host` (a host name or IP literal, IPv6 with or without brackets, no port) is
/// this machine's loopback: `localhost`, `*.localhost`, `127.0.0.0/8` or `::1`. Credentials
/// sent in the clear to loopback never leave the machine, so the cleartext refusals
/// (`allow_insecure`) except it.
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    if h.eq_ignore_ascii_case("localhost") || h.to_ascii_lowercase().ends_with(".localhost") {
        return true;
    }
    h.parse::<std::net::IpAddr>()
        .map(|ip| ip.is_loopback())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(
            redact_url_keep_path("amqp://user:pa55@127.0.0.1:5672/vh"),
            "amqp://127.0.0.1:5672/vh"
        );
        assert_eq!(
            redact_url_keep_path("https://u@h.example/p?token=abc&x=1#frag"),
            "https://h.example/p?token=REDACTED&x=REDACTED"
        );
        assert_eq!(redact_url("not a url pa55"), "REDACTED");
        assert_eq!(redact_url_keep_path("not a url pa55"), "REDACTED");
        assert_eq!(redact_url("http://h/"), "http://h/");
        assert_eq!(redact_url("http://h"), "http://h/");
    }

    #[test]
    fn path_tokens_are_hashed_stably() {
        let token = "T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX";
        let url = format!("https://u:p@hooks.slack.example/services/{token}?k=v");
        let shown = redact_url(&url);
        assert!(!shown.contains("XXXX"), "{shown}");
        assert!(!shown.contains("services"), "{shown}");
        assert!(
            shown.starts_with("https://hooks.slack.example/REDACTED-PATH-"),
            "{shown}"
        );
        assert!(shown.ends_with("?k=REDACTED"), "{shown}");
        assert_eq!(shown, redact_url(&url), "stable");
        let other = redact_url("https://hooks.slack.example/services/T000/B000/YYYY");
        assert_ne!(shown, other, "different paths are told apart");
        assert_eq!(redacted_path("/a").len(), "REDACTED-PATH-".len() + 8);
    }

    #[test]
    fn host_port_is_what_the_three_adapters_printed() {
        // AWS (SQS `description_host`, SNS inline), Pub/Sub `host_of`: the same rule.
        for (url, want) in [
            (
                "https://pubsub.googleapis.com",
                Some("pubsub.googleapis.com"),
            ),
            (
                "https://pubsub.googleapis.com:443",
                Some("pubsub.googleapis.com"),
            ),
            ("http://127.0.0.1:8085", Some("127.0.0.1:8085")),
            (
                "https://sqs.us-east-1.amazonaws.com/123456789012/q",
                Some("sqs.us-east-1.amazonaws.com"),
            ),
            (
                "http://user:pw@localhost:4566/q?x=1",
                Some("localhost:4566"),
            ),
            ("http://[::1]:9324", Some("[::1]:9324")),
            ("data:text/plain,x", None),
            ("nope", None),
        ] {
            assert_eq!(host_port(url).as_deref(), want, "{url}");
        }
    }

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost",
            "LOCALHOST",
            "a.localhost",
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "[::1]",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "example.com",
            "10.0.0.1",
            "0.0.0.0",
            "localhost.example.com",
            "[::2]",
            "",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }
}
