//! The delivery context: what dispatch tells a sink about this attempt.

use crate::claim::Claim;
use crate::envelope::Envelope;
use std::any::{Any, TypeId};
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

/// One extension: its type and the value.
type Entry = (TypeId, Arc<dyn Any + Send + Sync>);

/// Typed extra values a dispatcher passes to sinks that know them ([`Ctx::extension`]).
///
/// Every attempt's context is a clone, so a clone must cost no allocation: one value (the
/// trace context dispatch sets on every attempt) is held as it is, more in a shared slice.
#[derive(Clone, Default)]
enum Extensions {
    #[default]
    None,
    One(Entry),
    Many(Arc<[Entry]>),
}

impl Extensions {
    fn entries(&self) -> &[Entry] {
        match self {
            Extensions::None => &[],
            Extensions::One(entry) => std::slice::from_ref(entry),
            Extensions::Many(entries) => entries,
        }
    }
    /// Store a value, replacing one of the same type.
    fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        let id = TypeId::of::<T>();
        let entry: Entry = (id, Arc::new(value));
        let mut rest: Vec<Entry> = self
            .entries()
            .iter()
            .filter(|(t, _)| *t != id)
            .cloned()
            .collect();
        *self = if rest.is_empty() {
            Extensions::One(entry)
        } else {
            rest.push(entry);
            Extensions::Many(rest.into())
        };
    }
    /// The value of this type, if any.
    fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        let (_, value) = self.entries().iter().find(|(t, _)| *t == id)?;
        value.downcast_ref()
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.entries().len())
            .finish()
    }
}

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
/// The fields sinks read are public; the instance and extensions (the trace context, the
/// header policy) are set with `with_*` and read with accessors. The hook's source and
/// tenant are the envelope's.
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
    /// Whether a batching sink may batch this delivery.
    pub batch: bool,
    /// Values for sinks that know them.
    extensions: Extensions,
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
            batch: false,
            extensions: Extensions::default(),
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
    /// Allow (or forbid) batching.
    pub fn with_batch(mut self, batch: bool) -> Self {
        self.batch = batch;
        self
    }
    /// Add a value for sinks that know its type.
    pub fn with_extension<T: std::any::Any + Send + Sync>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }
    /// Set the instance name.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into().into());
        self
    }
    /// The instance name.
    pub fn instance(&self) -> &str {
        self.instance.as_deref().unwrap_or(DEFAULT_INSTANCE)
    }
    /// The value of type `T` the dispatcher set ([`with_extension`](Self::with_extension)),
    /// if any: the attempt's `ankusa_message::TraceContext` and `HeaderPolicy`, or a
    /// caller's own type.
    pub fn extension<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.extensions.get()
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
        assert_eq!(ctx.attempt.get(), 1);
        assert_eq!(ctx.instance(), "default");
        assert!(!ctx.batch && ctx.claim.is_none());
        assert_eq!(ctx.with_attempt(3).attempt.get(), 3);
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
        ext.insert(6u8);
        assert_eq!(ext.get::<u8>(), Some(&6), "replaced");
        assert_eq!(format!("{ext:?}"), "Extensions { len: 2 }");
        let ctx = Ctx::for_envelope(&Envelope::builder("h", "s", "").build().unwrap());
        assert_eq!(ctx.with_extension(7u8).extension::<u8>(), Some(&7));
    }
}
