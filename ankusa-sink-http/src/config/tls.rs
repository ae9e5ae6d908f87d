//! `[tls]`: extra CA roots and the client certificate for mutual TLS, read and checked
//! when the file is parsed.

use super::error::ConfigError;
use ankusa_sink_core::Secret;
use serde::Deserialize;
use std::path::PathBuf;

/// `tls` in the sink file.
#[derive(Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct TlsRepr {
    pub(super) ca_files: Vec<PathBuf>,
    pub(super) ca_pem: Vec<String>,
    pub(super) only: bool,
    pub(super) client_cert_file: Option<PathBuf>,
    pub(super) client_key_file: Option<PathBuf>,
}

/// `tls`, checked: the files read, every PEM parsed.
pub(super) struct Tls {
    /// Each CA source's PEM text (checked to hold certificates).
    pub(super) ca_pems: Vec<Vec<u8>>,
    pub(super) only: bool,
    /// The client certificate chain and its key, PEM (a secret: never printed).
    pub(super) client_identity: Option<Secret>,
}

impl TryFrom<TlsRepr> for Tls {
    type Error = ConfigError;

    fn try_from(tls: TlsRepr) -> Result<Self, ConfigError> {
        let ca_pems = load_pems(&tls)?;
        let client_identity = client_identity(&tls)?;
        if tls.only && ca_pems.is_empty() {
            return Err(ConfigError::NoRoots);
        }
        Ok(Tls {
            ca_pems,
            only: tls.only,
            client_identity,
        })
    }
}

/// The client certificate chain and key for mutual TLS, read and checked (PEM, the chain
/// then the key), or `None` without them. Both or neither.
fn client_identity(tls: &TlsRepr) -> Result<Option<Secret>, ConfigError> {
    let (cert, key) = match (&tls.client_cert_file, &tls.client_key_file) {
        (None, None) => return Ok(None),
        (Some(c), Some(k)) => (c, k),
        _ => {
            return Err(ConfigError::ClientIdentity(
                "give both client_cert_file and client_key_file".into(),
            ));
        }
    };
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|source| ConfigError::CaFile {
            path: path.clone(),
            source,
        })
    };
    let mut pem = read(cert)?;
    pem.push(b'\n');
    pem.extend(read(key)?);
    let pem = String::from_utf8(pem)
        .map_err(|_| ConfigError::ClientIdentity("the files are not PEM text".into()))?;
    // Checked now, so a bad pair is a config error at build, not a failure per delivery.
    reqwest::Identity::from_pem(pem.as_bytes()).map_err(|_| {
        ConfigError::ClientIdentity("the files hold no certificate and private key in PEM".into())
    })?;
    Ok(Some(Secret::from(pem)))
}

/// Each CA source's PEM text, read and checked to hold at least one certificate.
fn load_pems(tls: &TlsRepr) -> Result<Vec<Vec<u8>>, ConfigError> {
    let check = |pem: Vec<u8>, what: String| match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        _ => Err(ConfigError::CaPem(what)),
    };
    let mut pems = Vec::new();
    for path in &tls.ca_files {
        let pem = std::fs::read(path).map_err(|source| ConfigError::CaFile {
            path: path.clone(),
            source,
        })?;
        pems.push(check(pem, format!("ca file {path:?}"))?);
    }
    for (i, pem) in tls.ca_pem.iter().enumerate() {
        pems.push(check(pem.as_bytes().to_vec(), format!("ca_pem #{i}"))?);
    }
    Ok(pems)
}
