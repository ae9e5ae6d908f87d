//! The delivery context: what dispatch tells a sink about this attempt.

use crate::claim::Claim;
use crate::envelope::Envelope;
use crate::trace::TraceContext;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;

/// Which provider headers a queue sink forwards (see [`forwarded_headers`](crate::forwarded_headers)).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ForwardHeaders {
    /// Every header except the never-forwarded list.
    #[default]
    Default,
    /// Only these names (lowercase); an empty list forwards nothing. The never-forwarded
    /// list still applies.
    Only(Vec<String>),
}

impl ForwardHeaders {
    /// An allow-list; names are lowercased. Empty names are refused.
    pub fn only<I, S>(names: I) -> Result<Self, crate::envelope::EnvelopeError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = Vec::new();
        for n in names {
            let n = n.as_ref();
            if n.is_empty() {
                return Err(crate::envelope::EnvelopeError::Empty(
                    "forward_headers name",
                ));
            }
            out.push(n.to_ascii_lowercase());
        }
        Ok(ForwardHeaders::Only(out))
    }
}

/// Typed extra values a dispatcher passes to sinks that know them.
#[derive(Clone, Default)]
pub struct Extensions {
    map: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl Extensions {
    /// Store a value, replacing one of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.map.insert(TypeId::of::<T>(), Arc::new(value));
    }
    /// The value of this type, if any.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.map.get(&TypeId::of::<T>())?.downcast_ref()
    }
    /// How many values are stored.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// Whether none are stored.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.map.len())
            .finish()
    }
}

/// Default [`Ctx::max_headers`]: at most 100 forwarded header names.
///
/// Declared next to [`Ctx`], which applies it; public as `message::DEFAULT_MAX_HEADERS`
/// (a re-export, the path it always had).
pub const DEFAULT_MAX_HEADERS: NonZeroUsize = NonZeroUsize::new(100).unwrap();

/// Default [`Ctx::forward_headers_max_bytes`]: at most 16 KiB of forwarded names plus
/// values.
///
/// Declared next to [`Ctx`], which applies it; public as
/// `message::DEFAULT_FORWARD_HEADERS_MAX_BYTES` (a re-export, the path it always had).
pub const DEFAULT_FORWARD_HEADERS_MAX_BYTES: NonZeroUsize = NonZeroUsize::new(16 * 1024).unwrap();

/// The instance a context names until [`Ctx::with_instance`] sets one.
const DEFAULT_INSTANCE: &str = "default";

/// The delivery context of one attempt.
///
/// `attempt` is 1-based and never zero. `claim` is present only when dispatch already
/// checked the body in; a sink with an inline threshold must use it rather than check the
/// body in itself. `batch` is set only by a dispatcher that lets batching sinks batch.
///
/// `Debug` shows a claim's tenant only, never its reference or digest (see
/// [`Claim`]).
///
/// The fields sinks read are public; the forwarding options and extensions are set with
/// `with_*` and read with accessors. The hook's source and tenant are the envelope's.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Ctx {
    /// The dispatcher instance (registry namespace); `None` is `"default"`. Shared, not
    /// owned: dispatch clones a context for every attempt.
    instance: Option<std::sync::Arc<str>>,
    /// 1-based attempt number.
    pub attempt: NonZeroU32,
    /// The body's claim, when dispatch checked it in.
    pub claim: Option<Claim>,
    /// The replay job driving this delivery.
    pub replay_id: Option<String>,
    /// Which provider headers to forward.
    forward_headers: ForwardHeaders,
    /// Whether a batching sink may batch this delivery.
    pub batch: bool,
    /// At most this many forwarded header names (`None`: no cap).
    max_headers: Option<NonZeroUsize>,
    /// At most this many bytes of forwarded names plus values (`None`: no cap).
    forward_headers_max_bytes: Option<NonZeroUsize>,
    /// Values for sinks that know them.
    extensions: Extensions,
    /// This attempt's W3C Trace Context (dispatch sets it; sinks send it).
    trace: Option<TraceContext>,
}

impl Ctx {
    /// The context of a first attempt at `env`, with every option at its default. (Nothing
    /// of the envelope is copied: a sink reads the hook's fields from the envelope.)
    pub fn for_envelope(_env: &Envelope) -> Self {
        Ctx {
            instance: None,
            attempt: NonZeroU32::MIN,
            claim: None,
            replay_id: None,
            forward_headers: ForwardHeaders::Default,
            batch: false,
            max_headers: Some(DEFAULT_MAX_HEADERS),
            forward_headers_max_bytes: Some(DEFAULT_FORWARD_HEADERS_MAX_BYTES),
            extensions: Extensions::default(),
            trace: None,
        }
    }

