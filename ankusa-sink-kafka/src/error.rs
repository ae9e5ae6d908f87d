//! Every produce error, typed and classified: [`KafkaError`] and the one table that decides
//! what dispatch does with it ([`classify`]).

use ankusa_sink_core::{Class, Failure};
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use std::fmt;

/// Why a delivery to Kafka failed. It names codes and sizes only: never a broker address
/// with credentials, a property value or a record's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KafkaError {
    /// librdkafka or the broker answered with this code.
    Code {
        /// What was being done: `produce`, `enqueue`, `metadata`.
        during: &'static str,
        /// The code.
        code: RDKafkaErrorCode,
    },
    /// The code of the last client-level error explains a timed-out delivery (for
    /// example a refused SASL login, after which the message could only time out).
    Explained {
        /// What was being done: `produce`, `enqueue`, `metadata`.
        during: &'static str,
        /// The delivery's own code (`MessageTimedOut`, `AllBrokersDown`).
        code: RDKafkaErrorCode,
        /// The client error seen while the message waited.
        cause: RDKafkaErrorCode,
    },
    /// Value plus key over `max_record_bytes`: refused before producing.
    RecordTooLarge {
        /// Value plus key bytes.
        size: usize,
        /// The configured limit.
        max: usize,
    },
    /// The topic is not in the cluster's metadata.
    TopicMissing {
        /// The topic.
        topic: String,
    },
    /// No delivery report arrived within the produce timeout plus a grace period.
    NoDeliveryReport {
        /// How long the sink waited, in ms.
        waited_ms: u128,
    },
    /// librdkafka refused the configuration when a client was created (its text, which
    /// may quote a value, is left out).
    Refused {
        /// What was being done: `create`, `produce`, ...
        during: &'static str,
    },
    /// librdkafka refused to create the producer: its message, every secret of the
    /// configuration scrubbed.
    Create(String),
    /// A client error without a librdkafka code (the producer gone, a task failed).
    Client(String),
    /// Not sent: no broker could be reached when the sink last asked (librdkafka reported
    /// every broker down and a metadata probe failed). Transient; deliveries resume as soon
    /// as a probe reaches a broker.
    BrokersDown {
        /// How long the brokers have been known unreachable, in ms.
        for_ms: u128,
    },
    /// The producer went away before it reported on the record (it was replaced or shut
    /// down).
    ReportDropped,
    /// `check()`: on a cluster of several brokers the topic's `min.insync.replicas` is
    /// under 2, so an `acks=all` write may be acknowledged by its leader alone and lost
    /// with it, and the sink declares itself durable.
    WeakReplication {
        /// The topic.
        topic: String,
        /// Its `min.insync.replicas`.
        min_insync_replicas: u32,
        /// Brokers in the cluster's metadata.
        brokers: usize,
    },
}

impl fmt::Display for KafkaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KafkaError::Code { during, code } => write!(f, "kafka {during}: {code:?}"),
            KafkaError::Explained {
                during,
                code,
                cause,
            } => {
                write!(f, "kafka {during}: {code:?} after client error {cause:?}")
            }
            KafkaError::RecordTooLarge { size, max } => write!(
                f,
                "kafka record of {size} bytes (value + key) exceeds max_record_bytes {max}; \
                 nothing was produced"
            ),
            KafkaError::TopicMissing { topic } => {
                write!(f, "kafka topic {topic:?} does not exist (not auto-created)")
            }
            KafkaError::NoDeliveryReport { waited_ms } => {
                write!(f, "kafka: no delivery report within {waited_ms} ms")
            }
            KafkaError::Refused { during } => {
                write!(
                    f,
                    "kafka client: {during}: configuration refused by librdkafka"
                )
            }
            KafkaError::Create(what) => write!(f, "librdkafka refused the configuration: {what}"),
            KafkaError::Client(what) => write!(f, "kafka client: {what}"),
            KafkaError::BrokersDown { for_ms } => {
                write!(f, "kafka: no broker reachable (for {for_ms} ms); not sent")
            }
            KafkaError::ReportDropped => {
                f.write_str("kafka: the producer dropped the delivery report")
            }
            KafkaError::WeakReplication {
                topic,
                min_insync_replicas,
                brokers,
            } => write!(
                f,
                "kafka topic {topic:?} has min.insync.replicas={min_insync_replicas} on a \
                 cluster of {brokers} brokers: an acks=all write may rest on one replica \
                 (set it to 2 or more; the sink is durable)"
            ),
        }
    }
}

