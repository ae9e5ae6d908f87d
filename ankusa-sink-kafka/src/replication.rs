//! What `check()` asks about `acks=all`: the topic's `min.insync.replicas` (describe
//! configs, through an admin client of the check's own) against the brokers the cluster has.

use crate::client::Monitor;
use crate::config::KafkaConfig;
use rdkafka::ClientContext;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError as RdKafkaError;
use std::sync::Arc;
use std::time::Duration;

/// What `min.insync.replicas` makes of an `acks=all` write on this cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replication {
    /// At least 2: every acknowledged write is on two replicas or more.
    Replicated,
    /// A one-broker cluster: the one broker's write is all `acks=all` can mean. Reported,
    /// not failed (a development or single-node deployment says so by its size).
    OneBroker {
        /// The topic's `min.insync.replicas`, when asked.
        min_insync_replicas: Option<u32>,
    },
    /// Several brokers, and the leader alone may acknowledge a write: failed (config).
    Weak {
        /// The topic's `min.insync.replicas`.
        min_insync_replicas: u32,
    },
    /// The cluster would not say (describe configs refused by an ACL, not answered, or no
    /// value): reported, not failed.
    NotAsked,
}

/// The verdict for a cluster of `brokers` brokers whose topic has `min_insync_replicas`
/// (`None`: could not be asked).
pub(crate) fn judge(brokers: usize, min_insync_replicas: Option<u32>) -> Replication {
    match (brokers, min_insync_replicas) {
        (0 | 1, min_insync_replicas) => Replication::OneBroker {
            min_insync_replicas,
        },
        (_, None) => Replication::NotAsked,
        (_, Some(m)) if m >= 2 => Replication::Replicated,
        (_, Some(m)) => Replication::Weak {
            min_insync_replicas: m,
        },
    }
}

/// Routes the admin client's librdkafka logs and errors through the sink's monitor, which
/// scrubs every secret of the configuration from them.
struct AdminContext(Arc<Monitor>);

impl ClientContext for AdminContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.0.client_log(level, fac, log_message);
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        let _ = self.0.client_error(&error, reason);
    }
}

/// The topic's `min.insync.replicas`, asked with describe configs; `None` when the
/// cluster does not say (the request refused or unanswered within `timeout`, the value
/// absent or not a number). An admin client is made for the question and dropped after
/// it, on a blocking thread (dropping joins its polling thread).
pub(crate) async fn min_insync_replicas(
    config: &KafkaConfig,
    monitor: &Arc<Monitor>,
    timeout: Duration,
) -> Option<u32> {
    let mut client_config = config.client_config();
    // An admin client is a producer to librdkafka: one that asks for no producer id.
    client_config.set("enable.idempotence", "false");
    let admin: AdminClient<AdminContext> = client_config
        .create_with_context(AdminContext(Arc::clone(monitor)))
        .ok()?;
    let topic = ResourceSpecifier::Topic(&config.topic);
    let options = AdminOptions::new().request_timeout(Some(timeout));
    let answer = admin.describe_configs([&topic], &options).await;
    let _ = tokio::task::spawn_blocking(move || drop(admin)).await;
    let resource = answer.ok()?.into_iter().next()?.ok()?;
    resource
        .get("min.insync.replicas")?
        .value
        .as_deref()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_by_brokers_and_min_insync_replicas() {
        for (brokers, min, want) in [
            (
                1,
                Some(1),
                Replication::OneBroker {
                    min_insync_replicas: Some(1),
                },
            ),
            (
                1,
                None,
                Replication::OneBroker {
                    min_insync_replicas: None,
                },
            ),
            (3, None, Replication::NotAsked),
            (
                3,
                Some(1),
                Replication::Weak {
                    min_insync_replicas: 1,
                },
            ),
            (2, Some(2), Replication::Replicated),
            (5, Some(3), Replication::Replicated),
        ] {
            assert_eq!(judge(brokers, min), want, "{brokers} brokers, {min:?}");
        }
    }
}
