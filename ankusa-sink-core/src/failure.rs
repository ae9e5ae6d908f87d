//! Why a delivery failed: the [`Class`] that decides what dispatch does next, and the
//! [`ErrorClass`] a dead letter is filed under.

use std::error::Error as StdError;
use std::fmt;
use std::num::NonZeroU64;

/// A boxed error that can cross tasks: the reason behind a [`Failure`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What dispatch does next with a failed delivery: the one fact a sink's classifier
/// decides. Compare [`ErrorClass`], which only files a dead letter once dispatch gave up.
///
/// A sink's classifier is a pure function of its typed error (`fn classify(&XError) ->
/// Class`): no attempt number, no clock, no randomness. Pauses a destination did not state
/// are dispatch's to draw ([`Class::Throttled`]).
///
/// | Class | Dispatch | Breaker | Dead letter filed as | Config counter |
/// | --- | --- | --- | --- | --- |
/// | [`Permanent`](Class::Permanent) | dead-letter now | not counted | `permanent` | - |
/// | [`Config`](Class::Config) | dead-letter now | not counted | `permanent` | `ankusa_dispatch_config_errors_total{sink}` + 1 |
/// | [`RetryAfter`](Class::RetryAfter) | next attempt no sooner than `ms` (capped), policy may give up | counted | `throttled` | - |
/// | [`Throttled`](Class::Throttled) | as `RetryAfter`, with the pause dispatch draws: `throttle_after_ms(attempt)` | counted | `throttled` | - |
/// | [`Transient`](Class::Transient) | the retry policy decides | counted | `transient` | - |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Retrying cannot help: a `410 Gone`, a record the broker will never take.
    Permanent,
    /// Permanent, and the operator's to fix: a refused credential, a missing queue or topic.
    Config,
    /// The destination asked for a pause of at least this many milliseconds. Zero cannot be
    /// represented: a pause of zero is no pause, and such a failure is transient.
    RetryAfter(NonZeroU64),
    /// The destination throttled without saying for how long (a `429` without
    /// `Retry-After`, AWS `Throttling`, a broker's flow control). Dispatch pauses
    /// `throttle_after_ms(attempt)`, drawn when it decides: full jitter, uniform in
    /// `1..=min(30_000, 500 * 2^(attempt - 1))` ms (`ankusa_dispatch::throttle_after_ms`).
    /// Everything else is as [`RetryAfter`](Class::RetryAfter).
    Throttled,
    /// Anything else: the retry policy decides.
    Transient,
}

impl Class {
    /// The short, stable name of the class: `permanent`, `config`, `retry_after` or
    /// `transient`. A throttle is a retry-after whether or not the destination said how
    /// long, so [`Throttled`](Class::Throttled) is `retry_after` too.
    pub const fn as_str(self) -> &'static str {
        match self {
            Class::Permanent => "permanent",
            Class::Config => "config",
            Class::RetryAfter(_) | Class::Throttled => "retry_after",
            Class::Transient => "transient",
        }
    }

    /// Whether dispatch dead-letters at once (permanent and config).
    pub const fn is_permanent(self) -> bool {
        matches!(self, Class::Permanent | Class::Config)
    }

    /// The pause the destination stated, in milliseconds: `Some` only for
    /// [`Class::RetryAfter`]. The pause of a [`Class::Throttled`] is dispatch's draw.
    pub const fn retry_after_ms(self) -> Option<u64> {
        match self {
            Class::RetryAfter(ms) => Some(ms.get()),
            _ => None,
        }
    }

    /// The [`ErrorClass`] a dead letter of this class is filed under: config is permanent,
    /// both throttles are throttled.
    pub const fn error_class(self) -> ErrorClass {
        match self {
            Class::Permanent | Class::Config => ErrorClass::Permanent,
            Class::RetryAfter(_) | Class::Throttled => ErrorClass::Throttled,
            Class::Transient => ErrorClass::Transient,
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Class::RetryAfter(ms) => write!(f, "retry_after {}ms", ms),
            Class::Throttled => f.write_str("retry_after (throttled)"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// Why a delivery was dead-lettered, as an operator filters dead letters: set once dispatch
/// gave up, from the last failure's [`Class`] ([`Class::error_class`]). It decides nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    /// The sink said it will never work, or the hook or its destination is gone.
    Permanent,
    /// The destination asked for a pause and the retry horizon ended it.
    Throttled,
    /// Anything else that kept failing until the retry policy gave up.
    Transient,
}

impl ErrorClass {
    /// The stable name: `permanent`, `throttled` or `transient`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Permanent => "permanent",
            ErrorClass::Throttled => "throttled",
            ErrorClass::Transient => "transient",
        }
    }
}

