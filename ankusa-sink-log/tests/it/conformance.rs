//! The log sink against the conformance suite. It has no probe (what it writes goes to the
//! logger and stdout) and no credentials: the cases that need either are printed skips.

use ankusa_sink_core::{BoxError, async_trait};
use ankusa_sink_log::{LogConfig, LogSink};
use ankusa_sink_testkit::{Case, Harness, Output, Setup};

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
}

ankusa_sink_testkit::conformance_suite!(LogHarness);

#[tokio::test]
async fn whole_suite_passes_with_printed_skips() {
    let report = ankusa_sink_testkit::run_all_with(&LogHarness, Output::Quiet).await;
    report.assert_passed();
    let skipped: Vec<Case> = report.skips().into_iter().map(|(c, _)| c).collect();
    for case in [Case::Contract, Case::Durability, Case::RoundTrip] {
        assert!(skipped.contains(&case), "{case} should skip:\n{report}");
    }
}
