//! Message v1 decode (`ankusa_message::decode`), what a consumer and `forward` read from a
//! queue.
//!
//! Invariants: no panic; a decoded inline message's body matches its `size` and `sha256`;
//! the hook it rebuilds (as `forward` does) encodes to a Message v1 that decodes to the
//! same identity, body and digest.
#![no_main]

use ankusa_message::{MessageBody, decode, encode, sha256_hex};
use ankusa_sink_core::{Ctx, Envelope};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = decode(data) else {
        return;
    };
    let MessageBody::Inline(body) = &m.body else {
        return;
    };
    assert_eq!(body.len() as u64, m.size, "an inline body of another size");
    assert_eq!(
        sha256_hex(body),
        m.sha256,
        "an inline body of another digest"
    );
    let mut b = Envelope::builder(m.id.clone(), m.source_id.clone(), body.clone())
        .received_at(m.received_at)
        .headers(m.headers.clone());
    if let Some(t) = &m.tenant_id {
        b = b.tenant_id(t.clone());
    }
    if let Some(ct) = &m.content_type {
        b = b.content_type(ct.clone());
    }
    if let Some(k) = &m.dedupe_key {
        b = b.dedupe_key(k.clone());
    }
    // A message may carry what a hook may not (forward counts it invalid): nothing to check.
    let Ok(env) = b.build() else {
        return;
    };
    let wire = encode(&env, &Ctx::for_envelope(&env), None).expect("an inline message encodes");
    let again = decode(&wire).expect("an encoded message decodes");
    assert_eq!(
        (
            &m.id,
            &m.source_id,
            &m.tenant_id,
            m.received_at,
            &m.content_type,
            &m.dedupe_key
        ),
        (
            &again.id,
            &again.source_id,
            &again.tenant_id,
            again.received_at,
            &again.content_type,
            &again.dedupe_key
        ),
        "a message's identity changed through a hook"
    );
    assert_eq!(
        m.body, again.body,
        "a message's body changed through a hook"
    );
    assert_eq!(
        m.sha256, again.sha256,
        "a message's digest changed through a hook"
    );
});
