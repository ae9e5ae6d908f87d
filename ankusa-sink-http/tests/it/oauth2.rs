//! `[oauth2]` client credentials against a local token server that counts its calls.

use crate::server::{Reply, Server, always, sequence};
use crate::{class_of, deliver, envelope};
use ankusa_sink_core::Class;
use ankusa_sink_http::{HttpConfig, HttpSink};
use std::sync::Arc;

const SECRET: &str = "client-secret-DO-NOT-PRINT";

fn token(value: &str, expires_in: u64) -> Reply {
    Reply::Answer {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: format!(
            r#"{{"access_token":"{value}","token_type":"Bearer","expires_in":{expires_in}}}"#
        )
        .into_bytes(),
    }
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

#[tokio::test]
async fn a_token_is_fetched_once_shared_and_sent_as_bearer() {
    let tokens = Server::start(always(token("tok-1", 3600))).await;
    let dest = Server::start(always(Reply::status(200))).await;
    let sink = Arc::new(sink(&dest, &tokens.url("/token")));
    let mut all = Vec::new();
    for _ in 0..20 {
        let sink = sink.clone();
        all.push(tokio::spawn(async move {
            deliver(&sink, &envelope(b"{}")).await
        }));
    }
    for d in all {
        d.await.unwrap().unwrap();
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
