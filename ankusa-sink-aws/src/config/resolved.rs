//! What every service's config resolves from its [`AwsOptions`], and the accessors the four
//! configs share, written once ([`resolved_accessors!`]).

use super::{AwsOptions, ConfigError};

/// The region and endpoint the client uses, the message size limit, and the options
/// themselves: the part of [`SqsConfig`](super::SqsConfig), [`SnsConfig`](super::SnsConfig),
/// [`KinesisConfig`](super::KinesisConfig) and [`EventBridgeConfig`](super::EventBridgeConfig)
/// that is the same for all four.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Resolved {
    /// The region the client uses, `None` for the standard chain's.
    pub(super) region: Option<String>,
    /// The endpoint the client uses, `None` for the SDK's own.
    pub(super) endpoint: Option<String>,
    /// The resolved `max_message_bytes`.
    pub(super) max_message_bytes: usize,
    /// The shared options.
    pub(super) options: AwsOptions,
}

impl Resolved {
    /// `options` with the `endpoint` option (trimmed of a trailing `/`) and `region` as
    /// given; a service that resolves either differently sets the field afterwards.
    pub(super) fn new(options: AwsOptions, max_message_bytes: usize) -> Self {
        Resolved {
            region: options.region.clone(),
            endpoint: options
                .endpoint
                .as_deref()
                .map(|e| e.trim_end_matches('/').to_owned()),
            max_message_bytes,
            options,
        }
    }

    /// The SDK config for these options, region and endpoint.
    pub(super) async fn sdk_config(&self) -> Result<aws_config::SdkConfig, ConfigError> {
        super::sdk::load(
            &self.options,
            self.region.as_deref(),
            self.endpoint.as_deref(),
        )
        .await
    }
}

/// The accessors every config reads from its `resolved` field: `endpoint`,
/// `max_message_bytes` (documented as `$max`), `options` and `sdk_config`; with `region`,
/// also an optional `region`.
macro_rules! resolved_accessors {
    ($ty:ident, $max:literal $(, $region:ident)?) => {
        impl $ty {
            /// The endpoint the client uses, when not the SDK's own.
            pub fn endpoint(&self) -> Option<&str> {
                self.resolved.endpoint.as_deref()
            }
            #[doc = $max]
            pub fn max_message_bytes(&self) -> usize {
                self.resolved.max_message_bytes
            }
            /// The shared options.
            pub fn options(&self) -> &AwsOptions {
                &self.resolved.options
            }
            /// The SDK configuration this sink's client uses: region, endpoint,
            /// credentials, timeouts, and no SDK retries (dispatch retries, by class).
            /// Build your own client from it (e.g. to add interceptors) and pass it to the
            /// sink's `from_client`.
            pub async fn sdk_config(&self) -> Result<aws_config::SdkConfig, ConfigError> {
                self.resolved.sdk_config().await
            }
            $(
                /// The region, when one is resolved (else the standard chain's).
                pub fn $region(&self) -> Option<&str> {
                    self.resolved.region.as_deref()
                }
            )?
        }
    };
}
pub(super) use resolved_accessors;