impl std::error::Error for KafkaError {}

impl KafkaError {
    /// The error of a client call that is not a delivery report: its code when it has one;
    /// configuration refused at creation without its text (it may quote a value); the
    /// rest as text.
    pub(crate) fn from_client(err: &RdKafkaError, during: &'static str) -> Self {
        match err.rdkafka_error_code() {
            Some(code) => KafkaError::Code { during, code },
            None => match err {
                RdKafkaError::ClientConfig(..)
                | RdKafkaError::ClientCreation(_)
                | RdKafkaError::Nul(_) => KafkaError::Refused { during },
                _ => KafkaError::Client(format!("{during}: {err}")),
            },
        }
    }

    /// The error of a produce (or metadata) `code`, given what the sink knows about it: an
    /// unknown-topic code is [`TopicMissing`](KafkaError::TopicMissing) only when a
    /// metadata refresh confirms the topic is missing (`topic`, asked only for such
    /// codes); a code that can only mean the record timed out is
    /// [`Explained`](KafkaError::Explained) by a config-class client error seen meanwhile
    /// (`cause`, asked only when [`may_be_explained`]).
    pub(crate) fn of_code(
        during: &'static str,
        code: RDKafkaErrorCode,
        topic: Option<(&str, TopicState)>,
        cause: Option<RDKafkaErrorCode>,
    ) -> Self {
        if let Some((topic, TopicState::Missing)) = topic
            && asks_for_the_topic(code)
        {
            return KafkaError::TopicMissing {
                topic: topic.to_owned(),
            };
        }
        match cause {
            Some(cause) if may_be_explained(code) && is_config_code(cause) => {
                KafkaError::Explained {
                    during,
                    code,
                    cause,
                }
            }
            _ => KafkaError::Code { during, code },
        }
    }
}

/// What dispatch does with `err`: a pure, deterministic function of the error.
///
/// | Error | Class |
/// | --- | --- |
/// | `Code`: a librdkafka or broker code | per [`code_class`]: permanent (the record will never be taken), config (credentials, ACLs, unsupported settings), `Throttled` (`QueueFull`, `ThrottlingQuotaExceeded`), transient (timeouts, transport, leadership, unconfirmed unknown topic, every other code) |
/// | `Explained`: a record timed out while librdkafka reported a config-class client error (a refused SASL login) | `Config` |
/// | `RecordTooLarge`: value + key over `max_record_bytes` | `Permanent` |
/// | `TopicMissing`: a metadata refresh confirms the topic does not exist | `Config` |
/// | `WeakReplication` (`check()`: `min.insync.replicas` under 2 on several brokers) | `Config` |
/// | `Refused`, `Create`: librdkafka refused the configuration | `Config` |
/// | `NoDeliveryReport`, `Client`, `BrokersDown`, `ReportDropped` | `Transient` |
pub(crate) fn classify(err: &KafkaError) -> Class {
    match err {
        KafkaError::Code { code, .. } => code_class(*code),
        KafkaError::Explained { .. }
        | KafkaError::TopicMissing { .. }
        | KafkaError::WeakReplication { .. }
        | KafkaError::Refused { .. }
        | KafkaError::Create(_) => Class::Config,
        KafkaError::RecordTooLarge { .. } => Class::Permanent,
        KafkaError::NoDeliveryReport { .. }
        | KafkaError::Client(_)
        | KafkaError::BrokersDown { .. }
        | KafkaError::ReportDropped => Class::Transient,
    }
}

impl From<KafkaError> for Failure {
    fn from(e: KafkaError) -> Self {
        let landed = landed(&e);
        Failure::new(classify(&e), e).with_may_have_landed(landed)
    }
}

