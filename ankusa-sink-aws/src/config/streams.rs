//! The always-valid configs of the two services without message attributes: a Kinesis
//! stream and an EventBridge event bus, plus the shared [`AwsOptions`] minus the two options
//! they cannot honour (`message_group_id`, `[signing]`, a CloudEvents `format`).

use super::destination::SinkFile;
use super::resolved::{Resolved, resolved_accessors};
use super::{AwsOptions, ConfigError, EVENTBRIDGE_MAX_ENTRY_BYTES, KINESIS_MAX_RECORD_BYTES};
use ankusa_message::MessageOption;
use ankusa_message::template::{AbsentTenant, KeyTemplate, Placeholder};
use serde::Deserialize;

/// Kinesis: the longest partition key, in Unicode characters.
#[cfg(feature = "kinesis")]
pub(crate) const KINESIS_MAX_PARTITION_KEY_CHARS: usize = 256;
/// EventBridge: the longest `DetailType`, in characters.
const EVENTBRIDGE_MAX_DETAIL_TYPE: usize = 128;
/// EventBridge: the longest `Source`, in characters.
const EVENTBRIDGE_MAX_SOURCE: usize = 256;
/// The default `detail_type`.
const DEFAULT_DETAIL_TYPE: &str = "ankusa.message.v1";
/// The default event bus.
const DEFAULT_EVENT_BUS: &str = "default";

/// Refuse the shared options a service without message attributes cannot honour: a
/// message group (neither service has one), signing (the signature travels in message
/// attributes, which neither service has) and CloudEvents (these sinks send Message v1
/// only). Never a silent no-op.
fn refuse_attribute_options(sink: &'static str, options: &AwsOptions) -> Result<(), ConfigError> {
    if options.message_group_id.is_some() {
        return Err(ConfigError::Unsupported {
            option: "message_group_id",
            sink,
            why: "it has no message groups",
        });
    }
    if options.message.signing().is_some() {
        return Err(ConfigError::Unsupported {
            option: "signing",
            sink,
            why: "it has no message attributes to carry the signature in",
        });
    }
    if let Some(option) = options.message.key_set(MessageOption::Format) {
        return Err(ConfigError::Unsupported {
            option,
            sink,
            why: "it sends Message v1 only",
        });
    }
    Ok(())
}

/// The limit `max_message_bytes` resolves to, never above the service's own `max`.
fn service_limit(options: &AwsOptions, max: usize) -> Result<usize, ConfigError> {
    let resolved = options.validate(max)?;
    if resolved > max {
        return Err(ConfigError::TooLarge {
            field: "max_message_bytes",
            value: resolved,
            max,
        });
    }
    Ok(resolved)
}

/// The Kinesis Data Streams sink's options: a valid stream name, a partition key template
/// and valid [`AwsOptions`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SinkFile<KinesisKeys>")]
#[non_exhaustive]
pub struct KinesisConfig {
    stream: String,
    partition_key: Option<KeyTemplate>,
    resolved: Resolved,
}

/// The Kinesis keys of a sink file.
#[derive(Deserialize)]
struct KinesisKeys {
    stream: String,
    partition_key_template: Option<String>,
}

impl TryFrom<SinkFile<KinesisKeys>> for KinesisConfig {
    type Error = ConfigError;
    fn try_from(file: SinkFile<KinesisKeys>) -> Result<Self, ConfigError> {
        let (own, options) = file.split()?;
        let config = KinesisConfig::new(own.stream, options)?;
        match own.partition_key_template {
            Some(t) => config.with_partition_key_template(&t),
            None => Ok(config),
        }
    }
}

