//! The dispatch side: one put for a fat hook delivered to two sinks plus a retry, none
//! when every sink takes the body inline.

use crate::{Counting, body};
use ankusa_claimcheck::ClaimStore;
use ankusa_message::MessageBody;
use ankusa_sink_core::{
    Capabilities, Class, Ctx, Envelope, Failure, Reason, Sink, async_trait, safe_deliver,
};
use object_store::memory::InMemory;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// A queue-like sink: encodes Message v1 with its threshold and keeps what it sent. It can
/// fail its first `fail_first` attempts (transient), like a broker that was away.
#[derive(Debug)]
struct QueueSink {
    max: Option<NonZeroUsize>,
    fail_first: AtomicU32,
    sent: Mutex<Vec<Vec<u8>>>,
}

impl QueueSink {
    fn new(max: Option<usize>, fail_first: u32) -> Arc<Self> {
        Arc::new(QueueSink {
            max: max.and_then(NonZeroUsize::new),
            fail_first: AtomicU32::new(fail_first),
            sent: Mutex::new(Vec::new()),
        })
    }

    fn messages(&self) -> Vec<ankusa_message::Message> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .map(|b| ankusa_message::decode(b).unwrap())
            .collect()
    }
}

#[async_trait]
impl Sink for QueueSink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let wire = ankusa_message::encode(env, ctx, self.max)?;
        if self
            .fail_first
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Failure::transient(Reason("broker away".into())));
        }
        self.sent.lock().unwrap().push(wire);
        Ok(())
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(true, self.max)
    }
}

fn envelope(len: usize) -> Envelope {
    Envelope::builder("hook-1", "stripe", body(5, len))
        .tenant_id("acme")
        .content_type("application/json")
        .build()
        .unwrap()
}

/// Each sink's inline threshold, as the dispatcher reads it once.
fn thresholds(sinks: &[Arc<dyn Sink>]) -> Vec<Option<NonZeroUsize>> {
    sinks
        .iter()
        .map(|s| s.capabilities().inline_max_bytes)
        .collect()
}

/// The context of a first attempt: with the claim `claim_for` made, if it made one.
async fn first_attempt(store: &ClaimStore, env: &Envelope, sinks: &[Arc<dyn Sink>]) -> Ctx {
    let ctx = Ctx::for_envelope(env);
    match store.claim_for(env, thresholds(sinks)).await.unwrap() {
        Some(claim) => ctx.with_claim(claim),
        None => ctx,
    }
}

/// What a consumer does with a message: the inline body, or the redeemed claim.
async fn consume(store: &ClaimStore, msg: &ankusa_message::Message) -> Vec<u8> {
    store.redeem_message(msg).await.unwrap().to_vec()
}

#[tokio::test]
async fn a_fat_hook_to_two_sinks_and_a_retry_is_one_put() {
    let counting = Counting::new(Arc::new(InMemory::new()));
    let store = ClaimStore::new(counting.clone());
    let a = QueueSink::new(Some(1024), 0);
    let b = QueueSink::new(Some(65_536), 1);
    let sinks: Vec<Arc<dyn Sink>> = vec![a.clone(), b.clone()];
    let env = envelope(100_000);

    // First attempt: checked in once, before any sink runs.
    let ctx = first_attempt(&store, &env, &sinks).await;
    let claim = ctx.claim.clone().expect("over both thresholds");
    assert_eq!(counting.puts(), 1);
    let mut failed = Vec::new();
    for (i, sink) in sinks.iter().enumerate() {
        if let Err(f) = safe_deliver(sink, &env, &ctx, None).await {
            assert_eq!(f.class(), Class::Transient);
            failed.push(i);
        }
    }
    assert_eq!(failed, [1]);

    // The retry of sink b: the claim stored with the hook comes back in its ctx.
    let retry = Ctx::for_envelope(&env)
        .with_attempt(2)
        .with_claim(claim.clone());
    safe_deliver(&sinks[1], &env, &retry, None).await.unwrap();
    assert_eq!(counting.puts(), 1, "one put for two sinks and a retry");

    let (ma, mb) = (a.messages(), b.messages());
    assert_eq!((ma.len(), mb.len()), (1, 1));
    for msg in [&ma[0], &mb[0]] {
        match &msg.body {
            MessageBody::Claim(r) => assert_eq!(r, claim.reference()),
            other => panic!("expected a claim, got {other:?}"),
        }
        assert_eq!(msg.sha256, claim.sha256());
        assert_eq!(consume(&store, msg).await, env.body().to_vec());
    }
    assert_eq!(counting.puts(), 1);
}

#[tokio::test]
async fn nothing_is_written_when_every_sink_takes_the_body_inline() {
    let counting = Counting::new(Arc::new(InMemory::new()));
    let store = ClaimStore::new(counting.clone());
    let a = QueueSink::new(Some(1024), 0);
    let b = QueueSink::new(None, 0); // never uses the claim check
    let sinks: Vec<Arc<dyn Sink>> = vec![a.clone(), b.clone()];
    // Exactly the smallest threshold: still inline.
    let env = envelope(1024);
    let ctx = first_attempt(&store, &env, &sinks).await;
    assert!(ctx.claim.is_none());
    for sink in &sinks {
        safe_deliver(sink, &env, &ctx, None).await.unwrap();
    }
    assert_eq!(counting.puts(), 0);
    for msg in a.messages().iter().chain(b.messages().iter()) {
        assert!(matches!(msg.body, MessageBody::Inline(_)));
        assert_eq!(consume(&store, msg).await, env.body().to_vec());
    }

    // One byte more and the first sink needs a claim; the second still sends inline.
    let env = envelope(1025);
    let ctx = first_attempt(&store, &env, &sinks).await;
    assert!(ctx.claim.is_some());
    assert_eq!(counting.puts(), 1);
    for sink in &sinks {
        safe_deliver(sink, &env, &ctx, None).await.unwrap();
    }
    assert!(matches!(a.messages()[1].body, MessageBody::Claim(_)));
    assert!(matches!(b.messages()[1].body, MessageBody::Inline(_)));
}

#[tokio::test]
async fn a_sink_called_without_a_claim_fails_with_a_permanent_config_error() {
    let sink = QueueSink::new(Some(16), 0);
    let env = envelope(17);
    let err = safe_deliver(&sink, &env, &Ctx::for_envelope(&env), None)
        .await
        .unwrap_err();
    assert_eq!(err.class(), Class::Config);
    assert!(err.to_string().contains("ctx.claim is absent"), "{err}");
}