/// Every [`ErrorClass`], in a stable order: what a dead letter can be filed under (the
/// specification's `error_classes/0`), for an operator's filter or a dashboard's legend.
pub const fn error_classes() -> [ErrorClass; 3] {
    [
        ErrorClass::Permanent,
        ErrorClass::Throttled,
        ErrorClass::Transient,
    ]
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed delivery: its [`Class`] and a typed reason.
///
/// # Behavior
/// - The reason is any `std::error::Error`; its `source()` chain is kept and walked by
///   `Display` with `{:#}`.
/// - `Display` and `Debug` print the class and the reason chain. Adapters build reasons that
///   never hold a credential or URL userinfo (see `ankusa_sink_kit::redact_url`); the
///   testkit checks this with planted secrets.
/// - [`may_have_landed`](Self::may_have_landed) says whether the message may have reached
///   the destination although the delivery failed, as far as the sink's client knows.
pub struct Failure {
    class: Class,
    reason: BoxError,
    may_have_landed: Option<bool>,
}

impl Failure {
    /// A failure with an explicit class.
    pub fn new(class: Class, reason: impl Into<BoxError>) -> Self {
        Failure {
            class,
            reason: reason.into(),
            may_have_landed: None,
        }
    }

    /// Say whether the message may have reached the destination:
    ///
    /// - `Some(true)`: the request left and no answer refused it (an ack or response
    ///   timeout, a connection lost after the message was written, a `5xx`, a Kafka record
    ///   librdkafka calls possibly persisted). A retry may deliver it a second time:
    ///   consumers dedupe on `ankusa_idempotency_key`, which every attempt carries unchanged.
    /// - `Some(false)`: the destination did not take it: nothing was sent (connection
    ///   refused, DNS, a local queue full, refused before sending) or the destination
    ///   answered that it refused it.
    /// - `None` (the default): the sink cannot tell.
    pub fn with_may_have_landed(mut self, landed: Option<bool>) -> Self {
        self.may_have_landed = landed;
        self
    }

    /// Whether the message may have reached the destination (see
    /// [`with_may_have_landed`](Self::with_may_have_landed)); `None` when unknown.
    pub fn may_have_landed(&self) -> Option<bool> {
        self.may_have_landed
    }

    /// Retrying cannot help; dead-letter now.
    pub fn permanent(reason: impl Into<BoxError>) -> Self {
        Self::new(Class::Permanent, reason)
    }

    /// Permanent and the operator's to fix (credential, missing destination, bad config).
    pub fn config(reason: impl Into<BoxError>) -> Self {
        Self::new(Class::Config, reason)
    }

    /// The destination asked for a pause of `ms` milliseconds; a pause of 0 is no pause,
    /// so that is transient.
    pub fn retry_after_ms(ms: u64, reason: impl Into<BoxError>) -> Self {
        match NonZeroU64::new(ms) {
            Some(ms) => Self::new(Class::RetryAfter(ms), reason),
            None => Self::transient(reason),
        }
    }

    /// Anything else: the retry policy decides.
    pub fn transient(reason: impl Into<BoxError>) -> Self {
        Self::new(Class::Transient, reason)
    }

    /// The class.
    pub fn class(&self) -> Class {
        self.class
    }

    /// The reason.
    pub fn reason(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.reason
    }

    /// The reason and each of its sources, joined with `": "`.
    pub fn reason_chain(&self) -> String {
        let mut out = self.reason.to_string();
        let mut next = self.reason.source();
        while let Some(err) = next {
            let text = err.to_string();
            // Many errors repeat their source in their own text; skip exact repeats.
            if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            next = err.source();
        }
        out
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.class, self.reason_chain())
    }
}

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failure")
            .field("class", &self.class)
            .field("reason", &self.reason_chain())
            .field("may_have_landed", &self.may_have_landed)
            .finish()
    }
}

