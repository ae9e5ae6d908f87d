//! What a sink author writes: a [`Harness`] that builds sinks for fresh destinations.

use crate::case::Case;
use ankusa_sink_core::{BoxError, Bytes, Envelope, Sink, async_trait};
use futures_util::future::BoxFuture;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// One hook as read back from the destination by a [`Probe`].
///
/// Fill what the transport carries; leave the rest `None` (the suite compares only what is
/// present, but `id` must always be there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Received {
    /// The hook id.
    pub id: String,
    /// The source id.
    pub source_id: Option<String>,
    /// The tenant, `Some(None)` when the destination says "no tenant".
    pub tenant_id: Option<Option<String>>,
    /// The idempotency key.
    pub idempotency_key: Option<String>,
    /// Unix ms receive time.
    pub received_at: Option<i64>,
    /// The replay id, `Some(None)` when the destination says "not a replay".
    pub replay_id: Option<Option<String>>,
    /// The inline body.
    pub body: Option<Bytes>,
    /// The claim URN, when the body travelled by reference.
    pub claim: Option<String>,
    /// Which request to the destination carried this hook (any text that is the same for
    /// the hooks of one request and differs between requests), when the destination can
    /// tell. The `batching` case uses it to see whether a sink that claims to batch does.
    pub request_id: Option<String>,
}

impl Received {
    /// Everything a Message v1 carries.
    pub fn from_message(m: ankusa_message::Message) -> Self {
        use ankusa_message::MessageBody;
        let (body, claim) = match m.body {
            MessageBody::Inline(b) => (Some(b), None),
            MessageBody::Claim(r) => (None, Some(r.to_string())),
        };
        Received {
            id: m.id,
            source_id: Some(m.source_id),
            tenant_id: Some(m.tenant_id),
            idempotency_key: Some(m.idempotency_key),
            received_at: Some(m.received_at),
            replay_id: Some(m.replay_id),
            body,
            claim,
            request_id: None,
        }
    }

    /// Decode Message v1 bytes (verifying size and digest) into what they carry.
    pub fn from_message_bytes(bytes: &[u8]) -> Result<Self, BoxError> {
        Ok(Self::from_message(ankusa_message::decode(bytes)?))
    }
}

/// Reads back what reached a destination.
#[async_trait]
pub trait Probe: Send + Sync {
    /// Everything that reached this destination since it was created, in any order,
    /// duplicates included.
    ///
    /// # Behavior
    /// - Called repeatedly while the suite waits: return what has arrived so far, without
    ///   waiting for more. The `durability` case polls it every few milliseconds and needs
    ///   a hook to show up within [`DURABILITY_BOUND`](crate::DURABILITY_BOUND) of its ack,
    ///   so a probe should answer in well under a second.
    /// - Every call is time-limited by [`Harness::probe_timeout`]: a probe that does not
    ///   answer fails the case, with that reason.
    async fn received(&self) -> Result<Vec<Received>, BoxError>;
}

/// Deletes what a [`Setup`] made (a queue, stream, topic, server). See
/// [`Setup::with_teardown`].
pub type Teardown = Box<dyn FnOnce() -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync>;

/// A sink for one destination, plus what the suite needs to judge it.
///
/// Build it with [`Setup::new`] and the `with_*` methods.
pub struct Setup<S> {
    /// The sink under test.
    pub sink: S,
    /// Reads back the destination; `None` if the harness cannot.
    pub probe: Option<Box<dyn Probe>>,
    /// For [`Fault::Oversized`]: the body size the destination refuses.
    ///
    /// It must be **at most** the sink's [`inline_max_bytes`](ankusa_sink_core::Capabilities::inline_max_bytes), so
    /// that the body travels inline, while the encoded message (Message v1 adds about 500
    /// bytes and base64 grows the body by a third) is over the destination's limit. A body
    /// over the inline threshold would travel as a small claim and be accepted; the case
    /// fails with that explanation when the size is wrong.
    ///
    /// `None`: the suite takes one byte over the sink's own limit
    /// ([`Capabilities::max_message`](ankusa_sink_core::Capabilities::max_message)), so a
    /// harness whose sink checks the limit itself needs no guess. Set it when the
    /// destination, not the sink, refuses (a queue or stream with a lower limit).
    pub body_size: Option<usize>,
    teardown: Option<Teardown>,
    /// What the sink's parsed configuration prints: (where, text).
    config_texts: Vec<(String, String)>,
    heard: Option<Heard>,
}

