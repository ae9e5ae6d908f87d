//! The Redis sink against real servers: the shared one on 127.0.0.1:6379 and private
//! `redis-server` processes for the faults a shared server must not be pushed into.

mod classify;
mod common;
mod conformance;
mod poison;
mod tls;
mod wire;
