//! The claim check: once per hook, the same claim for every sink and every retry.

use crate::*;
use ankusa_claimcheck::{ClaimConfig, ClaimStore};
use ankusa_dispatch::{Dispatcher, Hook, Outcome};
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// A dispatcher over `sinks` (name, sink) that checks large bodies in to `store`.
fn claiming(
    store: &ClaimStore,
    sinks: &[(&str, &Arc<Script>)],
    config: DispatchConfig,
) -> (Dispatcher, Deliveries) {
    sinks
        .iter()
        .fold(Dispatcher::builder(), |b, &(name, sink)| {
            b.sink(name, sink.clone())
        })
        .claim_store(store.clone())
        .config(config)
        .build()
        .unwrap()
}

fn files_under(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.map(|e| e.unwrap().path())
        .map(|p| if p.is_dir() { files_under(&p) } else { 1 })
        .sum()
}

#[tokio::test]
async fn a_large_body_is_checked_in_once_for_every_sink_and_every_retry() {
    let root = scratch("dispatch-claims");
    let store = ClaimStore::local(&root, ClaimConfig::default()).unwrap();
    // `small` takes 100 bytes inline and fails twice; `inline` never needs a claim.
    let small = Script::new(Step::Ok)
        .first([Step::Transient, Step::Transient])
        .inline_max(100)
        .arc();
    let inline = Script::new(Step::Ok).arc();
    let (d, mut out) = claiming(
        &store,
        &[("small", &small), ("inline", &inline)],
        retrying(Duration::from_millis(20)),
    );
    let body_len = 1_000;
    d.submit(Hook::new(env_sized("h1", body_len)))
        .await
        .unwrap();
    let got = recv_n(&mut out, 2, Duration::from_secs(10)).await;
    assert!(got.iter().all(|x| matches!(x.outcome, Outcome::Delivered)));
    let seen: Vec<Seen> = small.seen().into_iter().chain(inline.seen()).collect();
    assert_eq!(seen.len(), 4, "three attempts to small, one to inline");
    let claim = seen[0].claim.clone().expect("a claim");
    assert!(seen.iter().all(|s| s.claim.as_ref() == Some(&claim)));
    assert_eq!(files_under(&root), 1, "checked in exactly once");
    let body = store
        .redeem_claim(Some("acme"), &claim, body_len as u64)
        .await
        .unwrap();
    assert_eq!(body.len(), body_len);
    d.shutdown(Duration::from_secs(1)).await;

    // A body both take inline: no claim, nothing written.
    let small = Script::new(Step::Ok).inline_max(100).arc();
    let (d, mut out) = claiming(&store, &[("small", &small)], DispatchConfig::default());
    d.submit(Hook::new(env_sized("h2", 100))).await.unwrap();
    recv_n(&mut out, 1, Duration::from_secs(10)).await;
    assert_eq!(files_under(&root), 1);
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn in_memory_store_claims_for_two_sinks() {
    let store = ClaimStore::in_memory();
    let a = Script::new(Step::Ok).inline_max(10).arc();
    let b = Script::new(Step::Ok).inline_max(10).arc();
    let (d, mut out) = claiming(&store, &[("a", &a), ("b", &b)], DispatchConfig::default());
    d.submit(Hook::new(env_sized("h1", 500))).await.unwrap();
    recv_n(&mut out, 2, Duration::from_secs(10)).await;
    let (ca, cb) = (a.seen()[0].claim.clone(), b.seen()[0].claim.clone());
    assert!(ca.is_some());
    assert_eq!(ca, cb);
    let body = store.redeem_claim(Some("acme"), &ca.unwrap(), 500).await;
    assert_eq!(body.unwrap().len(), 500);
}

#[tokio::test]
async fn a_failed_check_in_is_retried_and_still_claims_for_every_sink() {
    let root = scratch("dispatch-claims-fail");
    let store = ClaimStore::local(&root, ClaimConfig::default()).unwrap();
    // The store's directory is a file now: every put fails.
    std::fs::remove_dir_all(&root).unwrap();
    std::fs::write(&root, b"not a directory").unwrap();
    // `inline` first: its job wakes first and re-runs the check-in on its own.
    let inline = Script::new(Step::Ok).arc();
    let small = Script::new(Step::Ok).inline_max(100).arc();
    let (d, mut out) = claiming(
        &store,
        &[("inline", &inline), ("small", &small)],
        retrying(Duration::from_millis(300)),
    );
    d.submit(Hook::new(env_sized("h1", 1_000))).await.unwrap();
    let t0 = std::time::Instant::now();
    while d.waiting() < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the check-in never failed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        inline.calls() + small.calls(),
        0,
        "no sink runs before the check-in"
    );
    std::fs::remove_file(&root).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    let got = recv_n(&mut out, 2, Duration::from_secs(10)).await;
    for x in &got {
        assert!(matches!(x.outcome, Outcome::Delivered), "{x:?}");
        assert_eq!(x.attempts, 2, "the failed check-in counts as an attempt");
    }
    let (si, ss) = (inline.seen(), small.seen());
    assert_eq!((si.len(), ss.len()), (1, 1));
    assert_eq!(ss[0].attempt, 2);
    assert!(ss[0].claim.is_some(), "small needs the body by reference");
    assert_eq!(si[0].claim, ss[0].claim);
    assert_eq!(files_under(&root), 1);
    d.shutdown(Duration::from_secs(1)).await;
    let _ = std::fs::remove_dir_all(&root);
}

/// An in-memory object store whose first `panics` puts panic.
#[derive(Debug)]
struct PanickyStore {
    inner: object_store::memory::InMemory,
    panics: AtomicUsize,
}

impl std::fmt::Display for PanickyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PanickyStore")
    }
}

mod panicky {
    use super::PanickyStore;
    use futures_util::stream::BoxStream;
    use object_store::path::Path;
    use object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
        PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
    };
    use std::sync::atomic::Ordering;

    #[ankusa_sink_core::async_trait]
    impl ObjectStore for PanickyStore {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            opts: PutOptions,
        ) -> Result<PutResult> {
            if self
                .panics
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                panic!("scripted store panic");
            }
            self.inner.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: PutMultipartOptions,
        ) -> Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
            self.inner.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, Result<Path>>,
        ) -> BoxStream<'static, Result<Path>> {
            self.inner.delete_stream(locations)
        }
        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }
}

#[tokio::test]
async fn a_check_in_that_panics_is_a_transient_failure_not_a_lost_hook() {
    let store = ClaimStore::new(Arc::new(PanickyStore {
        inner: object_store::memory::InMemory::new(),
        panics: AtomicUsize::new(1),
    }));
    let sink = Script::new(Step::Ok).inline_max(10).arc();
    let (d, mut out) = claiming(&store, &[("s", &sink)], retrying(Duration::from_millis(20)));
    d.submit(Hook::new(env_sized("h1", 100))).await.unwrap();
    let x = recv_n(&mut out, 1, Duration::from_secs(10)).await.remove(0);
    assert!(matches!(x.outcome, Outcome::Delivered), "{x:?}");
    assert_eq!(x.attempts, 2);
    let claim = sink.seen()[0].claim.clone().expect("a claim");
    let body = store.redeem_claim(Some("acme"), &claim, 100).await;
    assert_eq!(body.unwrap().len(), 100);
}
