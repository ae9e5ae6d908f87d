//! Claims are bound to a tenant and to the size the message declares: a reader names the
//! tenant it reads for, a reference of another tenant is refused before the store is asked,
//! and a store whose index lies about a claim's length cannot make a redeem read it.

use crate::{Counting, body};
use ankusa_claimcheck::{ClaimConfig, ClaimError, ClaimItem, ClaimStore, DEFAULT_TENANT};
use ankusa_message::MessageBody;
use ankusa_sink_core::{Class, Ctx, Envelope, EnvelopeError, TENANTLESS};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _};
use std::num::NonZeroUsize;
use std::sync::Arc;

#[tokio::test]
async fn another_tenants_reference_is_refused_before_any_read() {
    let counting = Counting::new(Arc::new(InMemory::new()));
    let store = ClaimStore::new(counting.clone());
    let claim = store
        .check_in(ClaimItem::new("acme", body(1, 500)))
        .await
        .unwrap();
    let urn = claim.reference().to_string();
    counting.reset();
    for reader in [Some("globex"), None] {
        let err = store
            .redeem(reader, &urn, claim.sha256(), 500)
            .await
            .unwrap_err();
        match &err {
            ClaimError::WrongTenant {
                reference,
                expected,
            } => {
                assert_eq!(reference, &urn);
                assert_eq!(expected, reader.unwrap_or(TENANTLESS));
            }
            other => panic!("{reader:?}: {other:?}"),
        }
        assert_eq!(err.class(), Class::Permanent);
        let err = store.locate(reader, claim.reference()).await.unwrap_err();
        assert!(matches!(err, ClaimError::WrongTenant { .. }), "{err:?}");
        let err = store.redeem_claim(reader, &claim, 500).await.unwrap_err();
        assert!(matches!(err, ClaimError::WrongTenant { .. }), "{err:?}");
    }
    assert_eq!(counting.gets(), 0, "refused before the store was asked");
    assert_eq!(
        store
            .redeem(Some("acme"), &urn, claim.sha256(), 500)
            .await
            .unwrap(),
        body(1, 500)
    );
}

#[tokio::test]
async fn tenantless_hooks_have_their_own_reserved_partition() {
    let store = ClaimStore::in_memory();
    let env = Envelope::builder("hook-1", "stripe", body(2, 300))
        .build()
        .unwrap();
    let claim = store
        .check_in(ClaimItem::from_envelope(&env))
        .await
        .unwrap();
    assert_eq!(claim.reference().tenant(), DEFAULT_TENANT);
    assert_eq!(DEFAULT_TENANT, TENANTLESS);
    let urn = claim.reference().to_string();
    assert_eq!(
        store.redeem(None, &urn, claim.sha256(), 300).await.unwrap(),
        body(2, 300)
    );
    // No real tenant can be called "default", so none can read or share it.
    assert_eq!(
        Envelope::builder("hook-2", "stripe", "x")
            .tenant_id(DEFAULT_TENANT)
            .build()
            .unwrap_err(),
        EnvelopeError::ReservedTenant
    );
    let err = store
        .redeem(Some("acme"), &urn, claim.sha256(), 300)
        .await
        .unwrap_err();
    assert!(matches!(err, ClaimError::WrongTenant { .. }), "{err:?}");
}

