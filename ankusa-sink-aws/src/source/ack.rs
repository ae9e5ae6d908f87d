//! The settle handle of one record, and the source's task that settles with SQS: an ack
//! is a `DeleteMessage`, a release a `ChangeMessageVisibility` to 0 (the message is given
//! out again at once). Several pending at once go out as one batch call of up to 10
//! entries (`DeleteMessageBatch`, `ChangeMessageVisibilityBatch`). A call that fails for a
//! reason that passes (throttling, the network, a 5xx) is logged and retried with backoff;
//! one that cannot succeed (the receipt handle expired, the queue is gone) is logged and
//! dropped: SQS gives the message out again once its visibility timeout ends.

use crate::error::{self, AwsError, classify};
use ankusa_sink_core::Class;
use ankusa_source::{Settle, Settlement};
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
};
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// The first pause before a failed settlement call is made again.
const BACKOFF_START: Duration = Duration::from_millis(100);
/// The longest pause between attempts of a failed settlement call.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// The most entries of one batch call.
const BATCH: usize = 10;
/// The most settlement calls under way at once.
const MAX_CALLS: usize = 8;
/// How long the task goes on flushing after the source was dropped without `close`.
const DROPPED_FLUSH: Duration = Duration::from_secs(30);
/// Error codes of a settlement that no retry can make succeed: the receipt handle is not
/// (or no longer) valid, the message is not in flight any more.
const GONE: [&str; 4] = [
    "ReceiptHandleIsInvalid",
    "InvalidIdFormat",
    "MessageNotInflight",
    "AWS.SimpleQueueService.MessageNotInflight",
];

/// What one record's settlement asks of SQS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// `DeleteMessage`: the record is finished.
    Delete,
    /// `ChangeMessageVisibility` to 0: give the message out again now.
    Release,
}

/// One settlement on its way to SQS.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) op: Op,
    pub(super) receipt: String,
    pub(super) position: String,
}

/// The settle handle of one record: hands the settlement to the source's settling task
/// (an unbounded channel: `settle` never waits).
pub(super) struct SqsAck {
    pub(super) tx: mpsc::UnboundedSender<Pending>,
    pub(super) receipt: String,
    pub(super) position: String,
}

impl Settle for SqsAck {
    fn settle(self: Box<Self>, how: Settlement) {
        let op = match how {
            Settlement::Ack => Op::Delete,
            Settlement::Release => Op::Release,
        };
        let SqsAck {
            tx,
            receipt,
            position,
        } = *self;
        if let Err(mpsc::error::SendError(p)) = tx.send(Pending {
            op,
            receipt,
            position,
        }) {
            tracing::debug!(
                target: "ankusa_source",
                position = %p.position,
                op = ?p.op,
                "sqs source: settled after the source closed; SQS gives the message out \
                 again once its visibility timeout ends"
            );
        }
    }
}

/// The task that settles with SQS, fed by every [`SqsAck`] of one source.
pub(super) struct Settler {
    calls: Arc<Calls>,
    rx: mpsc::UnboundedReceiver<Pending>,
    /// Set by `close`: flush what is pending by then, then end.
    closing: watch::Receiver<Option<Instant>>,
    deletes: VecDeque<Pending>,
    releases: VecDeque<Pending>,
    backoff: Duration,
}

/// What one settlement call needs: shared by the calls under way.
struct Calls {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    queue_name: String,
}

impl Settler {
    /// A settler for the queue at `queue_url`.
    pub(super) fn new(
        client: aws_sdk_sqs::Client,
        queue_url: String,
        queue_name: String,
        rx: mpsc::UnboundedReceiver<Pending>,
        closing: watch::Receiver<Option<Instant>>,
    ) -> Self {
        Settler {
            calls: Arc::new(Calls {
                client,
                queue_url,
                queue_name,
            }),
            rx,
            closing,
            deletes: VecDeque::new(),
            releases: VecDeque::new(),
            backoff: BACKOFF_START,
        }
    }

    fn push(&mut self, p: Pending) {
        match p.op {
            Op::Delete => self.deletes.push_back(p),
            Op::Release => self.releases.push_back(p),
        }
    }

    fn idle(&self) -> bool {
        self.deletes.is_empty() && self.releases.is_empty()
    }

