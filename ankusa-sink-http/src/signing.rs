//! Standard Webhooks signing (`webhook-id`, `webhook-timestamp`, `webhook-signature`).

use crate::config::ConfigError;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;

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
    pub fn new<I, S>(secrets: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut keys = Vec::new();
        for (i, secret) in secrets.into_iter().enumerate() {
            let secret = secret.as_ref();
            if secret.is_empty() {
                return Err(ConfigError::EmptySecret(i));
            }
            let key = match secret.strip_prefix("whsec_") {
                Some(b64) => match STANDARD.decode(b64) {
                    Ok(k) if !k.is_empty() => k,
                    _ => return Err(ConfigError::BadWhsec(i)),
                },
                None => secret.as_bytes().to_vec(),
            };
            if key.len() < MIN_SECRET_BYTES {
                return Err(ConfigError::ShortSecret(i));
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(ConfigError::EmptySecret(0));
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
        assert!(matches!(e, ConfigError::ShortSecret(1)), "{e:?}");
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
        assert!(matches!(e, ConfigError::ShortSecret(0)), "{e:?}");
        assert!(!e.to_string().contains(&b64), "{e}");
        assert!(Signer::new([format!("whsec_{}", STANDARD.encode([7u8; 24]))]).is_ok());
        // Longer than the recommended 64 bytes is fine (HMAC hashes long keys).
        assert!(Signer::new(["y".repeat(200)]).is_ok());
    }

    #[test]
    fn bad_secrets_are_refused_without_echoing_them() {
        let e = Signer::new(["whsec_%%%not-base64"]).unwrap_err();
        assert!(matches!(e, ConfigError::BadWhsec(0)));
        assert!(!e.to_string().contains("not-base64"), "{e}");
        assert!(matches!(
            Signer::new([RAW, ""]).unwrap_err(),
            ConfigError::EmptySecret(1)
        ));
        assert!(matches!(
            Signer::new(["whsec_"]).unwrap_err(),
            ConfigError::BadWhsec(0)
        ));
        assert!(Signer::new(Vec::<String>::new()).is_err());
        let s = Signer::new([SECRET]).unwrap();
        assert_eq!(format!("{s:?}"), "Signer { keys: 1 }");
    }
}
