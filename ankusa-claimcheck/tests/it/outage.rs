//! The store down then up, a store refusing the credentials, and a missing bucket: each
//! provoked for real on S3 (moto) and classified on object_store's typed errors.

use crate::moto::{self, Moto};
use crate::{body, redeem};
use ankusa_claimcheck::{ClaimError, ClaimItem, ClaimStore};
use ankusa_sink_core::{Class, Failure};
use ankusa_sink_testkit::support::unique_name;
use std::sync::Arc;

/// A store on the S3 at `endpoint`, in a bucket named after `tag`, signing with `access_key`.
fn s3_store(endpoint: &str, tag: &str, access_key: &str) -> ClaimStore {
    ClaimStore::new(Arc::new(moto::s3(endpoint, &unique_name(tag), access_key)))
}

/// The error of checking a body in, which must fail.
async fn failed_check_in(store: &ClaimStore) -> ClaimError {
    store
        .check_in(ClaimItem::new("acme", body(1, 2000)))
        .await
        .unwrap_err()
}

/// The error of redeeming a claim never checked in (a well-formed reference to nothing):
/// what the store answers before it could say "not found".
async fn failed_redeem(store: &ClaimStore) -> ClaimError {
    let urn = format!("urn:ankusa:claim:v1:acme:{}", ulid::Ulid::new());
    store
        .redeem(Some("acme"), &urn, &"0".repeat(64), 4)
        .await
        .unwrap_err()
}

#[tokio::test]
async fn store_down_then_up() {
    ankusa_sink_testkit::require_broker!("moto", crate::moto::addr());
    // Nothing listens on the port yet: connection refused.
    let port = moto::free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let bucket = unique_name("claims-outage");
    let store = ClaimStore::new(Arc::new(moto::s3(&endpoint, &bucket, "testing")));

    let err = failed_check_in(&store).await;
    assert!(matches!(err, ClaimError::Unavailable(_)), "{err:?}");
    let failure = Failure::from(err);
    assert_eq!(failure.class(), Class::Transient);
    assert!(
        failure
            .to_string()
            .starts_with("transient: claim store unavailable"),
        "{failure}"
    );

    let err = failed_redeem(&store).await;
    assert!(matches!(err, ClaimError::Unavailable(_)), "{err:?}");
    assert!(err.is_transient());

    // The store comes up on that port: the same call now succeeds.
    let moto = Moto::start(port, &[]).await;
    moto::create_bucket(&moto.endpoint, &bucket).await;
    let claim = store
        .check_in(ClaimItem::new("acme", body(1, 2000)))
        .await
        .unwrap();
    let bytes = redeem(&store, &claim, 2000).await.unwrap();
    assert_eq!(bytes, body(1, 2000));

    // And down again: reads are transient, not "not found".
    moto.stop().await;
    let err = redeem(&store, &claim, 2000).await.unwrap_err();
    assert!(matches!(err, ClaimError::Unavailable(_)), "{err:?}");
}

#[tokio::test]
async fn a_store_refusing_the_credentials_is_a_config_failure() {
    ankusa_sink_testkit::require_broker!("moto", crate::moto::addr());
    // moto checks IAM from the first request: an unknown access key is refused (403).
    let moto = Moto::start(moto::free_port(), &[("INITIAL_NO_AUTH_ACTION_COUNT", "0")]).await;
    let store = s3_store(&moto.endpoint, "claims-denied", "AKIAUNKNOWNKEY000000");
    let err = failed_check_in(&store).await;
    assert!(matches!(err, ClaimError::Forbidden(_)), "{err:?}");
    let failure = Failure::from(err);
    assert_eq!(failure.class(), Class::Config);
    assert!(
        !failure.to_string().contains("testing"),
        "no secret: {failure}"
    );

    let err = failed_redeem(&store).await;
    assert!(matches!(err, ClaimError::Forbidden(_)), "{err:?}");
    assert_eq!(err.class(), Class::Config);
    moto.stop().await;
}

#[tokio::test]
async fn a_missing_bucket_is_a_config_failure_on_write() {
    ankusa_sink_testkit::require_broker!("moto", crate::moto::addr());
    let store = s3_store(&moto::endpoint(), "claims-missing", "testing");
    let err = failed_check_in(&store).await;
    assert!(matches!(err, ClaimError::StoreConfig(_)), "{err:?}");
    assert_eq!(Failure::from(err).class(), Class::Config);
}
