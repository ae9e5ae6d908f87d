//! The log sink against the conformance suite. It has no probe (what it writes goes to the
//! logger and stdout) and no credentials: the cases that need either are printed skips.
//! A log line has no destination to miss, no credential, no throttle, no size limit and
//! no acknowledgement: those faults are impossible. Its one failure, a write to stdout
//! that fails, is not provided here (the test process's stdout is every test's); the
//! CLI's operator-fault tests provoke it through the binary.

use ankusa_sink_core::{BoxError, async_trait};
use ankusa_sink_log::{LogConfig, LogSink};
use ankusa_sink_testkit::{Case, Fault, Harness, Output, Setup};

pub(crate) struct LogHarness;

#[async_trait]
impl Harness for LogHarness {
    type Sink = LogSink;
    async fn destination(&self, _case: Case) -> Result<Setup<LogSink>, BoxError> {
        Ok(Setup::new(LogSink::new(LogConfig::default())))
    }
    fn takes_credentials(&self) -> bool {
        false
    }
    fn fault_impossible(&self, fault: Fault) -> Option<String> {
        match fault {
            Fault::MissingDestination => Some("a log line has no destination to miss".into()),
            Fault::RefusedCredential => Some("the log sink takes no credential".into()),
            Fault::Throttled => Some("nothing throttles a log write".into()),
            Fault::Oversized => Some("a log line has no size limit".into()),
            Fault::Unacknowledged => {
                Some("a log write is done or failed when it returns: no ack to wait for".into())
            }
            Fault::Unreachable => None,
        }
    }
    fn fault_skip_reason(&self, fault: Fault) -> Option<String> {
        (fault == Fault::Unreachable).then(|| {
            "a failed stdout write would need this test process's stdout, which every test \
             shares (the CLI's operator-fault tests write to /dev/full through the binary)"
                .into()
        })
    }
}

ankusa_sink_testkit::conformance_suite!(LogHarness);

#[tokio::test]
async fn whole_suite_passes_with_printed_skips() {
    let report = ankusa_sink_testkit::run_all_with(&LogHarness, Output::Quiet).await;
    report.assert_passed();
    // Not certified: the failed write and the outage are not provided here.
    let unprovided: Vec<Case> = report.unprovided().into_iter().map(|(c, _)| c).collect();
    for case in [
        Case::ClassifyUnreachable,
        Case::ClassifyWarmUnreachable,
        Case::Recovery,
    ] {
        assert!(unprovided.contains(&case), "{case}:\n{report}");
    }
    assert!(!report.is_certified(), "{report}");
    let skipped: Vec<Case> = report.skips().into_iter().map(|(c, _)| c).collect();
    for case in [Case::Contract, Case::Durability, Case::RoundTrip] {
        assert!(skipped.contains(&case), "{case} should skip:\n{report}");
    }
}
