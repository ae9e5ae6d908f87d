//! The log sink against the conformance suite, and its config. Its one structured line per
//! hook is tested in `tests/structured_line.rs`, a process of its own.

mod conformance;

use ankusa_sink_log::LogConfig;

#[test]
fn config_is_strict() {
    let c: LogConfig = serde_json::from_str(r#"{"messages":true}"#).unwrap();
    assert!(c.messages());
    let err = serde_json::from_str::<LogConfig>(r#"{"mesages":true}"#).unwrap_err();
    assert!(err.to_string().contains("mesages"), "{err}");
}
