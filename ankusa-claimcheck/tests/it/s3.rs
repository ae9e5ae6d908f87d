//! Redeem through S3 on moto: packs written with one put each, read back with two ranged
//! reads per claim.

use crate::moto;
use crate::{Counting, body, check_in_all, redeem};
use ankusa_claimcheck::{ClaimConfig, ClaimItem, ClaimStore};
use ankusa_sink_testkit::support::unique_name;
use object_store::ObjectStoreExt as _;
use object_store::path::Path;
use std::sync::Arc;

#[tokio::test]
async fn redeem_through_s3_on_moto() {
    ankusa_sink_testkit::require_broker!("moto", crate::moto::addr());
    let endpoint = moto::endpoint();
    let bucket = unique_name("claims-it");
    moto::create_bucket(&endpoint, &bucket).await;
    let s3 = Arc::new(moto::s3(&endpoint, &bucket, "testing"));
    let counting = Counting::new(s3.clone());
    let config = ClaimConfig::builder()
        .pack_max_bytes(300_000)
        .build()
        .unwrap();
    let store = ClaimStore::with_config(counting.clone(), config);

    let sizes = [100_000usize, 150_000, 10, 0, 400_000, 64];
    let items = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            ClaimItem::new(if i % 2 == 0 { "acme" } else { "globex" }, body(i as u8, n))
                .with_id(format!("hook-{i}"))
        })
        .collect();
    let claims = check_in_all(&store, items).await;
    // acme: 100_000 + 10 | 400_000 ; globex: 150_000 + 0 + 64.
    assert_eq!(counting.puts(), 3);

    for (i, claim) in claims.iter().enumerate() {
        counting.reset();
        let bytes = redeem(&store, claim, sizes[i] as u64).await.unwrap();
        assert_eq!(bytes, body(i as u8, sizes[i]), "claim {i}");
        let reads = if sizes[i] == 0 { 1 } else { 2 };
        assert_eq!(counting.gets(), reads, "claim {i}");
    }

    // The object is where the reference design says, under the unprefixed key.
    let loc = store
        .locate(Some("acme"), claims[0].reference())
        .await
        .unwrap();
    assert!(loc.key().starts_with("claims/tenant=acme/dt="));
    let meta = s3.head(&Path::from(loc.key())).await.unwrap();
    assert!(meta.size > 100_010);

    // Clean up this run's objects (three packs).
    let mut keys = std::collections::BTreeSet::new();
    for c in &claims {
        let loc = store.locate(Some(c.reference().tenant()), c.reference());
        keys.insert(loc.await.unwrap().key().to_owned());
    }
    assert_eq!(keys.len(), 3);
    for key in keys {
        s3.delete(&Path::from(key)).await.unwrap();
    }
    moto::delete_bucket(&endpoint, &bucket).await;
}
