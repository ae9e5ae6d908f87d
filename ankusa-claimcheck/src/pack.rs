//! Pack ids, storage keys and the pack object format (a stored, deterministic ZIP).
//!
//! Layout of a pack holding `n` claims, every entry stored (not compressed), no ZIP64, DOS
//! timestamps fixed at 1980-01-01 00:00:
//!
//! | Entry | Bytes |
//! | --- | --- |
//! | `index.bin` | `n` rows of 8 bytes: big-endian u32 offset and u32 length of each claim's bytes in the object |
//! | `<claim id>` (26 bytes) × `n` | the raw bodies, in claim order |
//! | `manifest.json` | `{"v":1,"claims":[{claim_id, id, offset, length, sha256, content_type, received_at}]}` |
//!
//! followed by the central directory and the end-of-central-directory record. Because
//! `index.bin` comes first, the row of claim `i` sits at object offset `39 + 8 i`.

use crate::error::ClaimError;
use ankusa_message::sha256_hex;
use bytes::{BufMut, Bytes, BytesMut};
use chrono::{DateTime, NaiveDate};
use object_store::path::Path;
use serde::Serialize;
use ulid::Ulid;

/// Name of the first entry of every pack.
pub(crate) const INDEX_NAME: &[u8; 9] = b"index.bin";
const MANIFEST_NAME: &[u8; 13] = b"manifest.json";
/// Size of a ZIP local file header before its name.
pub(crate) const LOCAL_HEADER: u64 = 30;
/// Object offset of the first `index.bin` row.
pub(crate) const INDEX_DATA: u64 = LOCAL_HEADER + INDEX_NAME.len() as u64;
/// Bytes per `index.bin` row.
pub(crate) const ROW: u64 = 8;
const CENTRAL_HEADER: u64 = 46;
const END_RECORD: u64 = 22;
const CLAIM_NAME_LEN: u64 = 26;

const LOCAL_SIG: u32 = 0x0403_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const END_SIG: u32 = 0x0605_4b50;
/// 1980-01-01 in DOS date format: (year - 1980) << 9 | month << 5 | day.
const DOS_DATE: u16 = (1 << 5) | 1;
/// ZIP 1.0: stored entries, nothing else.
const VERSION_NEEDED: u16 = 10;
const VERSION_MADE_BY: u16 = 20;

/// At most this many claims in one pack (the ZIP entry count is 16 bits, and `index.bin`
/// and `manifest.json` take two; Ankusa caps a pack a little lower, as we do).
pub const MAX_PACK_CLAIMS: usize = 65_000;

/// The largest pack body total: a pack must stay a non-ZIP64 archive under 4 GiB, and this
/// leaves 16 MiB for headers and the manifest.
pub const MAX_PACK_BYTES: u64 = 0xFFFF_FFFF - 16 * 1024 * 1024;

/// A pack id: the pack's 48-bit check-in time (Unix ms) and 64 random bits. A claim id is
/// the pack id followed by the claim's 16-bit position in its pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PackId(u128);

impl PackId {
    /// A fresh pack id for a check-in at `now_ms`.
    pub(crate) fn generate(now_ms: u64) -> Self {
        let ts = u128::from(now_ms & 0xFFFF_FFFF_FFFF);
        PackId((ts << 80) | (u128::from(rand::random::<u64>()) << 16))
    }

    /// The pack a claim id belongs to, and the claim's position in it.
    pub(crate) fn of_claim(claim_id: Ulid) -> (Self, u16) {
        (PackId(claim_id.0 & !0xFFFF), (claim_id.0 & 0xFFFF) as u16)
    }

    /// The id of the claim at `position`.
    pub(crate) fn claim_id(self, position: u16) -> Ulid {
        Ulid(self.0 | u128::from(position))
    }

    /// Check-in time, Unix ms.
    pub(crate) fn timestamp_ms(self) -> u64 {
        (self.0 >> 80) as u64
    }

