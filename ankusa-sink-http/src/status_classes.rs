//! `[status_classes]`: the operator's class for an answer's status, over the sink's own
//! table. Keys are a status (`"409"`) or a range (`"4xx"`); the most specific key wins.
//! Values: `"ok"` (delivered: `409 = "ok"` for an endpoint that says "already have it"),
//! `"permanent"`, `"config"`, `"transient"` (`404 = "transient"` for a receiver that is
//! deploying) or `"retry_after"` (the `Retry-After` the answer carries is honoured; without
//! one, dispatch draws the pause as for a throttle).

use serde::Deserialize;
use std::collections::BTreeMap;

/// The class an operator gives a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StatusClass {
    /// Delivered.
    Ok,
    /// Retrying cannot help: dead-letter now.
    Permanent,
    /// The operator's to fix (credential, URL): dead-letter now, counted as a config error.
    Config,
    /// The retry policy decides.
    Transient,
    /// A pause: the answer's `Retry-After`, or one dispatch draws.
    RetryAfter,
}

impl StatusClass {
    /// The value as written in a sink file.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusClass::Ok => "ok",
            StatusClass::Permanent => "permanent",
            StatusClass::Config => "config",
            StatusClass::Transient => "transient",
            StatusClass::RetryAfter => "retry_after",
        }
    }
}

/// The `[status_classes]` table, checked: exact statuses and `Nxx` ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusClasses {
    exact: BTreeMap<u16, StatusClass>,
    /// `1xx` to `5xx`, by the first digit.
    ranges: [Option<StatusClass>; 5],
}

/// Why a `[status_classes]` key is refused (the key, never a value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("status_classes key {0:?} is neither a status (100 to 599) nor a range (1xx to 5xx)")]
pub struct BadStatusKey(pub String);

impl StatusClasses {
    /// Check a table of `key = class`.
    pub fn new(table: BTreeMap<String, StatusClass>) -> Result<Self, BadStatusKey> {
        let mut this = StatusClasses::default();
        for (key, class) in table {
            let k = key.as_bytes();
            match k {
                [d @ b'1'..=b'5', b'x' | b'X', b'x' | b'X'] => {
                    this.ranges[usize::from(d - b'1')] = Some(class);
                }
                [b'1'..=b'5', b'0'..=b'9', b'0'..=b'9'] => {
                    let status: u16 = key.parse().map_err(|_| BadStatusKey(key.clone()))?;
                    this.exact.insert(status, class);
                }
                _ => return Err(BadStatusKey(key)),
            }
        }
        Ok(this)
    }

    /// The operator's class for `status`, if any: the exact status, else its range.
    pub fn class_of(&self, status: u16) -> Option<StatusClass> {
        self.exact.get(&status).copied().or_else(|| {
            let first = usize::from(status / 100);
            (1..=5)
                .contains(&first)
                .then(|| self.ranges[first - 1])
                .flatten()
        })
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.ranges.iter().all(Option::is_none)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes(pairs: &[(&str, StatusClass)]) -> Result<StatusClasses, BadStatusKey> {
        StatusClasses::new(pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect())
    }

    #[test]
    fn the_most_specific_key_wins() {
        let c = classes(&[
            ("409", StatusClass::Ok),
            ("404", StatusClass::Transient),
            ("4xx", StatusClass::Permanent),
            ("5XX", StatusClass::Permanent),
            ("503", StatusClass::RetryAfter),
        ])
        .unwrap();
        assert_eq!(c.class_of(409), Some(StatusClass::Ok));
        assert_eq!(c.class_of(404), Some(StatusClass::Transient));
        assert_eq!(c.class_of(418), Some(StatusClass::Permanent));
        assert_eq!(c.class_of(503), Some(StatusClass::RetryAfter));
        assert_eq!(c.class_of(500), Some(StatusClass::Permanent));
        assert_eq!(c.class_of(302), None, "not set: the sink's own table");
        assert_eq!(c.class_of(200), None);
    }

    #[test]
    fn keys_that_are_not_a_status_or_a_range_are_refused() {
        for bad in [
            "600", "099", "6xx", "0xx", "4x", "40", "4000", "abc", "", "4xy", "+409",
        ] {
            assert_eq!(
                classes(&[(bad, StatusClass::Ok)]),
                Err(BadStatusKey(bad.to_owned())),
                "{bad:?}"
            );
        }
    }
}
