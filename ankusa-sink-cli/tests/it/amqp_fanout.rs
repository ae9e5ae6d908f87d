//! What the AMQP isolation test and bench both do to RabbitMQ: declare a durable fanout
//! exchange, publish persistent hooks to it with confirms, and delete what they made. The
//! bench includes this file by path, so both publish the same way.

use lapin::options::{
    ConfirmSelectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, ExchangeKind};

/// Declares the durable fanout exchange `exchange`.
pub(crate) async fn durable_fanout(ch: &Channel, exchange: &str) {
    ch.exchange_declare(
        exchange.into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
}

/// Puts `ch` in confirm mode and publishes each of `hooks` persistent to `exchange`,
/// `chunk` at a time, each chunk's confirms awaited (all acks) before the next.
pub(crate) async fn publish_confirmed(
    ch: &Channel,
    exchange: &str,
    hooks: &[Vec<u8>],
    chunk: usize,
) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    for chunk in hooks.chunks(chunk) {
        let mut confirms = Vec::with_capacity(chunk.len());
        for h in chunk {
            confirms.push(
                ch.basic_publish(
                    exchange.into(),
                    "".into(),
                    Default::default(),
                    h,
                    BasicProperties::default().with_delivery_mode(2),
                )
                .await
                .unwrap(),
            );
        }
        for c in confirms {
            assert!(c.await.unwrap().is_ack());
        }
    }
}

/// Deletes `queues`, then `exchange`, best effort.
pub(crate) async fn delete_all(ch: &Channel, exchange: &str, queues: &[String]) {
    for q in queues {
        let _ = ch
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    let _ = ch
        .exchange_delete(exchange.into(), ExchangeDeleteOptions::default())
        .await;
}
