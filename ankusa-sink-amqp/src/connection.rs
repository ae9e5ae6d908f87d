//! The connection keys a sink file and a source file share: where the broker is, how long
//! connecting may take, and whether a cleartext login to a remote host is accepted. Both
//! configs flatten [`AmqpConnection`] in, so the keys are declared once and spelled alike.

/// `url`, `connect_timeout_ms` and `allow_insecure`, as written (checked by the config
/// that flattens them in).
#[derive(serde::Deserialize)]
#[serde(remote = "Self")]
pub(crate) struct AmqpConnection {
    pub(crate) url: String,
    #[serde(default)]
    pub(crate) connect_timeout_ms: Option<u64>,
    #[serde(default)]
    pub(crate) allow_insecure: bool,
}

ankusa_sink_kit::keyed_flatten!(AmqpConnection);
