//! The `Sink` trait and the panic-proof ways to call one.

use crate::capabilities::Capabilities;
use crate::ctx::Ctx;
use crate::describe::{Description, Subject};
use crate::envelope::Envelope;
use crate::failure::{Failure, Reason};
use async_trait::async_trait;
use std::fmt;
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
/// Implement [`deliver`](Sink::deliver), and [`capabilities`](Sink::capabilities) where
/// the sink's facts differ from the default. Run `ankusa-sink-testkit` against your sink: it checks every bullet below.
/// The trait is object-safe: dispatchers hold `Arc<dyn Sink>`.
#[async_trait]
pub trait Sink: Send + Sync + fmt::Debug {
    /// Deliver one hook, at least once.
    ///
    /// # Behavior
    /// - `Ok(())` means the hook was accepted by the destination; when
    ///   [`Capabilities::durable`] is true, accepted durably (broker ack, publisher confirm, upstream 2xx), so a
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
    /// - A body larger than [`Capabilities::inline_max_bytes`] travels as `ctx.claim`;
    ///   the sink never checks a body in itself.
    /// - Batches only when [`Capabilities::batched`] and `ctx.batch` are both true.
    /// - Never holds a secret in a failure's reason.
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure>;

    /// What the destination takes and promises: whether `Ok` is durable, the inline
    /// threshold, batching, the pipeline window, its size limit and where that comes from,
    /// ordering, a deduplication window, what `Ok` means, the configured authentication
    /// ([`Capabilities`]). The one statement of the sink's facts.
    ///
    /// # Behavior
    /// - Read once, when the sink is registered with a dispatcher; the answer must not
    ///   change afterwards.
    /// - Default: [`Capabilities::new`]`(true, None)`: durable, never uses the claim check,
    ///   no batching, one request per delivery; nothing else is claimed.
    /// - The testkit checks that it does not contradict itself and picks its oversized
    ///   body from `max_message`.
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(true, None)
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
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
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
    // A panic while the attempt is polled is caught per poll (the future is boxed by
    // `async_trait`, so polling it again after a caught panic never happens).
    let mut attempt = sink.deliver(env, ctx);
    let fut = std::future::poll_fn(move |cx| {
        catch_unwind(AssertUnwindSafe(|| attempt.as_mut().poll(cx))).map_or_else(
            |payload| std::task::Poll::Ready(Err(payload)),
            |poll| poll.map(Ok),
        )
    });
    let res = match deadline {
        Some(d) => match tokio::time::timeout(d, fut).await {
            Ok(r) => r,
            Err(_) => return Err(Failure::transient(SinkFault::Timeout(d.as_millis()))),
        },
        None => fut.await,
    };
    res.unwrap_or_else(|payload| Err(Failure::transient(SinkFault::panicked(&*payload))))
}

/// `sink.capabilities()`, with a panic turned into a [`SinkFault`] rather than a crash.
///
/// Dispatch reads a sink's capabilities through this once, when the sink is registered,
/// and takes [`Capabilities::unknown`] for a sink that panicked.
pub fn safe_capabilities<S: Sink + ?Sized>(sink: &S) -> Result<Capabilities, SinkFault> {
    catch_unwind(AssertUnwindSafe(|| sink.capabilities())).map_err(|p| SinkFault::panicked(&*p))
}

/// `sink.describe(subject)`; `None` for a panicking sink.
pub fn safe_describe<S: Sink + ?Sized>(sink: &S, subject: &Subject) -> Option<Description> {
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
    use std::num::NonZeroUsize;

    #[derive(Debug)]
    struct Panicky;

    #[async_trait]
    impl Sink for Panicky {
        async fn deliver(&self, _: &Envelope, _: &Ctx) -> Result<(), Failure> {
            panic!("boom")
        }
        fn capabilities(&self) -> Capabilities {
            panic!("capabilities")
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

    #[tokio::test]
    async fn panics_become_transient_failures() {
        let e = env();
        let err = safe_deliver(&Panicky, &e, &Ctx::for_envelope(&e), None)
            .await
            .unwrap_err();
        assert_eq!(err.class(), Class::Transient);
        assert_eq!(err.to_string(), "transient: sink panicked: boom");
        assert_eq!(
            safe_capabilities(&Panicky),
            Err(SinkFault::Panicked("capabilities".into()))
        );
        assert!(safe_describe(&Panicky, &Subject::new("s", None)).is_none());
        // What dispatch assumes instead: not durable, every body by claim, no batching.
        let unknown = Capabilities::unknown();
        assert!(!unknown.durable && !unknown.batched && unknown.in_flight.is_none());
        assert_eq!(unknown.inline_max_bytes, Some(NonZeroUsize::MIN));
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
        let caps = safe_capabilities(&s).unwrap();
        assert!(caps.durable && !caps.batched);
        assert_eq!(caps.inline_max_bytes, None);
        assert_eq!(caps.in_flight, None);
        assert_eq!(s.check().await.unwrap(), Check::Unsupported);
        let b: Box<dyn Sink> = Box::new(Plain);
        let e = env();
        assert!(
            safe_deliver(&b, &e, &Ctx::for_envelope(&e), None)
                .await
                .is_ok()
        );
        assert!(safe_describe(&b, &Subject::new("s", None)).is_none());
    }
}