impl StdError for Failure {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.reason)
    }
}

/// A plain-text reason, for failures that have no richer typed error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason(pub String);

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Reason {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Reason);

    #[test]
    fn error_class_maps_every_class() {
        let ms = NonZeroU64::new(5).unwrap();
        assert_eq!(Class::Permanent.error_class(), ErrorClass::Permanent);
        assert_eq!(Class::Config.error_class(), ErrorClass::Permanent);
        assert_eq!(Class::RetryAfter(ms).error_class(), ErrorClass::Throttled);
        assert_eq!(Class::Throttled.error_class(), ErrorClass::Throttled);
        assert_eq!(Class::Transient.error_class(), ErrorClass::Transient);
    }

    #[test]
    fn error_classes_lists_every_error_class_once() {
        assert_eq!(
            error_classes(),
            [
                ErrorClass::Permanent,
                ErrorClass::Throttled,
                ErrorClass::Transient
            ]
        );
        // Every class's error class is listed (a new ErrorClass must join the list: the
        // match in `as_str` names them all).
        let ms = NonZeroU64::new(5).unwrap();
        for class in [
            Class::Permanent,
            Class::Config,
            Class::RetryAfter(ms),
            Class::Throttled,
            Class::Transient,
        ] {
            assert!(error_classes().contains(&class.error_class()), "{class}");
        }
        let names: Vec<&str> = error_classes().iter().map(|c| c.as_str()).collect();
        assert_eq!(names, ["permanent", "throttled", "transient"]);
    }

    #[test]
    fn a_throttle_without_a_duration_is_deterministic() {
        // No pause is drawn here: the same error always gives the same class.
        let f = Failure::new(Class::Throttled, Reason("slow down".into()));
        assert_eq!(f.class(), Class::Throttled);
        assert_eq!(f.class().retry_after_ms(), None);
        assert!(f.class().error_class() == ErrorClass::Throttled && !f.class().is_permanent());
        assert_eq!(f.class().error_class(), ErrorClass::Throttled);
        assert_eq!(f.to_string(), "retry_after (throttled): slow down");
    }

    #[test]
    fn retry_after_zero_is_transient() {
        let f = Failure::retry_after_ms(0, Reason("x".into()));
        assert_eq!(f.class(), Class::Transient);
        let f = Failure::retry_after_ms(7, Reason("x".into()));
        assert_eq!(f.class().retry_after_ms(), Some(7));
        assert_eq!(f.class().error_class(), ErrorClass::Throttled);
    }

    #[test]
    fn display_walks_the_source_chain() {
        let f = Failure::permanent(Outer(Reason("inner".into())));
        assert_eq!(f.to_string(), "permanent: outer: inner");
        assert_eq!(f.reason_chain(), "outer: inner");
        assert!(format!("{f:?}").contains("outer: inner"));
        assert!(StdError::source(&f).is_some());
    }

    #[test]
    fn class_names_are_stable() {
        assert_eq!(Class::Permanent.as_str(), "permanent");
        assert_eq!(Class::Config.as_str(), "config");
        assert_eq!(
            Class::RetryAfter(NonZeroU64::new(1).unwrap()).as_str(),
            "retry_after"
        );
        assert_eq!(Class::Throttled.as_str(), "retry_after");
        assert_eq!(Class::Transient.as_str(), "transient");
        assert!(Class::Config.is_permanent());
        assert!(!Class::Transient.is_permanent());
    }
}

#[cfg(test)]
mod landed_tests {
    use super::*;

    #[test]
    fn may_have_landed_is_unknown_until_the_sink_says() {
        let f = Failure::transient(Reason("ack timeout".into()));
        assert_eq!(f.may_have_landed(), None);
        let f = f.with_may_have_landed(Some(true));
        assert_eq!(f.may_have_landed(), Some(true));
        assert!(
            format!("{f:?}").contains("may_have_landed: Some(true)"),
            "{f:?}"
        );
        assert_eq!(
            f.to_string(),
            "transient: ack timeout",
            "Display is unchanged"
        );
    }
}
