//! A dead-letter or parked record (`ankusa_dispatch::record::PairRecord::parse`, which
//! `dead-letters list|stats` and redrive use), and `ankusa_dispatch::split_record` (the
//! CLI's reading of a record line).
//!
//! Invariants: no panic; a parsed record written back (`pair_line`) parses to the same
//! sink information and state, and writing that again gives the same line (forwardable
//! headers and masked query values are a fixed point).
#![no_main]

use ankusa_dispatch::record::{PairRecord, pair_line};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = ankusa_dispatch::split_record(value);
    }
    let Ok(record) = PairRecord::parse(data) else {
        return;
    };
    let line = pair_line(&record.envelope, &record.info, &record.state)
        .expect("a parsed record writes back");
    let again = PairRecord::parse(line.as_bytes()).expect("a written record parses");
    assert_eq!(
        record.info, again.info,
        "the dead-letter information changed"
    );
    assert_eq!(record.state, again.state, "the record's state changed");
    let line2 =
        pair_line(&again.envelope, &again.info, &again.state).expect("a parsed record writes back");
    assert_eq!(line, line2, "writing a record back is not a fixed point");
});
