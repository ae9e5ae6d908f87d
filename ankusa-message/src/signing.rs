//! Standard Webhooks signing (`webhook-id`, `webhook-timestamp`, `webhook-signature`), one
//! implementation for the HTTP sink (over the raw body) and every Message v1 sink (over the
//! exact Message v1 bytes), and its verification for consumers.

use ankusa_sink_core::Secret;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Deserializer};
use sha2::Sha256;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The header (or attribute) carrying the signed id.
pub const WEBHOOK_ID: &str = "webhook-id";
/// The header (or attribute) carrying the signing time, Unix seconds.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// The header (or attribute) carrying the signatures, `v1,<base64>` each, space-separated.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";
/// How far a timestamp may be from the verifier's clock, either way (the Standard Webhooks
/// libraries' five minutes).
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// A signing secret that cannot sign. Names the secret's position, never its value or
/// length.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SigningError {
    /// A signing secret is empty (or there is none at all: position 0).
    #[error("signing secret #{0} is empty")]
    EmptySecret(usize),
    /// A `whsec_` signing secret's base64 does not decode (or decodes to nothing).
    #[error("signing secret #{0} starts with whsec_ but is not valid base64")]
    BadWhsec(usize),
    /// A signing secret is shorter than [`MIN_SECRET_BYTES`] once decoded.
    #[error(
        "signing secret #{0} is shorter than {min} bytes (after decoding whsec_ base64); Standard Webhooks keys are 24 to 64 bytes",
        min = MIN_SECRET_BYTES
    )]
    ShortSecret(usize),
}

/// Why a signed message did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// A signature header is missing or empty (its name).
    #[error("{0} is missing")]
    Missing(&'static str),
    /// `webhook-timestamp` is not a whole number of seconds.
    #[error("webhook-timestamp is not Unix seconds")]
    BadTimestamp,
    /// The timestamp is further from now than the tolerance (a replayed or delayed
    /// message, or a skewed clock).
    #[error("webhook-timestamp is {0} s away from now, outside the tolerance")]
    OutsideTolerance(u64),
    /// No `v1` signature matches any key.
    #[error("no signature matches")]
    NoMatch,
}

/// The shortest signing key accepted, in bytes after decoding: the lower end of the 24 to
/// 64 bytes the Standard Webhooks specification recommends. A shorter key is refused rather
/// than warned about: an HMAC key an attacker can guess makes every signature forgeable.
pub const MIN_SECRET_BYTES: usize = 24;

/// Signs deliveries the Standard Webhooks way with one or more HMAC-SHA256 keys.
///
/// The signed content is `"<id>.<timestamp>.<body>"`; the signature header is one
/// `v1,<base64>` per key, space-separated, in key order (several keys let a receiver
/// rotate). `Debug` shows only how many keys there are.
#[derive(Clone, PartialEq, Eq)]
pub struct Signer {
    keys: Vec<Vec<u8>>,
}

impl Signer {
    /// Keys from secrets: `whsec_<base64>` is base64-decoded, as the official Standard
    /// Webhooks libraries do. Any other string is used as its own UTF-8 bytes (raw mode:
    /// kept because existing configs mean exactly that; a receiver using an official library
    /// must be given `whsec_` + base64 of those bytes, or the bytes themselves). An empty
    /// secret, a `whsec_` whose base64 does not decode, a key shorter than
    /// [`MIN_SECRET_BYTES`] and an empty list are errors (the error names the secret's
    /// position, never its value or length).
    pub fn new<I, S>(secrets: I) -> Result<Self, SigningError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut keys = Vec::new();
        for (i, secret) in secrets.into_iter().enumerate() {
            let secret = secret.as_ref();
            if secret.is_empty() {
                return Err(SigningError::EmptySecret(i));
            }
            let key = match secret.strip_prefix("whsec_") {
                Some(b64) => match STANDARD.decode(b64) {
                    Ok(k) if !k.is_empty() => k,
                    _ => return Err(SigningError::BadWhsec(i)),
                },
                None => secret.as_bytes().to_vec(),
            };
            if key.len() < MIN_SECRET_BYTES {
                return Err(SigningError::ShortSecret(i));
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(SigningError::EmptySecret(0));
        }
        Ok(Signer { keys })
    }

    /// How many keys sign.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Always false: a signer has at least one key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The `webhook-signature` value for `id`, `timestamp` (Unix seconds) and `body`.
    pub fn signature(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let ts = timestamp.to_string();
        let mut out = String::new();
        for key in &self.keys {
            let mut mac =
                Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(ts.as_bytes());
            mac.update(b".");
            mac.update(body);
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str("v1,");
            out.push_str(&STANDARD.encode(mac.finalize().into_bytes()));
        }
        out
    }

