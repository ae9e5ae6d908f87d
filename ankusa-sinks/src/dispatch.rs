//! A sink file's `[dispatch]` table: how the dispatcher runs this sink, for any `type`.
//! The registry reads it beside the sink's own keys ([`Registry::parse_sink_file_toml`]);
//! the dispatcher-wide flags of the CLI stay the defaults for what it leaves out.
//!
//! [`Registry::parse_sink_file_toml`]: crate::Registry::parse_sink_file_toml

use crate::config_error::ConfigError;
use serde::Deserialize;
use std::num::{NonZeroU32, NonZeroUsize};

/// The sink's own concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConcurrencySetting {
    /// `concurrency = N`: at most N attempts in flight.
    Fixed(NonZeroUsize),
    /// `concurrency = "adaptive"`: a limit that adapts, up to `max_concurrency` (default
    /// [`DEFAULT_MAX_CONCURRENCY`]).
    Adaptive {
        /// The most it grows to.
        max: NonZeroUsize,
    },
}

/// The most `concurrency`, `max_concurrency` and `tenant_concurrency` take (as the
/// dispatcher's `MAX_CONCURRENCY`).
const MAX_CONCURRENCY: usize = 1_000_000;
/// The most `breaker_failures` takes.
const MAX_BREAKER_FAILURES: u32 = 1_000_000;
/// The most `breaker_open_seconds` and `park_after_seconds` take: a day, the default
/// horizon (as the dispatcher's `MAX_BREAKER_OPEN`).
const MAX_SECONDS: u64 = 86_400;
/// The rates `rate_per_second` takes (as the dispatcher's `RATE_PER_SECOND`).
const RATE_PER_SECOND: std::ops::RangeInclusive<f64> = 0.001..=1_000_000.0;

/// `max_concurrency`'s default for `concurrency = "adaptive"` (the specification's).
pub const DEFAULT_MAX_CONCURRENCY: NonZeroUsize = NonZeroUsize::new(256).expect("not zero");

/// A sink file's `[dispatch]` table, checked. Every key is optional.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct DispatchTable {
    /// `concurrency = N | "adaptive"` (with `max_concurrency` for adaptive).
    pub concurrency: Option<ConcurrencySetting>,
    /// `rate_per_second`: attempts started per second, at most (a token bucket: a hook over
    /// the rate waits, it is not a failure). Positive.
    pub rate_per_second: Option<f64>,
    /// `tenant_concurrency`: attempts of one tenant in flight on this sink (0: no cap).
    pub tenant_concurrency: Option<u32>,
    /// `breaker_failures`: consecutive counted failures that open this sink's breaker.
    pub breaker_failures: Option<NonZeroU32>,
    /// `breaker_open_seconds`: how long it stays open before one probe.
    pub breaker_open_seconds: Option<u64>,
    /// `park` and `park_from`: where this sink's long retry waits are parked (a sink file)
    /// and how they are read back (a `--from` source file of the same destination), with
    /// `park_after_seconds`.
    pub park: Option<ParkTable>,
}

/// The parking keys of a `[dispatch]` table: `park = "retry-sink.toml"` (a durable sink
/// that writes to the park destination), `park_from = "retry-source.toml"` (a source file
/// that reads the same destination back) and `park_after_seconds` (default
/// [`DEFAULT_PARK_AFTER_SECONDS`]). Paths as written: the CLI reads them relative to the
/// sink file's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ParkTable {
    /// The park destination's sink file.
    pub sink: std::path::PathBuf,
    /// The park destination's source file.
    pub from: std::path::PathBuf,
    /// A retry due at least this far off is parked.
    pub after_seconds: NonZeroU32,
}

/// `park_after_seconds`' default: a retry due 5 minutes or more away is parked.
pub const DEFAULT_PARK_AFTER_SECONDS: NonZeroU32 = NonZeroU32::new(300).expect("not zero");

/// The keys as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Repr {
    concurrency: Option<Concurrency>,
    max_concurrency: Option<NonZeroUsize>,
    rate_per_second: Option<f64>,
    tenant_concurrency: Option<u32>,
    breaker_failures: Option<NonZeroU32>,
    breaker_open_seconds: Option<u64>,
    park: Option<std::path::PathBuf>,
    park_from: Option<std::path::PathBuf>,
    park_after_seconds: Option<NonZeroU32>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Concurrency {
    Fixed(NonZeroUsize),
    Mode(String),
}

