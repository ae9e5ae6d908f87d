//! The `type`-tagged source config of `forward --from` and how it opens a source.

use crate::config::syntax;
use crate::config_error::ConfigError;
use crate::env::EnvAccess;
use ankusa_source::{Source, SourceError, SourceOptions};

/// The source registry: one line per source `type`, in the order [`KNOWN_SOURCE_TYPES`]
/// lists them, as the `sinks!` table of config.rs lists sinks:
///
/// `"type" => Variant(ConfigType), feature "cargo-feature", |config, options| open;`
///
/// where `open` connects from the adapter's config and the [`SourceOptions`] (it may
/// `.await`) as a `Result<impl Source, E>` with `E: Into<SourceError>`.
/// [`KNOWN_SOURCE_TYPES`], [`SourceConfig`], its parsing, `kind` and `open` all come from
/// this table: adding a source type is one line here, plus its adapter's `source` feature
/// in Cargo.toml (see CONTRIBUTING.md, "Adding a source").
macro_rules! sources {
    ($($ty:literal => $variant:ident($config:ty), feature $feature:literal,
        |$c:ident, $o:ident| $open:expr;)*) => {
        /// Every source `type` this crate knows, compiled in or not.
        pub const KNOWN_SOURCE_TYPES: [&str; [$($ty),*].len()] = [$($ty),*];

        /// One durable source, by type, with its adapter's options.
        #[derive(Debug, Clone)]
        #[non_exhaustive]
        pub enum SourceConfig {
            $(
                #[doc = concat!("`type = \"", $ty, "\"`.")]
                #[cfg(feature = $feature)]
                $variant($config),
            )*
        }

        impl SourceConfig {
            /// The adapter's options for `ty`, one of [`KNOWN_SOURCE_TYPES`], from the rest
            /// of the table.
            fn parse_builtin(ty: String, value: toml::Value) -> Result<Self, SourceConfigError> {
                let _ = &value;
                match ty.as_str() {
                    $(
                        #[cfg(feature = $feature)]
                        $ty => Ok(SourceConfig::$variant(crate::config::options($ty, value)?)),
                        #[cfg(not(feature = $feature))]
                        $ty => Err(SourceConfigError::NotCompiled {
                            feature: $feature,
                            ty,
                        }),
                    )*
                    _ => Err(SourceConfigError::UnknownType(ty)),
                }
            }

            /// The source type.
            pub fn kind(&self) -> &'static str {
                match *self {
                    $(
                        #[cfg(feature = $feature)]
                        SourceConfig::$variant(_) => $ty,
                    )*
                }
            }

            /// Connect and start reading: records come from the source's `next`.
            pub async fn open(&self, options: &SourceOptions) -> Result<Box<dyn Source>, SourceError> {
                let _ = options;
                match self {
                    $(
                        #[cfg(feature = $feature)]
                        SourceConfig::$variant($c) => {
                            let $o = options;
                            Ok(Box::new($open.map_err(Into::<SourceError>::into)?))
                        }
                    )*
                    #[allow(unreachable_patterns)]
                    _ => unreachable!("a source config exists only for compiled-in types"),
                }
            }
        }
    };
}

sources! {
    "kafka" => Kafka(ankusa_sink_kafka::KafkaSourceConfig), feature "kafka",
        |c, o| ankusa_sink_kafka::KafkaSource::new(c, o);
    "amqp" => Amqp(ankusa_sink_amqp::AmqpSourceConfig), feature "amqp",
        |c, o| ankusa_sink_amqp::AmqpSource::new(c, o).await;
    "nats" => Nats(ankusa_sink_nats::NatsSourceConfig), feature "nats",
        |c, o| ankusa_sink_nats::NatsSource::open(c, o).await;
    "sqs" => Sqs(ankusa_sink_aws::SqsSourceConfig), feature "sqs",
        |c, o| ankusa_sink_aws::SqsSource::open(c, o).await;
}

