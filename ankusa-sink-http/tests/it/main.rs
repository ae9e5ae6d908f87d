//! Integration tests of ankusa-sink-http against real HTTP(S) servers on 127.0.0.1.

mod classes;
mod config;
mod conformance;
mod delivery;
mod forwarding;
mod guard;
mod oauth2;
mod poison;
mod proxy;
mod server;
mod tls;
mod transport;

use ankusa_sink_core::{Class, Ctx, Envelope, Failure, Sink};
use ankusa_sink_http::{HttpError, HttpSink, HttpSinkBuilder};

/// A JSON hook with a tenant and a dedupe key.
pub(crate) fn envelope(body: &[u8]) -> Envelope {
    Envelope::builder("01J0HOOKID", "stripe", body.to_vec())
        .tenant_id("acme")
        .content_type("application/json")
        .build()
        .unwrap()
}

pub(crate) fn builder(server: &server::Server) -> HttpSinkBuilder {
    HttpSink::builder(server.url("/hooks"))
}

/// Deliver `env` once as attempt `attempt`.
pub(crate) async fn deliver_attempt(
    sink: &HttpSink,
    env: &Envelope,
    attempt: u32,
) -> Result<(), Failure> {
    sink.deliver(env, &Ctx::for_envelope(env).with_attempt(attempt))
        .await
}

pub(crate) async fn deliver(sink: &HttpSink, env: &Envelope) -> Result<(), Failure> {
    deliver_attempt(sink, env, 1).await
}

/// The failure's class, panicking on `Ok`.
pub(crate) fn class_of(r: &Result<(), Failure>) -> Class {
    match r {
        Ok(()) => panic!("expected a failure, got Ok"),
        Err(f) => f.class(),
    }
}

/// The typed reason of a failure.
pub(crate) fn reason(r: &Result<(), Failure>) -> &HttpError {
    let f = r.as_ref().expect_err("expected a failure");
    f.reason()
        .downcast_ref::<HttpError>()
        .unwrap_or_else(|| panic!("reason is not an HttpError: {f}"))
}
