//! A source over records held in memory: for tests and examples of what reads a source,
//! without a broker.

use crate::{Ack, Record, Settle, Settlement, Source, SourceError, Window};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The settlements of a [`MemorySource`]'s records, by position, in the order they came.
pub type Settlements = Arc<Mutex<Vec<(String, Settlement)>>>;

/// Records held in memory, handed out in order (positions `memory#0`, `memory#1`, ...)
/// within a window of 1,024 unsettled records; [`next`](Source::next) answers `None` once
/// they are all handed out, as a source that ended. A released record is not handed out
/// again: its settlement is recorded like an acknowledgement, for the caller to check.
#[derive(Debug)]
pub struct MemorySource {
    records: VecDeque<Vec<u8>>,
    handed_out: u64,
    window: Window,
    settled: Settlements,
    stopped: bool,
}

impl MemorySource {
    /// A source of these record payloads.
    pub fn new(payloads: impl IntoIterator<Item = Vec<u8>>) -> Self {
        MemorySource {
            records: payloads.into_iter().collect(),
            handed_out: 0,
            window: Window::new(1024).expect("non-zero"),
            settled: Settlements::default(),
            stopped: false,
        }
    }

    /// Hand out at most `max_unacked` unsettled records at once instead of 1,024 (at
    /// least one).
    pub fn with_max_unacked(mut self, max_unacked: usize) -> Self {
        self.window = Window::new(max_unacked.max(1)).expect("non-zero");
        self
    }

    /// Where each record's settlement is recorded (a clone: it outlives the source).
    pub fn settlements(&self) -> Settlements {
        self.settled.clone()
    }
}

/// Records one settlement.
struct Recorded {
    position: String,
    settled: Settlements,
}

impl Settle for Recorded {
    fn settle(self: Box<Self>, how: Settlement) {
        let mut s = self.settled.lock().unwrap_or_else(|e| e.into_inner());
        s.push((self.position, how));
    }
}

#[async_trait::async_trait]
impl Source for MemorySource {
    async fn next(&mut self) -> Option<Result<Record, SourceError>> {
        if self.stopped {
            return None;
        }
        let payload = self.records.pop_front()?;
        let permit = self.window.acquire().await;
        let permit = self.window.charge(permit, payload.len()).await;
        let position = format!("memory#{}", self.handed_out);
        self.handed_out += 1;
        let ack = Ack::new(
            Recorded {
                position: position.clone(),
                settled: self.settled.clone(),
            },
            permit,
        );
        Some(Ok(Record::new(payload, position, ack)))
    }

    fn stop(&mut self) {
        self.stopped = true;
    }

    async fn close(self: Box<Self>, _grace: Duration) {}

    fn describe(&self) -> String {
        format!("memory source ({} records left)", self.records.len())
    }

    fn window(&self) -> Option<Window> {
        Some(self.window.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_come_in_order_and_their_settlements_are_recorded() {
        let mut s = MemorySource::new([b"a".to_vec(), b"b".to_vec()]);
        let settled = s.settlements();
        let a = s.next().await.unwrap().unwrap();
        let b = s.next().await.unwrap().unwrap();
        assert!(s.next().await.is_none(), "ended");
        assert_eq!(
            (a.payload.as_slice(), a.position.as_str()),
            (&b"a"[..], "memory#0")
        );
        a.ack.ack();
        drop(b);
        assert_eq!(
            *settled.lock().unwrap(),
            [
                ("memory#0".to_owned(), Settlement::Ack),
                ("memory#1".to_owned(), Settlement::Release)
            ]
        );
        s.stop();
        assert!(s.describe().contains("0 records left"));
    }
}
