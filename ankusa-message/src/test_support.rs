//! Fixtures the unit tests of forwarding and Message v1 share.

use ankusa_sink_core::Envelope;
use std::num::NonZeroUsize;

/// A hook with a tenant, a dedupe key, a repeated header and headers that are never
/// forwarded (a credential, a cookie, one of ours).
pub(crate) fn env() -> Envelope {
    Envelope::builder("h1", "stripe", &b"hello"[..])
        .tenant_id("acme")
        .received_at(1_700_000_000_123)
        .content_type("application/json")
        .dedupe_key("evt_1")
        .header("Stripe-Signature", "t=1")
        .header("Authorization", "Bearer x")
        .header("X-Multi", "a")
        .header("x-multi", "b")
        .header("X-Ankusa-Id", "spoof")
        .header("Cookie", "c")
        .build()
        .unwrap()
}

/// `n` as a `NonZeroUsize`.
pub(crate) fn nz(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap()
}
