//! The deprecated spellings (top-level `secrets`, `{ env = "VAR" }` tables) still load,
//! each with one WARN per load that names the key and the form to write, never a value.
//!
//! A process of its own, the capture on the global subscriber: tracing caches each
//! callsite's interest process-wide, and beside other tests installing subscribers of
//! their own a thread capture missed this warning (the testkit's `LogCapture` docs).

use ankusa_message::signing::Signer;
use ankusa_sink_core::Secret;
use ankusa_sink_http::{HttpConfig, HttpSink};
use ankusa_sink_testkit::support::LogCapture;

const KEY: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const KEY_PART: &str = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn load(json: serde_json::Value) -> HttpConfig {
    serde_json::from_value(json).expect("the legacy spelling still loads")
}

#[test]
fn legacy_spellings_load_with_one_warning_each_never_a_value() {
    // PATH is set wherever tests run; tests cannot set variables (no unsafe).
    let path = std::env::var("PATH").expect("PATH is set");
    let logs = LogCapture::for_targets(&["ankusa_sink_http"]);
    let _capturing = logs.attach_global();
    let clean = |w: &str| {
        assert!(!w.contains(KEY_PART), "the secret leaks: {w}");
        assert!(!w.contains(&path), "the variable's value leaks: {w}");
    };

    // Top-level `secrets`: still the signer, one warning naming the key and `[signing]`.
    let c = load(serde_json::json!({ "url": "http://127.0.0.1:9/in", "secrets": [KEY] }));
    assert_eq!(c.message().signing().map(Signer::len), Some(1));
    let w = logs.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("`secrets`") && w[0].contains("[signing]"),
        "{}",
        w[0]
    );
    clean(&w[0]);

    // `{ env = "VAR" }`: still read, one warning for the whole file naming each key and
    // the `${VAR}` to write.
    let c = load(serde_json::json!({
        "url": "http://127.0.0.1:9/in",
        "headers": { "x-team": { "env": "PATH" }, "x-other": { "env": "PATH" } },
    }));
    assert!(format!("{c:?}").contains("x-team"), "{c:?}");
    let w = logs.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    for part in [
        "env = \"VAR\"",
        "headers.x-team = \"${PATH}\"",
        "headers.x-other = \"${PATH}\"",
    ] {
        assert!(w[1].contains(part), "{part}: {}", w[1]);
    }
    clean(&w[1]);

    // Both in one file: one warning for each form.
    load(serde_json::json!({
        "url": "http://127.0.0.1:9/in",
        "secrets": [KEY],
        "headers": { "x-team": { "env": "PATH" } },
    }));
    let w = logs.warnings();
    assert_eq!(w.len(), 4, "{w:?}");
    w.iter().for_each(|w| clean(w));

    // The current spellings and the builder's own setters warn of nothing.
    load(serde_json::json!({
        "url": "http://127.0.0.1:9/in", "signing": { "secrets": [KEY] },
    }));
    HttpSink::builder("http://127.0.0.1:9/in")
        .secret(KEY)
        .secret_header("x-team", Secret::from("ops"))
        .build_config()
        .unwrap();
    assert_eq!(logs.warnings().len(), 4, "{:?}", logs.warnings());
}
