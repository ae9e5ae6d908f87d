//! [`Secret`]: a credential in a sink's configuration.

use crate::describe::REDACTED;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A credential (a password, a token, a key): held as given, never printed.
///
/// # Behavior
/// - `Debug` and `Display` print `REDACTED`, so a config struct can derive `Debug` and an
///   error can name the option without the value.
/// - [`expose`](Self::expose) is the one way to the text: call it where the client is
///   built, nowhere else.
/// - Serde reads a plain string. In a config file, `${VAR}` (the registry's expansion,
///   `ankusa-sinks`) is how a value comes from the environment; in code,
///   [`from_env`](Self::from_env). Serializing writes the secret itself, for a config
///   written back; never serialize a config into a log.
/// - Equality compares the text (configs in tests); it is not constant-time and is not for
///   checking a credential.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret.
    pub fn new(secret: impl Into<String>) -> Self {
        Secret(secret.into())
    }

    /// The value of the environment variable `var`.
    pub fn from_env(var: &str) -> Result<Self, SecretEnvError> {
        match std::env::var(var) {
            Ok(v) => Ok(Secret(v)),
            Err(std::env::VarError::NotPresent) => Err(SecretEnvError::Missing(var.to_owned())),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(SecretEnvError::NotUnicode(var.to_owned()))
            }
        }
    }

    /// The secret itself, for handing to a client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(secret: String) -> Self {
        Secret(secret)
    }
}

impl From<&str> for Secret {
    fn from(secret: &str) -> Self {
        Secret(secret.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// Why [`Secret::from_env`] found no value. Names the variable, never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretEnvError {
    /// The variable is not set.
    #[error("environment variable {0} is not set")]
    Missing(String),
    /// The variable is not valid Unicode.
    #[error("environment variable {0} is not valid Unicode")]
    NotUnicode(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "REDACTED");
        assert_eq!(s.to_string(), "REDACTED");
        assert_eq!(format!("{:?}", Some(&s)), "Some(REDACTED)");
        assert_eq!(s.expose(), "hunter2");
        assert!(!s.expose().is_empty() && Secret::from("").expose().is_empty());
        assert_eq!(Secret::from(String::from("a")), Secret::new("a"));
    }

    #[test]
    fn serde_is_a_plain_string() {
        let s: Secret = serde_json::from_str("\"pa55\"").unwrap();
        assert_eq!(s.expose(), "pa55");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"pa55\"");
        assert!(serde_json::from_str::<Secret>(r#"{"env":"X"}"#).is_err());
        assert!(serde_json::from_str::<Secret>("5").is_err());
    }

    #[test]
    fn from_the_environment() {
        // PATH is set wherever tests run; the variable is named, its value never.
        assert!(Secret::from_env("PATH").is_ok_and(|s| !s.expose().is_empty()));
        let var = "ANKUSA_TEST_SECRET_THAT_IS_NEVER_SET_7F3A";
        let err = Secret::from_env(var).unwrap_err();
        assert_eq!(err, SecretEnvError::Missing(var.into()));
        assert_eq!(
            err.to_string(),
            format!("environment variable {var} is not set")
        );
    }
}
