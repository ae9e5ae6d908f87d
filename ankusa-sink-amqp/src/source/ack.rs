//! The settle handle of one delivery: `basic.ack` after its final outcome, `basic.nack`
//! with requeue (after a pause) when it was not finished.

use crate::error::lapin_text;
use ankusa_source::{Settle, Settlement};
use lapin::Acker;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// How long a released record stays with this consumer before it is given back: given back
/// at once, it would come straight back here and, when what failed it has not changed (a
/// claim store down, a dead-letter file that cannot be written), fail again at once, in a
/// loop. Not while closing: closing the channel gives everything back anyway.
const RELEASE_DELAY: Duration = Duration::from_secs(1);
/// Counts one settlement in flight until dropped.
pub(super) struct Settling(Arc<AtomicUsize>);

impl Drop for Settling {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The settle handle of one delivery.
pub(super) struct AmqpAck {
    pub(super) acker: Acker,
    /// Its consumer's count of deliveries not settled with the broker, if it came
    /// straight from the consumer.
    pub(super) out: Option<Arc<AtomicUsize>>,
    pub(super) settling: Arc<AtomicUsize>,
    pub(super) closing: watch::Receiver<bool>,
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) position: String,
}

impl Settle for AmqpAck {
    fn settle(self: Box<Self>, how: Settlement) {
        let AmqpAck {
            acker,
            out,
            settling,
            mut closing,
            runtime,
            position,
        } = *self;
        // Only acks need to reach the broker before the channel closes: closing it gives
        // back whatever was released (or not settled) anyway.
        let guard = (how == Settlement::Ack).then(|| {
            settling.fetch_add(1, Ordering::SeqCst);
            Settling(settling)
        });
        // The dispatcher's scheduler must not wait for the broker: write it from a task.
        runtime.spawn(async move {
            let _guard = guard;
            let res = match how {
                Settlement::Ack => acker.ack(BasicAckOptions { multiple: false }).await,
                Settlement::Release => {
                    // An error: the source is gone, no reason to wait either.
                    tokio::select! {
                        () = tokio::time::sleep(RELEASE_DELAY) => {}
                        _ = closing.wait_for(|c| *c) => {}
                    }
                    acker
                        .nack(BasicNackOptions {
                            multiple: false,
                            requeue: true,
                        })
                        .await
                }
            };
            // Written (or the channel is gone): the broker counts it no more.
            if let Some(out) = out {
                out.fetch_sub(1, Ordering::SeqCst);
            }
            match res {
                Ok(true) => {}
                // The channel closed since: the broker gives the message out again.
                Ok(false) => tracing::debug!(
                    target: "ankusa_source",
                    %position,
                    ?how,
                    "amqp source: the record's channel is gone; the broker redelivers it"
                ),
                Err(e) => tracing::debug!(
                    target: "ankusa_source",
                    %position,
                    ?how,
                    error = %lapin_text(&e),
                    "amqp source: settling failed; the broker redelivers the record"
                ),
            }
        });
    }
}
