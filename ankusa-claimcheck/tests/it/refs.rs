//! References: what check-in hands out parses back, and every bad reference or tenant is
//! refused with a clear, permanent error.

use crate::body;
use ankusa_claimcheck::{ClaimError, ClaimItem, ClaimRef, ClaimRefError, ClaimStore};
use ankusa_sink_core::{Class, Failure};

#[tokio::test]
async fn check_in_hands_out_references_that_round_trip() {
    let store = ClaimStore::in_memory();
    let tenants = ["acme", "A-b_9", &"t".repeat(64)];
    for tenant in tenants {
        let claim = store
            .check_in(ClaimItem::new(tenant, body(1, 10)))
            .await
            .unwrap();
        let urn = claim.reference().to_string();
        let id = claim.reference().claim_id().to_string();
        assert_eq!(urn, format!("urn:ankusa:claim:v1:{tenant}:{id}"));
        // The SDKs' grammar: canonical uppercase ULID, first character 0..=7.
        assert_eq!(id, crate::ulid_of(&claim).to_string());
        assert!(id.len() == 26 && id.as_bytes()[0] <= b'7', "{id}");
        let parsed: ClaimRef = urn.parse().unwrap();
        assert_eq!(&parsed, claim.reference());
        assert_eq!(parsed.to_string(), urn);
        // A one-claim pack: position 0 in the last 16 bits.
        assert_eq!(crate::ulid_of(&claim).0 & 0xFFFF, 0);
        assert_eq!(claim.sha256().len(), 64);
        assert_eq!(
            store
                .redeem(Some(tenant), &urn, claim.sha256(), 10)
                .await
                .unwrap(),
            body(1, 10)
        );
    }
}

#[tokio::test]
async fn claim_ids_sort_by_check_in_time_and_are_unique() {
    let store = ClaimStore::in_memory();
    let a = store.check_in(ClaimItem::new("t", "x")).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let b = store.check_in(ClaimItem::new("t", "x")).await.unwrap();
    assert!(crate::ulid_of(&a) < crate::ulid_of(&b));
    assert_eq!(a.sha256(), b.sha256());
}

#[tokio::test]
async fn redeem_refuses_every_malformed_reference() {
    let store = ClaimStore::in_memory();
    let claim = store.check_in(ClaimItem::new("acme", "hi")).await.unwrap();
    let id = claim.reference().claim_id().to_string();
    let sha = claim.sha256();
    let cases = [
        (
            format!("urn:ankusa:claim:v1:acme:{}", id.to_lowercase()),
            ClaimRefError::InvalidId,
        ),
        (
            format!("urn:ankusa:claim:v1:acme:{}", &id[..25]),
            ClaimRefError::InvalidId,
        ),
        (
            format!("urn:ankusa:claim:v1:acme:{id}0"),
            ClaimRefError::InvalidId,
        ),
        (
            format!("urn:ankusa:claim:v1:acme:8{}", &id[1..]),
            ClaimRefError::InvalidId,
        ),
        (
            format!("urn:ankusa:claim:v1:acme:{}I", &id[..25]),
            ClaimRefError::InvalidId,
        ),
        (
            format!("urn:ankusa:claim:v1:acme:{}L", &id[..25]),
            ClaimRefError::InvalidId,
        ),
        (
            format!("urn:ankusa:claim:v1:acme:{}O", &id[..25]),
            ClaimRefError::InvalidId,
        ),
        (
            format!("urn:ankusa:claim:v1:acme:{}U", &id[..25]),
            ClaimRefError::InvalidId,
        ),
        (
            format!("urn:ankusa:claim:v1:acme:{id}\n"),
            ClaimRefError::InvalidId,
        ),
        (
            format!("urn:ankusa:claim:v1:acme:{id}:extra"),
            ClaimRefError::Malformed,
        ),
        (
            format!("urn:ankusa:claim:v1:a.b:{id}"),
            ClaimRefError::InvalidTenant,
        ),
        (
            format!("urn:ankusa:claim:v1:{}:{id}", "a".repeat(65)),
            ClaimRefError::InvalidTenant,
        ),
        (
            format!("urn:ankusa:claim:v1::{id}"),
            ClaimRefError::InvalidTenant,
        ),
        (
            format!("urn:ankusa:claim:v2:acme:{id}"),
            ClaimRefError::Malformed,
        ),
        (
            format!("urn:ankusa:claim:v1:acme:{id}:0:10:sha256-{sha}"),
            ClaimRefError::Malformed,
        ),
        ("".to_owned(), ClaimRefError::Malformed),
    ];
    for (urn, want) in cases {
        let err = store.redeem(Some("acme"), &urn, sha, 2).await.unwrap_err();
        match &err {
            ClaimError::InvalidRef(got) => assert_eq!(*got, want, "{urn:?}"),
            other => panic!("{urn:?}: {other:?}"),
        }
        assert_eq!(Failure::from(err).class(), Class::Permanent, "{urn:?}");
    }
    // The real reference still redeems.
    store
        .redeem(Some("acme"), &claim.reference().to_string(), sha, 2)
        .await
        .unwrap();
}

#[tokio::test]
async fn redeem_refuses_a_digest_that_is_not_lowercase_hex() {
    let store = ClaimStore::in_memory();
    let claim = store.check_in(ClaimItem::new("acme", "hi")).await.unwrap();
    let urn = claim.reference().to_string();
    for sha in [
        claim.sha256().to_uppercase(),
        claim.sha256()[1..].to_owned(),
        String::new(),
    ] {
        let err = store.redeem(Some("acme"), &urn, &sha, 2).await.unwrap_err();
        assert!(
            matches!(err, ClaimError::InvalidRef(ClaimRefError::InvalidDigest)),
            "{sha:?}: {err:?}"
        );
        assert_eq!(err.class(), Class::Permanent);
    }
}

#[tokio::test]
async fn check_in_refuses_bad_tenants_with_a_clear_error() {
    let store = ClaimStore::in_memory();
    for tenant in ["", "a.b", "a b", "a:b", "ä", &"a".repeat(65), "tenant/x"] {
        let err = store
            .check_in(ClaimItem::new(tenant, "body"))
            .await
            .unwrap_err();
        match &err {
            ClaimError::InvalidTenant(t) => assert_eq!(t, tenant),
            other => panic!("{tenant:?}: {other:?}"),
        }
        assert!(
            err.to_string().contains("[A-Za-z0-9_-]{1,64}"),
            "{tenant:?}: {err}"
        );
        assert_eq!(Failure::from(err).class(), Class::Permanent);
    }
}
