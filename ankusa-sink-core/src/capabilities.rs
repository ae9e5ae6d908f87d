//! [`Capabilities`]: what a sink's destination takes and promises, in one manifest for
//! dispatch (which reads it once, when the sink is registered), operators
//! (`ankusa-sink info --json`), the testkit (which picks boundary cases from it) and the
//! AsyncAPI document.

use serde::Serialize;
use std::num::NonZeroUsize;

/// What `Ok` from [`deliver`](crate::Sink::deliver) means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OkMeans {
    /// The destination acknowledged storing it (a broker ack, a publisher confirm, a 2xx).
    Stored,
    /// It was handed over, nothing stored it (a log line, a channel `PUBLISH`).
    Sent,
}

/// Where a size limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitSource {
    /// The sink's configuration set it (`max_message_bytes`, `max_record_bytes`).
    Configured,
    /// The destination's documented default (SQS 1 MiB, SNS 256 KiB, Pub/Sub 10 MB, ...).
    DestinationDefault,
}

/// The largest message the destination takes, as the sink checks it before sending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SizeLimit {
    /// The limit in bytes.
    pub bytes: u64,
    /// What counts toward it (`body`, `body + attributes`, `value + key`, ...).
    pub counts: &'static str,
    /// Where the number comes from.
    pub source: LimitSource,
}

/// The order in which deliveries reach consumers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ordering {
    /// No order is promised (retries and concurrent deliveries overtake each other).
    None,
    /// Publish order per key: the destination keeps the messages published with the same
    /// rendered key (one partition, one ordering key) in the order they were published, so
    /// one attempt's messages keep their order. Deliveries are still not ordered:
    /// concurrent deliveries and retries publish hooks in another order than they were
    /// accepted, and a consumer that needs order rebuilds it from the provider's own
    /// timestamp or sequence number.
    PerKey {
        /// The key (a template: `{tenant_id}/{source_id}`, a fixed group, ...).
        key: String,
    },
}

/// How deliveries with `ctx.batch` share requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchLimits {
    /// The most messages in one request.
    pub max_messages: u64,
    /// The most bytes in one request.
    pub max_bytes: u64,
    /// How long a batch waits for companions, in ms.
    pub linger_ms: u64,
}

/// What a sink's destination takes and promises: the one statement of a sink's facts.
///
/// # Behavior
/// - [`Sink::capabilities`](crate::Sink::capabilities) returns it; dispatch reads it once,
///   when the sink is registered ([`safe_capabilities`](crate::safe_capabilities)), and
///   takes from it whether `Ok` is durable, the inline threshold, whether the sink batches
///   and its pipeline window.
/// - Serialized as `ankusa-sink info --json`'s `capabilities` object (the pipeline window
///   is not part of it).
/// - The testkit checks that it does not contradict itself (durable while `Ok` means sent,
///   batch limits on a sink that does not batch, a batch of zero); a zero
///   threshold or window cannot be stated (both are non-zero types).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// Whether `Ok` means something that outlives this process has the hook (a broker
    /// ack, a publisher confirm, an upstream 2xx). A sink that cannot promise it (a log)
    /// says `false`, so a dispatcher that acks providers on the sink's word keeps a
    /// write-ahead log.
    pub durable: bool,
    /// What `Ok` means.
    pub ok_means: OkMeans,
    /// The largest body sent inline; one byte more travels by `ctx.claim`. `None`: the
    /// sink never uses the claim check.
    pub inline_max_bytes: Option<NonZeroUsize>,
    /// Whether deliveries with `ctx.batch` share requests. A batching sink gives each
    /// delivery its own result and never re-sends an entry the destination accepted.
    pub batched: bool,
    /// The largest message the destination takes, when the sink knows it.
    pub max_message: Option<SizeLimit>,
    /// The order consumers see.
    pub ordering: Ordering,
    /// The destination drops a message whose deduplication id it saw within this many
    /// seconds (SQS and SNS FIFO: 300), when it has such a window. `None` both for a
    /// destination that does not deduplicate and for one that does so forever
    /// ([`dedupe_forever`](Self::dedupe_forever)); [`dedupe`](Self::dedupe) tells them apart.
    pub dedupe_window_s: Option<u64>,
    /// The destination keeps one copy per deduplication id for as long as it keeps data
    /// (a table with a unique key on the idempotency key, an index whose document id is
    /// it): no window ends. Serialized only when `true`, so a manifest without it reads as
    /// it always did.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dedupe_forever: bool,
    /// Batching limits, when the sink batches.
    pub batch: Option<BatchLimits>,
    /// The authentication the sink is configured with (`none`, `tls`, `sasl_plain`,
    /// `static_credentials`, `application_default`, `signing`, ...), never a secret.
    pub auth: Vec<String>,
    /// How many deliveries (and body bytes) the sink can usefully have outstanding at
    /// once: its own pipeline window ([`InFlight`]). `None`: one request per delivery (an
    /// HTTP call), so the dispatcher's shared concurrency limit applies.
    #[serde(skip)]
    pub in_flight: Option<InFlight>,
}

