//! Integration tests of ankusa-claimcheck: one binary, one module per concern.

mod binding;
mod dispatch;
mod durability;
mod integrity;
mod outage;
mod packs;
mod refs;
mod s3;
mod sweeper;

use ankusa_claimcheck::{Claim, ClaimError, ClaimItem, ClaimStore};
use ankusa_sink_core::async_trait;
use futures_util::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// An `ObjectStore` wrapper that counts reads and puts, and can hold puts until a given
/// number are in flight (to see upload concurrency).
#[derive(Debug)]
pub(crate) struct Counting {
    inner: Arc<dyn ObjectStore>,
    gets: AtomicUsize,
    puts: AtomicUsize,
    inflight: AtomicUsize,
    max_inflight: AtomicUsize,
    /// Each put waits (at most 2 s) until this many puts are in flight.
    pair_up: usize,
}

impl Counting {
    pub(crate) fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Self::pairing(inner, 1)
    }

    pub(crate) fn pairing(inner: Arc<dyn ObjectStore>, pair_up: usize) -> Arc<Self> {
        Arc::new(Counting {
            inner,
            gets: AtomicUsize::new(0),
            puts: AtomicUsize::new(0),
            inflight: AtomicUsize::new(0),
            max_inflight: AtomicUsize::new(0),
            pair_up,
        })
    }

    pub(crate) fn gets(&self) -> usize {
        self.gets.load(Ordering::SeqCst)
    }

    pub(crate) fn puts(&self) -> usize {
        self.puts.load(Ordering::SeqCst)
    }

    pub(crate) fn max_inflight(&self) -> usize {
        self.max_inflight.load(Ordering::SeqCst)
    }

    pub(crate) fn reset(&self) {
        self.gets.store(0, Ordering::SeqCst);
        self.puts.store(0, Ordering::SeqCst);
    }
}

impl fmt::Display for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for Counting {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        let now = self.inflight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_inflight.fetch_max(now, Ordering::SeqCst);
        if self.pair_up > 1 {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
            while self.inflight.load(Ordering::SeqCst) < self.pair_up
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        let out = self.inner.put_opts(location, payload, opts).await;
        self.inflight.fetch_sub(1, Ordering::SeqCst);
        out
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> Result<Vec<bytes::Bytes>> {
        self.gets.fetch_add(ranges.len(), Ordering::SeqCst);
        self.inner.get_ranges(location, ranges).await
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

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

/// A body whose bytes depend on `seed`, so a mixed-up claim cannot pass for another.
/// A claim's id as the ULID the store minted.
pub(crate) fn ulid_of(claim: &ankusa_sink_core::Claim) -> ulid::Ulid {
    ulid::Ulid::from_string(claim.reference().claim_id()).expect("canonical ULID")
}

pub(crate) fn body(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8))
        .collect()
}

/// Check `items` in as one batch; every one must succeed.
pub(crate) async fn check_in_all(store: &ClaimStore, items: Vec<ClaimItem>) -> Vec<Claim> {
    store
        .check_in_batch(items)
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Redeem `claim` as its own tenant, by its reference and digest, as `size` bytes.
pub(crate) async fn redeem(
    store: &ClaimStore,
    claim: &Claim,
    size: u64,
) -> Result<bytes::Bytes, ClaimError> {
    let reference = claim.reference();
    store
        .redeem(
            Some(reference.tenant()),
            &reference.to_string(),
            claim.sha256(),
            size,
        )
        .await
}

/// S3 on moto: the endpoint, a store builder with short retries, bucket creation, and a
/// private `moto_server` for outage and credential tests.
pub(crate) mod moto {
    pub(crate) use ankusa_sink_testkit::support::free_port;
    use object_store::aws::{AmazonS3, AmazonS3Builder};
    use object_store::{BackoffConfig, ClientOptions, RetryConfig};
    use std::process::Stdio;
    use std::time::Duration;
    use tokio::process::{Child, Command};

    /// `ANKUSA_S3_ENDPOINT`, default `http://127.0.0.1:4566` (scripts/services/moto.sh).
    pub(crate) fn endpoint() -> String {
        std::env::var("ANKUSA_S3_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into())
    }

    /// `host:port` of [`endpoint`], for `require_broker!` (`ANKUSA_TEST_BROKERS`).
    pub(crate) fn addr() -> String {
        let e = endpoint();
        let rest = e.split_once("://").map_or(e.as_str(), |(_, r)| r);
        rest.trim_end_matches('/').to_owned()
    }

    /// An S3 store on `endpoint` with dummy credentials and at most one quick retry.
    pub(crate) fn s3(endpoint: &str, bucket: &str, access_key: &str) -> AmazonS3 {
        AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(bucket)
            .with_access_key_id(access_key)
            .with_secret_access_key("testing")
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(50),
                    max_backoff: Duration::from_millis(200),
                    base: 2.0,
                },
                max_retries: 1,
                retry_timeout: Duration::from_secs(5),
            })
            .with_client_options(
                ClientOptions::new()
                    .with_allow_http(true)
                    .with_connect_timeout(Duration::from_secs(2))
                    .with_timeout(Duration::from_secs(20)),
            )
            .build()
            .expect("S3 store")
    }

    /// Create `bucket` on the moto at `endpoint` (moto accepts an unsigned request).
    pub(crate) async fn create_bucket(endpoint: &str, bucket: &str) {
        let resp = reqwest::Client::new()
            .put(format!("{endpoint}/{bucket}"))
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!("moto not reachable at {endpoint} (run scripts/services/moto.sh): {e}")
            });
        assert!(
            resp.status().is_success(),
            "create bucket: {}",
            resp.status()
        );
    }

    /// Delete the (empty) `bucket` this run created.
    pub(crate) async fn delete_bucket(endpoint: &str, bucket: &str) {
        let resp = reqwest::Client::new()
            .delete(format!("{endpoint}/{bucket}"))
            .send()
            .await
            .unwrap();
        assert!(
            resp.status().is_success(),
            "delete bucket: {}",
            resp.status()
        );
    }

    /// A `moto_server` of this test's own on 127.0.0.1:`port`, killed on drop.
    #[derive(Debug)]
    pub(crate) struct Moto {
        child: Child,
        pub(crate) endpoint: String,
    }

    impl Moto {
        /// Start it with extra environment (e.g. `INITIAL_NO_AUTH_ACTION_COUNT=0`) and wait
        /// (at most 60 s) until it answers.
        pub(crate) async fn start(port: u16, env: &[(&str, &str)]) -> Moto {
            let bin = std::env::var("ANKUSA_MOTO_SERVER").unwrap_or_else(|_| "moto_server".into());
            let child = Command::new(&bin)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot start {bin} (install moto: scripts/services/moto.sh): {e}")
                });
            let endpoint = format!("http://127.0.0.1:{port}");
            let client = reqwest::Client::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                let up = client
                    .get(format!("{endpoint}/moto-api/"))
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if up {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "moto_server on port {port} not ready after 60 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Moto { child, endpoint }
        }

        pub(crate) async fn stop(mut self) {
            let _ = self.child.kill().await;
        }
    }
}
