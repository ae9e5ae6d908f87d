//! Packs: grouped per tenant, split at pack_max_bytes, one put each, bounded uploads, a
//! standard ZIP, and every claim read back by id with two ranged reads.

use crate::{Counting, body, check_in_all, redeem};
use ankusa_claimcheck::{ClaimConfig, ClaimError, ClaimItem, ClaimStore};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _};
use std::collections::BTreeSet;
use std::io::Read as _;
use std::sync::Arc;

fn pack_key(claim: &ankusa_claimcheck::Claim) -> String {
    // Everything but the position: the pack id is the first 112 bits.
    let id = crate::ulid_of(claim).0 & !0xFFFF;
    ulid::Ulid(id).to_string()
}

#[tokio::test]
async fn batch_packs_per_tenant_and_reads_back_with_two_ranged_reads() {
    let counting = Counting::new(Arc::new(InMemory::new()));
    let store = ClaimStore::new(counting.clone());
    let items: Vec<ClaimItem> = (0..12u8)
        .map(|i| {
            let tenant = ["acme", "globex", "initech"][usize::from(i % 3)];
            ClaimItem::new(tenant, body(i, 1000 + usize::from(i) * 37))
                .with_id(format!("hook-{i}"))
                .with_content_type("application/json")
                .with_received_at(1_700_000_000_000 + i64::from(i))
        })
        .collect();
    let claims = check_in_all(&store, items).await;

    // Three tenants, everything fits: three packs, three puts.
    assert_eq!(counting.puts(), 3);
    let packs: BTreeSet<String> = claims.iter().map(pack_key).collect();
    assert_eq!(packs.len(), 3);
    for (i, claim) in claims.iter().enumerate() {
        let tenant = ["acme", "globex", "initech"][i % 3];
        assert_eq!(claim.reference().tenant(), tenant);
        // Position in the pack: the claim's order within its tenant.
        assert_eq!(crate::ulid_of(claim).0 & 0xFFFF, (i / 3) as u128);
    }

    for (i, claim) in claims.iter().enumerate() {
        counting.reset();
        let size = 1000 + i * 37;
        let bytes = redeem(&store, claim, size as u64).await.unwrap();
        assert_eq!(bytes, body(i as u8, size));
        assert_eq!(
            counting.gets(),
            2,
            "claim {i}: one read of the index, one of the bytes"
        );
        assert_eq!(counting.puts(), 0);
    }
}

#[tokio::test]
async fn locate_then_ranged_reads_inside_a_claim() {
    let counting = Counting::new(Arc::new(InMemory::new()));
    let store = ClaimStore::new(counting.clone());
    let data = body(9, 5000);
    let claim = store
        .check_in(ClaimItem::new("acme", data.clone()))
        .await
        .unwrap();
    counting.reset();
    let loc = store.locate(Some("acme"), claim.reference()).await.unwrap();
    assert_eq!(counting.gets(), 1);
    assert_eq!(loc.len(), 5000);
    assert!(
        loc.key().starts_with("claims/tenant=acme/dt="),
        "{}",
        loc.key()
    );
    assert!(loc.key().ends_with(&pack_key(&claim)));

    assert_eq!(
        store.read_bytes(&loc, 100..164).await.unwrap(),
        &data[100..164]
    );
    assert_eq!(counting.gets(), 2);
    // Clipped to the claim; an empty range reads nothing.
    assert_eq!(
        store.read_bytes(&loc, 4990..9999).await.unwrap(),
        &data[4990..]
    );
    assert!(store.read_bytes(&loc, 7000..8000).await.unwrap().is_empty());
    assert_eq!(counting.gets(), 3);
}

#[tokio::test]
async fn packs_split_at_pack_max_bytes_and_an_oversized_body_gets_its_own() {
    let counting = Counting::new(Arc::new(InMemory::new()));
    let config = ClaimConfig::builder()
        .pack_max_bytes(10_000)
        .build()
        .unwrap();
    let store = ClaimStore::with_config(counting.clone(), config);
    let sizes = [4000usize, 4000, 4000, 25_000, 1000, 2000];
    let items = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| ClaimItem::new("acme", body(i as u8, n)))
        .collect();
    let claims = check_in_all(&store, items).await;
    // Greedy, in order: 4000+4000 | 4000 | 25_000 (alone, over the limit) | 1000+2000.
    let keys: Vec<String> = claims.iter().map(pack_key).collect();
    assert_eq!(keys[0], keys[1]);
    assert_ne!(keys[1], keys[2]);
    assert_ne!(keys[2], keys[3]);
    assert_ne!(keys[3], keys[4]);
    assert_eq!(keys[4], keys[5]);
    assert_eq!(counting.puts(), 4);
    for (i, claim) in claims.iter().enumerate() {
        assert_eq!(claim.reference().tenant(), "acme");
        let bytes = redeem(&store, claim, sizes[i] as u64).await.unwrap();
        assert_eq!(bytes, body(i as u8, sizes[i]));
    }
}

#[tokio::test]
async fn uploads_run_concurrently_up_to_the_bound() {
    // Each put waits until two are in flight, so a bound of 2 is reached and never passed.
    let counting = Counting::pairing(Arc::new(InMemory::new()), 2);
    let config = ClaimConfig::builder()
        .pack_max_bytes(100)
        .max_concurrent_uploads(2)
        .build()
        .unwrap();
    let store = ClaimStore::with_config(counting.clone(), config);
    let items = (0..6u8)
        .map(|i| ClaimItem::new("acme", body(i, 100)))
        .collect();
    let results = store.check_in_batch(items).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(counting.puts(), 6);
    assert_eq!(counting.max_inflight(), 2);
}