impl SourceConfig {
    /// The source that reads for the sink `sink` alone, so that a failing or slow sink
    /// holds back only its own records: a Kafka source in the group `<group>-<sink>`, a
    /// NATS source through the durable consumer `<consumer>-<sink>`, an AMQP source bound
    /// to an exchange through the queue `<queue>-<sink>` (bound the same way). `Ok(None)`
    /// when this source cannot be split (an AMQP source that names only a queue, an SQS
    /// queue): every sink must share it. `sink` is made a broker name: characters other than ASCII
    /// letters, digits, `_`, `-` (and `.`, but for NATS) become `_`.
    ///
    /// # Errors
    /// The name it makes is longer than the broker takes (255 bytes).
    pub fn for_sink(&self, sink: &str) -> Result<Option<SourceConfig>, SourceConfigError> {
        let _ = sink;
        match self {
            #[cfg(feature = "kafka")]
            SourceConfig::Kafka(c) => Ok(Some(SourceConfig::Kafka(c.for_sink(sink)))),
            #[cfg(feature = "amqp")]
            SourceConfig::Amqp(c) => {
                c.for_sink(sink)
                    .map(|c| c.map(SourceConfig::Amqp))
                    .map_err(|e| SourceConfigError::Field {
                        ty: "amqp",
                        detail: e.to_string(),
                    })
            }
            #[cfg(feature = "nats")]
            SourceConfig::Nats(c) => c
                .for_sink(sink)
                .map(|c| Some(SourceConfig::Nats(c)))
                .map_err(|e| SourceConfigError::Field {
                    ty: "nats",
                    detail: e.to_string(),
                }),
            // An SQS queue gives each message to one reader: it cannot be read per sink.
            #[cfg(feature = "sqs")]
            SourceConfig::Sqs(_) => Ok(None),
            #[allow(unreachable_patterns)]
            _ => Ok(None),
        }
    }

    /// What this source reads from, as the broker names it: the consumer group, the queue
    /// or the durable consumer (never a secret). Tells two per-sink sources apart.
    pub fn reads_as(&self) -> String {
        match self {
            #[cfg(feature = "kafka")]
            SourceConfig::Kafka(c) => format!("group {}", c.group()),
            #[cfg(feature = "amqp")]
            SourceConfig::Amqp(c) => format!("queue {}", c.queue()),
            #[cfg(feature = "nats")]
            SourceConfig::Nats(c) => format!("consumer {}", c.consumer()),
            #[cfg(feature = "sqs")]
            SourceConfig::Sqs(c) => format!("queue {}", c.queue_name()),
            #[allow(unreachable_patterns)]
            _ => String::new(),
        }
    }
}

/// Why a source config was refused. Messages name the key, type or feature at fault and
/// never echo a configured value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceConfigError {
    /// The file is not valid TOML.
    #[error("source config is not valid TOML: {0}")]
    Syntax(String),
    /// No `type` key, or not a string.
    #[error("source config is missing a string field `type` (one of: {})", KNOWN_SOURCE_TYPES.join(", "))]
    MissingType,
    /// `type` names no source.
    #[error("unknown source type `{0}` (known: {known})", known = KNOWN_SOURCE_TYPES.join(", "))]
    UnknownType(String),
    /// The type exists but its cargo feature is off.
    #[error(
        "source type `{ty}` is not compiled in: enable the `{feature}` feature of ankusa-sinks"
    )]
    NotCompiled {
        /// The type.
        ty: String,
        /// The feature that brings it.
        feature: &'static str,
    },
    /// A key is unknown, missing, has the wrong type, or the adapter refused its value.
    #[error("{ty} source config: {detail}")]
    Field {
        /// The source type.
        ty: &'static str,
        /// The key path and what is wrong (never the value).
        detail: String,
    },
    /// A `${VAR}` reference could not be resolved.
    #[error("source config key {path}: {detail}")]
    Env {
        /// Dotted key path.
        path: String,
        /// What is wrong.
        detail: String,
    },
}

impl From<ConfigError> for SourceConfigError {
    fn from(e: ConfigError) -> Self {
        match e {
            ConfigError::Syntax { detail, .. } => SourceConfigError::Syntax(detail),
            ConfigError::Field { ty, detail } | ConfigError::Build { ty, reason: detail } => {
                SourceConfigError::Field { ty, detail }
            }
            ConfigError::Env { path, detail } => SourceConfigError::Env { path, detail },
            ConfigError::MissingType { .. } | ConfigError::TypeNotString => {
                SourceConfigError::MissingType
            }
            ConfigError::UnknownType { ty, .. } => SourceConfigError::UnknownType(ty),
            ConfigError::NotCompiled { ty, feature } => {
                SourceConfigError::NotCompiled { ty, feature }
            }
            // Sink files only; kept as its text should a source ever be refused so.
            ConfigError::UnsupportedMessageOption { ty, .. } => SourceConfigError::Field {
                ty,
                detail: e.to_string(),
            },
        }
    }
}

