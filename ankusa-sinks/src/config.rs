//! The `type`-tagged sink config and how it builds a sink.

use crate::config_error::ConfigError;
use crate::registered::RegisteredConfig;
use ankusa_message::MessageOption::{self, Format, InlineMaxBytes, Signing};
use ankusa_sink_core::Sink;
use ankusa_sink_log::LogConfig;
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// The registry: one line per sink `type`, in the order [`KNOWN_TYPES`] lists them,
///
/// `"type" => Variant(ConfigType), feature "cargo-feature" (or `always`),
///     messages [options], |config| build;`
///
/// where `messages` lists the [`MessageOption`]s the adapter honours (`Format`: `format` and
/// `cloudevents_type`; `Signing`: `[signing]`; `InlineMaxBytes`), so that a sink file
/// setting any other is refused here, in one place, before the adapter reads it (an
/// option an adapter cannot honour is never a silent no-op); and `build` makes the sink
/// from the adapter's config (it may `.await`) as a
/// `Result<impl Sink, impl Error>`; a constructor that cannot fail is wrapped in
/// [`infallible`]. [`KNOWN_TYPES`], [`SinkConfig`], its parsing, `kind` and `build` all come
/// from this table: adding a type is one line here, plus its optional dependency and its
/// feature in Cargo.toml. A type of another crate is registered at run time instead
/// ([`Registry::register`](crate::Registry::register)) and becomes
/// [`SinkConfig::Registered`].
macro_rules! sinks {
    ($($ty:literal => $variant:ident($config:ty), $(feature $feature:literal)? $(always)?,
        messages [$($option:ident),*], |$c:ident| $build:expr;)*) => {
        /// Every sink `type` this crate knows, compiled in or not.
        pub const KNOWN_TYPES: [&str; [$($ty),*].len()] = [$($ty),*];

        /// One sink, by type, with its adapter's options.
        #[derive(Debug, Clone)]
        #[non_exhaustive]
        pub enum SinkConfig {
            $(
                #[doc = concat!("`type = \"", $ty, "\"`.")]
                $(#[cfg(feature = $feature)])?
                $variant($config),
            )*
            /// A type another crate registered ([`Registry::register`](crate::Registry::register)).
            Registered(RegisteredConfig),
        }

        /// The message options a built-in `ty` honours (`None`: not one of
        /// [`KNOWN_TYPES`]).
        pub fn message_options(ty: &str) -> Option<&'static [MessageOption]> {
            match ty {
                $($ty => Some(&[$($option),*]),)*
                _ => None,
            }
        }

        impl SinkConfig {
            /// The adapter's options for `ty`, one of [`KNOWN_TYPES`], from the rest of the
            /// table.
            pub(crate) fn parse_builtin(ty: String, value: toml::Value) -> Result<Self, ConfigError> {
                match ty.as_str() {
                    $(
                        $(#[cfg(feature = $feature)])?
                        $ty => {
                            refuse_unsupported($ty, &value, &[$($option),*])?;
                            Ok(SinkConfig::$variant(options($ty, value)?))
                        }
                    )*
                    $($(
                        #[cfg(not(feature = $feature))]
                        $ty => Err(ConfigError::NotCompiled {
                            feature: $feature,
                            ty,
                        }),
                    )?)*
                    _ => Err(ConfigError::UnknownType {
                        ty,
                        known: KNOWN_TYPES.to_vec(),
                    }),
                }
            }

            /// The sink type.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(
                        $(#[cfg(feature = $feature)])?
                        SinkConfig::$variant(_) => $ty,
                    )*
                    SinkConfig::Registered(c) => c.kind(),
                }
            }

            /// Build the sink. Adapters that connect do so lazily or within their own
            /// timeouts.
            pub async fn build(&self) -> Result<Arc<dyn Sink>, ConfigError> {
                match self {
                    $(
                        $(#[cfg(feature = $feature)])?
                        SinkConfig::$variant($c) => {
                            let $c = $c.clone();
                            built($ty, $build)
                        }
                    )*
                    SinkConfig::Registered(c) => c.build().await,
                }
            }
        }
    };
}

