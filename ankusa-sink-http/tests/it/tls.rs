//! HTTPS: a rejected certificate is config; extra and exclusive CA roots.
//!
//! Fixtures (valid until 2126), made with:
//! `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 36500
//! -subj "/CN=ankusa-sink-http test CA" -addext basicConstraints=critical,CA:TRUE ...`
//! then a P-256 leaf for `IP:127.0.0.1, DNS:localhost` signed by it (key in PKCS#8).

use crate::server::{Reply, Server, Tls, always};
use crate::{class_of, deliver, envelope, reason};
use ankusa_sink_core::Class;
use ankusa_sink_http::{HttpError, HttpSink};
use std::path::PathBuf;
use std::sync::Arc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures")
        .join(name)
}

pub(crate) fn acceptor() -> Tls {
    server_tls(None)
}

/// The test server's TLS (the `server.pem` leaf), requiring a client certificate signed by
/// the fixture CA `client_ca` when one is given.
fn server_tls(client_ca: Option<&str>) -> Tls {
    let certs = CertificateDer::pem_file_iter(fixture("server.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(fixture("server.key")).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(fixture(ca)).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(certs, key).unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

pub(crate) async fn https_server() -> (Server, String) {
    https_server_with(acceptor()).await
}

/// A server answering 200 over TLS with `tls`, and its `https://…/hooks` URL.
async fn https_server_with(tls: Tls) -> (Server, String) {
    let server = Server::start_on(
        "127.0.0.1:0".parse().unwrap(),
        always(Reply::status(200)),
        Some(tls),
    )
    .await;
    let url = format!("https://127.0.0.1:{}/hooks", server.addr().port());
    (server, url)
}

#[tokio::test]
async fn an_untrusted_certificate_is_config() {
    let (server, url) = https_server().await;
    let sink = HttpSink::builder(url).build().unwrap();
    let r = deliver(&sink, &envelope(b"{}")).await;
    assert_eq!(class_of(&r), Class::Config, "{r:?}");
    assert!(matches!(reason(&r), HttpError::Certificate(_)), "{r:?}");
    assert!(server.captured().is_empty());
}

#[tokio::test]
async fn extra_roots_are_trusted_alongside_the_platform_roots() {
    let (server, url) = https_server().await;
    let pem = std::fs::read_to_string(fixture("ca.pem")).unwrap();
    let sink = HttpSink::builder(url).ca_pem(pem).build().unwrap();
    deliver(&sink, &envelope(b"{\"tls\":1}")).await.unwrap();
    assert_eq!(server.captured()[0].body, b"{\"tls\":1}");
}

#[tokio::test]
async fn only_the_configured_roots() {
    let (server, url) = https_server().await;
    let sink = HttpSink::builder(url)
        .ca_file(fixture("ca.pem"))
        .tls_roots_only(true)
        .build()
        .unwrap();
    deliver(&sink, &envelope(b"{}")).await.unwrap();
    assert_eq!(server.captured().len(), 1);
    // Roots-only with an unrelated root (the leaf itself is not a CA) rejects it.
    let (server, url) = https_server().await;
    let sink = HttpSink::builder(url)
        .ca_file(fixture("server.pem"))
        .tls_roots_only(true)
        .build()
        .unwrap();
    let r = deliver(&sink, &envelope(b"{}")).await;
    assert_eq!(class_of(&r), Class::Config, "{r:?}");
    assert!(server.captured().is_empty());
}

/// A server that requires a client certificate signed by the test client CA.
fn mutual_acceptor() -> Tls {
    server_tls(Some("client-ca.pem"))
}

/// A sink to a mutual-TLS server, trusting the test CA, with the client certificate
/// `cert`/`key` (fixtures), if any.
async fn mutual(cert_key: Option<(&str, &str)>) -> (Server, Result<(), ankusa_sink_core::Failure>) {
    let (server, url) = https_server_with(mutual_acceptor()).await;
    let mut tls = serde_json::json!({"ca_files": [fixture("ca.pem")]});
    if let Some((cert, key)) = cert_key {
        tls["client_cert_file"] = serde_json::json!(fixture(cert));
        tls["client_key_file"] = serde_json::json!(fixture(key));
    }
    let config: ankusa_sink_http::HttpConfig =
        serde_json::from_value(serde_json::json!({"url": url, "tls": tls})).unwrap();
    assert!(!format!("{config:?}").contains("PRIVATE KEY"), "{config:?}");
    let sink = HttpSink::new(config).unwrap();
    let r = deliver(&sink, &envelope(b"{\"mtls\":1}")).await;
    (server, r)
}

#[tokio::test]
async fn mutual_tls_delivers_with_the_right_client_certificate() {
    let (server, r) = mutual(Some(("client.pem", "client.key"))).await;
    r.unwrap();
    assert_eq!(server.captured()[0].body, b"{\"mtls\":1}");
}

#[tokio::test]
async fn a_client_certificate_the_server_rejects_or_none_is_config() {
    for cert_key in [Some(("stranger.pem", "stranger.key")), None] {
        let (server, r) = mutual(cert_key).await;
        assert_eq!(class_of(&r), Class::Config, "{cert_key:?}: {r:?}");
        assert!(server.captured().is_empty());
    }
}

#[test]
fn a_client_certificate_without_its_key_or_unreadable_is_a_config_error() {
    for tls in [
        serde_json::json!({"client_cert_file": fixture("client.pem")}),
        serde_json::json!({"client_cert_file": fixture("client.pem"), "client_key_file": fixture("ca.pem")}),
    ] {
        let e = serde_json::from_value::<ankusa_sink_http::HttpConfig>(serde_json::json!({
            "url": "https://hooks.example/in", "tls": tls
        }))
        .unwrap_err()
        .to_string();
        assert!(e.contains("client"), "{e}");
        assert!(!e.contains("BEGIN"), "{e}");
    }
}
