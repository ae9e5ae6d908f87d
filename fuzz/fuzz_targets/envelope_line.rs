//! One line of JSON-lines input, as `forward --input` (the CLI's `parse_line`) and a
//! source record (`ankusa_dispatch::Forward`'s decode) read it: the envelope fast path
//! (`serde_json` straight into `Envelope`), the slow path (a JSON tree, a dead-letter
//! record split off, then `ankusa_sinks::from_json_value`), and Message v1 when the line
//! has `"v"` and `"idempotency_key"`. Every source (Kafka, AMQP, SQS, NATS) hands its
//! record's bytes to that one decode, so this target covers them all.
//!
//! Invariants: no panic; the fast and slow paths agree (the fast path is only a shortcut,
//! so what it accepts the slow path accepts, as the same envelope); an envelope survives
//! its own JSON unchanged.
#![no_main]

use ankusa_sink_core::Envelope;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fast = serde_json::from_slice::<Envelope>(data).ok();
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        assert!(
            fast.is_none(),
            "an envelope was read from bytes that are not JSON"
        );
        return;
    };
    let is_message = value.get("v").is_some() && value.get("idempotency_key").is_some();
    if is_message {
        let _ = ankusa_message::decode(data);
    }
    let slow = match ankusa_dispatch::split_record(value.clone()) {
        Ok((envelope, _info)) => ankusa_sinks::from_json_value::<Envelope>(envelope).ok(),
        Err(_) => None,
    };
    let plain = ankusa_sinks::from_json_value::<Envelope>(value).ok();
    if let Some(fast) = &fast {
        assert_eq!(
            Some(fast),
            plain.as_ref(),
            "fast and slow envelope paths disagree"
        );
        assert_eq!(
            Some(fast),
            slow.as_ref(),
            "a plain envelope split as a record"
        );
    }
    for env in [fast, slow, plain].into_iter().flatten() {
        let line = serde_json::to_vec(&env).expect("a valid envelope serializes");
        let again: Envelope = serde_json::from_slice(&line).expect("an envelope's own JSON parses");
        assert_eq!(env, again, "an envelope changed through its own JSON");
        let _ = ankusa_dispatch::forward::traced_hook(env);
    }
});