    /// Check a signed message the Standard Webhooks way: `timestamp` within `tolerance` of
    /// `now`, and one of the `v1,<base64>` entries of `signature` the HMAC of
    /// `"<id>.<timestamp>.<body>"` under one of the keys (compared in constant time).
    ///
    /// # Errors
    /// [`VerifyError`]: a missing value, a timestamp that is not seconds or is outside the
    /// tolerance, or no matching signature.
    pub fn verify(
        &self,
        id: &str,
        timestamp: &str,
        signature: &str,
        body: &[u8],
        now: SystemTime,
        tolerance: Duration,
    ) -> Result<(), VerifyError> {
        if id.is_empty() {
            return Err(VerifyError::Missing(WEBHOOK_ID));
        }
        if timestamp.is_empty() {
            return Err(VerifyError::Missing(WEBHOOK_TIMESTAMP));
        }
        if signature.trim().is_empty() {
            return Err(VerifyError::Missing(WEBHOOK_SIGNATURE));
        }
        let ts: u64 = timestamp.parse().map_err(|_| VerifyError::BadTimestamp)?;
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let skew = now.abs_diff(ts);
        if skew > tolerance.as_secs() {
            return Err(VerifyError::OutsideTolerance(skew));
        }
        let wanted: Vec<Vec<u8>> = signature
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|b64| STANDARD.decode(b64).ok())
            .collect();
        for key in &self.keys {
            let mut mac =
                Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(timestamp.as_bytes());
            mac.update(b".");
            mac.update(body);
            if wanted.iter().any(|w| mac.clone().verify_slice(w).is_ok()) {
                return Ok(());
            }
        }
        Err(VerifyError::NoMatch)
    }
}

/// The `[signing]` table of a sink file: `secrets = ["whsec_...", ...]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SigningRepr {
    secrets: Vec<Secret>,
}

/// Reads the `[signing]` table (`secrets`, one or more, the first signing first), refusing
/// a secret that cannot sign when the file is parsed.
impl<'de> Deserialize<'de> for Signer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let repr = SigningRepr::deserialize(d)?;
        Signer::new(repr.secrets.iter().map(Secret::expose)).map_err(serde::de::Error::custom)
    }
}

