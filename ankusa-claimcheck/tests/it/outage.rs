//! The store down then up, a store refusing the credentials, and a missing bucket: each
//! provoked for real on S3 (moto) and classified on object_store's typed errors.

use crate::body;
use crate::moto::{self, Moto};
use ankusa_claimcheck::{ClaimError, ClaimItem, ClaimStore};
use ankusa_sink_core::{Class, Failure};
use ankusa_sink_testkit::support::unique_name;
use std::sync::Arc;

#[tokio::test]
async fn store_down_then_up() {
    // Nothing listens on the port yet: connection refused.
    let port = moto::free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let bucket = unique_name("claims-outage");
    let store = ClaimStore::new(Arc::new(moto::s3(&endpoint, &bucket, "testing")));

    let err = store
        .check_in(ClaimItem::new("acme", body(1, 2000)))
        .await
        .unwrap_err();
    assert!(matches!(err, ClaimError::Unavailable(_)), "{err:?}");
    let failure = Failure::from(err);
    assert_eq!(failure.class(), Class::Transient);
    assert!(
        failure
            .to_string()
            .starts_with("transient: claim store unavailable"),
        "{failure}"
    );

    let urn = format!("urn:ankusa:claim:v1:acme:{}", ulid::Ulid::new());
    let err = store
        .redeem(Some("acme"), &urn, &"0".repeat(64), 4)
        .await
        .unwrap_err();
    assert!(matches!(err, ClaimError::Unavailable(_)), "{err:?}");
    assert!(err.is_transient());

    // The store comes up on that port: the same call now succeeds.
    let moto = Moto::start(port, &[]).await;
    moto::create_bucket(&moto.endpoint, &bucket).await;
    let claim = store
        .check_in(ClaimItem::new("acme", body(1, 2000)))
        .await
        .unwrap();
    let bytes = store
        .redeem(
            Some("acme"),
            &claim.reference().to_string(),
            claim.sha256(),
            2000,
        )
        .await
        .unwrap();
    assert_eq!(bytes, body(1, 2000));

    // And down again: reads are transient, not "not found".
    moto.stop().await;
    let err = store
        .redeem(
            Some("acme"),
            &claim.reference().to_string(),
            claim.sha256(),
            2000,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ClaimError::Unavailable(_)), "{err:?}");
}

#[tokio::test]
async fn a_store_refusing_the_credentials_is_a_config_failure() {
    // moto checks IAM from the first request: an unknown access key is refused (403).
    let moto = Moto::start(moto::free_port(), &[("INITIAL_NO_AUTH_ACTION_COUNT", "0")]).await;
    let store = ClaimStore::new(Arc::new(moto::s3(
        &moto.endpoint,
        &unique_name("claims-denied"),
        "AKIAUNKNOWNKEY000000",
    )));
    let err = store
        .check_in(ClaimItem::new("acme", "body"))
        .await
        .unwrap_err();
    assert!(matches!(err, ClaimError::Forbidden(_)), "{err:?}");
    let failure = Failure::from(err);
    assert_eq!(failure.class(), Class::Config);
    assert!(
        !failure.to_string().contains("testing"),
        "no secret: {failure}"
    );

    let urn = format!("urn:ankusa:claim:v1:acme:{}", ulid::Ulid::new());
    let err = store
        .redeem(Some("acme"), &urn, &"0".repeat(64), 4)
        .await
        .unwrap_err();
    assert!(matches!(err, ClaimError::Forbidden(_)), "{err:?}");
    assert_eq!(err.class(), Class::Config);
    moto.stop().await;
}

#[tokio::test]
async fn a_missing_bucket_is_a_config_failure_on_write() {
    let store = ClaimStore::new(Arc::new(moto::s3(
        &moto::endpoint(),
        &unique_name("claims-missing"),
        "testing",
    )));
    let err = store
        .check_in(ClaimItem::new("acme", "body"))
        .await
        .unwrap_err();
    assert!(matches!(err, ClaimError::StoreConfig(_)), "{err:?}");
    assert_eq!(Failure::from(err).class(), Class::Config);
}