/// Whether the record may have reached a broker, from the error alone: a pure function like
/// [`classify`]. A failed delivery report knows better (librdkafka's persistence status),
/// and the sink uses that for `produce` failures.
///
/// | Error | May have landed |
/// | --- | --- |
/// | over `max_record_bytes`, topic missing, weak replication (`check()`), brokers down, refused or failed configuration, any `enqueue` or `metadata` code (the record never left the process) | `Some(false)` |
/// | no delivery report in time (librdkafka may still send it) | `Some(true)` |
/// | a `produce` code without its report's status, a client error, a dropped report | `None` |
pub(crate) fn landed(err: &KafkaError) -> Option<bool> {
    match err {
        KafkaError::RecordTooLarge { .. }
        | KafkaError::TopicMissing { .. }
        | KafkaError::WeakReplication { .. }
        | KafkaError::BrokersDown { .. }
        | KafkaError::Refused { .. }
        | KafkaError::Create(_) => Some(false),
        KafkaError::Code { during, .. } | KafkaError::Explained { during, .. } => {
            (*during != "produce").then_some(false)
        }
        KafkaError::NoDeliveryReport { .. } => Some(true),
        KafkaError::Client(_) | KafkaError::ReportDropped => None,
    }
}

/// Whether a client-level `code` is the operator's to fix (a refused login, an unsupported
/// mechanism): what can explain a record that could only time out.
pub(crate) fn is_config_code(code: RDKafkaErrorCode) -> bool {
    code_class(code) == Class::Config
}

/// Whether a delivery's `code` says only that the record could not get through in time,
/// so a config-class client error seen meanwhile explains it.
pub(crate) fn may_be_explained(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::MessageTimedOut
            | RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::BrokerTransportFailure
    )
}