    /// The UTC day partition of the pack.
    pub(crate) fn date(self) -> NaiveDate {
        // 48 bits of ms always fit chrono's range (year < 10_900); were it ever otherwise,
        // the last date stands in rather than a panic.
        i64::try_from(self.timestamp_ms())
            .ok()
            .and_then(DateTime::from_timestamp_millis)
            .map_or(NaiveDate::MAX, |t| t.date_naive())
    }

    /// `claims/tenant=<tenant>/dt=<yyyy-mm-dd>/<pack id>`, the pack id written as the
    /// 26-character ULID of the pack's first claim (its position bits zero). The date is
    /// `NaiveDate`'s own ISO 8601 text (`%Y-%m-%d`: a sign and five digits past year 9999),
    /// which cannot fail where a format string could.
    pub(crate) fn key(self, tenant: &str) -> Path {
        Path::from(format!(
            "claims/tenant={tenant}/dt={}/{}",
            self.date(),
            Ulid(self.0)
        ))
    }
}

/// One body to pack, with the manifest fields that describe it.
#[derive(Debug)]
pub(crate) struct PackEntry<'a> {
    pub(crate) body: &'a Bytes,
    pub(crate) id: Option<&'a str>,
    pub(crate) content_type: Option<&'a str>,
    pub(crate) received_at: Option<i64>,
}

/// A built pack: the object's chunks (bodies are not copied) and each claim's digest.
#[derive(Debug)]
pub(crate) struct BuiltPack {
    pub(crate) chunks: Vec<Bytes>,
    pub(crate) size: u64,
    pub(crate) digests: Vec<String>,
}

#[derive(Serialize)]
struct Manifest<'a> {
    v: u8,
    claims: Vec<ManifestClaim<'a>>,
}

#[derive(Serialize)]
struct ManifestClaim<'a> {
    claim_id: String,
    id: Option<&'a str>,
    offset: u32,
    length: u32,
    sha256: &'a str,
    content_type: Option<&'a str>,
    received_at: Option<i64>,
}

struct Central {
    name: Vec<u8>,
    crc: u32,
    size: u32,
    offset: u32,
}

fn local_header(out: &mut BytesMut, name: &[u8], crc: u32, size: u32) {
    out.put_u32_le(LOCAL_SIG);
    out.put_u16_le(VERSION_NEEDED);
    out.put_u16_le(0); // flags
    out.put_u16_le(0); // stored
    out.put_u16_le(0); // time 00:00:00
    out.put_u16_le(DOS_DATE);
    out.put_u32_le(crc);
    out.put_u32_le(size);
    out.put_u32_le(size);
    out.put_u16_le(name.len() as u16);
    out.put_u16_le(0); // extra
    out.put_slice(name);
}

fn central_header(out: &mut BytesMut, c: &Central) {
    out.put_u32_le(CENTRAL_SIG);
    out.put_u16_le(VERSION_MADE_BY);
    out.put_u16_le(VERSION_NEEDED);
    out.put_u16_le(0);
    out.put_u16_le(0);
    out.put_u16_le(0);
    out.put_u16_le(DOS_DATE);
    out.put_u32_le(c.crc);
    out.put_u32_le(c.size);
    out.put_u32_le(c.size);
    out.put_u16_le(c.name.len() as u16);
    out.put_u16_le(0); // extra
    out.put_u16_le(0); // comment
    out.put_u16_le(0); // disk
    out.put_u16_le(0); // internal attributes
    out.put_u32_le(0); // external attributes
    out.put_u32_le(c.offset);
    out.put_slice(&c.name);
}

fn too_large(size: u64) -> ClaimError {
    ClaimError::TooLarge {
        size,
        max: MAX_PACK_BYTES,
    }
}