    /// Settle until closed (or until every handle and the source are gone) and nothing is
    /// pending, or the closing deadline passed.
    pub(super) async fn run(mut self) {
        let mut deadline: Option<Instant> = None;
        // The source gone without `close`: no more changes to wait for.
        let mut orphaned = false;
        loop {
            if !orphaned {
                match self.closing.has_changed() {
                    Ok(_) => deadline = *self.closing.borrow_and_update(),
                    // The source is gone: its deadline if it closed, else a last while.
                    Err(_) => {
                        orphaned = true;
                        deadline = Some(
                            (*self.closing.borrow())
                                .unwrap_or_else(|| Instant::now() + DROPPED_FLUSH),
                        );
                    }
                }
            }
            while let Ok(p) = self.rx.try_recv() {
                self.push(p);
            }
            if self.idle() {
                if deadline.is_some() {
                    return;
                }
                tokio::select! {
                    p = self.rx.recv() => match p {
                        Some(p) => self.push(p),
                        // Every handle and the source are gone, nothing is pending.
                        None => return,
                    },
                    _ = self.closing.changed() => {}
                }
                continue;
            }
            if let Some(d) = deadline
                && Instant::now() >= d
            {
                self.give_up();
                return;
            }
            if self.flush_once().await {
                self.backoff = BACKOFF_START;
            } else {
                let mut until = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                if let Some(d) = deadline {
                    until = until.min(d);
                }
                if orphaned {
                    tokio::time::sleep_until(until).await;
                } else {
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => {}
                        _ = self.closing.changed() => {}
                    }
                }
            }
        }
    }

    /// The close deadline passed with settlements still pending: said once, at warn.
    fn give_up(&self) {
        tracing::warn!(
            target: "ankusa_source",
            queue = %self.calls.queue_name,
            deletes = self.deletes.len(),
            releases = self.releases.len(),
            "sqs source: closed before every settlement reached SQS; those messages are given \
             out again once their visibility timeout ends"
        );
    }

    /// Up to [`MAX_CALLS`] calls at once, each for up to [`BATCH`] deletes or releases;
    /// `false` when one failed for a reason that passes (its entries are pending again).
    async fn flush_once(&mut self) -> bool {
        let mut calls = tokio::task::JoinSet::new();
        while calls.len() < MAX_CALLS && !self.idle() {
            for queue in [&mut self.deletes, &mut self.releases] {
                if !queue.is_empty() && calls.len() < MAX_CALLS {
                    let n = queue.len().min(BATCH);
                    let batch: Vec<Pending> = queue.drain(..n).collect();
                    calls.spawn(self.calls.clone().settle(batch, self.backoff));
                }
            }
        }
        let mut ok = true;
        while let Some(done) = calls.join_next().await {
            // A call that panicked: its entries are lost, SQS gives them out again once
            // their visibility timeout ends.
            let Ok(again) = done else {
                ok = false;
                continue;
            };
            ok &= again.is_empty();
            for p in again {
                self.push(p);
            }
        }
        ok
    }
}