/// The class of every librdkafka and broker error code: the complete table behind
/// [`classify`]'s `Code` row.
///
/// Written as one exhaustive `match` listing every variant of [`RDKafkaErrorCode`] in
/// rdkafka 0.39 (librdkafka 2.12). The enum is `#[non_exhaustive]`, so the compiler requires
/// a final arm for codes a later librdkafka adds: those are transient, the safe default for
/// an unknown code (retried, bounded by the retry policy).
///
/// | Codes | Class |
/// | --- | --- |
/// | `MessageSizeTooLarge`, `InvalidMessage` (CORRUPT_MESSAGE), `InvalidRecord`, `MessageBatchTooLarge` (RECORD_LIST_TOO_LARGE), `InvalidMessageSize`, `InvalidTimestamp`, `PolicyViolation`, `InvalidRequest`, `BadMessage`, `InvalidType`, (de)serialization | permanent |
/// | `TopicAuthorizationFailed`, `ClusterAuthorizationFailed`, `SaslAuthenticationFailed`, `Authentication`, `UnknownPartition`, `InvalidTopic`, unsupported SASL / version / compression / feature, invalid config, delegation-token and principal errors | config |
/// | `QueueFull`, `ThrottlingQuotaExceeded` | `Throttled` (dispatch draws the pause) |
/// | `UnknownTopicOrPartition`, `UnknownTopic` (a broker restarting says this of topics it has not loaded yet; the sink reports [`KafkaError::TopicMissing`] instead when a metadata refresh confirms the topic is missing) | transient |
/// | `MessageTimedOut`, `RequestTimedOut`, `NotLeaderForPartition`, `BrokerTransportFailure`, `AllBrokersDown`, leader / replica / coordinator movement, idempotence and fencing states, every other code | transient |
pub(crate) fn code_class(code: RDKafkaErrorCode) -> Class {
    use Class::{Config, Permanent, Throttled, Transient};
    use RDKafkaErrorCode as C;
    match code {
        // The record itself will never be accepted.
        C::MessageSizeTooLarge
        | C::InvalidMessage
        | C::InvalidRecord
        | C::MessageBatchTooLarge
        | C::InvalidMessageSize
        | C::InvalidTimestamp
        | C::PolicyViolation
        | C::InvalidRequest
        | C::BadMessage
        | C::InvalidType
        | C::KeySerialization
        | C::ValueSerialization
        | C::KeyDeserialization
        | C::ValueDeserialization => Permanent,

        // The operator's to fix: credentials, ACLs, the topic, the settings.
        C::TopicAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::GroupAuthorizationFailed
        | C::TransactionalIdAuthorizationFailed
        | C::SaslAuthenticationFailed
        | C::Authentication
        | C::UnsupportedSASLMechanism
        | C::IllegalSASLState
        | C::UnacceptableCredential
        | C::SecurityDisabled
        | C::InvalidPrincipalType
        | C::PrincipalDeserializationFailure
        | C::DelegationTokenAuthDisabled
        | C::DelegationTokenNotFound
        | C::DelegationTokenOwnerMismatch
        | C::DelegationTokenRequestNotAllowed
        | C::DelegationTokenAuthorizationFailed
        | C::DelegationTokenExpired
        | C::UnknownPartition
        | C::UnknownTopicId
        | C::InvalidTopic
        | C::TopicDeletionDisabled
        | C::ResourceNotFound
        | C::UnsupportedForMessageFormat
        | C::UnsupportedCompressionType
        | C::BadCompression
        | C::UnsupportedVersion
        | C::UnsupportedFeature
        | C::UnknownProtocol
        | C::NotImplemented
        | C::NotConfigured
        | C::InvalidArgument
        | C::InvalidConfig
        | C::InvalidRequiredAcks
        | C::InvalidPartitions
        | C::InvalidReplicationFactor
        | C::InvalidReplicaAssignment
        | C::InvalidTransactionTimeout => Config,

        // Back-pressure: the local queue is full, or the broker's quota says wait.
        C::QueueFull | C::ThrottlingQuotaExceeded => Throttled,

        // Unconfirmed: a restarting broker says this of a topic it has not loaded yet.
        C::UnknownTopicOrPartition
        | C::UnknownTopic
        // Timeouts, transport and leadership: the cluster is moving or unreachable.
        | C::MessageTimedOut
        | C::RequestTimedOut
        | C::OperationTimedOut
        | C::TimedOutQueue
        | C::NotLeaderForPartition
        | C::LeaderNotAvailable
        | C::PreferredLeaderNotAvailable
        | C::EligibleLeadersNotAvailable
        | C::BrokerNotAvailable
        | C::ReplicaNotAvailable
        | C::NotEnoughReplicas
        | C::NotEnoughReplicasAfterAppend
        | C::ISRInsufficient
        | C::NetworkException
        | C::BrokerTransportFailure
        | C::AllBrokersDown
        | C::Resolve
        | C::SSL
        | C::ListenerNotFound
        | C::KafkaStorageError
        | C::LogDirNotFound
        | C::NotController
        | C::StaleControllerEpoch
        | C::StaleBrokerEpoch
        | C::FencedLeaderEpoch
        | C::UnknownLeaderEpoch
        | C::ReassignmentInProgress
        | C::NoReassignmentInProgress
        | C::ElectionNotNeeded
        | C::RebootstrapRequired
        | C::NodeUpdate
        | C::UnknownBroker
        | C::BrokerDestroy
        | C::DestroyBroker
        | C::CriticalSystemResource
        | C::FileSystem
        // Idempotent / transactional producer state: a new producer id fixes it.
        | C::OutOfOrderSequenceNumber
        | C::DuplicateSequenceNumber
        | C::InvalidProducerEpoch
        | C::InvalidProducerIdMapping
        | C::UnknownProducerId
        | C::ProducerFenced
        | C::Fenced
        | C::Fatal
        | C::GaplessGuarantee
        | C::InvalidDifferentRecord
        | C::InvalidTransactionalState
        | C::ConcurrentTransactions
        | C::TransactionCoordinatorFenced
        | C::OperationNotAttempted
        | C::PurgeQueue
        | C::PurgeInflight
        | C::Inconsistent
        // Consumer, group and admin codes a producer does not expect: transient if seen.
        | C::OffsetOutOfRange
        | C::OffsetMetadataTooLarge
        | C::OffsetNotAvailable
        | C::CoordinatorLoadInProgress
        | C::CoordinatorNotAvailable
        | C::NotCoordinator
        | C::IllegalGeneration
        | C::InconsistentGroupProtocol
        | C::InvalidGroupId
        | C::UnknownMemberId
        | C::InvalidSessionTimeout
        | C::RebalanceInProgress
        | C::InvalidCommitOffsetSize
        | C::TopicAlreadyExists
        | C::NonEmptyGroup
        | C::GroupIdNotFound
        | C::FetchSessionIdNotFound
        | C::InvalidFetchSessionEpoch
        | C::MemberIdRequired
        | C::GroupMaxSizeReached
        | C::FencedInstanceId
        | C::GroupSubscribedToTopic
        | C::UnstableOffsetCommit
        | C::DuplicateResource
        | C::InconsistentVoterSet
        | C::InvalidUpdateVersion
        | C::FeatureUpdateFailed
        | C::FencedMemberEpoch
        | C::UnreleasedInstanceId
        | C::UnsupportedAssignor
        | C::StaleMemberEpoch
        | C::UnknownSubscriptionId
        | C::TelemetryTooLarge
        | C::WaitingForCoordinator
        | C::UnknownGroup
        | C::InProgress
        | C::PreviousInProgress
        | C::ExistingSubscription
        | C::AssignPartitions
        | C::RevokePartitions
        | C::Conflict
        | C::State
        | C::NoOffset
        | C::Outdated
        | C::WaitCache
        | C::Interrupted
        | C::Partial
        | C::ReadOnly
        | C::NoEnt
        | C::Underflow
        | C::Retry
        | C::PollExceeded
        | C::Application
        | C::AssignmentLost
        | C::Noop
        | C::AutoOffsetReset
        | C::LogTruncation
        | C::PartitionEOF
        // Generic and sentinel codes.
        | C::Fail
        | C::Unknown
        | C::NoError
        | C::Begin
        | C::End
        | C::EndAll => Transient,

        // Required by `#[non_exhaustive]`: a code added by a later librdkafka.
        _ => Transient,
    }
}