/// Build the pack object for `entries` (1..=[`MAX_PACK_CLAIMS`]). CPU-bound (sha256 and
/// CRC-32 of every body): run it off the async executor.
pub(crate) fn build(pack: PackId, entries: &[PackEntry<'_>]) -> Result<BuiltPack, ClaimError> {
    assert!(
        !entries.is_empty() && entries.len() <= MAX_PACK_CLAIMS,
        "pack of {} claims",
        entries.len()
    );
    let n = entries.len() as u64;
    let bodies: u64 = entries.iter().map(|e| e.body.len() as u64).sum();
    if bodies > MAX_PACK_BYTES {
        return Err(too_large(bodies));
    }

    // Offsets of every claim's bytes, known before anything is written.
    let mut rows = Vec::with_capacity(entries.len());
    let mut at = INDEX_DATA + ROW * n;
    for e in entries {
        let data = at + LOCAL_HEADER + CLAIM_NAME_LEN;
        rows.push((data as u32, e.body.len() as u32));
        at = data + e.body.len() as u64;
    }

    let digests: Vec<String> = entries.iter().map(|e| sha256_hex(e.body)).collect();
    let manifest = manifest(pack, entries, &rows, &digests);

    let manifest_at = at;
    let central_at =
        manifest_at + LOCAL_HEADER + MANIFEST_NAME.len() as u64 + manifest.len() as u64;
    let central_len = CENTRAL_HEADER * (n + 2)
        + INDEX_NAME.len() as u64
        + MANIFEST_NAME.len() as u64
        + CLAIM_NAME_LEN * n;
    let size = central_at + central_len + END_RECORD;
    if size > u64::from(u32::MAX) {
        return Err(too_large(size));
    }

    let mut central = Vec::with_capacity(entries.len() + 2);
    let mut chunks = Vec::with_capacity(2 * entries.len() + 3);
    let (index, index_central) = index_chunk(&rows);
    chunks.push(index);
    central.push(index_central);
    for (i, (e, &(offset, length))) in entries.iter().zip(&rows).enumerate() {
        let name = pack.claim_id(i as u16).to_string().into_bytes();
        let crc = crc32fast::hash(e.body);
        let mut header = BytesMut::with_capacity((LOCAL_HEADER + CLAIM_NAME_LEN) as usize);
        local_header(&mut header, &name, crc, length);
        chunks.push(header.freeze());
        chunks.push(e.body.clone());
        central.push(Central {
            name,
            crc,
            size: length,
            offset: offset - (LOCAL_HEADER + CLAIM_NAME_LEN) as u32,
        });
    }
    let tail = Tail {
        manifest: &manifest,
        manifest_at,
        central_at,
        central_len,
        size,
    };
    chunks.push(tail.write(central));

    debug_assert_eq!(chunks.iter().map(|c| c.len() as u64).sum::<u64>(), size);
    Ok(BuiltPack {
        chunks,
        size,
        digests,
    })
}

/// The manifest's JSON: every claim's id, hook id, place, digest and metadata.
fn manifest(
    pack: PackId,
    entries: &[PackEntry<'_>],
    rows: &[(u32, u32)],
    digests: &[String],
) -> Vec<u8> {
    let manifest = Manifest {
        v: 1,
        claims: entries
            .iter()
            .zip(rows)
            .zip(digests)
            .enumerate()
            .map(|(i, ((e, &(offset, length)), sha))| ManifestClaim {
                claim_id: pack.claim_id(i as u16).to_string(),
                id: e.id,
                offset,
                length,
                sha256: sha,
                content_type: e.content_type,
                received_at: e.received_at,
            })
            .collect(),
    };
    serde_json::to_vec(&manifest).expect("manifest serializes")
}

/// The index entry (local header and rows), first in the pack, and its central record.
fn index_chunk(rows: &[(u32, u32)]) -> (Bytes, Central) {
    let n = rows.len() as u64;
    let mut index = BytesMut::with_capacity((INDEX_DATA + ROW * n) as usize);
    let mut rows_bytes = BytesMut::with_capacity((ROW * n) as usize);
    for &(offset, length) in rows {
        rows_bytes.put_u32(offset);
        rows_bytes.put_u32(length);
    }
    let crc = crc32fast::hash(&rows_bytes);
    local_header(&mut index, INDEX_NAME, crc, rows_bytes.len() as u32);
    index.put_slice(&rows_bytes);
    let central = Central {
        name: INDEX_NAME.to_vec(),
        crc,
        size: rows_bytes.len() as u32,
        offset: 0,
    };
    (index.freeze(), central)
}

/// The pack's last chunk: the manifest entry, the central directory and the end record.
struct Tail<'a> {
    manifest: &'a [u8],
    manifest_at: u64,
    central_at: u64,
    central_len: u64,
    size: u64,
}

impl Tail<'_> {
    /// Writes the tail; `central` holds every record before the manifest's.
    fn write(self, mut central: Vec<Central>) -> Bytes {
        let manifest_crc = crc32fast::hash(self.manifest);
        let mut tail = BytesMut::with_capacity((self.size - self.manifest_at) as usize);
        local_header(
            &mut tail,
            MANIFEST_NAME,
            manifest_crc,
            self.manifest.len() as u32,
        );
        tail.put_slice(self.manifest);
        central.push(Central {
            name: MANIFEST_NAME.to_vec(),
            crc: manifest_crc,
            size: self.manifest.len() as u32,
            offset: self.manifest_at as u32,
        });
        for c in &central {
            central_header(&mut tail, c);
        }
        let records = central.len() as u16;
        tail.put_u32_le(END_SIG);
        tail.put_u16_le(0); // this disk
        tail.put_u16_le(0); // disk of the central directory
        tail.put_u16_le(records);
        tail.put_u16_le(records);
        tail.put_u32_le(self.central_len as u32);
        tail.put_u32_le(self.central_at as u32);
        tail.put_u16_le(0); // comment
        tail.freeze()
    }
}

