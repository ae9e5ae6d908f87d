//! One task on the runtime that awaits every publish and its confirm.
//!
//! lapin completes both on its I/O thread. Awaited by each delivery's own task, every
//! completion wakes the runtime across threads: an eventfd write and a wake-up each, two per
//! message (39,000 writes for 20,000 messages). Awaited here, in one task, a burst of
//! completions wakes the runtime once: the first schedules the task, the others find it
//! scheduled already; the deliveries then learn their results by local wake-ups.

use futures_util::stream::{FuturesUnordered, StreamExt as _};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::Poll;
use tokio::sync::{mpsc, oneshot};

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Runs futures in one task on the runtime of the delivery that first needs it.
#[derive(Debug, Default)]
pub(crate) struct Driver {
    jobs: Mutex<Option<mpsc::UnboundedSender<Job>>>,
}

impl Driver {
    /// `fut`'s output, awaited by the driver task; `None` when that task ended first (its
    /// runtime shut down while this delivery, on another runtime, waited). Without a
    /// runtime the future runs right here.
    ///
    /// `fut` is boxed here, before the returned future exists: that future holds the box,
    /// not `fut` itself, so a delivery waiting on it does not also carry a dead copy of
    /// the publish's whole state (it did, as an `async fn`'s argument: 3 KB per
    /// outstanding delivery).
    pub(crate) fn run<F>(&self, fut: F) -> impl Future<Output = Option<F::Output>> + '_
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::pin(async move {
            let _ = tx.send(fut.await);
        });
        async move {
            if let Err(job) = self.submit(job) {
                job.await;
            }
            rx.await.ok()
        }
    }

    fn submit(&self, job: Job) -> Result<(), Job> {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        let job = match jobs.as_ref() {
            Some(tx) => match tx.send(job) {
                Ok(()) => return Ok(()),
                // Its runtime ended: start again on this one.
                Err(mpsc::error::SendError(job)) => job,
            },
            None => job,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Err(job);
        };
        let (tx, rx) = mpsc::unbounded_channel();
        runtime.spawn(drive(rx));
        let sent = tx.send(job).map_err(|mpsc::error::SendError(job)| job);
        *jobs = Some(tx);
        sent
    }
}

/// Polls every job it receives until the sender is gone and every job has finished.
async fn drive(mut rx: mpsc::UnboundedReceiver<Job>) {
    let mut running = FuturesUnordered::new();
    let mut open = true;
    std::future::poll_fn(|cx| {
        while open {
            match rx.poll_recv(cx) {
                Poll::Ready(Some(job)) => running.push(job),
                Poll::Ready(None) => open = false,
                Poll::Pending => break,
            }
        }
        while let Poll::Ready(Some(())) = running.poll_next_unpin(cx) {}
        if open || !running.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn a_job_its_driver_runtime_dropped_is_none_and_the_next_runtime_gets_a_driver() {
        let driver = Driver::default();
        let first = runtime();
        assert_eq!(first.block_on(driver.run(async { 1 })), Some(1));
        let second = runtime();
        // Handed to the first runtime's driver, which never runs it: that runtime ends.
        let mut stuck = std::pin::pin!(driver.run(std::future::pending::<()>()));
        second.block_on(std::future::poll_fn(|cx| {
            assert!(stuck.as_mut().poll(cx).is_pending());
            Poll::Ready(())
        }));
        drop(first);
        assert_eq!(second.block_on(stuck), None);
        assert_eq!(second.block_on(driver.run(async { 2 })), Some(2));
    }

    #[test]
    fn without_a_runtime_the_job_runs_in_place() {
        let driver = Driver::default();
        let got = futures_util::FutureExt::now_or_never(driver.run(async { 3 }));
        assert_eq!(got, Some(Some(3)));
    }
}