sinks! {
    "log" => Log(ankusa_sink_log::LogConfig), always, messages [],
        |c| infallible(ankusa_sink_log::LogSink::new(c));
    "http" => Http(ankusa_sink_http::HttpConfig), feature "http", messages [Format, Signing],
        |c| ankusa_sink_http::HttpSink::new(c);
    "kafka" => Kafka(ankusa_sink_kafka::KafkaConfig), feature "kafka",
        messages [Format, Signing, InlineMaxBytes],
        |c| ankusa_sink_kafka::KafkaSink::new(c);
    "amqp" => Amqp(ankusa_sink_amqp::AmqpConfig), feature "amqp",
        messages [Format, Signing, InlineMaxBytes],
        |c| infallible(ankusa_sink_amqp::AmqpSink::new(c));
    "sqs" => Sqs(ankusa_sink_aws::SqsConfig), feature "sqs",
        messages [Format, Signing, InlineMaxBytes],
        |c| ankusa_sink_aws::SqsSink::new(c).await;
    "sns" => Sns(ankusa_sink_aws::SnsConfig), feature "sns",
        messages [Format, Signing, InlineMaxBytes],
        |c| ankusa_sink_aws::SnsSink::new(c).await;
    "kinesis" => Kinesis(ankusa_sink_aws::KinesisConfig), feature "kinesis",
        messages [InlineMaxBytes],
        |c| ankusa_sink_aws::KinesisSink::new(c).await;
    "eventbridge" => EventBridge(ankusa_sink_aws::EventBridgeConfig), feature "eventbridge",
        messages [InlineMaxBytes],
        |c| ankusa_sink_aws::EventBridgeSink::new(c).await;
    "pubsub" => Pubsub(ankusa_sink_pubsub::PubSubConfig), feature "pubsub",
        messages [Format, Signing, InlineMaxBytes],
        |c| ankusa_sink_pubsub::PubSubSink::new(c).await;
    "nats" => Nats(ankusa_sink_nats::NatsConfig), feature "nats",
        messages [Format, Signing, InlineMaxBytes],
        |c| infallible(ankusa_sink_nats::NatsSink::new(c));
    "redis" => Redis(ankusa_sink_redis::RedisConfig), feature "redis",
        messages [Format, Signing, InlineMaxBytes],
        |c| ankusa_sink_redis::RedisSink::new(c);
    "mqtt" => Mqtt(ankusa_sink_mqtt::MqttConfig), feature "mqtt",
        messages [Format, Signing, InlineMaxBytes],
        |c| ankusa_sink_mqtt::MqttSink::new(c);
}

/// Refuse a message option the type does not honour: the one place, and the one message,
/// for every built-in type (the key is named as written; values are never read here).
fn refuse_unsupported(
    ty: &'static str,
    value: &toml::Value,
    supported: &[MessageOption],
) -> Result<(), ConfigError> {
    let Some(table) = value.as_table() else {
        return Ok(());
    };
    for key in table.keys() {
        if let Some(option) = MessageOption::of_key(key)
            && !supported.contains(&option)
        {
            return Err(ConfigError::UnsupportedMessageOption {
                ty,
                key: key.clone(),
                supported: supported.iter().map(|o| o.key()).collect(),
            });
        }
    }
    Ok(())
}

/// A constructor that cannot fail, in the `Result` shape the registry's `build` takes.
fn infallible<S>(sink: S) -> Result<S, std::convert::Infallible> {
    Ok(sink)
}

/// The built sink, or the adapter's refusal with its source chain as text (adapters never
/// put secrets there).
pub(crate) fn built<S: Sink + 'static, E: std::error::Error>(
    ty: &'static str,
    sink: Result<S, E>,
) -> Result<Arc<dyn Sink>, ConfigError> {
    let e = match sink {
        Ok(sink) => return Ok(Arc::new(sink)),
        Err(e) => e,
    };
    let mut reason = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        reason.push_str(": ");
        reason.push_str(&s.to_string());
        next = s.source();
    }
    Err(ConfigError::Build { ty, reason })
}

pub(crate) fn options<T: DeserializeOwned>(
    ty: &'static str,
    value: toml::Value,
) -> Result<T, ConfigError> {
    // Through JSON so that errors come from `scrub`, which never echoes a value.
    let json = serde_json::to_value(value).map_err(|_| ConfigError::Field {
        ty,
        detail: "a value cannot be represented (TOML dates are not supported)".into(),
    })?;
    crate::scrub::from_value(json).map_err(|detail| ConfigError::Field { ty, detail })
}