/// What a silenced destination took from the sink since it went silent: see
/// [`Setup::with_heard`].
pub type Heard = Arc<dyn Fn() -> Vec<u8> + Send + Sync>;

impl<S> Setup<S> {
    /// A sink without a probe.
    pub fn new(sink: S) -> Self {
        Setup {
            sink,
            probe: None,
            body_size: None,
            teardown: None,
            config_texts: Vec::new(),
            heard: None,
        }
    }
    /// The parsed configuration the sink was built from (a registry's `SinkConfig`, the
    /// adapter's own config type): the `contract` case searches its `Debug` (plain and
    /// alternate) for the planted [`secrets`](Harness::secrets), as it searches the sink's.
    /// Hand it the value an operator's sink file parses into, with the secrets planted in
    /// that file: a config that derives `Debug` over a URL or a password leaks them in
    /// every `{:?}` of a parsed sink file.
    pub fn with_config(mut self, config: &(impl fmt::Debug + ?Sized)) -> Self {
        self.config_texts
            .push(("the config's Debug".to_owned(), format!("{config:?}")));
        self.config_texts.push((
            "the config's alternate Debug".to_owned(),
            format!("{config:#?}"),
        ));
        self
    }
    /// The configuration's `Display` too, for a config that has one (searched like
    /// [`with_config`](Self::with_config)'s `Debug`).
    pub fn with_config_display(mut self, config: &(impl fmt::Display + ?Sized)) -> Self {
        self.config_texts
            .push(("the config's Display".to_owned(), format!("{config}")));
        self.config_texts.push((
            "the config's alternate Display".to_owned(),
            format!("{config:#}"),
        ));
        self
    }
    /// Whether a configuration was handed over ([`with_config`](Self::with_config)).
    pub fn has_config(&self) -> bool {
        !self.config_texts.is_empty()
    }
    pub(crate) fn config_texts(&self) -> &[(String, String)] {
        &self.config_texts
    }
    /// How to read what the destination took from the sink after it went silent: for a
    /// [`Fault::Unacknowledged`] made by silencing the network (a
    /// [`TcpProxy::blackhole`](crate::support::TcpProxy::blackhole): pass
    /// [`TcpProxy::heard`](crate::support::TcpProxy::heard)).
    ///
    /// # Behavior
    /// - The suite reads it once the fault's delivery has answered. When the hook's id is
    ///   not among the bytes (the sink met the silence before it sent anything of the
    ///   hook: a new connection whose login went unanswered), nothing of the hook left,
    ///   and `may_have_landed = Some(false)` is the truth: the suite accepts it (and
    ///   `Some(true)`, the cautious answer). When the id is there, or without this,
    ///   `Some(false)` is refused as before.
    /// - [`support::silent_after_warm_up`](crate::support::silent_after_warm_up) sets it.
    /// - A sink that compresses or encrypts what it sends hides the id: the suite then
    ///   accepts `Some(false)` it cannot disprove; give such a sink's harness a plaintext
    ///   path, or leave this unset.
    pub fn with_heard(mut self, heard: impl Fn() -> Vec<u8> + Send + Sync + 'static) -> Self {
        self.heard = Some(Arc::new(heard));
        self
    }
    pub(crate) fn heard(&self) -> Option<&Heard> {
        self.heard.as_ref()
    }
    /// Add a probe.
    pub fn with_probe(mut self, probe: impl Probe + 'static) -> Self {
        self.probe = Some(Box::new(probe));
        self
    }
    /// Set the refused body size (oversized fault); see [`body_size`](Self::body_size).
    pub fn with_body_size(mut self, size: usize) -> Self {
        self.body_size = Some(size);
        self
    }
    /// Delete what this setup made once the case is done with it.
    ///
    /// # Behavior
    /// - Every case awaits the teardown of every setup it was given, after the case has
    ///   finished with the sink and probe (they are dropped first), whether the case passed,
    ///   failed, skipped or panicked midway.
    /// - Time-limited by [`Harness::harness_timeout`]; an error or a timeout fails the case
    ///   with its reason.
    /// - A second call replaces the first teardown; chain the work in one closure.
    pub fn with_teardown<F, Fut>(mut self, teardown: F) -> Self
    where
        F: FnOnce() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.teardown = Some(Box::new(move || Box::pin(teardown())));
        self
    }
    /// The same setup around another sink (e.g. `Arc::new`, a wrapper), keeping the probe,
    /// body size and teardown.
    pub fn map_sink<T>(self, f: impl FnOnce(S) -> T) -> Setup<T> {
        Setup {
            sink: f(self.sink),
            probe: self.probe,
            body_size: self.body_size,
            teardown: self.teardown,
            config_texts: self.config_texts,
            heard: self.heard,
        }
    }
    /// Whether a teardown is set.
    pub fn has_teardown(&self) -> bool {
        self.teardown.is_some()
    }
    pub(crate) fn take_teardown(&mut self) -> Option<Teardown> {
        self.teardown.take()
    }
}

