//! Parking: a pair whose retry is far off is written to its sink's park destination and
//! acknowledged to its source; read back, it resumes at its attempt count, waits for its
//! not-before and keeps its horizon from the first attempt.

use crate::*;
use ankusa_dispatch::DeadLetterInfo;
use ankusa_dispatch::forward::Forward;
use ankusa_dispatch::record::{PairRecord, PairState, carrier};
use ankusa_dispatch::{Dispatcher, Outcome, Park, SinkDispatch};
use ankusa_sink_core::{Ctx, Failure, Sink, async_trait};
use ankusa_source::{MemorySource, Settlement, Source};
use std::sync::Mutex;
use std::time::Duration;

/// A park destination that keeps every body it takes.
#[derive(Debug, Default)]
struct Store(Mutex<Vec<Vec<u8>>>);

#[async_trait]
impl Sink for Store {
    async fn deliver(&self, env: &Envelope, _: &Ctx) -> Result<(), Failure> {
        self.0.lock().unwrap().push(env.body().to_vec());
        Ok(())
    }
}

fn record(id: &str) -> Vec<u8> {
    serde_json::to_vec(&env(id)).unwrap()
}

fn acked(s: &ankusa_source::Settlements) -> usize {
    s.lock()
        .unwrap()
        .iter()
        .filter(|(_, h)| *h == Settlement::Ack)
        .count()
}

fn parking(
    sink: Arc<dyn Sink>,
    store: Arc<Store>,
    max_elapsed: Duration,
) -> (Dispatcher, ankusa_dispatch::Deliveries) {
    Dispatcher::builder()
        .sink("far", sink)
        .sink_settings(
            "far",
            SinkDispatch::default().with_park(Park::new(store, Duration::from_secs(300))),
        )
        .config(config(policy(
            Duration::from_secs(1),
            u32::MAX,
            max_elapsed,
        )))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_far_retry_is_parked_acknowledged_then_resumes_after_its_not_before() {
    let source = MemorySource::new((0..10).map(|i| record(&format!("h{i}"))));
    let settled = source.settlements();
    let store = Arc::new(Store::default());
    // An hour's Retry-After on the first attempt: past the 300 s threshold.
    let far = Script::new(Step::Ok)
        .first((0..10).map(|_| Step::RetryAfter(3_600_000)))
        .arc();
    let (d, deliveries) = parking(far.clone(), store.clone(), Duration::from_secs(86_400));
    let report = Forward::new(Box::new(source), d)
        .run(deliveries, Duration::from_secs(5))
        .await;
    assert_eq!((report.parked, report.delivered), (10, 0), "{report:?}");
    assert_eq!(acked(&settled), 10, "each record acknowledged once parked");
    let parked = store.0.lock().unwrap().clone();
    assert_eq!(parked.len(), 10);
    let r = PairRecord::parse(&parked[0]).unwrap();
    assert_eq!(
        (r.info.sink.as_str(), r.info.attempts, r.info.class.as_str()),
        ("far", 1, "retry_after")
    );
    let PairState::Parked {
        not_before_ms,
        parked_at_ms,
    } = r.state
    else {
        panic!("{r:?}")
    };
    assert!(not_before_ms - parked_at_ms >= 3_599_000, "{r:?}");
    assert!(r.envelope.id().starts_with('h'));

    // Read back (a later run): each waits out its hour, then goes as its second attempt.
    let t0 = tokio::time::Instant::now();
    let park = MemorySource::new(parked);
    let park_settled = park.settlements();
    let ok = Script::new(Step::Ok).arc();
    let (d, deliveries) = parking(
        ok.clone(),
        Arc::new(Store::default()),
        Duration::from_secs(86_400),
    );
    let report = Forward::new(Box::new(MemorySource::new([])), d)
        .park_source("far", Box::new(park))
        .run(deliveries, Duration::from_secs(5))
        .await;
    assert_eq!((report.delivered, report.parked), (10, 0), "{report:?}");
    assert_eq!(acked(&park_settled), 10);
    let seen = ok.seen();
    assert_eq!(seen.len(), 10);
    assert!(
        seen.iter().all(|s| s.attempt == 2),
        "resumed at its attempt count"
    );
    // The wall clock of the first run and this one differ by little: most of the hour is
    // still to wait.
    assert!(
        seen.iter()
            .all(|s| s.at.duration_since(t0) >= Duration::from_secs(3_500)),
        "waited for its not-before"
    );
}

#[tokio::test(start_paused = true)]
async fn a_resumed_pair_keeps_its_horizon_from_the_first_attempt() {
    // Parked 25 hours after its first attempt, with a 24 h horizon: one more transient
    // failure dead-letters it, it is not retried on.
    let env = env("old");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let failure = Failure::transient(ankusa_sink_core::Reason("down".into()));
    let info = DeadLetterInfo::new("far", &failure, 7, now - 25 * 3_600_000, now - 3_600_000);
    let state = PairState::Parked {
        not_before_ms: now,
        parked_at_ms: now - 3_600_000,
    };
    let carrier = carrier(&env, &info, &state).unwrap();
    let park = MemorySource::new([carrier.body().to_vec(), b"{\"parked\":1}".to_vec()]);
    let settled = park.settlements();
    let failing = Script::new(Step::Transient).arc();
    let (d, deliveries) = parking(
        failing.clone(),
        Arc::new(Store::default()),
        Duration::from_secs(86_400),
    );
    let report = Forward::new(Box::new(MemorySource::new([])), d)
        .park_source("far", Box::new(park) as Box<dyn Source>)
        .run(deliveries, Duration::from_secs(5))
        .await;
    assert_eq!((report.dead_lettered, report.invalid), (1, 1), "{report:?}");
    assert_eq!(failing.calls(), 1);
    assert_eq!(failing.seen()[0].attempt, 8);
    assert_eq!(acked(&settled), 2);
}

#[tokio::test(start_paused = true)]
async fn a_park_that_cannot_be_written_waits_in_memory_and_loses_nothing() {
    let source = MemorySource::new([record("h1")]);
    let settled = source.settlements();
    let far = Script::new(Step::Ok)
        .first([Step::RetryAfter(600_000)])
        .arc();
    let (d, deliveries) = Dispatcher::builder()
        .sink("far", far.clone())
        .sink_settings(
            "far",
            SinkDispatch::default().with_park(Park::new(
                Script::new(Step::Transient).arc(),
                Duration::from_secs(300),
            )),
        )
        .config(config(policy(
            Duration::from_secs(1),
            u32::MAX,
            Duration::from_secs(86_400),
        )))
        .build()
        .unwrap();
    let report = Forward::new(Box::new(source), d)
        .run(deliveries, Duration::from_secs(5))
        .await;
    assert_eq!((report.delivered, report.parked), (1, 0), "{report:?}");
    assert_eq!(far.calls(), 2, "retried after its wait, in memory");
    assert_eq!(acked(&settled), 1);
    let d = far.seen();
    assert!(d[1].at.duration_since(d[0].at) >= Duration::from_secs(600));
    let _ = Outcome::Delivered;
}