    /// Set the attempt number (clamped to at least 1).
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = NonZeroU32::new(attempt).unwrap_or(NonZeroU32::MIN);
        self
    }
    /// Set the claim.
    pub fn with_claim(mut self, claim: Claim) -> Self {
        self.claim = Some(claim);
        self
    }
    /// Set the replay id.
    pub fn with_replay_id(mut self, replay_id: impl Into<String>) -> Self {
        self.replay_id = Some(replay_id.into());
        self
    }
    /// Set the header forwarding mode.
    pub fn with_forward_headers(mut self, mode: ForwardHeaders) -> Self {
        self.forward_headers = mode;
        self
    }
    /// Allow (or forbid) batching.
    pub fn with_batch(mut self, batch: bool) -> Self {
        self.batch = batch;
        self
    }
    /// Cap the forwarded header count (default
    /// [`DEFAULT_MAX_HEADERS`], 100).
    pub fn with_max_headers(mut self, max: NonZeroUsize) -> Self {
        self.max_headers = Some(max);
        self
    }
    /// Cap the forwarded header bytes, names plus values (default
    /// [`DEFAULT_FORWARD_HEADERS_MAX_BYTES`], 16 KiB).
    pub fn with_forward_headers_max_bytes(mut self, max: NonZeroUsize) -> Self {
        self.forward_headers_max_bytes = Some(max);
        self
    }
    /// Lift both forwarding caps (count and bytes).
    pub fn without_header_caps(mut self) -> Self {
        self.max_headers = None;
        self.forward_headers_max_bytes = None;
        self
    }
    /// Add a value for sinks that know its type.
    pub fn with_extension<T: std::any::Any + Send + Sync>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }
    /// Set this attempt's W3C Trace Context: every sink sends it beside the message
    /// (`traceparent`, `tracestate`). Dispatch sets it on every attempt.
    pub fn with_trace(mut self, trace: TraceContext) -> Self {
        self.trace = Some(trace);
        self
    }
    /// This attempt's W3C Trace Context, when dispatch (or the caller) set one.
    pub fn trace(&self) -> Option<&TraceContext> {
        self.trace.as_ref()
    }
    /// Set the instance name.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into().into());
        self
    }
    /// The attempt as a plain number.
    pub fn attempt(&self) -> u32 {
        self.attempt.get()
    }
    /// The instance name.
    pub fn instance(&self) -> &str {
        self.instance.as_deref().unwrap_or(DEFAULT_INSTANCE)
    }
    /// The header forwarding mode.
    pub fn forward_headers(&self) -> &ForwardHeaders {
        &self.forward_headers
    }
    /// The forwarded header count cap.
    pub fn max_headers(&self) -> Option<NonZeroUsize> {
        self.max_headers
    }
    /// The forwarded header bytes cap.
    pub fn forward_headers_max_bytes(&self) -> Option<NonZeroUsize> {
        self.forward_headers_max_bytes
    }
    /// Values for sinks that know them.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_envelope() {
        let env = Envelope::builder("h", "src", "")
            .tenant_id("t")
            .build()
            .unwrap();
        let ctx = Ctx::for_envelope(&env).with_attempt(0);
        assert_eq!(ctx.attempt(), 1);
        assert_eq!(ctx.instance(), "default");
        assert_eq!(ctx.forward_headers(), &ForwardHeaders::Default);
        assert!(!ctx.batch && ctx.claim.is_none());
        assert_eq!(ctx.with_attempt(3).attempt(), 3);
    }

    #[test]
    fn forwarded_headers_are_capped_by_default() {
        let env = Envelope::builder("h", "src", "").build().unwrap();
        let ctx = Ctx::for_envelope(&env);
        assert_eq!(ctx.max_headers.map(NonZeroUsize::get), Some(100));
        assert_eq!(
            ctx.forward_headers_max_bytes.map(NonZeroUsize::get),
            Some(16 * 1024)
        );
        let five = NonZeroUsize::new(5).unwrap();
        let ctx = ctx
            .with_max_headers(five)
            .with_forward_headers_max_bytes(five);
        assert_eq!(
            (ctx.max_headers(), ctx.forward_headers_max_bytes()),
            (Some(five), Some(five))
        );
        let ctx = ctx.without_header_caps().with_extension(7u8);
        assert_eq!(
            (ctx.max_headers(), ctx.forward_headers_max_bytes()),
            (None, None)
        );
        assert_eq!(ctx.extensions().get::<u8>(), Some(&7));
    }

    #[test]
    fn debug_shows_a_claim_is_there_but_not_its_capability() {
        let env = Envelope::builder("h", "src", "")
            .tenant_id("acme")
            .build()
            .unwrap();
        let id = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
        let sha = "cd".repeat(32);
        let r: crate::ClaimRef = format!("urn:ankusa:claim:v1:acme:{id}").parse().unwrap();
        let ctx = Ctx::for_envelope(&env).with_claim(Claim::new(r, sha.clone()).unwrap());
        let d = format!("{ctx:?}");
        assert!(!d.contains(id) && !d.contains(&sha), "{d}");
        assert!(d.contains("claim: Some(Claim"), "{d}");
    }

    #[test]
    fn extensions_are_typed() {
        let mut ext = Extensions::default();
        ext.insert(5u8);
        ext.insert("x");
        assert_eq!(ext.get::<u8>(), Some(&5));
        assert_eq!(ext.get::<&str>(), Some(&"x"));
        assert_eq!(ext.get::<u16>(), None);
        assert_eq!(ext.len(), 2);
    }

    #[test]
    fn allow_list_lowercases_and_refuses_empty() {
        assert_eq!(
            ForwardHeaders::only(["X-A", "b"]).unwrap(),
            ForwardHeaders::Only(vec!["x-a".into(), "b".into()])
        );
        assert!(ForwardHeaders::only([""]).is_err());
    }
}