impl<S: fmt::Debug> fmt::Debug for Setup<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Setup")
            .field("sink", &self.sink)
            .field("probe", &self.probe.is_some())
            .field("body_size", &self.body_size)
            .field("teardown", &self.teardown.is_some())
            .field("config", &!self.config_texts.is_empty())
            .field("heard", &self.heard.is_some())
            .finish()
    }
}

/// A fault the suite asks the harness to provoke, and the class the sink must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The queue, topic, exchange or endpoint does not exist: config.
    MissingDestination,
    /// The destination refuses the credential: config.
    RefusedCredential,
    /// Nothing listens at the address: transient, within a bounded time.
    Unreachable,
    /// The destination throttles: retry-after with `0 < ms <= 1 h`.
    Throttled,
    /// A body the destination will never take ([`Setup::body_size`] bytes, at most the
    /// sink's inline threshold): permanent, and nothing is delivered.
    Oversized,
    /// The destination takes the write but never stores or acknowledges it (a server that
    /// reads the request and never answers, a broker that never confirms): `Ok` is a
    /// failure (the sink acked what nobody stored); the sink must answer transient within
    /// the [`deadline`](Harness::deadline). Configure the sink's own ack timeout below it.
    Unacknowledged,
}

impl Fault {
    /// Every fault, in the suite's order.
    pub const ALL: [Fault; 6] = [
        Fault::MissingDestination,
        Fault::RefusedCredential,
        Fault::Unreachable,
        Fault::Throttled,
        Fault::Oversized,
        Fault::Unacknowledged,
    ];
}

/// Expected outcome of one entry in a [`MixedBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Accepted.
    Ok,
    /// Refused, with a permanent (or config) class.
    Permanent,
}

/// Envelopes for one batch with mixed per-entry outcomes.
#[derive(Debug)]
pub struct MixedBatch<S> {
    /// The batching sink and its probe.
    pub setup: Setup<S>,
    /// Each envelope and what the destination will answer for it.
    pub envelopes: Vec<(Envelope, Expect)>,
}

/// What makes a warm destination show its fault: see [`WarmFault::new`].
type Provoke = Box<dyn FnOnce() -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync>;

/// A destination that works, and shows a [`Fault`] once the sink has delivered to it: what
/// [`Harness::warm_fault`] returns.
///
/// The suite delivers [`WARM_DELIVERIES`](crate::WARM_DELIVERIES) small hooks through the
/// sink (each must return `Ok`, and reach the probe when there is one), then awaits the
/// provocation, then delivers the fault's hook through **the same sink** and judges it as
/// it judges the cold fault. A sink that is honest only while it connects (errors from its
/// first request, `Ok` from every later one) fails here.
pub struct WarmFault<S> {
    /// The sink, its probe and teardown, on a destination that works until provoked.
    pub setup: Setup<S>,
    provoke: Option<Provoke>,
}