#[tokio::test]
async fn a_bad_item_fails_alone() {
    let counting = Counting::new(Arc::new(InMemory::new()));
    let store = ClaimStore::new(counting.clone());
    let results = store
        .check_in_batch(vec![
            ClaimItem::new("acme", "one"),
            ClaimItem::new("not valid", "two"),
            ClaimItem::new("acme", "three"),
        ])
        .await;
    assert!(matches!(results[1], Err(ClaimError::InvalidTenant(_))));
    let a = results[0].as_ref().unwrap();
    let c = results[2].as_ref().unwrap();
    assert_eq!(pack_key(a), pack_key(c));
    assert_eq!(counting.puts(), 1);
    assert!(store.check_in_batch(Vec::new()).await.is_empty());
    assert_eq!(counting.puts(), 1);
}

#[tokio::test]
async fn a_pack_is_a_standard_stored_zip_with_index_first_and_a_manifest() {
    let mem = Arc::new(InMemory::new());
    let store = ClaimStore::new(mem.clone());
    let items = vec![
        ClaimItem::new("acme", body(1, 300))
            .with_id("hook-1")
            .with_content_type("application/json")
            .with_received_at(1_700_000_000_001),
        ClaimItem::new("acme", Vec::new()).with_id("hook-2"),
    ];
    let claims = check_in_all(&store, items).await;
    let loc = store
        .locate(Some("acme"), claims[0].reference())
        .await
        .unwrap();
    let object = mem
        .get(&Path::from(loc.key()))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();

    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(object.to_vec())).unwrap();
    let names: Vec<String> = (0..zip.len())
        .map(|i| zip.by_index(i).unwrap().name().unwrap().into_owned())
        .collect();
    // index.bin's local header is the first thing in the object.
    assert_eq!(&object[..4], b"PK\x03\x04");
    assert_eq!(&object[30..39], b"index.bin");
    let ids: Vec<String> = claims
        .iter()
        .map(|c| c.reference().claim_id().to_string())
        .collect();
    assert_eq!(names, ["index.bin", &ids[0], &ids[1], "manifest.json"]);
    for i in 0..zip.len() {
        let f = zip.by_index(i).unwrap();
        assert_eq!(f.compression(), zip::CompressionMethod::Stored);
    }

    let mut index = Vec::new();
    zip.by_name("index.bin")
        .unwrap()
        .read_to_end(&mut index)
        .unwrap();
    assert_eq!(index.len(), 16);
    let row = |i: usize| {
        let o = u32::from_be_bytes(index[i * 8..i * 8 + 4].try_into().unwrap());
        let l = u32::from_be_bytes(index[i * 8 + 4..i * 8 + 8].try_into().unwrap());
        (u64::from(o), u64::from(l))
    };
    assert_eq!(row(0), (loc.offset(), 300));
    assert_eq!(&object[row(0).0 as usize..][..300], &body(1, 300)[..]);
    assert_eq!(row(1).1, 0);

    let mut claim0 = Vec::new();
    zip.by_name(&ids[0])
        .unwrap()
        .read_to_end(&mut claim0)
        .unwrap();
    assert_eq!(claim0, body(1, 300));

    let mut manifest = String::new();
    zip.by_name("manifest.json")
        .unwrap()
        .read_to_string(&mut manifest)
        .unwrap();
    let m: serde_json::Value = serde_json::from_str(&manifest).unwrap();
    assert_eq!(m["v"], 1);
    let c0 = &m["claims"][0];
    assert_eq!(c0["claim_id"], ids[0].as_str());
    assert_eq!(c0["id"], "hook-1");
    assert_eq!(c0["offset"], loc.offset());
    assert_eq!(c0["length"], 300);
    assert_eq!(c0["sha256"], claims[0].sha256());
    assert_eq!(c0["content_type"], "application/json");
    assert_eq!(c0["received_at"], 1_700_000_000_001i64);
    let c1 = &m["claims"][1];
    assert_eq!(c1["id"], "hook-2");
    assert_eq!(c1["length"], 0);
    assert!(c1["content_type"].is_null());

    // The empty claim redeems to nothing (no read of zero bytes).
    let urn = claims[1].reference().to_string();
    assert!(
        store
            .redeem(Some("acme"), &urn, claims[1].sha256(), 0)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn local_store_writes_under_the_partitioned_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = ClaimStore::local(dir.path().join("root"), ClaimConfig::default()).unwrap();
    let claim = store
        .check_in(ClaimItem::new("acme", body(3, 2048)))
        .await
        .unwrap();
    // The partition is the UTC day of the pack's check-in time (the id's timestamp).
    let ms = crate::ulid_of(&claim).timestamp_ms() as i64;
    let day = chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .date_naive();
    let today = day.format("%Y-%m-%d").to_string();
    let mut file = dir.path().join("root/claims/tenant=acme");
    file.push(format!("dt={today}"));
    file.push(pack_key(&claim));
    assert!(file.is_file(), "{}", file.display());
    let urn = claim.reference().to_string();
    assert_eq!(
        store
            .redeem(Some("acme"), &urn, claim.sha256(), 2048)
            .await
            .unwrap(),
        body(3, 2048)
    );
    let _: &dyn ObjectStore = store.object_store().as_ref();
}
