//! The claim store: check-in (packs), locate, ranged reads and redeem.

use crate::config::{ClaimConfig, ConfigError, SweeperConfig};
use crate::error::{ClaimError, Op, StoreError, classify};
use crate::pack::{self, IndexRow, MAX_PACK_BYTES, MAX_PACK_CLAIMS, PackEntry, PackId};
use crate::sweeper::Sweeper;
use ankusa_message::{Message, MessageBody, sha256_hex};
use ankusa_sink_core::{Claim, ClaimRef, Envelope, TENANTLESS, validate_partition};
use bytes::Bytes;
use futures_util::StreamExt as _;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The tenant a claim is filed under when its envelope has none: the core's reserved
/// [`TENANTLESS`](ankusa_sink_core::TENANTLESS) partition, which no real tenant can use.
pub const DEFAULT_TENANT: &str = ankusa_sink_core::TENANTLESS;

/// Bodies at most this large are hashed on the calling task; larger ones on the blocking
/// pool, so a redeem of megabytes does not stall the executor.
const INLINE_HASH_MAX: usize = 64 * 1024;

/// One body to check in, with the manifest fields that describe it.
#[derive(Clone)]
pub struct ClaimItem {
    tenant: String,
    body: Bytes,
    id: Option<String>,
    content_type: Option<String>,
    received_at: Option<i64>,
}

impl ClaimItem {
    /// A body for `tenant` (validated at check-in: `[A-Za-z0-9_-]{1,64}`; [`DEFAULT_TENANT`]
    /// files it with the hooks that have no tenant).
    pub fn new(tenant: impl Into<String>, body: impl Into<Bytes>) -> Self {
        ClaimItem {
            tenant: tenant.into(),
            body: body.into(),
            id: None,
            content_type: None,
            received_at: None,
        }
    }

    /// The envelope's body, filed under its tenant (or [`DEFAULT_TENANT`]) and described
    /// by its id, content type and receive time. The body is shared, not copied.
    pub fn from_envelope(env: &Envelope) -> Self {
        let mut item = ClaimItem::new(env.partition(), env.body().clone())
            .with_id(env.id())
            .with_received_at(env.received_at());
        if let Some(ct) = env.content_type() {
            item = item.with_content_type(ct);
        }
        item
    }

    /// The hook id recorded in the pack's manifest.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
    /// The provider's content type recorded in the manifest.
    pub fn with_content_type(mut self, ct: impl Into<String>) -> Self {
        self.content_type = Some(ct.into());
        self
    }
    /// The hook's receive time (Unix ms) recorded in the manifest.
    pub fn with_received_at(mut self, ms: i64) -> Self {
        self.received_at = Some(ms);
        self
    }
    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }
}

impl fmt::Debug for ClaimItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimItem")
            .field("tenant", &self.tenant)
            .field("body_len", &self.body.len())
            .field("id", &self.id)
            .field("content_type", &self.content_type)
            .field("received_at", &self.received_at)
            .finish()
    }
}

/// Where a claim's bytes are: its pack's key and the byte range inside it.
///
/// Only [`ClaimStore::locate`] makes one, after checking the claim is the reader's
/// tenant's, so reading through a `Location` is bound to that tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    reference: ClaimRef,
    key: Path,
    offset: u64,
    length: u64,
}

impl Location {
    /// The claim.
    pub fn reference(&self) -> &ClaimRef {
        &self.reference
    }
    /// The pack's storage key.
    pub fn key(&self) -> &str {
        self.key.as_ref()
    }
    /// Offset of the claim's first byte in the pack object.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// The claim's length in bytes.
    pub fn len(&self) -> u64 {
        self.length
    }
    /// Whether the claim is empty.
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }
}