impl KinesisConfig {
    /// Options for the stream named `stream` (1 to 128 of `a-z A-Z 0-9 _ . -`).
    pub fn new(stream: impl Into<String>, options: AwsOptions) -> Result<Self, ConfigError> {
        let stream = stream.into();
        if stream.is_empty() {
            return Err(ConfigError::Empty("stream"));
        }
        if stream.len() > 128 {
            return Err(ConfigError::TooLarge {
                field: "stream",
                value: stream.len(),
                max: 128,
            });
        }
        if !stream
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        {
            return Err(ConfigError::Invalid {
                field: "stream",
                why: "a stream name is letters, digits, `_`, `.` and `-` (not an ARN)",
            });
        }
        refuse_attribute_options("kinesis", &options)?;
        let max_message_bytes = service_limit(&options, KINESIS_MAX_RECORD_BYTES)?;
        Ok(KinesisConfig {
            stream,
            partition_key: None,
            resolved: Resolved::new(options, max_message_bytes),
        })
    }

    /// Render each record's partition key from `template` (`{tenant_id}`, `{source_id}`,
    /// `{id}`, `{dedupe_key}`; a hook without a tenant renders `{tenant_id}` as `default`).
    /// Default: the hook's idempotency key. A template that can render empty (no text,
    /// only `{dedupe_key}`) is refused: Kinesis takes no empty key.
    pub fn with_partition_key_template(mut self, template: &str) -> Result<Self, ConfigError> {
        let key = KeyTemplate::parse(template, AbsentTenant::Default)
            .map_err(ConfigError::PartitionKeyTemplate)?;
        let never_empty = !key.literal_text().is_empty()
            || [
                Placeholder::TenantId,
                Placeholder::SourceId,
                Placeholder::Id,
            ]
            .into_iter()
            .any(|p| key.uses(p));
        if !never_empty {
            return Err(ConfigError::Invalid {
                field: "partition_key_template",
                why: "it renders empty for a hook without a dedupe key: add text or \
                      {tenant_id}, {source_id} or {id}",
            });
        }
        self.partition_key = Some(key);
        Ok(self)
    }

    /// The stream name.
    pub fn stream(&self) -> &str {
        &self.stream
    }
    /// The partition key template, when one is set (else the idempotency key is the key).
    pub fn partition_key_template(&self) -> Option<&KeyTemplate> {
        self.partition_key.as_ref()
    }
}

resolved_accessors!(
    KinesisConfig,
    "The resolved record size limit (data plus partition key).",
    region
);

/// The EventBridge sink's options: an event bus, the events' `Source` and `DetailType`, and
/// valid [`AwsOptions`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SinkFile<EventBridgeKeys>")]
#[non_exhaustive]
pub struct EventBridgeConfig {
    event_bus_name: String,
    source: String,
    detail_type: String,
    resolved: Resolved,
}

/// The EventBridge keys of a sink file.
#[derive(Deserialize)]
struct EventBridgeKeys {
    event_bus_name: Option<String>,
    source: String,
    detail_type: Option<String>,
}

impl TryFrom<SinkFile<EventBridgeKeys>> for EventBridgeConfig {
    type Error = ConfigError;
    fn try_from(file: SinkFile<EventBridgeKeys>) -> Result<Self, ConfigError> {
        let (own, options) = file.split()?;
        let config = EventBridgeConfig::new(own.source, options)?;
        let config = match own.event_bus_name {
            Some(bus) => config.with_event_bus_name(bus)?,
            None => config,
        };
        match own.detail_type {
            Some(t) => config.with_detail_type(t),
            None => Ok(config),
        }
    }
}

/// The region of an event bus ARN, `arn:<partition>:events:<region>:<account>:event-bus/<name>`.
fn event_bus_arn_region(bus: &str) -> Result<Option<String>, ConfigError> {
    if !bus.starts_with("arn:") {
        return Ok(None);
    }
    match bus.split(':').collect::<Vec<_>>().as_slice() {
        ["arn", partition, "events", region, account, resource]
            if !partition.is_empty()
                && !region.is_empty()
                && !account.is_empty()
                && resource
                    .strip_prefix("event-bus/")
                    .is_some_and(|n| !n.is_empty()) =>
        {
            Ok(Some((*region).to_owned()))
        }
        _ => Err(ConfigError::Invalid {
            field: "event_bus_name",
            why: "an ARN must be arn:<partition>:events:<region>:<account>:event-bus/<name>",
        }),
    }
}

