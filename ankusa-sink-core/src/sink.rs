//! The `Sink` trait and the panic-proof ways to call one.

use crate::capabilities::Capabilities;
use crate::ctx::Ctx;
use crate::describe::{Description, Subject};
use crate::envelope::Envelope;
use crate::failure::{Failure, Reason};
use async_trait::async_trait;
use futures_util::FutureExt as _;
use std::fmt;
use std::num::{NonZeroU64, NonZeroUsize};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

/// What a preflight [`Sink::check`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Check {
    /// The destination exists and the credentials were accepted.
    Passed,
    /// The destination accepts connections; whether it exists and takes the credentials
    /// cannot be known without delivering (an HTTP endpoint).
    Reachable,
    /// This sink has no preflight.
    Unsupported,
}

/// Where a delivered hook goes.
///
/// Implement [`deliver`](Sink::deliver); override the capability methods that differ from
/// the defaults. Run `ankusa-sink-testkit` against your sink: it checks every bullet below.
/// The trait is object-safe: dispatchers hold `Arc<dyn Sink>`.
#[async_trait]
pub trait Sink: Send + Sync + fmt::Debug {
    /// Deliver one hook, at least once.
    ///
    /// # Behavior
    /// - `Ok(())` means the hook was accepted by the destination; when [`durable`](Sink::durable)
    ///   is true, accepted durably (broker ack, publisher confirm, upstream 2xx), so a
    ///   consumer can read it back after `Ok`.
    /// - `Err` carries the [`Class`](crate::Class) that decides what dispatch does:
    ///   missing destination or refused credential is [`Config`](crate::Class::Config); a
    ///   destination's throttle is [`RetryAfter`](crate::Class::RetryAfter) with `0 < ms`
    ///   when it said how long, else [`Throttled`](crate::Class::Throttled);
    ///   a body the destination will never take is [`Permanent`](crate::Class::Permanent)
    ///   and nothing is delivered; an unreachable destination is
    ///   [`Transient`](crate::Class::Transient) within a bounded time.
    /// - The same hook may be delivered again (a retry after a lost ack); the sink carries
    ///   `env.id()` and `env.idempotency_key()` so consumers can deduplicate.
    /// - A body larger than [`inline_max_bytes`](Sink::inline_max_bytes) travels as
    ///   `ctx.claim`; the sink never checks a body in itself.
    /// - Batches only when [`batched`](Sink::batched) and `ctx.batch` are both true.
    /// - Never holds a secret in a failure's reason.
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure>;

    /// Does `Ok` mean something that outlives this process has the hook?
    ///
    /// # Behavior
    /// - Default `true`. A sink that cannot promise it (a log) says `false`, so a
    ///   dispatcher that acks providers on the sink's word keeps a write-ahead log.
    fn durable(&self) -> bool {
        true
    }

    /// The largest body sent inline, or `None` if the sink never uses the claim check.
    ///
    /// # Behavior
    /// - Positive by type. A body of exactly this many bytes is inline; one byte more
    ///   travels by `ctx.claim`.
    fn inline_max_bytes(&self) -> Option<NonZeroUsize> {
        None
    }

    /// Does this sink batch deliveries whose `ctx.batch` is set?
    ///
    /// # Behavior
    /// - Default `false`. A batching sink gives each delivery its own result and never
    ///   re-sends an entry the destination accepted.
    fn batched(&self) -> bool {
        false
    }

    /// What the destination takes and promises: its size limit and where that comes
    /// from, ordering, a deduplication window, batching limits, what `Ok` means, the
    /// configured authentication ([`Capabilities`]).
    ///
    /// # Behavior
    /// - Default: [`Capabilities::new`] from [`durable`](Sink::durable) and
    ///   [`inline_max_bytes`](Sink::inline_max_bytes), batched when
    ///   [`batched`](Sink::batched) is; nothing else is claimed.
    /// - The testkit checks that `durable`, `inline_max_bytes` and `batched` agree with
    ///   those methods, and picks its oversized body from `max_message`.
    fn capabilities(&self) -> Capabilities {
        let c = Capabilities::new(self.durable(), self.inline_max_bytes());
        if self.batched() {
            c.with_batch(None)
        } else {
            c
        }
    }

    /// How many deliveries this sink can usefully have outstanding at once, and how many
    /// bytes of bodies: its own pipeline window.
    ///
    /// # Behavior
    /// - Default `None`: one request per delivery (an HTTP call), so the dispatcher's
    ///   shared concurrency limit applies.
    /// - `Some(window)`: the sink pipelines (a producer with its own send queue, publisher
    ///   confirms), and a full pipeline is what makes it fast: the dispatcher keeps up to
    ///   `window.deliveries` attempts (and about `window.bytes` of bodies) in flight for
    ///   this sink, outside the shared limit.
    fn in_flight(&self) -> Option<InFlight> {
        None
    }

    /// Where this sink publishes hooks of `subject`, for an AsyncAPI document.
    ///
    /// # Behavior
    /// - Default `None`. Never contains credentials or URL userinfo.
    fn describe(&self, subject: &Subject) -> Option<Description> {
        let _ = subject;
        None
    }

