//! An interceptor counting the HTTP requests an SDK client transmits. The `vs_raw` bench
//! includes this file by path, so the tests and the bench count requests the same way.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts HTTP requests a client transmits (an SQS or SNS client: the interceptor trait is
/// the same smithy one for both).
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestCounter {
    total: Arc<AtomicUsize>,
}

impl RequestCounter {
    pub(crate) fn count(&self) -> usize {
        self.total.load(Ordering::SeqCst)
    }
}

impl aws_sdk_sqs::config::Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }
    fn read_before_transmit(
        &self,
        _ctx: &aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &aws_sdk_sqs::config::RuntimeComponents,
        _cfg: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        self.total.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}
