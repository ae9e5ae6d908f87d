//! The declarations both the `amqp_raw_loop` example and the integration tests make (the
//! tests include this file by path), so the baseline's queues are the tests' queues.

use lapin::options::{QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Queue};

/// Declare the durable queue `name` with `args`.
pub(crate) async fn durable_queue(
    ch: &Channel,
    name: &str,
    args: FieldTable,
) -> lapin::Result<Queue> {
    let options = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare(name.into(), options, args).await
}

/// Bind `queue` to `exchange` with `key`.
pub(crate) async fn bind(
    ch: &Channel,
    queue: &str,
    exchange: &str,
    key: &str,
) -> lapin::Result<()> {
    ch.queue_bind(
        queue.into(),
        exchange.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
}

/// A passive declare: `queue` as the broker has it (its message count), an error if it does
/// not exist; never creates it.
pub(crate) async fn passive(ch: &Channel, queue: &str) -> lapin::Result<Queue> {
    let options = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    ch.queue_declare(queue.into(), options, FieldTable::default())
        .await
}