    /// Preflight: verify the destination exists and the credentials are accepted, while
    /// publishing nothing.
    ///
    /// # Behavior
    /// - `Ok(Check::Passed)`: the destination is there and reachable with these
    ///   credentials. `Ok(Check::Reachable)`: it accepts connections, nothing more is
    ///   known. `Ok(Check::Unsupported)` (the default): no preflight.
    /// - `Err` is classified like a delivery: missing or forbidden is config.
    async fn check(&self) -> Result<Check, Failure> {
        Ok(Check::Unsupported)
    }
}

/// `Sink` for a smart pointer to a sink: every method forwards to the pointee.
macro_rules! forward_sink {
    ($($ptr:ident),*) => {$(
        #[async_trait]
        impl<S: Sink + ?Sized> Sink for $ptr<S> {
            async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
                (**self).deliver(env, ctx).await
            }
            fn durable(&self) -> bool {
                (**self).durable()
            }
            fn inline_max_bytes(&self) -> Option<NonZeroUsize> {
                (**self).inline_max_bytes()
            }
            fn batched(&self) -> bool {
                (**self).batched()
            }
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
            fn in_flight(&self) -> Option<InFlight> {
                (**self).in_flight()
            }
            fn describe(&self, subject: &Subject) -> Option<Description> {
                (**self).describe(subject)
            }
            async fn check(&self) -> Result<Check, Failure> {
                (**self).check().await
            }
        }
    )*};
}

forward_sink!(Arc, Box);

/// A sink's pipeline window: see [`Sink::in_flight`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InFlight {
    /// Deliveries outstanding at once, at most.
    pub deliveries: NonZeroUsize,
    /// Body bytes outstanding at once, at most; a single larger body still goes, alone.
    pub bytes: NonZeroUsize,
}

impl InFlight {
    /// The window of a client that pipelines on one connection (a producer queue,
    /// publisher confirms, a pipelined connection): 1,024 deliveries or 16 MiB of bodies.
    /// On the local Kafka broker 512 to 4,096 outstanding records ran equally fast (the
    /// broker's time per request decides) while memory grew with the window; 16 MiB keeps
    /// large bodies in check.
    pub const PIPELINE: InFlight = InFlight::new(
        NonZeroUsize::new(1024).expect("positive"),
        NonZeroUsize::new(16 << 20).expect("positive"),
    );

    /// A window of `deliveries` deliveries and `bytes` body bytes.
    pub const fn new(deliveries: NonZeroUsize, bytes: NonZeroUsize) -> Self {
        InFlight { deliveries, bytes }
    }

    /// This window with at most `deliveries` deliveries.
    pub fn at_most(self, deliveries: NonZeroUsize) -> Self {
        InFlight::new(self.deliveries.min(deliveries), self.bytes)
    }
}

/// Why [`safe_deliver`] turned a sink's misbehaviour into a failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SinkFault {
    /// The sink panicked; the panic message, when it was text.
    #[error("sink panicked: {0}")]
    Panicked(String),
    /// The sink did not answer within the deadline.
    #[error("sink did not answer within {0} ms")]
    Timeout(u128),
}

impl SinkFault {
    /// The fault for a caught panic: its message when the payload is text
    /// (`panic!("...")`), else `"non-text panic payload"`.
    pub fn panicked(payload: &(dyn std::any::Any + Send)) -> Self {
        let text = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_owned()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "non-text panic payload".to_owned()
        };
        SinkFault::Panicked(text)
    }
}

/// Deliver through `sink`, so that its misbehaviour is a failure, never a crashed caller.
///
/// # Behavior
/// - A panic inside `deliver` is a [`Transient`](crate::Class::Transient) failure
///   ([`SinkFault::Panicked`]).
/// - With a `deadline`, a sink that has not answered in time is a transient
///   [`SinkFault::Timeout`]; the attempt's future is dropped. The sink may still complete
///   the delivery: at-least-once covers that.
pub async fn safe_deliver<S: Sink + ?Sized>(
    sink: &S,
    env: &Envelope,
    ctx: &Ctx,
    deadline: Option<Duration>,
) -> Result<(), Failure> {
    let fut = AssertUnwindSafe(sink.deliver(env, ctx)).catch_unwind();
    let res = match deadline {
        Some(d) => match tokio::time::timeout(d, fut).await {
            Ok(r) => r,
            Err(_) => return Err(Failure::transient(SinkFault::Timeout(d.as_millis()))),
        },
        None => fut.await,
    };
    res.unwrap_or_else(|payload| Err(Failure::transient(SinkFault::panicked(&*payload))))
}

/// A configured timeout as whole milliseconds, the unit sink configs store: rounded down,
/// at least 1 ms (a zero timeout would fail every delivery), saturating at `u64::MAX`.
pub fn timeout_ms(timeout: Duration) -> NonZeroU64 {
    let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    NonZeroU64::new(ms).unwrap_or(NonZeroU64::MIN)
}