impl<S> WarmFault<S> {
    /// `setup` works until `provoke` is awaited, which makes the destination show the
    /// fault: delete the queue, revoke the credential (and cut the connections, so the sink
    /// must log in again: [`TcpProxy::redirect`](crate::support::TcpProxy::redirect) to a
    /// server that refuses it), stop the destination ([`TcpProxy::stop`](crate::support::TcpProxy::stop)),
    /// start throttling, go silent on the sink's open connections
    /// ([`TcpProxy::blackhole`](crate::support::TcpProxy::blackhole)).
    ///
    /// # Behavior
    /// - Awaited once, after the warm-up deliveries, time-limited by
    ///   [`Harness::harness_timeout`]; an error fails the case.
    /// - Whatever it stops or redirects is the setup's to clean up: its teardown runs after
    ///   the case whether or not `provoke` ran.
    pub fn new<F, Fut>(setup: Setup<S>, provoke: F) -> Self
    where
        F: FnOnce() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        WarmFault {
            setup,
            provoke: Some(Box::new(move || Box::pin(provoke()))),
        }
    }

    /// `setup` shows the fault from the start for the fault's own hook and takes the
    /// warm-up's small ones: a destination (or a sink limit) that refuses the oversized
    /// body ([`Setup::body_size`], or the sink's own `max_message`) and nothing smaller.
    pub fn standing(setup: Setup<S>) -> Self {
        WarmFault {
            setup,
            provoke: None,
        }
    }

    /// The same warm fault around another sink (`Arc::new`, a wrapper).
    pub fn map_sink<T>(self, f: impl FnOnce(S) -> T) -> WarmFault<T> {
        WarmFault {
            setup: self.setup.map_sink(f),
            provoke: self.provoke,
        }
    }

    pub(crate) fn into_parts(self) -> (Setup<S>, Option<Provoke>) {
        (self.setup, self.provoke)
    }
}

impl<S: fmt::Debug> fmt::Debug for WarmFault<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WarmFault")
            .field("setup", &self.setup)
            .field("provoke", &self.provoke.is_some())
            .finish()
    }
}