/// Checks bodies in and reads them back, over any `object_store` store.
///
/// # Behavior
/// - [`check_in`](Self::check_in) writes a one-claim pack;
///   [`check_in_batch`](Self::check_in_batch) groups bodies per tenant into packs of at
///   most [`ClaimConfig::pack_max_bytes`] body bytes (a single larger body gets its own
///   pack; at most 65,000 claims per pack), one object put per pack, at most
///   [`ClaimConfig::max_concurrent_uploads`] puts at once. A claim is returned only after
///   its pack's put completed.
/// - Keys are `claims/tenant=<tenant>/dt=<yyyy-mm-dd>/<pack id>` (UTC day of the check-in),
///   never prefixed, so one reader serves every writer of the bucket.
/// - Every read names the tenant it reads for (the message's `tenant_id`; `None` for a
///   hook without one): a reference filed under another tenant is refused
///   ([`ClaimError::WrongTenant`]) before the store is asked.
/// - [`locate`](Self::locate) is one ranged read of the pack's index; reading the bytes is
///   one more. [`redeem`](Self::redeem) checks the length the index gives against the
///   size the message declares before reading, then the sha256: it never trusts the
///   store. [`read`](Self::read) and [`read_bytes`](Self::read_bytes) do not check the
///   digest (a range cannot be): use them for ranged access, redeem for the body.
/// - No read brings more than [`ClaimConfig::max_read_bytes`] into memory (when set).
/// - Cloning is cheap and shares the store.
#[derive(Clone)]
pub struct ClaimStore {
    store: Arc<dyn ObjectStore>,
    config: ClaimConfig,
    local_root: Option<PathBuf>,
}

impl fmt::Debug for ClaimStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimStore")
            .field("store", &self.store.to_string())
            .field("config", &self.config)
            .field("local_root", &self.local_root)
            .finish()
    }
}

