//! Why an AMQP configuration was refused: the sink's, the broker URL's and the source's.
//! Its own module so that `config` and `broker_url`, which both return it, need not import
//! each other for it. Public as `ankusa_sink_amqp::ConfigError`, as it always was.

/// Why a configuration was refused. Never contains the URL or its credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key the sink does not know.
    #[error("unknown field `{0}`")]
    UnknownField(String),
    /// The URL is not an absolute `amqp://` or `amqps://` URL with a host.
    #[error("url: not a valid amqp:// or amqps:// URL with a host ({0})")]
    Url(&'static str),
    /// The exchange name is too long or has control characters.
    #[error("exchange: {0}")]
    Exchange(&'static str),
    /// The source's queue name is empty, too long or has control characters.
    #[error("queue: {0}")]
    Queue(&'static str),
    /// The exchange type is not one of topic, direct, fanout, headers.
    #[error("exchange_type: {0:?} is not one of topic, direct, fanout, headers")]
    ExchangeType(String),
    /// The default exchange (`""`) cannot be declared.
    #[error("declare_exchange: the default exchange \"\" cannot be declared")]
    DeclareDefaultExchange,
    /// A bad static routing key or template.
    #[error("routing_key: {0}")]
    RoutingKey(String),
    /// Both a static routing key and a template were given.
    #[error("routing_key and routing_key_template are exclusive")]
    RoutingKeyAndTemplate,
    /// The source's binding key is too long or has control characters.
    #[error("binding_key: {0}")]
    BindingKey(&'static str),
    /// The source names a binding key but no exchange to bind with it.
    #[error("binding_key needs exchange: the queue is bound to that exchange with it")]
    BindingKeyWithoutExchange,
    /// A zero where a positive number is required.
    #[error("{0} must be positive")]
    Zero(&'static str),
    /// `amqp://` to a host that is not this machine: the login (user and password; a URL
    /// without them logs in as guest/guest) would cross the network unencrypted.
    #[error(
        "url: amqp:// sends the user name and password unencrypted to a host that is not \
         loopback; use amqps://, or set allow_insecure = true to accept that"
    )]
    Insecure,
}