/// The `webhook-id` of a delivery: the hook id, or `<id>:replay:<replay_id>` for a replay.
pub fn webhook_id(id: &str, replay_id: Option<&str>) -> String {
    match replay_id.filter(|r| !r.is_empty()) {
        Some(r) => format!("{id}:replay:{r}"),
        None => id.to_owned(),
    }
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("keys", &self.keys.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    /// 28 bytes: a raw-mode secret long enough to be accepted.
    const RAW: &str = "raw-secret-of-28-bytes-long!";

    #[test]
    fn standard_webhooks_reference_vector() {
        let s = Signer::new([SECRET]).unwrap();
        assert_eq!(
            s.signature(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn rotation_signs_with_every_key_in_order() {
        let one = Signer::new([SECRET]).unwrap();
        let other = Signer::new([RAW]).unwrap();
        let both = Signer::new([SECRET, RAW]).unwrap();
        let (id, ts, body) = ("msg_1", 1_700_000_000, b"\x00\xffbinary".as_slice());
        assert_eq!(
            both.signature(id, ts, body),
            format!(
                "{} {}",
                one.signature(id, ts, body),
                other.signature(id, ts, body)
            )
        );
        assert_eq!(both.len(), 2);
    }

    #[test]
    fn raw_secret_is_its_own_bytes() {
        // whsec_ of base64(RAW) must sign exactly like the raw string.
        assert_eq!(RAW.len(), 28);
        let raw = Signer::new([RAW]).unwrap();
        let wrapped = Signer::new([format!("whsec_{}", STANDARD.encode(RAW))]).unwrap();
        assert_eq!(raw.signature("a", 1, b"b"), wrapped.signature("a", 1, b"b"));
    }

    #[test]
    fn keys_shorter_than_24_bytes_are_refused_by_position() {
        // Raw: 23 bytes refused, 24 accepted.
        let short = "x".repeat(MIN_SECRET_BYTES - 1);
        let e = Signer::new([RAW, short.as_str()]).unwrap_err();
        assert!(matches!(e, SigningError::ShortSecret(1)), "{e:?}");
        assert!(!e.to_string().contains(&short), "{e}");
        assert!(
            !e.to_string().contains("23"),
            "the length is not shown: {e}"
        );
        assert!(Signer::new(["x".repeat(MIN_SECRET_BYTES)]).is_ok());
        // whsec_: counted after decoding. 23 decoded bytes are refused although the
        // base64 text is longer than 24 characters.
        let b64 = STANDARD.encode([7u8; MIN_SECRET_BYTES - 1]);
        assert!(b64.len() > MIN_SECRET_BYTES);
        let e = Signer::new([format!("whsec_{b64}")]).unwrap_err();
        assert!(matches!(e, SigningError::ShortSecret(0)), "{e:?}");
        assert!(!e.to_string().contains(&b64), "{e}");
        assert!(Signer::new([format!("whsec_{}", STANDARD.encode([7u8; 24]))]).is_ok());
        // Longer than the recommended 64 bytes is fine (HMAC hashes long keys).
        assert!(Signer::new(["y".repeat(200)]).is_ok());
    }

    #[test]
    fn bad_secrets_are_refused_without_echoing_them() {
        let e = Signer::new(["whsec_%%%not-base64"]).unwrap_err();
        assert!(matches!(e, SigningError::BadWhsec(0)));
        assert!(!e.to_string().contains("not-base64"), "{e}");
        assert!(matches!(
            Signer::new([RAW, ""]).unwrap_err(),
            SigningError::EmptySecret(1)
        ));
        assert!(matches!(
            Signer::new(["whsec_"]).unwrap_err(),
            SigningError::BadWhsec(0)
        ));
        assert!(Signer::new(Vec::<String>::new()).is_err());
        let s = Signer::new([SECRET]).unwrap();
        assert_eq!(format!("{s:?}"), "Signer { keys: 1 }");
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn verify_accepts_any_key_and_refuses_tampering_staleness_and_gaps() {
        let both = Signer::new([SECRET, RAW]).unwrap();
        let old = Signer::new([SECRET]).unwrap();
        let new = Signer::new([RAW]).unwrap();
        let (id, ts, body) = ("h-1", 1_700_000_000u64, br#"{"v":1}"#.as_slice());
        let sig = both.signature(id, ts, body);
        let t = ts.to_string();
        let ok = |s: &Signer, sig: &str, body: &[u8], now| {
            s.verify(id, &t, sig, body, at(now), DEFAULT_TOLERANCE)
        };
        // Either key of a rotation verifies the two-signature header.
        assert_eq!(ok(&old, &sig, body, ts), Ok(()));
        assert_eq!(ok(&new, &sig, body, ts + 300), Ok(()));
        assert_eq!(ok(&new, &sig, body, ts - 300), Ok(()));
        assert_eq!(ok(&old, &sig, b"{\"v\":2}", ts), Err(VerifyError::NoMatch));
        assert_eq!(
            ok(&old, &sig, body, ts + 301),
            Err(VerifyError::OutsideTolerance(301))
        );
        let other = Signer::new(["z".repeat(32)]).unwrap();
        assert_eq!(ok(&other, &sig, body, ts), Err(VerifyError::NoMatch));
        assert_eq!(ok(&old, "v1,!!!", body, ts), Err(VerifyError::NoMatch));
        assert_eq!(
            ok(&old, "", body, ts),
            Err(VerifyError::Missing(WEBHOOK_SIGNATURE))
        );
        assert_eq!(
            old.verify(id, "soon", &sig, body, at(ts), DEFAULT_TOLERANCE),
            Err(VerifyError::BadTimestamp)
        );
        // The id is signed: the same signature under another id fails.
        assert_eq!(
            old.verify("h-2", &t, &sig, body, at(ts), DEFAULT_TOLERANCE),
            Err(VerifyError::NoMatch)
        );
    }

    #[test]
    fn the_signing_table_parses_and_refuses_bad_secrets_and_keys() {
        let s: Signer =
            serde_json::from_value(serde_json::json!({"secrets": [SECRET, RAW]})).unwrap();
        assert_eq!(s.len(), 2);
        for bad in [
            serde_json::json!({"secrets": []}),
            serde_json::json!({"secrets": ["short"]}),
            serde_json::json!({"secrets": [SECRET], "secret": "x"}),
        ] {
            assert!(serde_json::from_value::<Signer>(bad).is_err());
        }
        let e = serde_json::from_value::<Signer>(serde_json::json!({"secrets": [RAW, "tooshort"]}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("signing secret #1") && !e.contains("tooshort"),
            "{e}"
        );
    }

    #[test]
    fn webhook_id_names_a_replay() {
        assert_eq!(webhook_id("h-1", None), "h-1");
        assert_eq!(webhook_id("h-1", Some("")), "h-1");
        assert_eq!(webhook_id("h-1", Some("r7")), "h-1:replay:r7");
    }
}
