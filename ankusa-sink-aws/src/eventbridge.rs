//! The EventBridge sink: `PutEvents`, `DescribeEventBus`.

use crate::config::{EVENTBRIDGE_MAX_ENTRY_BYTES, EventBridgeConfig};
use crate::error::{self, AwsError};
use crate::outgoing::{self, Event, Ids};
use crate::sink::{self, AwsSink, BatchResults, Limits, Publisher, fail_all, forward_sink};
use ankusa_message::Outgoing;
use ankusa_sink_core::{Description, InFlight, Ordering, Payload, Subject, async_trait};
use ankusa_sink_kit::host_port;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use std::fmt;

/// What EventBridge counts toward an entry's limit.
const COUNTS: &str = "Detail + Source + DetailType";

/// Puts each hook on an event bus as one event whose `Detail` is the Message v1 JSON (an
/// object), with the configured `Source` and `DetailType`, no `Resources`.
///
/// # Behavior
/// - `Ok` only when EventBridge returned the entry's event id.
/// - An entry whose `Detail`, `Source` and `DetailType` exceed `max_message_bytes` (256
///   KiB) is permanent and not sent.
/// - Every put is a `PutEvents` request; with batching on and `ctx.batch` set, deliveries
///   share one (10 entries, 256 KiB). Each entry's `ErrorCode` fails that delivery alone.
/// - `check()` reads the bus (`DescribeEventBus`); nothing is put.
/// - EventBridge re-serializes `Detail`: a rule's target receives the same JSON value,
///   not the same bytes.
pub struct EventBridgeSink {
    inner: AwsSink<EventBridgePublisher>,
}

forward_sink!(
    EventBridgeSink,
    EventBridgeConfig,
    aws_sdk_eventbridge::Client
);

impl EventBridgeSink {
    /// A sink using `client` (its region, endpoint, credentials and interceptors); the
    /// config's connection options are not used.
    pub fn from_client(config: EventBridgeConfig, client: aws_sdk_eventbridge::Client) -> Self {
        let host = match config.endpoint() {
            Some(e) => host_port(e),
            None => client
                .config()
                .region()
                .map(|r| format!("events.{r}.amazonaws.com")),
        };
        let options = config.options().clone();
        let layout = sink::layout(&options);
        let publisher = EventBridgePublisher {
            client,
            bus: config.event_bus_name().to_owned(),
            source: config.source().to_owned(),
            detail_type: config.detail_type().to_owned(),
            host,
        };
        let limits = Limits {
            max_entry_bytes: config.max_message_bytes(),
            default_max_entry_bytes: EVENTBRIDGE_MAX_ENTRY_BYTES,
            counts: COUNTS,
            max_entries: sink::MAX_MESSAGE_ENTRIES,
            max_batch_bytes: EVENTBRIDGE_MAX_ENTRY_BYTES,
            max_window: InFlight::PIPELINE.deliveries.get(),
        };
        EventBridgeSink {
            inner: AwsSink::new(publisher, options, layout, limits),
        }
    }
}

pub(crate) struct EventBridgePublisher {
    client: aws_sdk_eventbridge::Client,
    bus: String,
    source: String,
    detail_type: String,
    host: Option<String>,
}

impl fmt::Debug for EventBridgePublisher {
    // The client's config holds the credentials provider: never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventBridgePublisher")
            .field("event_bus_name", &self.bus)
            .field("source", &self.source)
            .field("detail_type", &self.detail_type)
            .finish_non_exhaustive()
    }
}

impl EventBridgePublisher {
    fn request_entry(&self, e: Event) -> PutEventsRequestEntry {
        PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus)
            .source(&self.source)
            .detail_type(&self.detail_type)
            .detail(e.detail)
            .build()
    }

    /// `PutEvents` of `events`: one result per entry, by position.
    async fn put(&self, events: Vec<Event>) -> Vec<Result<(), AwsError>> {
        const OP: &str = "PutEvents";
        let n = events.len();
        let entries = events.into_iter().map(|e| self.request_entry(e)).collect();
        let out = match self
            .client
            .put_events()
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(out) => out,
            Err(err) => return fail_all(error::eventbridge(OP, err), n),
        };
        let mut results = BatchResults::new("eventbridge", OP, n);
        // Results come by position: any other count leaves no entry's result known.
        if out.entries().len() == n {
            for (i, e) in out.entries().iter().enumerate() {
                match (e.error_code(), e.event_id()) {
                    (Some(code), _) => results.failed_at(i, code, e.error_message()),
                    (None, Some(id)) if !id.is_empty() => results.set_at(i, Ok(())),
                    (None, _) => results.set_at(
                        i,
                        Err(AwsError::Unconfirmed {
                            service: "eventbridge",
                            operation: OP,
                        }),
                    ),
                }
            }
        }
        results.finish()
    }
}

#[async_trait]
impl Publisher for EventBridgePublisher {
    type Entry = Event;
    const SERVICE: &'static str = "eventbridge";

    /// `Detail` is the Message v1 JSON, valid JSON by construction, and `Source` and
    /// `DetailType` are the config's: nothing of the hook can be refused.
    fn entry(&self, out: Outgoing<'_>, _ids: Ids) -> Result<(Event, usize), AwsError> {
        let event = outgoing::to_event(out, &self.source, &self.detail_type);
        let size = event.size;
        Ok((event, size))
    }

    /// EventBridge has no single-event call: a `PutEvents` of one.
    async fn publish(&self, e: Event) -> Result<(), AwsError> {
        self.put(vec![e]).await.pop().expect("one result per entry")
    }

    async fn publish_batch(&self, events: Vec<Event>) -> Vec<Result<(), AwsError>> {
        self.put(events).await
    }

    async fn check(&self) -> Result<(), AwsError> {
        self.client
            .describe_event_bus()
            .name(&self.bus)
            .send()
            .await
            .map(|_| ())
            .map_err(|err| error::eventbridge("DescribeEventBus", err))
    }

    /// EventBridge promises no order.
    fn ordering(&self, _batched: bool) -> Ordering {
        Ordering::None
    }

    fn describe(&self, _subject: &Subject) -> Description {
        // AsyncAPI has no EventBridge binding: protocol, host and bus only.
        let mut d = Description::new("eventbridge", Payload::Message);
        d.host = self.host.clone();
        d.address = Some(self.bus.clone());
        d
    }
}
