//! Settling records with the server: `+ACK` or `-NAK` once a record is settled, `+WPI`
//! for every unsettled one in between so that `ack_wait` does not run out.

use ankusa_source::{Settle, Settlement};
use async_nats::{Client, Subject};
use bytes::Bytes;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::mpsc;

/// What the settling task is told, in order: a record handed out, then its settlement.
pub(super) enum Cmd {
    Track(u64, Subject),
    Settle(u64, Settlement),
}

/// The settle handle of one record.
pub(super) struct NatsAck {
    pub(super) id: u64,
    pub(super) tx: mpsc::UnboundedSender<Cmd>,
}

impl Settle for NatsAck {
    fn settle(self: Box<Self>, how: Settlement) {
        // After `close`, the settling task is gone: the broker redelivers after ack_wait.
        let _ = self.tx.send(Cmd::Settle(self.id, how));
    }
}

/// Acknowledge settled records and keep unsettled ones alive, until every sender (the
/// source and every record's handle) is gone.
pub(super) async fn settle_loop(
    client: Client,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
    every: Duration,
) {
    let mut inflight: HashMap<u64, Subject> = HashMap::new();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Cmd::Track(id, reply)) => {
                    inflight.insert(id, reply);
                }
                Some(Cmd::Settle(id, how)) => {
                    if let Some(reply) = inflight.remove(&id) {
                        let body = match how {
                            Settlement::Ack => Bytes::from_static(b"+ACK"),
                            Settlement::Release => Bytes::from_static(b"-NAK"),
                        };
                        if let Err(e) = client.publish(reply, body).await {
                            tracing::warn!(
                                target: "ankusa_source", error = %e, ?how,
                                "settling a record failed: the broker redelivers it after ack_wait"
                            );
                        }
                    }
                }
                None => return,
            },
            _ = tick.tick() => {
                for reply in inflight.values() {
                    if let Err(e) = client.publish(reply.clone(), Bytes::from_static(b"+WPI")).await {
                        tracing::debug!(target: "ankusa_source", error = %e, "in-progress ack failed");
                    }
                }
            }
        }
    }
}
