//! Integration tests: moto on 127.0.0.1 (`scripts/services/moto.sh`) for SQS, SNS, Kinesis
//! and EventBridge, a dedicated moto for IAM denial, and a scripted loopback server for
//! throttling, 5xx and batch shapes; `source` reads SQS through `SqsSource` (the `source`
//! feature).

mod common;
mod conformance;
mod eventbridge;
mod iam;
mod kinesis;
mod poison;
mod request_counter;
mod scripted;
mod serial;
mod sns;
mod source;
mod sqs;