pub(crate) fn syntax(format: &'static str, text: &str, e: &toml::de::Error) -> ConfigError {
    let place = e.span().map(|s| {
        let before = &text[..s.start.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
        format!("line {line}, column {col}: ")
    });
    ConfigError::Syntax {
        format,
        detail: format!("{}{}", place.unwrap_or_default(), e.message().trim()),
    }
}

impl SinkConfig {
    /// The embedded default: the log sink with default options.
    pub fn log() -> Self {
        SinkConfig::Log(LogConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::EnvAccess;

    fn err(text: &str) -> String {
        SinkConfig::from_toml_str(text).unwrap_err().to_string()
    }

    #[test]
    fn log_builds() {
        let c = SinkConfig::from_toml_str("type = \"log\"\nmessages = true").unwrap();
        assert_eq!(c.kind(), "log");
        assert!(matches!(c, SinkConfig::Log(ref log) if log.messages()));
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(err("messages = true").contains("missing field `type`"));
        assert!(err("type = 3").contains("`type` must be a string"));
        assert!(err("type = \"carrier-pigeon\"").contains("unknown sink type `carrier-pigeon`"));
        assert!(err("type = \"log\"\nmesages = true").contains("unknown field `mesages`"));
        assert!(err("type = \"log\"\nmessages = \"yes\"").contains("log sink config"));
        let e = err("type = \"log\"\nmessages = \"secret-value");
        assert!(e.contains("line 2"), "{e}");
        assert!(
            !e.contains("secret-value"),
            "syntax errors never echo the source: {e}"
        );
    }

    #[test]
    fn every_known_type_parses_or_names_its_feature() {
        // The CLI contract: the types and their order in error messages.
        assert_eq!(
            KNOWN_TYPES,
            [
                "log",
                "http",
                "kafka",
                "amqp",
                "sqs",
                "sns",
                "kinesis",
                "eventbridge",
                "pubsub",
                "nats",
                "redis",
                "mqtt"
            ]
        );
        for ty in KNOWN_TYPES {
            match SinkConfig::from_toml_str(&format!("type = \"{ty}\"")) {
                Ok(c) => assert_eq!(c.kind(), ty),
                Err(ConfigError::NotCompiled { ty: t, feature }) => {
                    assert_eq!((t.as_str(), feature), (ty, ty));
                }
                // Compiled in: the adapter's own config wants more keys.
                Err(ConfigError::Field { ty: t, .. }) => assert_eq!(t, ty),
                Err(e) => panic!("{ty}: {e}"),
            }
        }
    }

    #[cfg(not(feature = "http"))]
    #[test]
    fn types_not_compiled_in_name_their_feature() {
        let e = err("type = \"http\"\nurl = \"http://127.0.0.1/\"");
        assert!(e.contains("enable the `http` feature"), "{e}");
    }

    #[cfg(feature = "http")]
    #[test]
    fn http_builds_and_refuses_bad_values() {
        let c = SinkConfig::from_toml_str(
            "type = \"http\"\nurl = \"http://127.0.0.1:9/hook\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]",
        )
        .unwrap();
        assert_eq!(c.kind(), "http");
        assert!(!format!("{c:?}").contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
        assert!(err("type = \"http\"").contains("missing field `url`"));
        // Secret values: plain strings (`${VAR}` expanded) and the HTTP sink's own
        // `{ env = "VAR" }`, as existing files write them.
        let c = SinkConfig::from_toml_str(
            "type = \"http\"\nurl = \"http://127.0.0.1:9/hook\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\", { env = \"PATH\" }]\n[headers]\nx-plain = \"ops\"\nx-env = { env = \"PATH\" }\nx-expanded = \"${PATH}\"",
        )
        .unwrap();
        let path = std::env::var("PATH").unwrap();
        assert!(!format!("{c:?}").contains(&path), "{c:?}");
        let e = err(
            "type = \"http\"\nurl = \"http://127.0.0.1:9/\"\nsecrets = [{ env = \"ANKUSA_SINKS_TEST_UNSET_9D\" }]",
        );
        assert!(
            e.contains(
                "signing secret #0: environment variable ANKUSA_SINKS_TEST_UNSET_9D is not set"
            ),
            "{e}"
        );
        assert!(
            err("type = \"http\"\nurl = \"x\"\nmethodd = \"put\"")
                .contains("unknown field `methodd`")
        );
    }

    #[cfg(feature = "http")]
    #[tokio::test]
    async fn build_makes_the_sink_or_names_the_adapters_refusal() {
        let c = SinkConfig::from_toml_str("type = \"http\"\nurl = \"http://127.0.0.1:9/hook\"");
        assert!(c.unwrap().build().await.is_ok());
        // The adapter's config refuses invalid values when the file is read.
        let e = SinkConfig::from_toml_str("type = \"http\"\nurl = \"not a url\"").unwrap_err();
        assert!(matches!(e, ConfigError::Field { ty: "http", .. }), "{e}");
        assert!(e.to_string().starts_with("http sink config: "), "{e}");
        assert!(
            e.to_string().contains("url is not a valid absolute URL"),
            "{e}"
        );
        assert!(SinkConfig::log().build().await.is_ok());
    }

    #[cfg(feature = "pubsub")]
    #[test]
    fn pubsub_batch_delay_ms_is_still_read_as_linger_ms() {
        let base = "type = \"pubsub\"\nproject = \"p\"\ntopic = \"t\"\n\
                    endpoint = \"http://127.0.0.1:8085\"\n[batch]\nmax_messages = 5\n";
        let old = SinkConfig::from_toml_str(&format!("{base}delay_ms = 25")).unwrap();
        let new = SinkConfig::from_toml_str(&format!("{base}linger_ms = 25")).unwrap();
        let (SinkConfig::Pubsub(old), SinkConfig::Pubsub(new)) = (old, new) else {
            panic!("not pubsub configs");
        };
        assert_eq!(old, new);
        assert_eq!(new.batch().linger(), std::time::Duration::from_millis(25));
        assert_eq!(new.batch().max_messages().get(), 5);
        // Values are checked when the file is parsed, naming the option.
        let e = err(&format!("{base}delay_ms = 60001"));
        assert!(e.contains("batch.linger_ms"), "{e}");
        let e = err("type = \"pubsub\"\nproject = \"p\"\ntopic = \"a/b\"");
        assert!(
            e.contains("pubsub sink config") && e.contains("topic"),
            "{e}"
        );
    }

    #[cfg(feature = "all")]
    #[test]
    fn every_type_names_its_missing_and_unknown_fields() {
        for (ty, required, missing) in [
            ("kafka", "brokers = [\"127.0.0.1:9092\"]", "topic"),
            ("kafka", "topic = \"t\"", "bootstrap_servers"),
            ("amqp", "url = \"amqp://127.0.0.1\"", "exchange"),
            ("sqs", "region = \"us-east-1\"", "queue_url"),
            ("sns", "region = \"us-east-1\"", "topic_arn"),
            ("kinesis", "region = \"us-east-1\"", "stream"),
            ("eventbridge", "region = \"us-east-1\"", "source"),
            ("pubsub", "topic = \"t\"", "project"),
            ("redis", "stream = \"s\"", "url"),
            ("mqtt", "topic = \"t\"", "url"),
        ] {
            let e = err(&format!("type = \"{ty}\"\n{required}"));
            assert!(
                e.contains(&format!("missing field `{missing}`")),
                "{ty}: {e}"
            );
        }
        for (ty, text) in [
            ("kafka", "brokers = [\"127.0.0.1:9092\"]\ntopic = \"t\""),
            (
                "amqp",
                "url = \"amqp://u:p@127.0.0.1/%2f\"\nexchange = \"x\"\nrouting_key = \"k\"",
            ),
            (
                "sqs",
                "queue_url = \"http://127.0.0.1:4566/000000000000/q\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:4566\"",
            ),
            (
                "sns",
                "topic_arn = \"arn:aws:sns:us-east-1:000000000000:t\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:4566\"",
            ),
            (
                "pubsub",
                "project = \"p\"\ntopic = \"t\"\nendpoint = \"http://127.0.0.1:8085\"",
            ),
            (
                "kinesis",
                "stream = \"hooks\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:4566\"\npartition_key_template = \"{tenant_id}\"",
            ),
            (
                "eventbridge",
                "event_bus_name = \"hooks\"\nsource = \"com.example\"\nregion = \"us-east-1\"\nendpoint = \"http://127.0.0.1:4566\"",
            ),
            (
                "nats",
                "url = \"nats://u:p@127.0.0.1:4222\"\nsubject = \"hooks.in\"",
            ),
            (
                "redis",
                "url = \"redis://u:p@127.0.0.1:6379\"\nstream = \"s\"",
            ),
            (
                "mqtt",
                "url = \"mqtt://127.0.0.1:1883\"\ntopic = \"t\"\nusername = \"u\"\npassword = \"u:p@\"",
            ),
        ] {
            let c = SinkConfig::from_toml_str(&format!("type = \"{ty}\"\n{text}")).unwrap();
            assert_eq!(c.kind(), ty);
            assert!(
                !format!("{c:?}").contains("u:p@"),
                "{ty}: Debug shows credentials"
            );
            let e = err(&format!("type = \"{ty}\"\n{text}\nbogus_key = 1"));
            assert!(e.contains("bogus_key"), "{ty}: {e}");
        }
    }

    #[cfg(feature = "all")]
    #[test]
    fn wrong_types_never_echo_the_value() {
        const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        for (text, key) in [
            (format!("type = \"http\"\nurl = \"http://127.0.0.1/\"\nsecrets = \"{SECRET}\""), "secrets"),
            (format!("type = \"http\"\nurl = \"http://127.0.0.1/\"\nheaders = \"Bearer {SECRET}\""), "headers"),
            (format!("type = \"sqs\"\nqueue_url = \"http://127.0.0.1:4566/0/q\"\nregion = \"us-east-1\"\ncredentials = \"{SECRET}\""), "StaticCredentials"),
            ("type = \"kafka\"\nbootstrap_servers = [\"127.0.0.1:9092\"]\ntopic = \"t\"\n[sasl]\nmechanism = \"plain\"\nusername = \"u\"\npassword = 987654321987".to_owned(), "sasl.password"),
        ] {
            let e = err(&text);
            assert!(!e.contains("MfKQ9r8") && !e.contains("987654321987"), "echoed: {e}");
            // serde's `flatten` (the AWS configs) loses the key path; the type names it there.
            assert!(e.contains(&format!("`{key}`")) || e.contains(key), "names the key: {e}");
            assert!(e.contains("wrong type"), "{e}");
        }
    }

    #[test]
    fn the_log_sink_takes_no_message_options() {
        assert_eq!(message_options("log"), Some(&[][..]));
        assert_eq!(message_options("carrier-pigeon"), None);
        let e = SinkConfig::from_toml_str("type = \"log\"\ninline_max_bytes = 10").unwrap_err();
        assert!(
            matches!(e, ConfigError::UnsupportedMessageOption { ty: "log", ref key, .. } if key == "inline_max_bytes"),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "log sink config: `inline_max_bytes` is not supported by the log sink \
             (it takes no message options)"
        );
    }

    /// Each type's message options, as its `sinks!` line states them.
    const MESSAGE_OPTIONS: [(&str, &[&str]); 12] = [
        ("log", &[]),
        ("http", &["format", "signing"]),
        ("kafka", &["format", "signing", "inline_max_bytes"]),
        ("amqp", &["format", "signing", "inline_max_bytes"]),
        ("sqs", &["format", "signing", "inline_max_bytes"]),
        ("sns", &["format", "signing", "inline_max_bytes"]),
        ("kinesis", &["inline_max_bytes"]),
        ("eventbridge", &["inline_max_bytes"]),
        ("pubsub", &["format", "signing", "inline_max_bytes"]),
        ("nats", &["format", "signing", "inline_max_bytes"]),
        ("redis", &["format", "signing", "inline_max_bytes"]),
        ("mqtt", &["format", "signing", "inline_max_bytes"]),
    ];

    #[test]
    fn every_type_states_its_message_options() {
        for (ty, keys) in MESSAGE_OPTIONS {
            let stated: Vec<&str> = message_options(ty)
                .unwrap()
                .iter()
                .map(|o| o.key())
                .collect();
            assert_eq!(stated, keys, "{ty}");
        }
        assert_eq!(MESSAGE_OPTIONS.map(|(ty, _)| ty), KNOWN_TYPES);
    }

    /// A message option a type cannot honour is refused by the registry, with one message,
    /// before the adapter reads the file: every (type, key) pair the table leaves out.
    #[cfg(feature = "all")]
    #[test]
    fn message_options_a_type_cannot_honour_are_refused_in_one_place() {
        let keys = [
            ("format", "format = \"cloudevents\""),
            (
                "cloudevents_type",
                "cloudevents_type = \"com.example.hook\"",
            ),
            ("inline_max_bytes", "inline_max_bytes = 1024"),
            (
                "signing",
                "[signing]\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]",
            ),
        ];
        let mut refused = Vec::new();
        for (ty, supported) in MESSAGE_OPTIONS {
            for (key, text) in keys {
                let option = MessageOption::of_key(key).unwrap();
                if supported.contains(&option.key()) {
                    continue;
                }
                // Nothing else is needed: the refusal comes before the adapter's own keys.
                let e = SinkConfig::from_toml_str(&format!("type = \"{ty}\"\n{text}")).unwrap_err();
                let ConfigError::UnsupportedMessageOption { ty: t, key: k, .. } = &e else {
                    panic!("{ty} {key}: {e}");
                };
                assert_eq!((*t, k.as_str()), (ty, key));
                let takes = if supported.is_empty() {
                    "it takes no message options".to_owned()
                } else {
                    format!("its message options: {}", supported.join(", "))
                };
                assert_eq!(
                    e.to_string(),
                    format!(
                        "{ty} sink config: `{key}` is not supported by the {ty} sink ({takes})"
                    )
                );
                assert!(!e.to_string().contains("MfKQ9r8"), "{e}");
                refused.push(format!("{ty}.{key}"));
            }
        }
        assert_eq!(
            refused,
            [
                "log.format",
                "log.cloudevents_type",
                "log.inline_max_bytes",
                "log.signing",
                "http.inline_max_bytes",
                "kinesis.format",
                "kinesis.cloudevents_type",
                "kinesis.signing",
                "eventbridge.format",
                "eventbridge.cloudevents_type",
                "eventbridge.signing",
            ]
        );
        // A supported option passes through to the adapter, which reads it.
        let c = SinkConfig::from_toml_str(
            "type = \"kafka\"\nbrokers = [\"127.0.0.1:9092\"]\ntopic = \"t\"\nformat = \"cloudevents\"",
        )
        .unwrap();
        let SinkConfig::Kafka(k) = c else {
            panic!("not kafka")
        };
        assert!(k.message().cloudevents().is_some());
    }

    #[test]
    fn untrusted_configs_cannot_read_the_environment() {
        let text = "type = \"log\"\nmessages = \"${HOME}\"";
        let e = SinkConfig::from_toml_str_with(text, &EnvAccess::None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("may not read environment variables"), "{e}");
        let e = SinkConfig::from_json_str_with(
            r#"{"type":"log","messages":"${HOME}"}"#,
            &EnvAccess::None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("may not read environment variables"), "{e}");
        assert!(SinkConfig::from_toml_str_with("type = \"log\"", &EnvAccess::None).is_ok());
    }

    /// Every place the HTTP sink reads a `{ env = "VAR" }` value, in the padded form that
    /// slipped past a guard looking only at one-key tables: refused, key named.
    #[cfg(feature = "http")]
    #[test]
    fn untrusted_configs_cannot_read_the_environment_through_env_tables() {
        let env = r#"{ env = "HOME", pad = 1 }"#;
        let base = "type = \"http\"\nurl = \"https://example.com/h\"";
        for (text, key) in [
            (format!("type = \"http\"\nurl = {env}"), "url"),
            (format!("{base}\nproxy = {env}"), "proxy"),
            (format!("{base}\nsecrets = [{env}]"), "secrets[0]"),
            (format!("{base}\n[headers]\nx-a = {env}"), "headers.x-a"),
            (
                format!(
                    "{base}\n[oauth2]\ntoken_url = {env}\nclient_id = \"c\"\nclient_secret = \"s\""
                ),
                "oauth2.token_url",
            ),
            (
                format!(
                    "{base}\n[oauth2]\ntoken_url = \"https://example.com/t\"\nclient_id = \"c\"\nclient_secret = {env}"
                ),
                "oauth2.client_secret",
            ),
        ] {
            for access in [EnvAccess::None, EnvAccess::Prefix("ANKUSA_T_".into())] {
                let e = SinkConfig::from_toml_str_with(&text, &access)
                    .unwrap_err()
                    .to_string();
                assert!(
                    e.contains("may not read environment variables"),
                    "{text}: {e}"
                );
                assert!(e.contains(key), "{text}: {e}");
            }
        }
    }

    #[test]
    fn json_works_too() {
        let c = SinkConfig::from_json_str(r#"{"type":"log","messages":false}"#).unwrap();
        assert_eq!(c.kind(), "log");
        assert!(SinkConfig::from_json_str("{").is_err());
    }
}