/// What a metadata refresh said about the sink's topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TopicState {
    /// A broker answered, and the topic is not in the cluster.
    Missing,
    /// A broker answered with the topic and its partitions.
    Present,
    /// No answer, or one that cannot tell (a broker error, no partitions leader yet).
    Unknown,
}

/// Whether `code` says the topic is unknown, which only a metadata refresh can confirm.
pub(crate) fn asks_for_the_topic(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic
    )
}

/// Why a producer must be replaced, if `code` (or a fatal error on the client) means it
/// can no longer deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// librdkafka raised a fatal error: the instance refuses every record from now on.
    Fatal,
    /// The broker fenced the producer id or epoch, or lost its sequence state. For an
    /// idempotent (not transactional) producer librdkafka fails the record without a
    /// fatal error and keeps the id, so every later record is refused the same way.
    Fenced,
    /// A record timed out: it may be stuck behind producer state the broker lost.
    TimedOut,
}

impl Renewal {
    /// The word logged for it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Renewal::Fatal => "fatal error",
            Renewal::Fenced => "fenced producer",
            Renewal::TimedOut => "timed-out record",
        }
    }
}

/// The renewal a delivery error calls for: `fatal` is whether the client reports a fatal
/// error (`rd_kafka_fatal_error`, or the error callback's `Fatal`).
pub(crate) fn renewal(code: Option<RDKafkaErrorCode>, fatal: bool) -> Option<Renewal> {
    use RDKafkaErrorCode as C;
    if fatal {
        return Some(Renewal::Fatal);
    }
    match code? {
        C::Fatal => Some(Renewal::Fatal),
        C::ProducerFenced
        | C::Fenced
        | C::InvalidProducerEpoch
        | C::InvalidProducerIdMapping
        | C::UnknownProducerId
        | C::OutOfOrderSequenceNumber
        | C::GaplessGuarantee => Some(Renewal::Fenced),
        C::MessageTimedOut => Some(Renewal::TimedOut),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::RDKafkaErrorCode as C;

    fn class(code: C) -> Class {
        classify(&KafkaError::Code {
            during: "produce",
            code,
        })
    }

    #[test]
    fn row_record_never_taken_is_permanent() {
        for code in [
            C::MessageSizeTooLarge,
            C::InvalidRecord,
            C::InvalidMessage,       // CORRUPT_MESSAGE
            C::MessageBatchTooLarge, // RECORD_LIST_TOO_LARGE
            C::InvalidMessageSize,
            C::InvalidTimestamp,
        ] {
            assert_eq!(class(code), Class::Permanent, "{code:?}");
        }
    }

    #[test]
    fn row_record_too_large_is_permanent() {
        let err = KafkaError::RecordTooLarge {
            size: 601,
            max: 600,
        };
        assert_eq!(classify(&err), Class::Permanent);
    }

    #[test]
    fn row_refused_credentials_and_missing_topic_are_config() {
        for code in [
            C::TopicAuthorizationFailed,
            C::ClusterAuthorizationFailed,
            C::SaslAuthenticationFailed,
            C::Authentication,
            C::UnsupportedSASLMechanism,
            C::InvalidConfig,
            C::InvalidArgument,
        ] {
            assert_eq!(class(code), Class::Config, "{code:?}");
        }
    }

    #[test]
    fn row_queue_full_and_throttling_are_throttled() {
        for code in [C::QueueFull, C::ThrottlingQuotaExceeded] {
            assert_eq!(class(code), Class::Throttled, "{code:?}");
        }
    }

    #[test]
    fn row_timeouts_leadership_and_transport_are_transient() {
        for code in [
            C::MessageTimedOut,
            C::RequestTimedOut,
            C::NotLeaderForPartition,
            C::LeaderNotAvailable,
            C::BrokerTransportFailure,
            C::AllBrokersDown,
            C::NetworkException,
            C::Resolve,
            C::NotEnoughReplicas,
            C::OutOfOrderSequenceNumber,
            C::Fatal,
        ] {
            assert_eq!(class(code), Class::Transient, "{code:?}");
        }
    }

    #[test]
    fn the_table_pins_every_code_librdkafka_knows() {
        // Every code librdkafka 2.12 defines, counted per class: a change to any row of
        // the table changes these numbers.
        let mut count = std::collections::BTreeMap::new();
        for raw in -200..=200 {
            let Ok(resp) = rdkafka::types::RDKafkaRespErr::try_from(raw) else {
                continue;
            };
            let c = code_class(C::from(resp));
            *count.entry(format!("{c:?}")).or_insert(0) += 1;
        }
        let count: Vec<(String, i32)> = count.into_iter().collect();
        assert_eq!(
            count,
            [
                ("Config".to_owned(), 38),
                ("Permanent".to_owned(), 14),
                ("Throttled".to_owned(), 2),
                ("Transient".to_owned(), 119),
            ]
        );
    }

    #[test]
    fn row_unknown_topic_is_config_only_when_a_refresh_confirms_it_missing() {
        for code in [C::UnknownTopicOrPartition, C::UnknownTopic] {
            assert_eq!(class(code), Class::Transient, "{code:?} unconfirmed");
            let err = KafkaError::of_code("produce", code, Some(("t", TopicState::Missing)), None);
            assert_eq!(
                err,
                KafkaError::TopicMissing { topic: "t".into() },
                "{code:?}"
            );
            assert_eq!(classify(&err), Class::Config, "{code:?}");
        }
    }

    #[test]
    fn row_unknown_topic_is_transient_while_the_cluster_cannot_say() {
        for code in [C::UnknownTopicOrPartition, C::UnknownTopic] {
            let err = KafkaError::of_code("produce", code, Some(("t", TopicState::Unknown)), None);
            assert_eq!(classify(&err), Class::Transient, "{code:?}");
        }
    }

    #[test]
    fn row_unknown_topic_is_transient_when_the_refresh_finds_the_topic() {
        for code in [C::UnknownTopicOrPartition, C::UnknownTopic] {
            let err = KafkaError::of_code("produce", code, Some(("t", TopicState::Present)), None);
            assert_eq!(classify(&err), Class::Transient, "{code:?}");
        }
    }

    #[test]
    fn row_other_codes_ignore_the_topic_refresh() {
        for topic in [
            TopicState::Missing,
            TopicState::Present,
            TopicState::Unknown,
        ] {
            for code in [
                C::TopicAuthorizationFailed,
                C::MessageSizeTooLarge,
                C::MessageTimedOut,
                C::QueueFull,
            ] {
                let err = KafkaError::of_code("produce", code, Some(("t", topic)), None);
                assert_eq!(classify(&err), class(code), "{code:?}");
            }
        }
    }

    #[test]
    fn row_a_timeout_explained_by_a_refused_login_is_config() {
        for code in [C::MessageTimedOut, C::AllBrokersDown] {
            let err = KafkaError::of_code("produce", code, None, Some(C::SaslAuthenticationFailed));
            assert!(matches!(err, KafkaError::Explained { .. }), "{err:?}");
            assert_eq!(classify(&err), Class::Config, "{code:?}");
        }
        // Only a timeout is explained: a record refused for itself keeps its own code.
        let err = KafkaError::of_code(
            "produce",
            C::MessageSizeTooLarge,
            None,
            Some(C::SaslAuthenticationFailed),
        );
        assert_eq!(classify(&err), Class::Permanent);
    }

    #[test]
    fn row_refused_configuration_is_config_and_the_rest_transient() {
        assert_eq!(
            classify(&KafkaError::Refused { during: "create" }),
            Class::Config
        );
        assert_eq!(classify(&KafkaError::Create("x".into())), Class::Config);
        for err in [
            KafkaError::NoDeliveryReport { waited_ms: 1 },
            KafkaError::Client("x".into()),
            KafkaError::BrokersDown { for_ms: 1 },
            KafkaError::ReportDropped,
        ] {
            assert_eq!(classify(&err), Class::Transient, "{err:?}");
        }
    }

    #[test]
    fn fenced_fatal_and_timed_out_producers_are_renewed() {
        for code in [
            C::ProducerFenced,
            C::Fenced,
            C::InvalidProducerEpoch,
            C::InvalidProducerIdMapping,
            C::UnknownProducerId,
            C::OutOfOrderSequenceNumber,
            C::GaplessGuarantee,
        ] {
            assert_eq!(
                renewal(Some(code), false),
                Some(Renewal::Fenced),
                "{code:?}"
            );
        }
        assert_eq!(renewal(Some(C::Fatal), false), Some(Renewal::Fatal));
        assert_eq!(
            renewal(Some(C::MessageTimedOut), false),
            Some(Renewal::TimedOut)
        );
        // A fatal client wins over the record's own code, and needs no code at all.
        assert_eq!(
            renewal(Some(C::MessageTimedOut), true),
            Some(Renewal::Fatal)
        );
        assert_eq!(renewal(None, true), Some(Renewal::Fatal));
        for code in [
            C::QueueFull,
            C::MessageSizeTooLarge,
            C::UnknownTopicOrPartition,
            C::AllBrokersDown,
            C::PurgeQueue,
        ] {
            assert_eq!(renewal(Some(code), false), None, "{code:?}");
        }
        assert_eq!(renewal(None, false), None);
    }

    #[test]
    fn reasons_are_short_and_typed() {
        let reasons = [
            KafkaError::Code {
                during: "produce",
                code: C::ProducerFenced,
            }
            .to_string(),
            KafkaError::BrokersDown { for_ms: 1200 }.to_string(),
            KafkaError::ReportDropped.to_string(),
        ];
        assert_eq!(reasons[0], "kafka produce: ProducerFenced");
        assert_eq!(
            reasons[1],
            "kafka: no broker reachable (for 1200 ms); not sent"
        );
        for r in reasons {
            assert!(r.len() < 80 && !r.contains('{') && !r.contains("::"), "{r}");
        }
    }

    #[test]
    fn client_errors_without_a_code() {
        let err = RdKafkaError::ClientCreation("sasl.password=hunter2 refused".into());
        let f = Failure::from(KafkaError::from_client(&err, "create"));
        assert_eq!(f.class(), Class::Config);
        assert!(!f.to_string().contains("hunter2"), "{f}");
        let f = Failure::from(KafkaError::from_client(&RdKafkaError::Canceled, "produce"));
        assert_eq!(f.class(), Class::Transient);
        let f = Failure::from(KafkaError::from_client(
            &RdKafkaError::MetadataFetch(C::TopicAuthorizationFailed),
            "metadata",
        ));
        assert_eq!(f.class(), Class::Config);
        assert_eq!(
            f.to_string(),
            "config: kafka metadata: TopicAuthorizationFailed"
        );
    }

    #[test]
    fn landing_rows() {
        let code = |during, code| KafkaError::Code { during, code };
        for (e, want) in [
            (KafkaError::RecordTooLarge { size: 2, max: 1 }, Some(false)),
            (KafkaError::TopicMissing { topic: "t".into() }, Some(false)),
            (
                KafkaError::WeakReplication {
                    topic: "t".into(),
                    min_insync_replicas: 1,
                    brokers: 3,
                },
                Some(false),
            ),
            (KafkaError::BrokersDown { for_ms: 1 }, Some(false)),
            (KafkaError::Refused { during: "create" }, Some(false)),
            (code("enqueue", RDKafkaErrorCode::QueueFull), Some(false)),
            (
                code("metadata", RDKafkaErrorCode::BrokerTransportFailure),
                Some(false),
            ),
            (KafkaError::NoDeliveryReport { waited_ms: 1 }, Some(true)),
            // A failed report carries librdkafka's own status; the code alone says nothing.
            (code("produce", RDKafkaErrorCode::MessageTimedOut), None),
            (KafkaError::Client("x".into()), None),
            (KafkaError::ReportDropped, None),
        ] {
            assert_eq!(landed(&e), want, "{e}");
        }
    }
}
