//! A hook from a durable source is acknowledged only after every sink of its route has
//! delivered it or dead-lettered it (the record stored), and released otherwise.

use crate::*;
use ankusa_dispatch::{DeadLetter, Dispatcher, Hook, Outcome};
use ankusa_source::{Ack, Settle, Settlement, Window};
use std::sync::Mutex;
use std::time::Duration;

/// Records each settlement with the hook's id.
#[derive(Clone, Default)]
struct Settled(Arc<Mutex<Vec<(String, Settlement)>>>);

struct One(String, Settled);
impl Settle for One {
    fn settle(self: Box<Self>, how: Settlement) {
        self.1.0.lock().unwrap().push((self.0, how));
    }
}

impl Settled {
    async fn hook(&self, window: &Window, id: &str) -> Hook {
        let ack = Ack::new(One(id.to_owned(), self.clone()), window.acquire().await);
        Hook::new(env(id)).source_ack(ack)
    }

    fn take(&self) -> Vec<(String, Settlement)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

#[tokio::test(start_paused = true)]
async fn acked_after_the_last_sink_of_the_route_and_after_its_delivery_is_read() {
    let settled = Settled::default();
    let w = Window::new(8).unwrap();
    let slow = Script::new(Step::after(Duration::from_secs(5), Step::Ok)).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("fast", Script::new(Step::Ok).arc())
        .sink("slow", slow)
        .build()
        .unwrap();
    d.submit(settled.hook(&w, "h1").await).await.unwrap();
    let first = recv_n(&mut out, 1, Duration::from_secs(1)).await;
    assert_eq!(&*first[0].sink, "fast");
    drop(first);
    assert!(settled.take().is_empty(), "one sink of two is not the hook");
    let second = recv_n(&mut out, 1, Duration::from_secs(10)).await;
    assert!(settled.take().is_empty(), "not before its outcome was read");
    assert_eq!(w.unsettled(), 1);
    drop(second);
    assert_eq!(settled.take(), [("h1".to_owned(), Settlement::Ack)]);
    assert_eq!(w.unsettled(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_that_cannot_be_stored_holds_its_hook_and_pauses_intake() {
    let settled = Settled::default();
    let w = Window::new(8).unwrap();
    // The dead-letter store refuses twice, then takes it.
    let dl = Script::new(Step::Ok)
        .first([Step::Transient, Step::Transient])
        .arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("gone", Script::new(Step::Permanent).arc())
        .dead_letter(DeadLetter::sink(dl.clone()))
        .build()
        .unwrap();
    let t0 = tokio::time::Instant::now();
    d.submit(settled.hook(&w, "h1").await).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    // Held, not released to the source: intake waits while it is.
    let second = {
        let d = d.clone();
        let hook = settled.hook(&w, "h2").await;
        tokio::spawn(async move { d.submit(hook).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.is_finished(), "intake is paused");
    assert!(
        settled.take().is_empty(),
        "h1 is neither acked nor released"
    );
    let first = recv_n(&mut out, 1, Duration::from_secs(10)).await;
    assert!(
        matches!(
            &first[0].outcome,
            Outcome::DeadLettered {
                store_error: None,
                ..
            }
        ),
        "{first:?}"
    );
    drop(first);
    // Stored on the third try: 1 s, then 2 s after the first failure (h2's dead letter may
    // follow).
    let tries: Vec<Duration> = dl.seen().iter().map(|s| s.at - t0).collect();
    assert!(tries.len() >= 3, "{tries:?}");
    assert!(
        dl.seen()[..3]
            .iter()
            .all(|s| s.hook.starts_with("h1.dead."))
    );
    assert!(tries[1] >= Duration::from_secs(1) && tries[2] - tries[1] >= Duration::from_secs(2));
    second.await.unwrap().unwrap();
    drop(recv_n(&mut out, 1, Duration::from_secs(1)).await);
    assert_eq!(
        settled.take(),
        [
            ("h1".to_owned(), Settlement::Ack),
            ("h2".to_owned(), Settlement::Ack)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_held_dead_letter_is_released_at_a_shutdown() {
    let settled = Settled::default();
    let w = Window::new(8).unwrap();
    let (d, mut out) = Dispatcher::builder()
        .sink("gone", Script::new(Step::Permanent).arc())
        .dead_letter(DeadLetter::sink(Script::new(Step::Transient).arc()))
        .build()
        .unwrap();
    d.submit(settled.hook(&w, "h1").await).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(settled.take().is_empty(), "held");
    let unfinished = d.shutdown(Duration::from_secs(30)).await;
    assert_eq!(unfinished.len(), 1);
    assert!(unfinished[0].last_failure.is_some());
    while out.recv().await.is_some() {}
    drop(unfinished);
    assert_eq!(settled.take(), [("h1".to_owned(), Settlement::Release)]);
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_releases_what_it_leaves_and_acks_what_finished() {
    let settled = Settled::default();
    let w = Window::new(8).unwrap();
    // `down` fails every attempt: its hook waits for a retry when the shutdown comes.
    let (d, mut out) = Dispatcher::builder()
        .sink("up", Script::new(Step::Ok).arc())
        .sink("down", Script::new(Step::Transient).arc())
        .route("up", ["up"])
        .route("both", ["up", "down"])
        .config(config(policy(
            Duration::from_secs(60),
            10,
            Duration::from_secs(3600),
        )))
        .build()
        .unwrap();
    d.submit(settled.hook(&w, "h1").await.route("up"))
        .await
        .unwrap();
    d.submit(settled.hook(&w, "h2").await.route("both"))
        .await
        .unwrap();
    let delivered = recv_n(&mut out, 2, Duration::from_secs(1)).await;
    drop(delivered);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let unfinished = d.shutdown(Duration::from_secs(1)).await;
    assert_eq!(unfinished.len(), 1, "h2 to down");
    while out.recv().await.is_some() {}
    let mut got = settled.take();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        [
            ("h1".to_owned(), Settlement::Ack),
            ("h2".to_owned(), Settlement::Release)
        ]
    );
    assert_eq!(w.unsettled(), 0);
}

#[tokio::test]
async fn a_hook_not_taken_is_released() {
    let settled = Settled::default();
    let w = Window::new(8).unwrap();
    let (d, _out) = Dispatcher::builder()
        .sink("up", Script::new(Step::Ok).arc())
        .build()
        .unwrap();
    d.shutdown(Duration::ZERO).await;
    let refused = d.submit(settled.hook(&w, "h1").await).await;
    assert!(refused.is_err());
    drop(refused);
    assert_eq!(settled.take(), [("h1".to_owned(), Settlement::Release)]);
}