resolved_accessors!(
    EventBridgeConfig,
    "The resolved entry size limit (`Detail`, `Source` and `DetailType`).",
    region
);

impl EventBridgeConfig {
    /// Options for events of `source` on the default event bus, with `DetailType`
    /// `ankusa.message.v1`. EventBridge refuses a `source` that starts with `aws.` (AWS
    /// services' own): a config error here.
    pub fn new(source: impl Into<String>, options: AwsOptions) -> Result<Self, ConfigError> {
        let source = source.into();
        if source.trim().is_empty() {
            return Err(ConfigError::Empty("source"));
        }
        if source.chars().count() > EVENTBRIDGE_MAX_SOURCE {
            return Err(ConfigError::TooLarge {
                field: "source",
                value: source.chars().count(),
                max: EVENTBRIDGE_MAX_SOURCE,
            });
        }
        if source.to_ascii_lowercase().starts_with("aws.") {
            return Err(ConfigError::Invalid {
                field: "source",
                why: "sources starting with `aws.` are reserved for AWS services",
            });
        }
        refuse_attribute_options("eventbridge", &options)?;
        let max_message_bytes = service_limit(&options, EVENTBRIDGE_MAX_ENTRY_BYTES)?;
        Ok(EventBridgeConfig {
            event_bus_name: DEFAULT_EVENT_BUS.to_owned(),
            source,
            detail_type: DEFAULT_DETAIL_TYPE.to_owned(),
            resolved: Resolved::new(options, max_message_bytes),
        })
    }

    /// Put events on `bus`: a bus name or an event bus ARN (its region is the default
    /// region). Default `default`.
    pub fn with_event_bus_name(mut self, bus: impl Into<String>) -> Result<Self, ConfigError> {
        let bus = bus.into();
        if bus.trim().is_empty() {
            return Err(ConfigError::Empty("event_bus_name"));
        }
        if bus.len() > 1600 {
            return Err(ConfigError::TooLarge {
                field: "event_bus_name",
                value: bus.len(),
                max: 1600,
            });
        }
        let from_arn = event_bus_arn_region(&bus)?;
        // The `region` option, else the ARN's.
        self.resolved.region = self.resolved.options.region.clone().or(from_arn);
        self.event_bus_name = bus;
        Ok(self)
    }

    /// Set the events' `DetailType` (1 to 128 characters).
    pub fn with_detail_type(mut self, detail_type: impl Into<String>) -> Result<Self, ConfigError> {
        let detail_type = detail_type.into();
        if detail_type.trim().is_empty() {
            return Err(ConfigError::Empty("detail_type"));
        }
        if detail_type.chars().count() > EVENTBRIDGE_MAX_DETAIL_TYPE {
            return Err(ConfigError::TooLarge {
                field: "detail_type",
                value: detail_type.chars().count(),
                max: EVENTBRIDGE_MAX_DETAIL_TYPE,
            });
        }
        self.detail_type = detail_type;
        Ok(self)
    }

