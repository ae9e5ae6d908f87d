//! Forwarded provider headers: the credential, proxy-trust and override headers of the
//! testkit's list never leave, in the policy or on the wire, whatever the allow-list; signature headers do.

use ankusa_message::encode;
use ankusa_message::{
    ForwardHeaders, HeaderPolicy, NEVER_FORWARDED_PATTERNS, forwarded_headers, is_forwardable,
};
use ankusa_sink_core::{Ctx, Envelope};
use ankusa_sink_testkit::support::UNTRUSTED_HEADERS;

/// Provider signature and event headers: not secrets, they must stay.
const PROVIDER_HEADERS: &[&str] = &[
    "stripe-signature",
    "x-hub-signature",
    "x-hub-signature-256",
    "webhook-signature",
    "webhook-id",
    "webhook-timestamp",
    "x-slack-signature",
    "x-slack-request-timestamp",
    "x-github-event",
    "x-github-delivery",
    "x-gitlab-event",
    "x-shopify-hmac-sha256",
    "x-twilio-signature",
    "x-authy-signature",
    "svix-signature",
    "paddle-signature",
    "x-signature-ed25519",
    "x-signature-timestamp",
    "user-agent",
    "x-request-id",
    "accept",
];

#[test]
fn credential_and_trust_headers_are_never_forwarded() {
    let mut b = Envelope::builder("h", "s", "");
    for name in UNTRUSTED_HEADERS {
        b = b.header(*name, "planted-value");
    }
    for name in PROVIDER_HEADERS {
        b = b.header(*name, "v");
    }
    let e = b.build().unwrap();
    let ctx = Ctx::for_envelope(&e);
    let names: Vec<String> = forwarded_headers(&e, &ctx)
        .into_iter()
        .map(|(n, _)| n.into_owned())
        .collect();
    assert_eq!(names, PROVIDER_HEADERS);
    for name in UNTRUSTED_HEADERS {
        assert!(!is_forwardable(&name.to_ascii_lowercase()), "{name}");
    }
    // An allow-list cannot bring them back.
    let only = ctx.with_extension(HeaderPolicy::from(
        ForwardHeaders::only(UNTRUSTED_HEADERS.iter().copied()).unwrap(),
    ));
    assert!(forwarded_headers(&e, &only).is_empty());
    // Nor in Message v1.
    let wire = String::from_utf8(encode(&e, &only, None).unwrap()).unwrap();
    assert!(!wire.contains("planted-value"), "{wire}");
    let wire = String::from_utf8(encode(&e, &Ctx::for_envelope(&e), None).unwrap()).unwrap();
    assert!(!wire.contains("planted-value"), "{wire}");
    for p in NEVER_FORWARDED_PATTERNS {
        for name in PROVIDER_HEADERS {
            assert!(!name.contains(p), "pattern {p} would hit {name}");
        }
    }
}
