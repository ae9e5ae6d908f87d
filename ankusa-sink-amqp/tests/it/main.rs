//! Integration tests against a real RabbitMQ on 127.0.0.1 (`ANKUSA_AMQP_URL`).
//!
//! Start one with `scripts/services/rabbitmq.sh`. Every test uses unique exchange, queue,
//! vhost and user names and removes them; `broker` tests stop the broker or raise its
//! memory alarm under an exclusive lock, restoring it in a guard.

mod broker;
mod classify;
mod common;
mod conformance;
mod poison;
mod private_node;
mod publish;
#[cfg(feature = "source")]
mod source;