/// How to build the sink under test. Implement it in your crate's tests.
///
/// Only [`destination`](Harness::destination) is required. Every other method has a
/// default that makes the matching case a printed skip: **not provided** for a fault the
/// harness does not provoke ([`fault`](Harness::fault), [`warm_fault`](Harness::warm_fault))
/// or a restart it does not do ([`can_restart`](Harness::can_restart)), which keeps the
/// report from saying "certified" (a destination it does not restart for `durability`,
/// [`can_restart_destination`](Harness::can_restart_destination), is a not provided skip
/// too, that does not); **impossible** only where the harness says the protocol
/// has no such fault ([`fault_impossible`](Harness::fault_impossible),
/// [`restart_impossible`](Harness::restart_impossible)). For
/// [`takes_credentials`](Harness::takes_credentials) the default is a failure until secrets
/// are planted.
///
/// A harness may be built once per case (what [`conformance_suite!`](crate::conformance_suite)
/// does, optionally with a per-case constructor) or once for a whole
/// [`run_all`](crate::run_all); either way [`destination`](Harness::destination) is told
/// which case asks.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The sink type.
    type Sink: Sink + 'static;

    /// A sink for a fresh destination unique to this call (a new queue, topic or endpoint),
    /// and a probe reading it back when you can. `case` is the case asking: use it to name
    /// the destination, or to give one case (e.g. [`Case::Recovery`]) a destination of its
    /// own. Attach a [`Setup::with_teardown`] that deletes what you made.
    async fn destination(&self, case: Case) -> Result<Setup<Self::Sink>, BoxError>;

    /// A sink configured so that the destination produces `fault` from its first delivery
    /// (a cold sink), or `None` if this harness does not provoke it: the case is then a
    /// **not provided** skip, unless [`fault_impossible`](Harness::fault_impossible) says
    /// the fault cannot exist.
    async fn fault(&self, fault: Fault) -> Result<Option<Setup<Self::Sink>>, BoxError> {
        let _ = fault;
        Ok(None)
    }

    /// A working destination and a sink that will deliver to it, and how to make the
    /// destination show `fault` afterwards (a warm sink: the `classify_warm_*` cases), or
    /// `None` if this harness does not: a **not provided** skip, unless
    /// [`fault_impossible`](Harness::fault_impossible) says the fault cannot exist. See
    /// [`WarmFault`].
    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<Self::Sink>>, BoxError> {
        let _ = fault;
        Ok(None)
    }

    /// Why `fault` cannot exist for this destination's protocol (a log has no credential, a
    /// broker that has no throttle), or `None` (the default) when it can. When
    /// [`fault`](Harness::fault) or [`warm_fault`](Harness::warm_fault) returns `None`, the
    /// case is an **impossible** skip with this reason instead of a **not provided** one.
    /// Say it only of the protocol, never of a harness that could do more: an impossible
    /// skip still certifies.
    fn fault_impossible(&self, fault: Fault) -> Option<String> {
        let _ = fault;
        None
    }

    /// Why this harness does not provoke `fault`, printed in the case's **not provided**
    /// skip when [`fault`](Harness::fault) or [`warm_fault`](Harness::warm_fault) returns
    /// `None` (e.g. "a shared server must not be pushed over its memory limit").
    fn fault_skip_reason(&self, fault: Fault) -> Option<String> {
        let _ = fault;
        None
    }

    /// Whether the sink's [`check()`](ankusa_sink_core::Sink::check) can tell `fault`
    /// ([`Fault::MissingDestination`], [`Fault::RefusedCredential`]) without delivering:
    /// then the suite requires a config failure from it under that fault, cold and warm.
    /// Default `false`: `check()` may then also answer `Reachable` or `Unsupported` (never
    /// `Passed`). Whatever this says, `check()` must never answer `Passed` or `Reachable`
    /// where nothing listens ([`Fault::Unreachable`]).
    fn check_detects(&self, fault: Fault) -> bool {
        let _ = fault;
        false
    }

    /// Why this harness does not run `case` at all, or `None` (the default): the case is
    /// then a **not provided** skip with this reason, without a destination being made.
    /// For a destination that cannot serve a case in reasonable time (an emulator far too
    /// slow for `volume`), said with the figure that shows it. A certifying case declined
    /// here keeps the report from saying "certified", as any not provided one does.
    fn not_provided(&self, case: Case) -> Option<String> {
        let _ = case;
        None
    }

    /// How many hooks the `volume` case delivers and reads back: at least
    /// [`VOLUME`](crate::VOLUME) (5,000; a smaller answer is raised to it). Raise it for a
    /// sink whose losses would hide in 5,000.
    fn volume(&self) -> usize {
        crate::VOLUME
    }

    /// For batching sinks: one batch whose entries the destination answers differently.
    async fn mixed_batch(&self) -> Result<Option<MixedBatch<Self::Sink>>, BoxError> {
        Ok(None)
    }

    /// A short label for this harness in printed outcomes and [`Report`](crate::Report)s.
    /// Default: the type's name without its module path.
    fn name(&self) -> String {
        short_type_name(std::any::type_name::<Self>())
    }

    /// Secrets planted in the sink's configuration that must never appear in `describe`,
    /// `Debug`, or any failure.
    fn secrets(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether the sink's configuration takes credentials (a password, token, key). Default
    /// `true`: then [`secrets`](Harness::secrets) must plant some, or `contract` fails. A
    /// sink whose config has nothing secret says `false`, and `contract` is a printed skip
    /// for its secret checks.
    fn takes_credentials(&self) -> bool {
        true
    }

    /// Whether [`stop`](Harness::stop) and [`start`](Harness::start) work. `false` (the
    /// default) makes `recovery` a **not provided** skip (a destination too heavy or too
    /// shared to restart), or an impossible one with
    /// [`restart_impossible`](Harness::restart_impossible).
    fn can_restart(&self) -> bool {
        false
    }

    /// Why the destination cannot be down at all (a log, the process's own stdout), or
    /// `None` (the default): with [`can_restart`](Harness::can_restart) `false`, `recovery`
    /// is then an **impossible** skip with this reason.
    fn restart_impossible(&self) -> Option<String> {
        None
    }

    /// Stop the destination (broker, server). Must leave it stoppable and startable again.
    async fn stop(&self) -> Result<(), BoxError> {
        Err("this harness cannot stop its destination".into())
    }

    /// Start the destination again after [`stop`](Harness::stop). The suite always awaits
    /// it after a `stop` that did not return an error, even when the case fails or
    /// panics in between.
    async fn start(&self) -> Result<(), BoxError> {
        Err("this harness cannot start its destination".into())
    }

    /// Whether [`restart_destination`](Harness::restart_destination) works. `false` (the
    /// default) ends the `durability` case in a **not provided** skip after its read-back
    /// checks, with [`restart_destination_skip_reason`](Harness::restart_destination_skip_reason).
    fn can_restart_destination(&self) -> bool {
        false
    }

    /// Why this harness does not restart the destination (a hosted service, a shared broker
    /// whose restart would disturb other tests, a server that keeps nothing on disk),
    /// printed in the `durability` case's **not provided** skip.
    fn restart_destination_skip_reason(&self) -> Option<String> {
        None
    }

    /// Restart the destination of the `durability` case's setup (what
    /// [`destination`](Harness::destination) built for [`Case::Durability`]) **keeping its
    /// data**, as an operator's restart or a crash would: stop the server process (a kill is
    /// the stronger test), start it again on the same port and store, and return once it
    /// answers. The case then reads every hook the sink acked back through the same probe:
    /// a sink that declares `durable` while its destination holds the hook only in memory
    /// (write-behind, `fsync` off, a memory-only store) fails.
    ///
    /// # Behavior
    /// - Called once, after the hooks were delivered and read back, time-limited by
    ///   [`harness_timeout`](Harness::harness_timeout); an error fails the case.
    /// - Restart a destination of the setup's own (a private server on a port of its own),
    ///   never one other tests share while they run.
    /// - The probe must read again after the restart (reconnect, or connect per read).
    async fn restart_destination(&self) -> Result<(), BoxError> {
        Err("this harness cannot restart its destination".into())
    }

    /// Whether the sink says whether a failed message may have landed
    /// ([`Failure::may_have_landed`](ankusa_sink_core::Failure::may_have_landed)). Default
    /// false: the suite then only refuses a wrong claim (`Some(true)` when nothing listens or
    /// the body was refused before sending, `Some(false)` for a write the destination took
    /// but never acknowledged). True: it requires `Some(false)` for
    /// [`Fault::Unreachable`] and [`Fault::Oversized`] and `Some(true)` for
    /// [`Fault::Unacknowledged`].
    fn reports_landing(&self) -> bool {
        false
    }

    /// How long one delivery may take before the suite calls it hung. Default 30 s.
    fn deadline(&self) -> Duration {
        Duration::from_secs(30)
    }

    /// How long the probe may take to show a delivered hook (every case but `durability`,
    /// whose bound is [`DURABILITY_BOUND`](crate::DURABILITY_BOUND)). Default 15 s.
    fn read_timeout(&self) -> Duration {
        Duration::from_secs(15)
    }

    /// How long one [`Probe::received`] call may take before the case fails. Default 10 s.
    fn probe_timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    /// How long one harness call (`destination`, `fault`, `mixed_batch`, `stop`, `start`, a
    /// teardown) may take before the case fails. Default 120 s.
    fn harness_timeout(&self) -> Duration {
        Duration::from_secs(120)
    }
}

/// `a::b::C<d::E>` → `C<E>`.
pub(crate) fn short_type_name(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut segment = String::new();
    let mut chars = full.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            segment.clear();
        } else if c.is_alphanumeric() || c == '_' {
            segment.push(c);
        } else {
            out.push_str(&segment);
            segment.clear();
            out.push(c);
        }
    }
    out.push_str(&segment);
    out
}

#[cfg(test)]
mod tests {
    use super::short_type_name;

    #[test]
    fn short_names() {
        assert_eq!(short_type_name("a::b::MyHarness"), "MyHarness");
        assert_eq!(short_type_name("Plain"), "Plain");
        assert_eq!(short_type_name("a::W<b::c::D, e::F>"), "W<D, F>");
    }
}