impl Calls {
    /// Settle `batch` (all of one [`Op`]): one entry alone by the single call, several by
    /// the batch call. Answers what failed and may succeed later.
    async fn settle(self: Arc<Self>, batch: Vec<Pending>, backoff: Duration) -> Vec<Pending> {
        let op = batch[0].op;
        let failed: Result<HashSet<usize>, AwsError> = if batch.len() == 1 {
            let receipt = batch[0].receipt.clone();
            match op {
                Op::Delete => self
                    .client
                    .delete_message()
                    .queue_url(&self.queue_url)
                    .receipt_handle(receipt)
                    .send()
                    .await
                    .map(|_| HashSet::new())
                    .map_err(|e| error::sqs("DeleteMessage", e)),
                Op::Release => self
                    .client
                    .change_message_visibility()
                    .queue_url(&self.queue_url)
                    .receipt_handle(receipt)
                    .visibility_timeout(0)
                    .send()
                    .await
                    .map(|_| HashSet::new())
                    .map_err(|e| error::sqs("ChangeMessageVisibility", e)),
            }
        } else {
            match op {
                Op::Delete => self.delete_batch(&batch).await,
                Op::Release => self.release_batch(&batch).await,
            }
        };
        match failed {
            Ok(again) => batch
                .into_iter()
                .enumerate()
                .filter(|(i, _)| again.contains(i))
                .map(|(_, p)| p)
                .collect(),
            Err(e) if retryable(&e) => {
                tracing::warn!(
                    target: "ankusa_source",
                    queue = %self.queue_name,
                    entries = batch.len(),
                    retry_in_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX),
                    "sqs source: settling failed, will retry: {e}"
                );
                batch
            }
            Err(e) => {
                let first = batch.first().map(|p| p.position.as_str()).unwrap_or("");
                tracing::warn!(
                    target: "ankusa_source",
                    queue = %self.queue_name,
                    entries = batch.len(),
                    position = %first,
                    "sqs source: settling failed and cannot succeed ({e}); SQS gives these \
                     messages out again once their visibility timeout ends"
                );
                Vec::new()
            }
        }
    }

    /// `DeleteMessageBatch`: the indices of `batch` to try again.
    async fn delete_batch(&self, batch: &[Pending]) -> Result<HashSet<usize>, AwsError> {
        let entries = batch
            .iter()
            .enumerate()
            .map(|(i, p)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(&p.receipt)
                    .build()
                    .expect("id and receipt handle are set")
            })
            .collect();
        let out = self
            .client
            .delete_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| error::sqs("DeleteMessageBatch", e))?;
        let done = out.successful().iter().map(|s| s.id());
        let failed = out
            .failed()
            .iter()
            .map(|f| (f.id(), f.sender_fault(), f.code(), f.message()));
        Ok(self.entry_results(batch, "DeleteMessageBatch", done, failed))
    }

    /// `ChangeMessageVisibilityBatch` to 0: the indices of `batch` to try again.
    async fn release_batch(&self, batch: &[Pending]) -> Result<HashSet<usize>, AwsError> {
        let entries = batch
            .iter()
            .enumerate()
            .map(|(i, p)| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(&p.receipt)
                    .visibility_timeout(0)
                    .build()
                    .expect("id and receipt handle are set")
            })
            .collect();
        let out = self
            .client
            .change_message_visibility_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| error::sqs("ChangeMessageVisibilityBatch", e))?;
        let done = out.successful().iter().map(|s| s.id());
        let failed = out
            .failed()
            .iter()
            .map(|f| (f.id(), f.sender_fault(), f.code(), f.message()));
        Ok(self.entry_results(batch, "ChangeMessageVisibilityBatch", done, failed))
    }

    /// A batch answer, per entry: the indices to try again (a failure that is not the
    /// sender's fault, or no result at all); a sender's fault (an expired receipt handle)
    /// is logged and dropped.
    fn entry_results<'a>(
        &self,
        batch: &[Pending],
        operation: &'static str,
        done: impl Iterator<Item = &'a str>,
        failed: impl Iterator<Item = (&'a str, bool, &'a str, Option<&'a str>)>,
    ) -> HashSet<usize> {
        let mut again: HashSet<usize> = (0..batch.len()).collect();
        for id in done {
            if let Ok(i) = id.parse::<usize>() {
                again.remove(&i);
            }
        }
        for (id, sender_fault, code, message) in failed {
            let Some(i) = id.parse::<usize>().ok().filter(|i| *i < batch.len()) else {
                continue;
            };
            let e = AwsError::entry("sqs", operation, code, message);
            if sender_fault || !retryable(&e) {
                again.remove(&i);
                tracing::warn!(
                    target: "ankusa_source",
                    queue = %self.queue_name,
                    position = %batch[i].position,
                    "sqs source: settling failed and cannot succeed ({e}); SQS gives the \
                     message out again once its visibility timeout ends"
                );
            }
        }
        if !again.is_empty() {
            tracing::warn!(
                target: "ankusa_source",
                queue = %self.queue_name,
                entries = again.len(),
                "sqs source: {operation} did not settle every entry, will retry them"
            );
        }
        again
    }
}

/// Whether a failed settlement may succeed if made again: throttling, the network, the
/// service's trouble; never a receipt handle SQS no longer takes, nor what the error table
/// calls a config or permanent error (the queue gone, access denied).
fn retryable(e: &AwsError) -> bool {
    if let AwsError::Refused {
        code: Some(code), ..
    } = e
        && GONE.contains(&code.as_str())
    {
        return false;
    }
    matches!(
        classify(e),
        Class::Transient | Class::Throttled | Class::RetryAfter(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_receipts_are_not_retried_throttles_and_5xx_are() {
        let refused = |code: &str, status| AwsError::Refused {
            service: "sqs",
            operation: "DeleteMessage",
            modeled: None,
            code: Some(code.to_owned()),
            status: Some(status),
            retry_after_ms: None,
            message: None,
        };
        assert!(!retryable(&refused("ReceiptHandleIsInvalid", 400)));
        assert!(!retryable(&refused(
            "AWS.SimpleQueueService.MessageNotInflight",
            400
        )));
        assert!(!retryable(&refused("AccessDenied", 403)));
        assert!(!retryable(&refused(
            "AWS.SimpleQueueService.NonExistentQueue",
            400
        )));
        assert!(retryable(&refused("RequestThrottled", 400)));
        assert!(retryable(&refused("InternalError", 500)));
        assert!(retryable(&AwsError::NoResponse {
            service: "sqs",
            operation: "DeleteMessageBatch",
            what: "connection refused".into(),
            sent: Some(false),
        }));
    }
}
