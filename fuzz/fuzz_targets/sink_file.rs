//! Sink files (`SinkConfig::from_toml_str_with(text, &EnvAccess::None)`), the reading of a
//! config written by someone not trusted (a tenant's sink). Every type the build has
//! (feature `all-sinks` for every adapter).
//!
//! Invariants: no panic, also when the error or the config is displayed.
#![no_main]

use ankusa_sinks::{EnvAccess, SinkConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match SinkConfig::from_toml_str_with(text, &EnvAccess::None) {
        Ok(config) => {
            let _ = format!("{config:?}");
        }
        Err(e) => {
            let _ = format!("{e} {e:?}");
        }
    }
});