/// How long a destination keeps one copy per deduplication id: see
/// [`Capabilities::dedupe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dedupe {
    /// A repeat within this many seconds of the first copy is dropped (SQS and SNS FIFO:
    /// 300); a later one is stored again.
    WindowS(u64),
    /// A repeat is dropped whenever it comes.
    Forever,
}

/// A sink's pipeline window: see [`Capabilities::in_flight`].
///
/// A sink that pipelines (a producer with its own send queue, publisher confirms) is fast
/// when its pipeline is full: the dispatcher keeps up to `deliveries` attempts (and about
/// `bytes` of bodies) in flight for it, outside the shared limit.
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

impl Capabilities {
    /// A manifest that says only this: `Ok` means stored when `durable`, else sent; no
    /// size limit, order, dedupe window or batching; no authentication.
    pub fn new(durable: bool, inline_max_bytes: Option<NonZeroUsize>) -> Self {
        Capabilities {
            durable,
            ok_means: if durable {
                OkMeans::Stored
            } else {
                OkMeans::Sent
            },
            inline_max_bytes,
            batched: false,
            max_message: None,
            ordering: Ordering::None,
            dedupe_window_s: None,
            dedupe_forever: false,
            batch: None,
            auth: vec!["none".to_owned()],
            in_flight: None,
        }
    }

    /// What dispatch assumes of a sink whose [`capabilities`](crate::Sink::capabilities)
    /// panicked: nothing durable, every body by claim (so a body it might need by
    /// reference is checked in), no batching, the shared concurrency limit.
    pub fn unknown() -> Self {
        Capabilities::new(false, Some(NonZeroUsize::MIN))
    }

    /// Set the pipeline window ([`in_flight`](Self::in_flight)).
    pub fn with_in_flight(mut self, window: InFlight) -> Self {
        self.in_flight = Some(window);
        self
    }

    /// Set what `Ok` means.
    pub fn with_ok_means(mut self, ok_means: OkMeans) -> Self {
        self.ok_means = ok_means;
        self
    }

    /// Set the size limit: `bytes` of what `counts`, from `source`.
    pub fn with_max_message(
        mut self,
        bytes: usize,
        counts: &'static str,
        source: LimitSource,
    ) -> Self {
        self.max_message = Some(SizeLimit {
            bytes: bytes as u64,
            counts,
            source,
        });
        self
    }

    /// Set the order consumers see.
    pub fn with_ordering(mut self, ordering: Ordering) -> Self {
        self.ordering = ordering;
        self
    }

    /// Set the destination's deduplication window in seconds (and clear
    /// [`dedupe_forever`](Self::dedupe_forever)).
    pub fn with_dedupe_window_s(mut self, seconds: u64) -> Self {
        self.dedupe_window_s = Some(seconds);
        self.dedupe_forever = false;
        self
    }

    /// Say the destination keeps one copy per deduplication id with no window (a unique
    /// key on the idempotency key): [`dedupe_forever`](Self::dedupe_forever), and no
    /// [`dedupe_window_s`](Self::dedupe_window_s).
    pub fn with_dedupe_forever(mut self) -> Self {
        self.dedupe_window_s = None;
        self.dedupe_forever = true;
        self
    }

