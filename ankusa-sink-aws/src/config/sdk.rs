//! The SDK's configuration from valid options: where the credentials are exposed.

use super::{AwsOptions, ConfigError};
use aws_config::stalled_stream_protection::StalledStreamProtectionConfig;
use aws_config::{BehaviorVersion, Region, retry::RetryConfig, timeout::TimeoutConfig};

/// The SDK config for `options`, with the region and endpoint the destination resolved.
pub(super) async fn load(
    options: &AwsOptions,
    region: Option<&str>,
    endpoint: Option<&str>,
) -> Result<aws_config::SdkConfig, ConfigError> {
    let timeout = options.timeout();
    // One attempt per delivery (dispatch retries by class), bounded by `timeout_ms` alone:
    // messages are small, so stalled-stream detection would only add a second, shorter
    // clock that fires while a busy server is still reading.
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .retry_config(RetryConfig::disabled())
        .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(timeout)
                .operation_timeout(timeout)
                .build(),
        );
    if let Some(r) = region {
        loader = loader.region(Region::new(r.to_owned()));
    }
    if let Some(e) = endpoint {
        loader = loader.endpoint_url(e);
    }
    if let Some(c) = &options.credentials {
        loader = loader.credentials_provider(aws_credential_types::Credentials::new(
            c.access_key_id.expose(),
            c.secret_access_key.expose(),
            c.session_token.as_ref().map(|t| t.expose().to_owned()),
            None,
            "ankusa-static",
        ));
    }
    let sdk = loader.load().await;
    if sdk.region().is_none() {
        return Err(ConfigError::NoRegion);
    }
    Ok(sdk)
}
