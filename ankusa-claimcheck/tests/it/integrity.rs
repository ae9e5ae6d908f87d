//! Integrity: a tampered object, a wrong digest, an unknown claim and a foreign object are
//! permanent failures; integrity is never trusted from the store.

use crate::body;
use ankusa_claimcheck::{ClaimConfig, ClaimError, ClaimItem, ClaimRef, ClaimStore};
use ankusa_message::sha256_hex;
use ankusa_sink_core::{Class, Failure};
use object_store::ObjectStoreExt as _;
use object_store::path::Path;
use std::io::{Seek as _, SeekFrom, Write as _};

#[tokio::test]
async fn a_tampered_object_fails_its_integrity_check() {
    let dir = tempfile::tempdir().unwrap();
    let store = ClaimStore::local(dir.path(), ClaimConfig::default()).unwrap();
    let results = store
        .check_in_batch(vec![
            ClaimItem::new("acme", body(1, 4096)),
            ClaimItem::new("acme", body(2, 4096)),
        ])
        .await;
    let claim = results[1].as_ref().unwrap().clone();
    let sibling = results[0].as_ref().unwrap().clone();
    let loc = store.locate(Some("acme"), claim.reference()).await.unwrap();

    // Flip one byte of the claim's bytes on disk, in place.
    let file = dir.path().join(loc.key());
    let mut f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.seek(SeekFrom::Start(loc.offset() + 100)).unwrap();
    f.write_all(&[!body(2, 4096)[100]]).unwrap();
    f.sync_all().unwrap();
    drop(f);

    let urn = claim.reference().to_string();
    let err = store
        .redeem(Some("acme"), &urn, claim.sha256(), 4096)
        .await
        .unwrap_err();
    match &err {
        ClaimError::IntegrityMismatch {
            reference,
            expected,
            actual,
        } => {
            assert_eq!(reference, &urn);
            assert_eq!(expected, claim.sha256());
            assert_ne!(actual, expected);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(Failure::from(err).class(), Class::Permanent);

    // The neighbour in the same pack is untouched and still redeems.
    let urn = sibling.reference().to_string();
    assert_eq!(
        store
            .redeem(Some("acme"), &urn, sibling.sha256(), 4096)
            .await
            .unwrap(),
        body(1, 4096)
    );
}

#[tokio::test]
async fn a_digest_that_is_not_the_bodys_is_a_mismatch() {
    let store = ClaimStore::in_memory();
    let claim = store.check_in(ClaimItem::new("acme", "abc")).await.unwrap();
    let other = sha256_hex(b"abd");
    let err = store
        .redeem(Some("acme"), &claim.reference().to_string(), &other, 3)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClaimError::IntegrityMismatch { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("failed its integrity check"),
        "{err}"
    );
}

#[tokio::test]
async fn unknown_claims_are_not_found() {
    let store = ClaimStore::in_memory();
    let claim = store.check_in(ClaimItem::new("acme", "abc")).await.unwrap();
    let id = crate::ulid_of(&claim);

    // Another tenant, another pack, and a position past the pack's one claim.
    let cases = [
        ClaimRef::new("globex", id.to_string()).unwrap(),
        ClaimRef::new("acme", ulid::Ulid(id.0 ^ (1 << 20)).to_string()).unwrap(),
        ClaimRef::new("acme", ulid::Ulid(id.0 | 1).to_string()).unwrap(),
        ClaimRef::new("acme", ulid::Ulid(id.0 | 0xFFFF).to_string()).unwrap(),
    ];
    for r in cases {
        let urn = r.to_string();
        let err = store
            .redeem(Some(r.tenant()), &urn, claim.sha256(), 3)
            .await
            .unwrap_err();
        match &err {
            ClaimError::NotFound { reference } => assert_eq!(reference, &urn),
            other => panic!("{urn}: {other:?}"),
        }
        assert_eq!(Failure::from(err).class(), Class::Permanent);
    }
}

#[tokio::test]
async fn an_object_that_is_not_a_pack_is_refused() {
    let store = ClaimStore::in_memory();
    let claim = store.check_in(ClaimItem::new("acme", "abc")).await.unwrap();
    let loc = store.locate(Some("acme"), claim.reference()).await.unwrap();
    store
        .object_store()
        .put(&Path::from(loc.key()), vec![b'x'; 200].into())
        .await
        .unwrap();
    let err = store
        .redeem(
            Some("acme"),
            &claim.reference().to_string(),
            claim.sha256(),
            3,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ClaimError::CorruptPack { .. }), "{err:?}");
    assert_eq!(err.class(), Class::Permanent);

    // Cut short: a pack whose bytes end before the claim's range.
    store
        .object_store()
        .put(&Path::from(loc.key()), vec![b'x'; 10].into())
        .await
        .unwrap();
    let err = store
        .locate(Some("acme"), claim.reference())
        .await
        .unwrap_err();
    assert!(matches!(err, ClaimError::CorruptPack { .. }), "{err:?}");
}