    /// How long the destination keeps one copy per deduplication id, or `None` when it
    /// keeps every copy. [`Dedupe::Forever`] wins over a window set beside it (a manifest
    /// that states both contradicts itself; the testkit's `contract` case refuses it).
    pub fn dedupe(&self) -> Option<Dedupe> {
        if self.dedupe_forever {
            Some(Dedupe::Forever)
        } else {
            self.dedupe_window_s.map(Dedupe::WindowS)
        }
    }

    /// Say the sink batches, within these limits (`None`: it batches by its client's own
    /// rules, which the sink does not bound).
    pub fn with_batch(mut self, limits: Option<BatchLimits>) -> Self {
        self.batched = true;
        self.batch = limits;
        self
    }

    /// Set the configured authentication modes (an empty list is `none`).
    pub fn with_auth<I, S>(mut self, modes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.auth = modes.into_iter().map(Into::into).collect();
        if self.auth.is_empty() {
            self.auth.push("none".to_owned());
        }
        self
    }

    /// `source` for a configured limit equal to the destination's default.
    pub fn limit_source(configured: usize, default: usize) -> LimitSource {
        if configured == default {
            LimitSource::DestinationDefault
        } else {
            LimitSource::Configured
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_info_prints_it() {
        let c = Capabilities::new(true, NonZeroUsize::new(65_536))
            .with_max_message(
                1_048_576,
                "body + attributes",
                LimitSource::DestinationDefault,
            )
            .with_ordering(Ordering::PerKey {
                key: "{tenant_id}/{source_id}".into(),
            })
            .with_dedupe_window_s(300)
            .with_batch(Some(BatchLimits {
                max_messages: 10,
                max_bytes: 1_048_576,
                linger_ms: 10,
            }))
            .with_auth(["static_credentials"]);
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["ok_means"], "stored");
        assert_eq!(v["max_message"]["source"], "destination_default");
        assert_eq!(
            v["ordering"],
            serde_json::json!({"kind": "per_key", "key": "{tenant_id}/{source_id}"})
        );
        assert_eq!(v["batch"]["max_messages"], 10);
        assert!(v["batched"].as_bool().unwrap());
        assert_eq!(v["auth"], serde_json::json!(["static_credentials"]));
        let plain = Capabilities::new(false, None).with_auth(Vec::<String>::new());
        let v = serde_json::to_value(&plain).unwrap();
        assert_eq!(v["ok_means"], "sent");
        assert_eq!(v["ordering"], serde_json::json!({"kind": "none"}));
        assert_eq!(v["auth"], serde_json::json!(["none"]));
        assert_eq!(
            Capabilities::limit_source(5, 5),
            LimitSource::DestinationDefault
        );
        assert_eq!(Capabilities::limit_source(4, 5), LimitSource::Configured);
    }

    #[test]
    fn dedupe_forever_is_stated_and_a_window_is_serialized_as_before() {
        let window = Capabilities::new(true, None).with_dedupe_window_s(300);
        assert_eq!(window.dedupe(), Some(Dedupe::WindowS(300)));
        let v = serde_json::to_value(&window).unwrap();
        assert_eq!(v["dedupe_window_s"], 300);
        // Absent unless true: `info --json` of every existing sink is unchanged.
        assert!(v.get("dedupe_forever").is_none(), "{v}");

        let forever = window.with_dedupe_forever();
        assert_eq!(forever.dedupe(), Some(Dedupe::Forever));
        assert_eq!(forever.dedupe_window_s, None);
        let v = serde_json::to_value(&forever).unwrap();
        assert_eq!(v["dedupe_forever"], true);
        assert_eq!(v["dedupe_window_s"], serde_json::Value::Null);

        assert_eq!(Capabilities::new(true, None).dedupe(), None);
        let back = forever.with_dedupe_window_s(60);
        assert_eq!(back.dedupe(), Some(Dedupe::WindowS(60)));
    }
}
