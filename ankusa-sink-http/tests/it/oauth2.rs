//! `[oauth2]` client credentials against a local token server that counts its calls.

use crate::server::{Reply, Server, always, sequence};
use crate::{class_of, deliver, envelope};
use ankusa_sink_core::{Class, Failure};
use ankusa_sink_http::{HttpConfig, HttpSink};
use std::sync::Arc;

const SECRET: &str = "client-secret-DO-NOT-PRINT";

fn token(value: &str, expires_in: u64) -> Reply {
    token_raw(value, &expires_in.to_string())
}

fn refused(status: u16, error: &str) -> Reply {
    Reply::Answer {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: format!(r#"{{"error":"{error}","error_description":"{SECRET} is wrong"}}"#)
            .into_bytes(),
    }
}

fn sink(destination: &Server, token_url: &str) -> HttpSink {
    let config: HttpConfig = serde_json::from_value(serde_json::json!({
        "url": destination.url("/hooks"),
        "oauth2": {
            "token_url": token_url,
            "client_id": "ankusa",
            "client_secret": SECRET,
            "scope": "hooks:write",
            "audience": "https://api.example"
        }
    }))
    .unwrap();
    assert!(!format!("{config:?}").contains(SECRET), "{config:?}");
    let sink = HttpSink::new(config).unwrap();
    assert!(!format!("{sink:?}").contains(SECRET));
    sink
}

fn authorization(c: &crate::server::Captured) -> Option<&str> {
    c.headers
        .iter()
        .find(|(n, _)| n == "authorization")
        .map(|(_, v)| v.as_str())
}

/// Twenty deliveries of one hook on `sink` at once, their results in spawn order.
async fn twenty_at_once(sink: &Arc<HttpSink>) -> Vec<Result<(), Failure>> {
    let all: Vec<_> = (0..20)
        .map(|_| {
            let sink = sink.clone();
            tokio::spawn(async move { deliver(&sink, &envelope(b"{}")).await })
        })
        .collect();
    let mut out = Vec::new();
    for d in all {
        out.push(d.await.unwrap());
    }
    out
}

#[tokio::test]
async fn a_token_is_fetched_once_shared_and_sent_as_bearer() {
    let tokens = Server::start(always(token("tok-1", 3600))).await;
    let dest = Server::start(always(Reply::status(200))).await;
    for r in twenty_at_once(&Arc::new(sink(&dest, &tokens.url("/token")))).await {
        r.unwrap();
    }
    assert_eq!(tokens.requests(), 1, "one refresh, shared by 20 deliveries");
    let asked = &tokens.captured()[0];
    assert_eq!(asked.method, "POST");
    let body = String::from_utf8(asked.body.clone()).unwrap();
    assert!(body.contains("grant_type=client_credentials"), "{body}");
    assert!(body.contains("scope=hooks%3Awrite"), "{body}");
    assert!(
        body.contains("audience=https%3A%2F%2Fapi.example"),
        "{body}"
    );
    assert!(
        !body.contains(SECRET),
        "the secret goes in Basic auth, not the body"
    );
    assert!(authorization(asked).is_some_and(|a| a.starts_with("Basic ")));
    assert_eq!(dest.captured().len(), 20);
    assert!(
        dest.captured()
            .iter()
            .all(|c| authorization(c) == Some("Bearer tok-1"))
    );
}

#[tokio::test]
async fn a_token_is_renewed_30_s_before_it_expires() {
    let tokens = Server::start(sequence(vec![token("tok-1", 30)], token("tok-2", 3600))).await;
    let dest = Server::start(always(Reply::status(200))).await;
    let sink = sink(&dest, &tokens.url("/token"));
    deliver(&sink, &envelope(b"{}")).await.unwrap();
    deliver(&sink, &envelope(b"{}")).await.unwrap();
    deliver(&sink, &envelope(b"{}")).await.unwrap();
    assert_eq!(
        tokens.requests(),
        2,
        "30 s left: renewed at once, then kept"
    );
    let used = bearers(&dest);
    assert_eq!(
        used,
        [
            Some("Bearer tok-1".into()),
            Some("Bearer tok-2".into()),
            Some("Bearer tok-2".into())
        ]
    );
}

#[tokio::test]
async fn a_401_refreshes_once_and_retries_that_delivery_once() {
    let tokens = Server::start(sequence(vec![token("tok-1", 3600)], token("tok-2", 3600))).await;
    let dest = Server::start(sequence(vec![Reply::status(401)], Reply::status(200))).await;
    let sink = sink(&dest, &tokens.url("/token"));
    deliver(&sink, &envelope(b"{}")).await.unwrap();
    assert_eq!(tokens.requests(), 2);
    let used = bearers(&dest);
    assert_eq!(
        used,
        [Some("Bearer tok-1".into()), Some("Bearer tok-2".into())]
    );
    // A destination that keeps refusing: one retry, then its own class (401: config).
    let dest = Server::start(always(Reply::status(401))).await;
    let sink = sink_with(&dest, &tokens);
    let r = deliver(&sink, &envelope(b"{}")).await;
    assert_eq!(class_of(&r), Class::Config);
    assert_eq!(dest.captured().len(), 2);
}

fn sink_with(dest: &Server, tokens: &Server) -> HttpSink {
    sink(dest, &tokens.url("/token"))
}

/// The `Authorization` of each request `dest` received, in order.
fn bearers(dest: &Server) -> Vec<Option<String>> {
    dest.captured()
        .iter()
        .map(|c| authorization(c).map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_refused_client_is_config_and_an_unavailable_token_endpoint_transient() {
    let dest = Server::start(always(Reply::status(200))).await;
    for (reply, class) in [
        (refused(401, "invalid_client"), Class::Config),
        (refused(400, "invalid_scope"), Class::Config),
        (Reply::status(503), Class::Transient),
        (Reply::status(200), Class::Config),
    ] {
        let tokens = Server::start(always(reply)).await;
        let r = deliver(&sink_with(&dest, &tokens), &envelope(b"{}")).await;
        assert_eq!(class_of(&r), class);
        let f = r.unwrap_err();
        assert_eq!(f.may_have_landed(), Some(false));
        assert!(!format!("{f} {f:?}").contains(SECRET), "{f:?}");
    }
    let r = deliver(
        &sink_with(
            &dest,
            &Server::start(always(refused(401, "invalid_client"))).await,
        ),
        &envelope(b"{}"),
    )
    .await;
    assert!(r.unwrap_err().to_string().contains("invalid_client"));
    // Nothing listens at the token URL.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let r = deliver(
        &sink(&dest, &format!("http://127.0.0.1:{port}/token")),
        &envelope(b"{}"),
    )
    .await;
    assert_eq!(class_of(&r), Class::Transient);
    assert_eq!(dest.captured().len(), 0, "no hook went out without a token");
}

#[test]
fn oauth2_settings_that_cannot_work_are_config_errors() {
    for (extra, what) in [
        (
            serde_json::json!({"headers": {"authorization": "Bearer x"}}),
            "authorization",
        ),
        (
            serde_json::json!({"url": "http://hooks.example/in"}),
            "cleartext",
        ),
    ] {
        let mut v = serde_json::json!({
            "url": "https://hooks.example/in",
            "oauth2": {"token_url": "https://auth.example/token", "client_id": "a", "client_secret": SECRET}
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        let e = serde_json::from_value::<HttpConfig>(v)
            .unwrap_err()
            .to_string();
        assert!(e.contains(what), "{e}");
        assert!(!e.contains(SECRET), "{e}");
    }
    let e = serde_json::from_value::<HttpConfig>(serde_json::json!({
        "url": "https://hooks.example/in",
        "oauth2": {"token_url": "http://auth.example/token", "client_id": "a", "client_secret": SECRET}
    }))
    .unwrap_err()
    .to_string();
    assert!(e.contains("client secret"), "{e}");
}

/// A token answer with `expires_in` as written (a number, a string, ...).
fn token_raw(value: &str, expires_in: &str) -> Reply {
    Reply::Answer {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: format!(
            r#"{{"access_token":"{value}","token_type":"Bearer","expires_in":{expires_in}}}"#
        )
        .into_bytes(),
    }
}

#[tokio::test]
async fn a_lifetime_near_u64_max_is_clamped_and_a_string_lifetime_is_read() {
    // u64::MAX seconds once panicked adding to the clock ("sink panicked", transient).
    let tokens = Server::start(always(token("tok-1", u64::MAX))).await;
    let dest = Server::start(always(Reply::status(200))).await;
    let clamped = sink(&dest, &tokens.url("/token"));
    deliver(&clamped, &envelope(b"{}")).await.unwrap();
    deliver(&clamped, &envelope(b"{}")).await.unwrap();
    assert_eq!(tokens.requests(), 1, "kept (for a day at most)");

    // Azure AD v1 sends `"expires_in": "3599"`: a lifetime, not a malformed answer. A
    // string of 30 s is read too: renewed at once, as the number would be.
    let tokens = Server::start(sequence(
        vec![token_raw("tok-1", r#""30""#)],
        token_raw("tok-2", r#""3599""#),
    ))
    .await;
    let dest = Server::start(always(Reply::status(200))).await;
    let sink = sink(&dest, &tokens.url("/token"));
    for _ in 0..3 {
        deliver(&sink, &envelope(b"{}")).await.unwrap();
    }
    assert_eq!(tokens.requests(), 2);
    assert_eq!(
        bearers(&dest),
        [
            Some("Bearer tok-1".into()),
            Some("Bearer tok-2".into()),
            Some("Bearer tok-2".into())
        ]
    );
}

#[tokio::test]
async fn a_token_answer_over_64_kib_is_refused_unread() {
    // A valid token padded past the cap: never taken.
    let mut body = br#"{"access_token":"tok-1","token_type":"Bearer","expires_in":3600}"#.to_vec();
    body.extend(std::iter::repeat_n(b' ', 64 * 1024));
    let tokens = Server::start(always(Reply::Answer {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body,
    }))
    .await;
    let dest = Server::start(always(Reply::status(200))).await;
    let r = deliver(&sink(&dest, &tokens.url("/token")), &envelope(b"{}")).await;
    assert_eq!(class_of(&r), Class::Config);
    let f = r.unwrap_err();
    assert!(f.to_string().contains("over 64 KiB"), "{f}");
    assert_eq!(dest.captured().len(), 0);
    // An endless answer is not read to its end either.
    let tokens = Server::start(always(Reply::Huge {
        status: 200,
        total: 1 << 30,
    }))
    .await;
    let r = deliver(&sink(&dest, &tokens.url("/token")), &envelope(b"{}")).await;
    assert_eq!(class_of(&r), Class::Config);
}

#[tokio::test]
async fn a_failed_refresh_is_shared_by_the_deliveries_that_waited_for_it() {
    // The answer is slow so that every delivery is waiting while the one request is out.
    let tokens = Server::start(always(Reply::Slow(
        std::time::Duration::from_millis(200),
        Box::new(Reply::status(503)),
    )))
    .await;
    let dest = Server::start(always(Reply::status(200))).await;
    let sink = Arc::new(sink(&dest, &tokens.url("/token")));
    for r in twenty_at_once(&sink).await {
        assert_eq!(class_of(&r), Class::Transient);
    }
    assert_eq!(
        tokens.requests(),
        1,
        "one token request for the wave, not one per delivery"
    );
    // A delivery after the wave asks again.
    let r = deliver(&sink, &envelope(b"{}")).await;
    assert_eq!(class_of(&r), Class::Transient);
    assert_eq!(tokens.requests(), 2);
    assert_eq!(dest.captured().len(), 0);
}

#[tokio::test]
async fn a_destination_refusing_every_token_costs_one_token_request_a_minute() {
    let tokens = Server::start(always(token("tok", 3600))).await;
    let dest = Server::start(always(Reply::status(401))).await;
    let sink = sink(&dest, &tokens.url("/token"));
    for _ in 0..5 {
        let r = deliver(&sink, &envelope(b"{}")).await;
        assert_eq!(class_of(&r), Class::Config);
    }
    // The first 401 replaces the token and retries; within the minimum lifetime (60 s) a
    // 401 is the answer, with the token kept.
    assert_eq!(tokens.requests(), 2);
    assert_eq!(dest.captured().len(), 6);
}

/// A sink to a public literal address (never reached: the token comes first) with
/// `deny_private` and the token endpoint at `token_url`.
fn guarded(token_url: &str, allow: &[&str]) -> Result<HttpConfig, String> {
    serde_json::from_value(serde_json::json!({
        "url": "https://203.0.113.9/hooks",
        "deny_private": true,
        "allow_cidrs": allow,
        "oauth2": {"token_url": token_url, "client_id": "ankusa", "client_secret": SECRET}
    }))
    .map_err(|e| e.to_string())
}

#[tokio::test]
async fn deny_private_guards_the_token_endpoint_too() {
    let tokens = Server::start(always(token("tok-1", 3600))).await;
    // A literal private address: refused when the config is read.
    let e = guarded(&tokens.url("/token"), &[]).unwrap_err();
    assert!(
        e.contains("oauth2.token_url address 127.0.0.1 is private"),
        "{e}"
    );
    assert!(!e.contains(SECRET), "{e}");
    guarded(&tokens.url("/token"), &["127.0.0.1"]).unwrap();
    // Set on a config that already has the token URL.
    let config: HttpConfig = serde_json::from_value(serde_json::json!({
        "url": "https://203.0.113.9/hooks",
        "oauth2": {"token_url": tokens.url("/token"), "client_id": "ankusa", "client_secret": SECRET}
    }))
    .unwrap();
    let e = config
        .with_deny_private(Vec::new())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("oauth2.token_url address 127.0.0.1 is private"),
        "{e}"
    );
    // A name: refused on the connect, as config (not a transient outage), nothing sent.
    let by_name = tokens.url("/token").replace("127.0.0.1", "localhost");
    let sink = HttpSink::new(guarded(&by_name, &[]).unwrap()).unwrap();
    let r = deliver(&sink, &envelope(b"{}")).await;
    assert_eq!(class_of(&r), Class::Config);
    let f = r.unwrap_err();
    assert_eq!(f.may_have_landed(), Some(false));
    assert!(
        f.to_string()
            .contains("localhost resolves only to refused addresses"),
        "{f}"
    );
    assert_eq!(tokens.requests(), 0, "the token endpoint was never asked");
}