impl SourceConfig {
    /// Parse a TOML document whose top level is the source's table. `${VAR}` references
    /// may read any environment variable: the config is trusted input.
    pub fn from_toml_str(text: &str) -> Result<Self, SourceConfigError> {
        let mut table: toml::Table = toml::from_str(text).map_err(|e| syntax("TOML", text, &e))?;
        let ty = match table.remove("type") {
            Some(toml::Value::String(s)) => s,
            _ => return Err(SourceConfigError::MissingType),
        };
        let mut value = toml::Value::Table(table);
        crate::env::expand(&mut value, "", &EnvAccess::Any)?;
        Self::parse_builtin(ty, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_problem_never_a_value() {
        let e = |t: &str| SourceConfig::from_toml_str(t).unwrap_err().to_string();
        assert!(e("topic = \"t\"").contains("missing a string field `type`"));
        assert!(e("type = \"smoke-signal\"").contains("unknown source type `smoke-signal`"));
        let bad = e("type = \"kafka\"\nbrokers = \"secret-value");
        assert!(!bad.contains("secret-value"), "{bad}");
    }

    #[test]
    fn every_known_source_type_parses_or_names_its_feature() {
        // The CLI contract: the types and their order in error messages.
        assert_eq!(KNOWN_SOURCE_TYPES, ["kafka", "amqp", "nats", "sqs"]);
        for ty in KNOWN_SOURCE_TYPES {
            match SourceConfig::from_toml_str(&format!("type = \"{ty}\"")) {
                Ok(c) => assert_eq!(c.kind(), ty),
                Err(SourceConfigError::NotCompiled { ty: t, feature }) => {
                    assert_eq!((t.as_str(), feature), (ty, ty));
                }
                // Compiled in: the adapter's own config wants more keys.
                Err(SourceConfigError::Field { ty: t, .. }) => assert_eq!(t, ty),
                Err(e) => panic!("{ty}: {e}"),
            }
        }
    }

    /// The dead-letter examples read back as sources (`examples/deadletters/`).
    #[cfg(all(feature = "kafka", feature = "amqp", feature = "sqs"))]
    #[test]
    fn the_dead_letter_examples_parse_as_sources() {
        for (text, kind) in [
            (
                include_str!("../../examples/deadletters/kafka-source.toml"),
                "kafka",
            ),
            (
                include_str!("../../examples/deadletters/amqp-source.toml"),
                "amqp",
            ),
            (include_str!("../../examples/deadletters/sqs.toml"), "sqs"),
        ] {
            let text = text
                .replace("${ANKUSA_KAFKA_BROKERS}", "127.0.0.1:9092")
                .replace(
                    "${ANKUSA_AMQP_URL}",
                    "amqp://guest:guest@127.0.0.1:5672/%2f",
                )
                .replace(
                    "${ANKUSA_SQS_DLQ_URL}",
                    "https://sqs.eu-west-1.amazonaws.com/123456789012/dlq",
                );
            let c = SourceConfig::from_toml_str(&text).unwrap();
            assert_eq!(c.kind(), kind);
        }
    }

    /// `examples/sources/kafka.toml` parses (its brokers from the environment).
    #[cfg(feature = "kafka")]
    #[test]
    fn the_kafka_example_parses() {
        let text = include_str!("../../examples/sources/kafka.toml")
            .replace("${ANKUSA_KAFKA_BROKERS}", "127.0.0.1:9092");
        let c = SourceConfig::from_toml_str(&text).unwrap();
        assert_eq!(c.kind(), "kafka");
    }

    #[cfg(feature = "kafka")]
    #[test]
    fn a_kafka_source_parses_and_refuses_unknown_keys() {
        let c = SourceConfig::from_toml_str(
            "type = \"kafka\"\nbrokers = [\"127.0.0.1:9092\"]\ntopic = \"hooks\"\ngroup = \"fwd\"",
        )
        .unwrap();
        assert_eq!(c.kind(), "kafka");
        let e = SourceConfig::from_toml_str(
            "type = \"kafka\"\nbrokers = [\"127.0.0.1:9092\"]\ntopic = \"hooks\"\ngroup = \"fwd\"\ngorup = 1",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("kafka source config") && e.contains("gorup"),
            "{e}"
        );
        let e = SourceConfig::from_toml_str(
            "type = \"kafka\"\nbrokers = [\"127.0.0.1:9092\"]\ntopic = \"hooks\"",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("group"), "{e}");
    }

    #[cfg(feature = "nats")]
    #[test]
    fn a_nats_source_parses_and_refuses_unknown_keys() {
        let c = SourceConfig::from_toml_str(
            "type = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nstream = \"HOOKS\"\nconsumer = \"fwd\"",
        )
        .unwrap();
        assert_eq!(c.kind(), "nats");
        let e = SourceConfig::from_toml_str(
            "type = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nstream = \"HOOKS\"\nconsumer = \"fwd\"\nsubject = \"a\"",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("nats source config") && e.contains("subject"),
            "{e}"
        );
        let e = SourceConfig::from_toml_str(
            "type = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nstream = \"HOOKS\"\ntoken = \"secret-value\"",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("consumer") && !e.contains("secret-value"), "{e}");
        let e = SourceConfig::from_toml_str(
            "type = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nstream = \"HOOKS\"\nconsumer = \"fwd\"\nack_wait_ms = 0",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("ack_wait_ms"), "{e}");
    }

    #[cfg(feature = "nats")]
    #[test]
    fn the_nats_example_parses() {
        let c =
            SourceConfig::from_toml_str(include_str!("../../examples/sources/nats.toml")).unwrap();
        assert_eq!(c.kind(), "nats");
    }

    #[cfg(feature = "amqp")]
    #[test]
    fn an_amqp_source_parses_and_refuses_bad_keys() {
        let c = SourceConfig::from_toml_str(
            "type = \"amqp\"\nurl = \"amqp://u:s3cr3t@127.0.0.1/%2f\"\nqueue = \"hooks\"\nprefetch = 8",
        )
        .unwrap();
        assert_eq!(c.kind(), "amqp");
        assert!(!format!("{c:?}").contains("s3cr3t"), "{c:?}");
        for (bad, what) in [
            ("url = \"amqp://127.0.0.1\"", "queue"),
            (
                "url = \"amqp://127.0.0.1\"\nqueue = \"q\"\nqeueu = 1",
                "qeueu",
            ),
            (
                "url = \"amqp://127.0.0.1\"\nqueue = \"q\"\nprefetch = 0",
                "prefetch",
            ),
            (
                "url = \"amqp://u:s3cr3t@broker.example\"\nqueue = \"q\"",
                "allow_insecure",
            ),
        ] {
            let e = SourceConfig::from_toml_str(&format!("type = \"amqp\"\n{bad}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("amqp source config") && e.contains(what), "{e}");
            assert!(!e.contains("s3cr3t"), "{e}");
        }
    }

    #[cfg(feature = "sqs")]
    #[test]
    fn an_sqs_source_parses_and_refuses_bad_keys() {
        let c = SourceConfig::from_toml_str(
            "type = \"sqs\"\nqueue_url = \"http://127.0.0.1:4566/123456789012/hooks\"\n\
             region = \"us-east-1\"\nwait_seconds = 20\n\
             [credentials]\naccess_key_id = \"AKIA-ID\"\nsecret_access_key = \"s3cr3t\"",
        )
        .unwrap();
        assert_eq!(c.kind(), "sqs");
        assert_eq!(c.reads_as(), "queue hooks");
        assert!(c.for_sink("a").unwrap().is_none(), "a queue is shared");
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("s3cr3t") && !dbg.contains("AKIA-ID"), "{dbg}");
        for (bad, what) in [
            ("region = \"us-east-1\"", "queue_url"),
            (
                "queue_url = \"http://127.0.0.1:4566/1/q\"\nqeueu = 1",
                "qeueu",
            ),
            (
                "queue_url = \"http://127.0.0.1:4566/1/q\"\nwait_seconds = 21",
                "wait_seconds",
            ),
            (
                "queue_url = \"http://127.0.0.1:4566/1/q\"\nmax_messages = 11",
                "max_messages",
            ),
            (
                "queue_url = \"http://127.0.0.1:4566/1/q\"\nvisibility_timeout_seconds = \"s3cr3t\"",
                "visibility_timeout_seconds",
            ),
        ] {
            let e = SourceConfig::from_toml_str(&format!("type = \"sqs\"\n{bad}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("sqs source config") && e.contains(what), "{e}");
            assert!(!e.contains("s3cr3t"), "{e}");
        }
    }

    /// `examples/sources/sqs.toml` parses (its queue URL from the environment).
    #[cfg(feature = "sqs")]
    #[test]
    fn the_sqs_example_parses() {
        let text = include_str!("../../examples/sources/sqs.toml").replace(
            "${ANKUSA_SQS_QUEUE_URL}",
            "http://127.0.0.1:4566/123456789012/ankusa-hooks-in",
        );
        let c = SourceConfig::from_toml_str(&text).unwrap();
        assert_eq!(c.kind(), "sqs");
    }

    /// `examples/sources/amqp.toml` parses (its URL from the environment).
    #[cfg(feature = "amqp")]
    #[test]
    fn the_amqp_example_parses() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/sources/amqp.toml");
        let text = std::fs::read_to_string(path).unwrap().replace(
            "${ANKUSA_AMQP_URL}",
            "amqp://guest:guest@127.0.0.1:5672/%2f",
        );
        let c = SourceConfig::from_toml_str(&text).unwrap();
        assert_eq!(c.kind(), "amqp");
    }
}
