//! CloudEvents from untrusted values: a `cloudevents_type` (`CloudEvents::new`), a hook's
//! content type (`is_json`), header values of the HTTP binding (`http_header_value`), and
//! the structured event of a hook read from the input's second half (an envelope line).
//!
//! Invariants: no panic; a header value is printable ASCII without space, `"` or a lone
//! `%`, and percent-decodes back to the input; a structured event is a JSON object with
//! the event's type and the hook's body as `data` (JSON content) or `data_base64`.
#![no_main]

use ankusa_message::cloudevents::{CloudEvents, Mode, http_header_value, is_json};
use ankusa_sink_core::{Ctx, Envelope};
use libfuzzer_sys::fuzz_target;

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).expect("ASCII");
            out.push(u8::from_str_radix(hex, 16).expect("two hex digits after %"));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    // The first line is the text values, the rest an envelope.
    let (head, rest) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(head);
    let _ = is_json(&text);
    let value = http_header_value(&text);
    assert!(
        value
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b'"'),
        "a header value outside printable ASCII"
    );
    assert_eq!(
        percent_decode(&value),
        text.as_bytes(),
        "a header value that does not decode back"
    );
    let ce = CloudEvents::new(Mode::Structured, text.as_ref())
        .or_else(|_| CloudEvents::new(Mode::Structured, "fuzz.event"))
        .expect("a plain type is valid");
    let Ok(env) = serde_json::from_slice::<Envelope>(rest) else {
        return;
    };
    let ctx = Ctx::for_envelope(&env);
    let key = env.idempotency_key();
    let _ = ce.attributes(&env, &ctx, key.clone());
    let event: serde_json::Value =
        serde_json::from_slice(&ce.structured(&env, &ctx, &key)).expect("an event is JSON");
    assert_eq!(event["type"], ce.event_type(), "the event's type changed");
    assert!(
        event.get("data").is_some() || event.get("data_base64").is_some(),
        "an event without its data"
    );
});
