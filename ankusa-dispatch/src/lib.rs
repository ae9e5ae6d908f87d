#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod attempt;
mod breaker;
mod dead_letter;
mod dispatcher;
pub mod forward;
pub mod metrics;
mod policy;
pub mod record;
mod throttle;

#[cfg(feature = "otel")]
pub use attempt::parse_traceparent;
pub use attempt::{ATTEMPT_SPAN, attempt, attempt_in_trace, trace_id_of};
pub use breaker::BreakerConfig;
pub use dead_letter::{
    DeadLetter, DeadLetterInfo, DeadLetterOpenError, dead_letter_backoff, record_line, split_record,
};
pub use dispatcher::{
    BuildError, Concurrency, Deliveries, Delivery, DispatchConfig, Dispatcher, DispatcherBuilder,
    Hook, MAX_BREAKER_OPEN, MAX_CONCURRENCY, Outcome, Park, RATE_PER_SECOND, SinkDispatch,
    SubmitError, Unfinished,
};
pub use policy::{
    Action, CONFIG_ERRORS_METRIC, Decision, DispatchPolicy, Exponential, RetryPolicy, decide,
    record,
};
pub use throttle::{throttle_after_ms, throttle_after_ms_with};