/// Where a claim's bytes are, read from the first bytes of its pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IndexRow {
    /// The claim's offset and length in the pack object.
    Found { offset: u64, length: u64 },
    /// The pack has fewer claims than the position asks for.
    PastEnd,
}

/// How many bytes from the start of a pack hold the row of the claim at `position`.
pub(crate) fn index_prefix_len(position: u16) -> u64 {
    INDEX_DATA + ROW * (u64::from(position) + 1)
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Read the row of the claim at `position` from `prefix`, the first
/// [`index_prefix_len`]`(position)` bytes of a pack (fewer if the object is shorter).
/// `Err` names what is wrong with a prefix that is not a pack's.
pub(crate) fn read_row(prefix: &[u8], position: u16) -> Result<IndexRow, &'static str> {
    if prefix.len() < INDEX_DATA as usize {
        return Err("shorter than a ZIP local header");
    }
    if le32(prefix, 0) != LOCAL_SIG {
        return Err("no ZIP local header at offset 0");
    }
    if le16(prefix, 8) != 0 {
        return Err("index.bin is compressed");
    }
    if le16(prefix, 26) as usize != INDEX_NAME.len()
        || le16(prefix, 28) != 0
        || &prefix[LOCAL_HEADER as usize..INDEX_DATA as usize] != INDEX_NAME
    {
        return Err("first entry is not index.bin");
    }
    let index_len = u64::from(le32(prefix, 18));
    if index_len % ROW != 0 || u64::from(le32(prefix, 22)) != index_len {
        return Err("index.bin size is not a whole number of rows");
    }
    let rows = index_len / ROW;
    if u64::from(position) >= rows {
        return Ok(IndexRow::PastEnd);
    }
    let at = (INDEX_DATA + ROW * u64::from(position)) as usize;
    if prefix.len() < at + ROW as usize {
        return Err("object ends inside index.bin");
    }
    let offset = u64::from(be32(prefix, at));
    let length = u64::from(be32(prefix, at + 4));
    if offset < INDEX_DATA + index_len {
        return Err("index row points into index.bin");
    }
    Ok(IndexRow::Found { offset, length })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &Bytes) -> PackEntry<'_> {
        PackEntry {
            body,
            id: Some("hook"),
            content_type: None,
            received_at: Some(1),
        }
    }

    #[test]
    fn every_pack_id_has_a_date_and_a_key() {
        // The latest check-in time a pack id can carry (48 bits of ms, year 10889), the
        // first after year 9999, and the epoch: a date, never a panic.
        for (ms, dt) in [
            (0xFFFF_FFFF_FFFF, "dt=+10889-08-02/"),
            (253_402_300_800_000, "dt=+10000-01-01/"),
            (253_402_300_799_999, "dt=9999-12-31/"),
            (0, "dt=1970-01-01/"),
        ] {
            let key = PackId::generate(ms).key("acme").to_string();
            assert!(key.contains(dt), "{ms}: {key}");
        }
    }

    #[test]
    fn claim_ids_carry_pack_and_position() {
        let pack = PackId::generate(1_700_000_000_123);
        assert_eq!(pack.timestamp_ms(), 1_700_000_000_123);
        let id = pack.claim_id(513);
        assert_eq!(PackId::of_claim(id), (pack, 513));
        assert_eq!(id.timestamp_ms(), 1_700_000_000_123);
        // Canonical ULID text: uppercase, first character 0..=7.
        let text = id.to_string();
        assert_eq!(
            ankusa_sink_core::ClaimRef::new("acme", text.clone()).map(|r| r.claim_id().to_owned()),
            Ok(text)
        );
        let key = pack.key("acme").to_string();
        assert!(
            key.starts_with("claims/tenant=acme/dt=2023-11-14/"),
            "{key}"
        );
        assert_eq!(
            key.rsplit('/').next().unwrap(),
            pack.claim_id(0).to_string()
        );
    }

    #[test]
    fn two_packs_in_one_millisecond_differ() {
        assert_ne!(PackId::generate(5), PackId::generate(5));
    }

    #[test]
    fn rows_point_at_the_bodies() {
        let bodies = [
            Bytes::from_static(b"hello"),
            Bytes::new(),
            Bytes::from_static(b"xyz"),
        ];
        let entries: Vec<_> = bodies.iter().map(entry).collect();
        let built = build(PackId::generate(0), &entries).unwrap();
        let object: Vec<u8> = built.chunks.concat();
        assert_eq!(object.len() as u64, built.size);
        for (i, body) in bodies.iter().enumerate() {
            let prefix = &object[..index_prefix_len(i as u16) as usize];
            let IndexRow::Found { offset, length } = read_row(prefix, i as u16).unwrap() else {
                panic!("row {i} missing");
            };
            assert_eq!(
                &object[offset as usize..(offset + length) as usize],
                &body[..]
            );
        }
        assert_eq!(read_row(&object, 3), Ok(IndexRow::PastEnd));
        assert_eq!(built.digests[1], sha256_hex(b""));
    }

    #[test]
    fn the_same_input_gives_the_same_bytes() {
        let body = Bytes::from_static(b"same");
        let pack = PackId::generate(42);
        let a = build(pack, &[entry(&body)]).unwrap().chunks.concat();
        let b = build(pack, &[entry(&body)]).unwrap().chunks.concat();
        assert_eq!(a, b);
    }

    #[test]
    fn read_row_refuses_what_is_not_a_pack() {
        assert!(read_row(b"short", 0).is_err());
        assert!(read_row(&[0u8; 64], 0).is_err());
        let body = Bytes::from_static(b"x");
        let mut object = build(PackId::generate(0), &[entry(&body)])
            .unwrap()
            .chunks
            .concat();
        object[30] = b'X'; // rename index.bin
        assert_eq!(read_row(&object, 0), Err("first entry is not index.bin"));
    }
}