    /// The event bus (a name or an ARN).
    pub fn event_bus_name(&self) -> &str {
        &self.event_bus_name
    }
    /// The events' `Source`.
    pub fn source(&self) -> &str {
        &self.source
    }
    /// The events' `DetailType`.
    pub fn detail_type(&self) -> &str {
        &self.detail_type
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_message::MessageOptions;
    use ankusa_message::cloudevents::{CloudEvents, Mode};
    use ankusa_message::signing::Signer;
    use std::num::NonZeroUsize;

    fn opts() -> AwsOptions {
        AwsOptions::default().with_region("us-east-1")
    }

    #[test]
    fn kinesis_stream_names_and_limits() {
        let c = KinesisConfig::new("hooks_1.a-b", opts()).unwrap();
        assert_eq!(c.stream(), "hooks_1.a-b");
        assert_eq!(c.max_message_bytes(), KINESIS_MAX_RECORD_BYTES);
        assert!(c.partition_key_template().is_none());
        assert_eq!(
            KinesisConfig::new("", opts()).unwrap_err(),
            ConfigError::Empty("stream")
        );
        for bad in ["a b", "arn:aws:kinesis:us-east-1:1:stream/s", "ü"] {
            let e = KinesisConfig::new(bad, opts()).unwrap_err();
            assert!(e.to_string().starts_with("stream is invalid"), "{bad}: {e}");
        }
        let e = KinesisConfig::new("s".repeat(129), opts()).unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::TooLarge {
                    field: "stream",
                    ..
                }
            ),
            "{e}"
        );
        let lower = opts().with_max_message_bytes(NonZeroUsize::new(500_000).unwrap());
        assert_eq!(
            KinesisConfig::new("s", lower).unwrap().max_message_bytes(),
            500_000
        );
    }

    #[test]
    fn kinesis_partition_key_template_is_parsed_and_never_renders_empty() {
        let c = KinesisConfig::new("s", opts())
            .unwrap()
            .with_partition_key_template("{tenant_id}/{source_id}")
            .unwrap();
        let t = c.partition_key_template().unwrap();
        assert_eq!(t.as_str(), "{tenant_id}/{source_id}");
        assert_eq!(t.absent_tenant(), AbsentTenant::Default);
        for ok in ["fixed", "{dedupe_key}-x", "{id}", "{tenant_id}"] {
            assert!(
                KinesisConfig::new("s", opts())
                    .unwrap()
                    .with_partition_key_template(ok)
                    .is_ok(),
                "{ok}"
            );
        }
        for bad in ["", "{dedupe_key}"] {
            let e = KinesisConfig::new("s", opts())
                .unwrap()
                .with_partition_key_template(bad)
                .unwrap_err();
            assert!(e.to_string().contains("renders empty"), "{bad}: {e}");
        }
        let e = KinesisConfig::new("s", opts())
            .unwrap()
            .with_partition_key_template("{nope}")
            .unwrap_err();
        assert!(matches!(e, ConfigError::PartitionKeyTemplate(_)), "{e}");
        assert!(e.to_string().starts_with("partition_key_template: "), "{e}");
    }

    #[test]
    fn options_neither_service_can_honour_are_config_errors() {
        let signer = Signer::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]).unwrap();
        for (sink, e) in [
            (
                "kinesis",
                KinesisConfig::new(
                    "s",
                    opts().with_message(MessageOptions::new().with_signing(signer.clone())),
                )
                .unwrap_err(),
            ),
            (
                "eventbridge",
                EventBridgeConfig::new(
                    "app",
                    opts().with_message(MessageOptions::new().with_signing(signer)),
                )
                .unwrap_err(),
            ),
        ] {
            assert_eq!(
                e,
                ConfigError::Unsupported {
                    option: "signing",
                    sink,
                    why: "it has no message attributes to carry the signature in",
                }
            );
            assert!(!e.to_string().contains("MfKQ9r8"), "{e}");
        }
        let events = CloudEvents::new(Mode::Structured, "t.x").unwrap();
        for e in [
            KinesisConfig::new(
                "s",
                opts().with_message(MessageOptions::new().with_cloudevents(Some(events.clone()))),
            )
            .unwrap_err(),
            EventBridgeConfig::new(
                "app",
                opts().with_message(MessageOptions::new().with_cloudevents(Some(events))),
            )
            .unwrap_err(),
        ] {
            assert!(
                e.to_string()
                    .starts_with("`format` is not supported by the "),
                "{e}"
            );
        }
        let e = KinesisConfig::new("s", opts().with_message_group_id("g")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`message_group_id` is not supported by the kinesis sink: it has no message groups"
        );
        let e = EventBridgeConfig::new("app", opts().with_message_group_id("g")).unwrap_err();
        assert!(matches!(e, ConfigError::Unsupported { .. }), "{e}");
        // Over the service's own limit.
        let big = opts().with_max_message_bytes(NonZeroUsize::new(300_000).unwrap());
        let e = EventBridgeConfig::new("app", big).unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::TooLarge {
                    field: "max_message_bytes",
                    max: 262_144,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn eventbridge_source_detail_type_and_bus() {
        let c = EventBridgeConfig::new("com.example.hooks", AwsOptions::default()).unwrap();
        assert_eq!(c.event_bus_name(), "default");
        assert_eq!(c.detail_type(), "ankusa.message.v1");
        assert_eq!(c.max_message_bytes(), EVENTBRIDGE_MAX_ENTRY_BYTES);
        assert_eq!(c.region(), None);
        let c = c
            .with_event_bus_name("arn:aws:events:eu-west-1:123456789012:event-bus/orders")
            .unwrap()
            .with_detail_type("Hook Received")
            .unwrap();
        assert_eq!(c.region(), Some("eu-west-1"));
        assert_eq!(c.detail_type(), "Hook Received");
        // The region option wins over the ARN's.
        let c = EventBridgeConfig::new("app", opts())
            .unwrap()
            .with_event_bus_name("arn:aws:events:eu-west-1:1:event-bus/b")
            .unwrap();
        assert_eq!(c.region(), Some("us-east-1"));
        for bad in ["aws.hooks", "AWS.ec2"] {
            let e = EventBridgeConfig::new(bad, opts()).unwrap_err();
            assert!(e.to_string().contains("reserved for AWS"), "{bad}: {e}");
        }
        assert_eq!(
            EventBridgeConfig::new(" ", opts()).unwrap_err(),
            ConfigError::Empty("source")
        );
        let e = EventBridgeConfig::new("app", opts())
            .unwrap()
            .with_detail_type("d".repeat(129))
            .unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::TooLarge {
                    field: "detail_type",
                    ..
                }
            ),
            "{e}"
        );
        for bad in [
            "arn:aws:events:r:1:rule/x",
            "arn:aws:sqs:r:1:event-bus/x",
            "arn:",
        ] {
            let e = EventBridgeConfig::new("app", opts())
                .unwrap()
                .with_event_bus_name(bad)
                .unwrap_err();
            assert!(
                e.to_string().starts_with("event_bus_name is invalid"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn sink_files_deserialize_and_refuse_unknown_or_unhonoured_keys() {
        let c: KinesisConfig = serde_json::from_value(serde_json::json!({
            "stream": "hooks", "region": "us-east-1", "endpoint": "http://127.0.0.1:4566/",
            "partition_key_template": "{tenant_id}", "batch": {"linger_ms": 5},
            "credentials": {"access_key_id": "AKIAX", "secret_access_key": "s3cr3t-value"}
        }))
        .unwrap();
        assert_eq!(c.endpoint(), Some("http://127.0.0.1:4566"));
        assert_eq!(c.partition_key_template().unwrap().as_str(), "{tenant_id}");
        let dbg = format!("{c:?}");
        assert!(
            !dbg.contains("s3cr3t-value") && !dbg.contains("AKIAX"),
            "{dbg}"
        );
        let c: EventBridgeConfig = serde_json::from_value(serde_json::json!({
            "event_bus_name": "orders", "source": "com.example", "detail_type": "Hook",
            "region": "us-east-1"
        }))
        .unwrap();
        assert_eq!(
            (c.event_bus_name(), c.source(), c.detail_type()),
            ("orders", "com.example", "Hook")
        );
        for (json, says) in [
            (serde_json::json!({"stream": "s", "strem": 1}), "strem"),
            (
                serde_json::json!({"stream": "s", "format": "cloudevents"}),
                "format",
            ),
            (
                serde_json::json!({"stream": "s", "queue_url": "x"}),
                "queue_url",
            ),
        ] {
            let e = serde_json::from_value::<KinesisConfig>(json).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
        for (json, says) in [
            (
                serde_json::json!({"source": "a", "format": "cloudevents"}),
                "format",
            ),
            (serde_json::json!({"source": "aws.x"}), "reserved"),
            (serde_json::json!({"event_bus_name": "b"}), "source"),
            (
                serde_json::json!({"source": "a", "signing": {"secrets": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}}),
                "signing",
            ),
        ] {
            let e = serde_json::from_value::<EventBridgeConfig>(json).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
            assert!(!e.to_string().contains("MfKQ9r8"), "{e}");
        }
    }
}