impl ClaimStore {
    /// A claim store over `store` (S3, GCS, Azure, memory, ...) with the default config.
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Self::with_config(store, ClaimConfig::default())
    }

    /// A claim store over `store`.
    pub fn with_config(store: Arc<dyn ObjectStore>, config: ClaimConfig) -> Self {
        ClaimStore {
            store,
            config,
            local_root: None,
        }
    }

    /// A claim store in the local directory `root` (created if missing). Writes are
    /// durable: written to a temporary file, fsynced, renamed, and the directory fsynced.
    /// Only a local store has a [`sweeper`](Self::sweeper).
    pub fn local(root: impl Into<PathBuf>, config: ClaimConfig) -> Result<Self, ClaimError> {
        let root = root.into();
        let misconfigured = |e| ClaimError::StoreConfig(StoreError::new(e));
        std::fs::create_dir_all(&root).map_err(|e| {
            misconfigured(object_store::Error::Generic {
                store: "LocalFileSystem",
                source: Box::new(e),
            })
        })?;
        let store = LocalFileSystem::new_with_prefix(&root)
            .map_err(misconfigured)?
            .with_fsync(true);
        // The sweeper works on the same directory whatever the working directory becomes.
        let root = std::fs::canonicalize(&root).unwrap_or(root);
        Ok(ClaimStore {
            store: Arc::new(store),
            config,
            local_root: Some(root),
        })
    }

    /// A claim store in memory (tests, single-process tools): claims die with the process.
    pub fn in_memory() -> Self {
        Self::new(Arc::new(InMemory::new()))
    }

    /// The underlying store.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The config.
    pub fn config(&self) -> &ClaimConfig {
        &self.config
    }

    /// The sweeper that enforces `config.retention_days` on a [`local`](Self::local)
    /// store. Any other store is refused ([`ConfigError::SweeperNeedsLocalStore`]): cloud
    /// stores expire claims with a bucket lifecycle rule (see the crate docs).
    pub fn sweeper(&self, config: SweeperConfig) -> Result<Sweeper, ConfigError> {
        match &self.local_root {
            Some(root) => Ok(Sweeper::new(root.clone(), config)),
            None => Err(ConfigError::SweeperNeedsLocalStore),
        }
    }

    /// Check one body in as a one-claim pack. The claim is returned once the pack's put
    /// completed.
    pub async fn check_in(&self, item: ClaimItem) -> Result<Claim, ClaimError> {
        self.check_in_batch(vec![item])
            .await
            .pop()
            .expect("one result per item")
    }

    /// Check many bodies in: grouped per tenant into packs, one put per pack, uploads
    /// bounded by `max_concurrent_uploads`. One result per item, in input order; an item
    /// with an invalid tenant or a failed pack upload fails alone (with its pack).
    pub async fn check_in_batch(&self, items: Vec<ClaimItem>) -> Vec<Result<Claim, ClaimError>> {
        let mut results: Vec<Option<Result<Claim, ClaimError>>> = vec![None; items.len()];
        let packs = plan(&items, self.config.pack_max_bytes(), &mut results);
        let items = Arc::new(items);
        let uploads = packs.into_iter().map(|members| {
            let items = Arc::clone(&items);
            async move {
                let out = self.upload(items, &members).await;
                (members, out)
            }
        });
        let mut done = futures_util::stream::iter(uploads)
            .buffer_unordered(self.config.max_concurrent_uploads());
        while let Some((members, out)) = done.next().await {
            match out {
                Ok(claims) => {
                    for (i, claim) in members.into_iter().zip(claims) {
                        results[i] = Some(Ok(claim));
                    }
                }
                Err(e) => {
                    for i in members {
                        results[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.expect("every item has a result"))
            .collect()
    }

    /// Build and put one pack of `members` (indices into `items`, one tenant).
    async fn upload(
        &self,
        items: Arc<Vec<ClaimItem>>,
        members: &[usize],
    ) -> Result<Vec<Claim>, ClaimError> {
        let tenant = items[members[0]].tenant.clone();
        let pack = PackId::generate(now_ms());
        let owned = members.to_vec();
        let built = tokio::task::spawn_blocking(move || {
            let entries: Vec<PackEntry<'_>> = owned
                .iter()
                .map(|&i| {
                    let it = &items[i];
                    PackEntry {
                        body: &it.body,
                        id: it.id.as_deref(),
                        content_type: it.content_type.as_deref(),
                        received_at: it.received_at,
                    }
                })
                .collect();
            pack::build(pack, &entries)
        })
        .await
        .map_err(|e| classify(e.into(), Op::Put))??;

        let key = pack.key(&tenant);
        let started = std::time::Instant::now();
        let size = built.size;
        self.store
            .put(&key, PutPayload::from_iter(built.chunks))
            .await
            .map_err(|e| classify(e, Op::Put))?;
        tracing::debug!(
            target: "ankusa_claimcheck",
            tenant = %tenant,
            key = %key,
            claims = members.len(),
            size,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "checked in a pack"
        );
        built
            .digests
            .into_iter()
            .enumerate()
            .map(|(pos, sha)| {
                let reference =
                    ClaimRef::new(tenant.clone(), pack.claim_id(pos as u16).to_string())?;
                Ok(Claim::new(reference, sha)?)
            })
            .collect()
    }

    /// Find a claim of `tenant_id` (`None`: a hook without a tenant): one ranged read of
    /// its pack's index.
    ///
    /// # Behavior
    /// - A reference filed under another tenant: [`ClaimError::WrongTenant`], nothing read.
    /// - No pack at the key, or a position past the pack's index: [`ClaimError::NotFound`].
    /// - An object that is not a pack: [`ClaimError::CorruptPack`].
    pub async fn locate(
        &self,
        tenant_id: Option<&str>,
        reference: &ClaimRef,
    ) -> Result<Location, ClaimError> {
        let expected = tenant_id.unwrap_or(TENANTLESS);
        let urn = reference.to_string();
        if reference.tenant() != expected {
            return Err(ClaimError::WrongTenant {
                reference: urn,
                expected: expected.to_owned(),
            });
        }
        let id = ulid::Ulid::from_string(reference.claim_id())
            .expect("a ClaimRef holds a canonical ULID's text");
        let (pack, position) = pack::PackId::of_claim(id);
        let key = pack.key(reference.tenant());
        let prefix = self
            .store
            .get_range(&key, 0..pack::index_prefix_len(position))
            .await
            .map_err(|e| classify(e, Op::Read(&urn)))?;
        match pack::read_row(&prefix, position) {
            Ok(IndexRow::Found { offset, length }) => Ok(Location {
                reference: reference.clone(),
                key,
                offset,
                length,
            }),
            Ok(IndexRow::PastEnd) => Err(ClaimError::NotFound { reference: urn }),
            Err(detail) => Err(ClaimError::CorruptPack {
                key: key.to_string(),
                detail,
            }),
        }
    }

    /// Read `range` of a located claim's bytes (relative to the claim) with one ranged
    /// read; the range is clipped to the claim. An empty range reads nothing. The bytes
    /// are not checked against the claim's digest. A clipped range over
    /// [`ClaimConfig::max_read_bytes`]: [`ClaimError::ReadTooLarge`], nothing read.
    pub async fn read_bytes(
        &self,
        location: &Location,
        range: Range<u64>,
    ) -> Result<Bytes, ClaimError> {
        let end = range.end.min(location.length);
        if range.start >= end {
            return Ok(Bytes::new());
        }
        let urn = location.reference.to_string();
        if let Some(max) = self.config.max_read_bytes()
            && end - range.start > max
        {
            return Err(ClaimError::ReadTooLarge {
                reference: urn,
                size: end - range.start,
                max,
            });
        }
        let want = location.offset + range.start..location.offset + end;
        let bytes = self
            .store
            .get_range(&location.key, want.clone())
            .await
            .map_err(|e| classify(e, Op::Read(&urn)))?;
        if bytes.len() as u64 != want.end - want.start {
            // The object is shorter than its own index says.
            return Err(ClaimError::NotFound { reference: urn });
        }
        Ok(bytes)
    }

    /// A located claim's bytes, whole (one ranged read, none for an empty claim), not
    /// checked against the digest; capped like [`read_bytes`](Self::read_bytes).
    pub async fn read(&self, location: &Location) -> Result<Bytes, ClaimError> {
        self.read_bytes(location, 0..location.length).await
    }

    /// Read a claim of `tenant_id` by its URN and check it against the message's `size`
    /// and `sha256` (64 lowercase hex): two ranged reads.
    ///
    /// # Behavior
    /// - A malformed URN or digest: [`ClaimError::InvalidRef`]. A URN of another tenant:
    ///   [`ClaimError::WrongTenant`]. Unknown claim: [`ClaimError::NotFound`]. An index
    ///   length other than `size`: [`ClaimError::SizeMismatch`] and a size over
    ///   [`ClaimConfig::max_read_bytes`]: [`ClaimError::ReadTooLarge`], both before the
    ///   bytes are read (a lying index cannot make it allocate 4 GiB). Bytes that do not
    ///   hash to `sha256`: [`ClaimError::IntegrityMismatch`]. All permanent.
    /// - Store outage: [`ClaimError::Unavailable`] (transient); refused credentials:
    ///   [`ClaimError::Forbidden`] (config).
    pub async fn redeem(
        &self,
        tenant_id: Option<&str>,
        reference: &str,
        sha256: &str,
        size: u64,
    ) -> Result<Bytes, ClaimError> {
        let reference: ClaimRef = reference.parse()?;
        let claim = Claim::new(reference, sha256)?;
        self.redeem_claim(tenant_id, &claim, size).await
    }

    /// [`redeem`](Self::redeem) a claim already parsed (e.g. `ctx.claim`, with the
    /// envelope's tenant and size).
    pub async fn redeem_claim(
        &self,
        tenant_id: Option<&str>,
        claim: &Claim,
        size: u64,
    ) -> Result<Bytes, ClaimError> {
        let location = self.locate(tenant_id, claim.reference()).await?;
        if location.length != size {
            return Err(ClaimError::SizeMismatch {
                reference: claim.reference().to_string(),
                declared: size,
                actual: location.length,
            });
        }
        let bytes = self.read(&location).await?;
        let actual = digest(bytes.clone()).await?;
        if actual != claim.sha256() {
            return Err(ClaimError::IntegrityMismatch {
                reference: claim.reference().to_string(),
                expected: claim.sha256().to_owned(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// The body of a decoded Message v1: the inline body as is (`decode` verified it), or
    /// the claim [`redeem`](Self::redeem)ed for the message's `tenant_id`, `size` and
    /// `sha256`.
    pub async fn redeem_message(&self, message: &Message) -> Result<Bytes, ClaimError> {
        match &message.body {
            MessageBody::Inline(bytes) => Ok(bytes.clone()),
            MessageBody::Claim(reference) => {
                let claim = Claim::new(reference.clone(), message.sha256.as_str())?;
                self.redeem_claim(message.tenant_id.as_deref(), &claim, message.size)
                    .await
            }
        }
    }
}

/// Group `items` per tenant into packs (indices, input order): a tenant's open pack takes
/// the next body while its body bytes stay within `pack_max_bytes` and it has fewer than
/// [`MAX_PACK_CLAIMS`] claims; a single larger body gets a pack of its own. An item that
/// cannot be checked in gets its error in `results` and no pack.
fn plan(
    items: &[ClaimItem],
    pack_max_bytes: u64,
    results: &mut [Option<Result<Claim, ClaimError>>],
) -> Vec<Vec<usize>> {
    let mut packs: Vec<Vec<usize>> = Vec::new();
    // Per tenant: the index in `packs` of its open pack, and that pack's body bytes.
    let mut open: Vec<(&str, usize, u64)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if validate_partition(&item.tenant).is_err() {
            results[i] = Some(Err(ClaimError::InvalidTenant(item.tenant.clone())));
            continue;
        }
        let len = item.body.len() as u64;
        if len > MAX_PACK_BYTES {
            results[i] = Some(Err(ClaimError::TooLarge {
                size: len,
                max: MAX_PACK_BYTES,
            }));
            continue;
        }
        match open.iter_mut().find(|(t, _, _)| *t == item.tenant) {
            Some((_, p, bytes))
                if *bytes + len <= pack_max_bytes && packs[*p].len() < MAX_PACK_CLAIMS =>
            {
                packs[*p].push(i);
                *bytes += len;
            }
            Some((_, p, bytes)) => {
                packs.push(vec![i]);
                (*p, *bytes) = (packs.len() - 1, len);
            }
            None => {
                packs.push(vec![i]);
                open.push((&item.tenant, packs.len() - 1, len));
            }
        }
    }
    packs
}

async fn digest(bytes: Bytes) -> Result<String, ClaimError> {
    if bytes.len() <= INLINE_HASH_MAX {
        return Ok(sha256_hex(&bytes));
    }
    tokio::task::spawn_blocking(move || sha256_hex(&bytes))
        .await
        .map_err(|e| classify(e.into(), Op::Read("")))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_groups_per_tenant_and_caps_claims_per_pack() {
        let mut items: Vec<ClaimItem> = (0..MAX_PACK_CLAIMS + 1)
            .map(|_| ClaimItem::new("a", Bytes::new()))
            .collect();
        items.push(ClaimItem::new("b", Bytes::from_static(b"xyz")));
        items.push(ClaimItem::new("", Bytes::new()));
        let mut results = vec![None; items.len()];
        let packs = plan(&items, 16, &mut results);
        let lens: Vec<usize> = packs.iter().map(Vec::len).collect();
        assert_eq!(lens, [MAX_PACK_CLAIMS, 1, 1]);
        assert_eq!(packs[2], [MAX_PACK_CLAIMS + 1]);
        assert!(matches!(
            results[MAX_PACK_CLAIMS + 2],
            Some(Err(ClaimError::InvalidTenant(_)))
        ));
        assert_eq!(results.iter().filter(|r| r.is_some()).count(), 1);
    }
}