fn bad(detail: &str) -> ConfigError {
    ConfigError::Field {
        ty: "dispatch",
        detail: detail.to_owned(),
    }
}

impl DispatchTable {
    /// Check a `[dispatch]` table (its `${VAR}` references already expanded).
    pub(crate) fn parse(value: toml::Value) -> Result<Self, ConfigError> {
        let r: Repr = crate::config::options("dispatch", value)?;
        let concurrency = match (r.concurrency, r.max_concurrency) {
            (None, None) => None,
            (Some(Concurrency::Fixed(n)), None) => Some(ConcurrencySetting::Fixed(n)),
            (Some(Concurrency::Mode(m)), max) if m == "adaptive" => {
                Some(ConcurrencySetting::Adaptive {
                    max: max.unwrap_or(DEFAULT_MAX_CONCURRENCY),
                })
            }
            (Some(Concurrency::Mode(_)), _) => {
                return Err(bad("key `concurrency`: a positive number, or \"adaptive\""));
            }
            (_, Some(_)) => {
                return Err(bad(
                    "key `max_concurrency` goes with concurrency = \"adaptive\"",
                ));
            }
        };
        match concurrency {
            Some(ConcurrencySetting::Fixed(n)) if n.get() > MAX_CONCURRENCY => {
                return Err(bad(
                    "key `concurrency`: a number from 1 to 1000000, or \"adaptive\"",
                ));
            }
            Some(ConcurrencySetting::Adaptive { max }) if max.get() > MAX_CONCURRENCY => {
                return Err(bad("key `max_concurrency`: a number from 1 to 1000000"));
            }
            _ => {}
        }
        if let Some(r) = r.rate_per_second
            && !RATE_PER_SECOND.contains(&r)
        {
            return Err(bad("key `rate_per_second`: a number from 0.001 to 1000000"));
        }
        if r.tenant_concurrency
            .is_some_and(|n| n as usize > MAX_CONCURRENCY)
        {
            return Err(bad("key `tenant_concurrency`: a number from 0 to 1000000"));
        }
        if r.breaker_failures
            .is_some_and(|n| n.get() > MAX_BREAKER_FAILURES)
        {
            return Err(bad("key `breaker_failures`: a number from 1 to 1000000"));
        }
        if r.breaker_open_seconds.is_some_and(|s| s > MAX_SECONDS) {
            return Err(bad("key `breaker_open_seconds`: a number from 0 to 86400"));
        }
        if r.park_after_seconds
            .is_some_and(|s| u64::from(s.get()) > MAX_SECONDS)
        {
            return Err(bad("key `park_after_seconds`: a number from 1 to 86400"));
        }
        let park = match (r.park, r.park_from, r.park_after_seconds) {
            (Some(sink), Some(from), after) => Some(ParkTable {
                sink,
                from,
                after_seconds: after.unwrap_or(DEFAULT_PARK_AFTER_SECONDS),
            }),
            (None, None, None) => None,
            _ => {
                return Err(bad(
                    "keys `park` and `park_from` go together (a sink file that writes the \
                     park destination, a source file that reads it back), and \
                     `park_after_seconds` needs them",
                ));
            }
        };
        Ok(DispatchTable {
            concurrency,
            rate_per_second: r.rate_per_second,
            tenant_concurrency: r.tenant_concurrency,
            breaker_failures: r.breaker_failures,
            breaker_open_seconds: r.breaker_open_seconds,
            park,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Registry;

    fn table(text: &str) -> Result<DispatchTable, String> {
        Registry::builtin()
            .parse_sink_file_toml(&format!("type = \"log\"\n[dispatch]\n{text}"))
            .map(|(_, d)| d)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_park_keys_go_together() {
        let d = table("park = \"retry.toml\"\npark_from = \"retry-src.toml\"").unwrap();
        let p = d.park.unwrap();
        assert_eq!(
            (p.sink.to_str(), p.from.to_str(), p.after_seconds.get()),
            (Some("retry.toml"), Some("retry-src.toml"), 300)
        );
        let d =
            table("park = \"a.toml\"\npark_from = \"b.toml\"\npark_after_seconds = 60").unwrap();
        assert_eq!(d.park.unwrap().after_seconds.get(), 60);
        for bad in [
            "park = \"a.toml\"",
            "park_from = \"b.toml\"",
            "park_after_seconds = 60",
            "park = \"a.toml\"\npark_from = \"b.toml\"\npark_after_seconds = 0",
        ] {
            let e = table(bad).unwrap_err();
            assert!(e.contains("park"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_key_of_the_dispatch_table() {
        let d = table(
            "concurrency = \"adaptive\"\nmax_concurrency = 64\nrate_per_second = 12.5\n\
             tenant_concurrency = 3\nbreaker_failures = 2\nbreaker_open_seconds = 9",
        )
        .unwrap();
        assert_eq!(
            d.concurrency,
            Some(ConcurrencySetting::Adaptive {
                max: NonZeroUsize::new(64).unwrap()
            })
        );
        assert_eq!(d.rate_per_second, Some(12.5));
        assert_eq!(d.tenant_concurrency, Some(3));
        assert_eq!(d.breaker_failures, NonZeroU32::new(2));
        assert_eq!(d.breaker_open_seconds, Some(9));
        // The ends of every range are taken.
        let d = table(
            "concurrency = 1000000\nrate_per_second = 0.001\ntenant_concurrency = 1000000\n\
             breaker_failures = 1000000\nbreaker_open_seconds = 86400",
        )
        .unwrap();
        assert_eq!(d.rate_per_second, Some(0.001));
        assert_eq!(d.breaker_open_seconds, Some(86_400));
        assert!(table("rate_per_second = 1000000\nbreaker_open_seconds = 0").is_ok());
        assert!(table("concurrency = \"adaptive\"\nmax_concurrency = 1000000").is_ok());
        assert_eq!(
            table("concurrency = 8").unwrap().concurrency,
            Some(ConcurrencySetting::Fixed(NonZeroUsize::new(8).unwrap()))
        );
        assert_eq!(
            table("concurrency = \"adaptive\"").unwrap().concurrency,
            Some(ConcurrencySetting::Adaptive {
                max: DEFAULT_MAX_CONCURRENCY
            })
        );
        // No table: nothing of its own.
        let (_, none) = Registry::builtin()
            .parse_sink_file_toml("type = \"log\"")
            .unwrap();
        assert_eq!(none, DispatchTable::default());
    }

    #[test]
    fn bad_values_are_config_errors_that_name_the_key() {
        for (text, key) in [
            ("concurrency = \"fast\"", "concurrency"),
            ("concurrency = 0", "concurrency"),
            ("max_concurrency = 9", "max_concurrency"),
            ("concurrency = 4\nmax_concurrency = 9", "max_concurrency"),
            ("rate_per_second = 0", "rate_per_second"),
            ("rate_per_second = -1.5", "rate_per_second"),
            ("breaker_failures = 0", "breaker_failures"),
            ("retries = 3", "retries"),
            // Extreme numbers: each panicked at start or in the scheduler task.
            ("rate_per_second = 1e-300", "rate_per_second"),
            ("rate_per_second = 1e300", "rate_per_second"),
            ("concurrency = 1000001", "concurrency"),
            ("concurrency = 9223372036854775807", "concurrency"),
            (
                "concurrency = \"adaptive\"\nmax_concurrency = 2305843009213693952",
                "max_concurrency",
            ),
            ("tenant_concurrency = 4294967295", "tenant_concurrency"),
            ("breaker_failures = 4294967295", "breaker_failures"),
            ("breaker_open_seconds = 86401", "breaker_open_seconds"),
            (
                "breaker_open_seconds = 9223372036854775807",
                "breaker_open_seconds",
            ),
            ("breaker_open_seconds = -1", "breaker_open_seconds"),
            (
                "park = \"a.toml\"\npark_from = \"b.toml\"\npark_after_seconds = 86401",
                "park_after_seconds",
            ),
        ] {
            let e = match table(text) {
                Ok(d) => panic!("{text}: taken as {d:?}"),
                Err(e) => e,
            };
            assert!(e.contains(key), "{text}: {e}");
            assert!(e.contains("dispatch"), "{text}: {e}");
        }
    }

    #[test]
    fn the_sink_config_alone_refuses_a_dispatch_table_instead_of_dropping_it() {
        let e = crate::SinkConfig::from_toml_str("type = \"log\"\n[dispatch]\nconcurrency = 2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("parse_sink_file_toml"), "{e}");
    }
}