#[tokio::test]
async fn redeem_message_reads_for_the_messages_tenant_size_and_digest() {
    let store = ClaimStore::in_memory();
    let env = Envelope::builder("hook-1", "stripe", body(3, 4000))
        .tenant_id("acme")
        .build()
        .unwrap();
    let claim = store
        .claim_for(&env, [NonZeroUsize::new(100)])
        .await
        .unwrap()
        .expect("over the threshold");
    let ctx = Ctx::for_envelope(&env).with_claim(claim);
    let wire = ankusa_message::encode(&env, &ctx, NonZeroUsize::new(100)).unwrap();
    let msg = ankusa_message::decode(&wire).unwrap();
    assert!(matches!(msg.body, MessageBody::Claim(_)));
    assert_eq!(store.redeem_message(&msg).await.unwrap(), body(3, 4000));

    // The same reference presented as another tenant's message.
    let mut foreign = msg.clone();
    foreign.tenant_id = Some("globex".into());
    let err = store.redeem_message(&foreign).await.unwrap_err();
    assert!(matches!(err, ClaimError::WrongTenant { .. }), "{err:?}");
    // A size the store disagrees with: refused, whatever the digest.
    let mut resized = msg.clone();
    resized.size = 3999;
    let err = store.redeem_message(&resized).await.unwrap_err();
    assert!(
        matches!(
            err,
            ClaimError::SizeMismatch {
                declared: 3999,
                actual: 4000,
                ..
            }
        ),
        "{err:?}"
    );
    // An inline message needs no store.
    let inline = ankusa_message::decode(
        &ankusa_message::encode(&env, &Ctx::for_envelope(&env), None).unwrap(),
    )
    .unwrap();
    assert_eq!(store.redeem_message(&inline).await.unwrap(), body(3, 4000));
}

/// Rewrite the length in the index row of the one-claim pack at `key`.
async fn lie_about_the_length(store: &Arc<dyn ObjectStore>, key: &str, length: u32) {
    let path = Path::from(key);
    let mut object = store
        .get(&path)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    // Row 0 of index.bin: 4 bytes offset, then 4 bytes length, big-endian, at 39.
    object[43..47].copy_from_slice(&length.to_be_bytes());
    store.put(&path, object.into()).await.unwrap();
}

#[tokio::test]
async fn a_lying_index_cannot_make_redeem_read_more_than_the_message_declares() {
    let counting = Counting::new(Arc::new(InMemory::new()));
    let store = ClaimStore::new(counting.clone());
    let claim = store
        .check_in(ClaimItem::new("acme", body(4, 1000)))
        .await
        .unwrap();
    let loc = store.locate(Some("acme"), claim.reference()).await.unwrap();
    let inner: Arc<dyn ObjectStore> = counting.clone();
    lie_about_the_length(&inner, loc.key(), u32::MAX - 64).await;

    counting.reset();
    let urn = claim.reference().to_string();
    let err = store
        .redeem(Some("acme"), &urn, claim.sha256(), 1000)
        .await
        .unwrap_err();
    match &err {
        ClaimError::SizeMismatch {
            declared, actual, ..
        } => {
            assert_eq!(*declared, 1000);
            assert_eq!(*actual, u64::from(u32::MAX - 64));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.class(), Class::Permanent);
    assert_eq!(
        counting.gets(),
        1,
        "the index only: the bytes were not read"
    );
}

#[tokio::test]
async fn max_read_bytes_caps_every_read_before_it_happens() {
    let counting = Counting::new(Arc::new(InMemory::new()));
    let config = ClaimConfig::builder().max_read_bytes(100).build().unwrap();
    let store = ClaimStore::with_config(counting.clone(), config);
    let data = body(5, 200);
    let claim = store
        .check_in(ClaimItem::new("acme", data.clone()))
        .await
        .unwrap();
    counting.reset();
    let urn = claim.reference().to_string();
    let err = store
        .redeem(Some("acme"), &urn, claim.sha256(), 200)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClaimError::ReadTooLarge {
                size: 200,
                max: 100,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.class(), Class::Permanent);
    assert_eq!(counting.gets(), 1, "the index only");

    let loc = store.locate(Some("acme"), claim.reference()).await.unwrap();
    assert!(matches!(
        store.read(&loc).await,
        Err(ClaimError::ReadTooLarge { .. })
    ));
    assert!(matches!(
        store.read_bytes(&loc, 0..u64::MAX).await,
        Err(ClaimError::ReadTooLarge { .. })
    ));
    // Ranges within the cap still read (clipped to the claim).
    assert_eq!(
        store.read_bytes(&loc, 150..400).await.unwrap(),
        &data[150..]
    );
    assert_eq!(store.read_bytes(&loc, 0..100).await.unwrap(), &data[..100]);
}