/// Why an inline threshold could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inline_max_bytes failed: {0}")]
pub struct ResolveError(SinkFault);

/// `sink.inline_max_bytes()`, with a panic turned into an error rather than a crash.
pub fn resolve_inline_max_bytes<S: Sink + ?Sized>(
    sink: &S,
) -> Result<Option<NonZeroUsize>, ResolveError> {
    catch_unwind(AssertUnwindSafe(|| sink.inline_max_bytes()))
        .map_err(|p| ResolveError(SinkFault::panicked(&*p)))
}

/// `sink.durable()`; a panicking sink cannot promise durability, so `false`.
pub fn resolve_durable<S: Sink + ?Sized>(sink: &S) -> bool {
    catch_unwind(AssertUnwindSafe(|| sink.durable())).unwrap_or(false)
}

/// `sink.batched()`; `false` for a panicking sink.
pub fn resolve_batched<S: Sink + ?Sized>(sink: &S) -> bool {
    catch_unwind(AssertUnwindSafe(|| sink.batched())).unwrap_or(false)
}

/// `sink.capabilities()`; `None` for a panicking sink.
pub fn resolve_capabilities<S: Sink + ?Sized>(sink: &S) -> Option<Capabilities> {
    catch_unwind(AssertUnwindSafe(|| sink.capabilities())).ok()
}

/// `sink.in_flight()`; `None` (the shared limit) for a panicking sink.
pub fn resolve_in_flight<S: Sink + ?Sized>(sink: &S) -> Option<InFlight> {
    catch_unwind(AssertUnwindSafe(|| sink.in_flight()))
        .ok()
        .flatten()
}

/// `sink.describe(subject)`; `None` for a panicking sink.
pub fn resolve_describe<S: Sink + ?Sized>(sink: &S, subject: &Subject) -> Option<Description> {
    catch_unwind(AssertUnwindSafe(|| sink.describe(subject)))
        .ok()
        .flatten()
}

impl From<SinkFault> for Failure {
    fn from(f: SinkFault) -> Self {
        Failure::transient(f)
    }
}

impl From<Reason> for Failure {
    fn from(r: Reason) -> Self {
        Failure::transient(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Class;

    #[derive(Debug)]
    struct Panicky;

    #[async_trait]
    impl Sink for Panicky {
        async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
            panic!("boom")
        }
        fn durable(&self) -> bool {
            panic!("durable")
        }
        fn inline_max_bytes(&self) -> Option<NonZeroUsize> {
            panic!("threshold")
        }
        fn batched(&self) -> bool {
            panic!("batched")
        }
        fn describe(&self, _: &Subject) -> Option<Description> {
            panic!("describe")
        }
    }

    #[derive(Debug)]
    struct Never;

    #[async_trait]
    impl Sink for Never {
        async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
            std::future::pending().await
        }
    }

    #[derive(Debug)]
    struct Plain;

    #[async_trait]
    impl Sink for Plain {
        async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
            Ok(())
        }
    }

    fn env() -> Envelope {
        Envelope::builder("h", "s", "").build().unwrap()
    }

    #[test]
    fn timeouts_are_whole_milliseconds_of_at_least_one() {
        assert_eq!(timeout_ms(Duration::from_micros(2_999)).get(), 2);
        assert_eq!(timeout_ms(Duration::ZERO).get(), 1);
        assert_eq!(timeout_ms(Duration::MAX).get(), u64::MAX);
    }

    #[tokio::test]
    async fn panics_become_transient_failures() {
        let e = env();
        let err = safe_deliver(&Panicky, &e, &Ctx::for_envelope(&e), None)
            .await
            .unwrap_err();
        assert_eq!(err.class(), Class::Transient);
        assert_eq!(err.to_string(), "transient: sink panicked: boom");
        assert!(resolve_inline_max_bytes(&Panicky).is_err());
        assert!(!resolve_durable(&Panicky));
        assert!(!resolve_batched(&Panicky));
        assert!(resolve_describe(&Panicky, &Subject::new("s", None)).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_bounds_a_silent_sink() {
        let e = env();
        let err = safe_deliver(
            &Never,
            &e,
            &Ctx::for_envelope(&e),
            Some(Duration::from_millis(250)),
        )
        .await
        .unwrap_err();
        assert_eq!(err.class(), Class::Transient);
        assert!(err.to_string().contains("250 ms"), "{err}");
    }

    #[tokio::test]
    async fn defaults_and_dyn_forwarding() {
        let s: Arc<dyn Sink> = Arc::new(Plain);
        assert!(resolve_durable(&s));
        assert!(!resolve_batched(&s));
        assert_eq!(resolve_inline_max_bytes(&s), Ok(None));
        assert_eq!(s.check().await.unwrap(), Check::Unsupported);
        let b: Box<dyn Sink> = Box::new(Plain);
        let e = env();
        assert!(
            safe_deliver(&b, &e, &Ctx::for_envelope(&e), None)
                .await
                .is_ok()
        );
        assert!(resolve_describe(&b, &Subject::new("s", None)).is_none());
    }
}
