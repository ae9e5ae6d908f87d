//! Issue 63's twins. What an outside table sink still got past (a fresh key per insert, a
//! "durable" destination that loses data on restart, a password in the config's `Debug`)
//! is caught, each by the case named and by no other: the rest of the suite, all the old
//! suite had, certifies each twin. And an honest connection-per-delivery sink, which the
//! silent destination of `classify_warm_unacknowledged` used to fail, passes.

use ankusa_message::encode;
use ankusa_sink_core::{
    BoxError, Capabilities, Check, Class, Ctx, Description, Envelope, Failure, Secret, Sink,
    Subject, async_trait,
};
use ankusa_sink_testkit::memory::{MemoryError, MemoryHarness, MemoryProbe, MemorySink, Publish};
use ankusa_sink_testkit::support::{TcpProxy, silent_after_warm_up};
use ankusa_sink_testkit::{
    Case, Fault, Harness, Outcome, Output, Probe, Received, Setup, WarmFault, run_all_with,
    run_case,
};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// What is wrong with a twin of the memory reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Twin {
    /// A table without a key column: each insert gets a fresh row id, and no consumer can
    /// see the hook's idempotency key.
    KeylessTable,
    /// Declares dedupe forever, but dedupes on a fresh id per insert: every redelivery is
    /// a new row.
    DedupesOnAFreshId,
    /// Declares durable; its destination acknowledges from memory (synchronous commit
    /// off) and loses it on restart.
    VolatileDestination,
    /// Hands over a config whose derived `Debug` prints the URL with its password.
    LeakyConfig,
    /// Hands over a config that holds the password as a `Secret`.
    HonestConfig,
}

/// The memory sink with the twin's defect.
#[derive(Debug)]
struct TwinSink {
    inner: MemorySink,
    twin: Twin,
}

#[async_trait]
impl Sink for TwinSink {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        match self.twin {
            Twin::KeylessTable | Twin::DedupesOnAFreshId => {
                let bytes = encode(env, ctx, self.inner.capabilities().inline_max_bytes)?;
                // A fresh id per insert: the dedupe never sees the same id twice.
                let msg = Publish {
                    bytes,
                    dedupe_id: Some(ulid::Ulid::new().to_string()),
                };
                let sent = self
                    .inner
                    .broker()
                    .publish(self.inner.queue(), self.inner.token(), msg);
                // The ack timeout of the fault setups (300 ms), as the reference has it.
                match tokio::time::timeout(Duration::from_millis(300), sent).await {
                    Ok(res) => res.map_err(Failure::from),
                    Err(_) => Err(MemoryError::AckTimeout { ms: 300 }.into()),
                }
            }
            _ => self.inner.deliver(env, ctx).await,
        }
    }
    fn capabilities(&self) -> Capabilities {
        let caps = self.inner.capabilities();
        match self.twin {
            // The table keeps every insert: it declares no dedupe.
            Twin::KeylessTable => Capabilities::new(caps.durable, caps.inline_max_bytes),
            _ => caps,
        }
    }
    fn describe(&self, subject: &Subject) -> Option<Description> {
        self.inner.describe(subject)
    }
    async fn check(&self) -> Result<Check, Failure> {
        self.inner.check().await
    }
}

/// Reads the queue back; a keyless table has no idempotency key to read.
struct TwinProbe {
    inner: MemoryProbe,
    keyless: bool,
}

#[async_trait]
impl Probe for TwinProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        let mut got = self.inner.received().await?;
        if self.keyless {
            for r in &mut got {
                r.idempotency_key = None;
            }
        }
        Ok(got)
    }
}

/// The sink file's options as a careless author declares them: `Debug` derived over a
/// URL that holds the password.
#[derive(Debug)]
#[allow(dead_code)]
struct LeakyConfig {
    url: String,
}

/// The same options with the password apart, as a `Secret`.
#[derive(Debug)]
#[allow(dead_code)]
struct HonestConfig {
    url: String,
    password: Secret,
}

/// The memory harness, every setup's sink a twin.
struct TwinHarness {
    inner: MemoryHarness,
    twin: Twin,
}

impl TwinHarness {
    fn new(twin: Twin) -> Self {
        let inner = MemoryHarness::new();
        if twin == Twin::VolatileDestination {
            inner.broker().set_volatile(true);
        }
        TwinHarness { inner, twin }
    }
    fn token(&self) -> String {
        self.inner.secrets()[0].clone()
    }
    fn wrap(&self, mut s: Setup<MemorySink>) -> Setup<TwinSink> {
        if s.probe.is_some() {
            s.probe = Some(Box::new(TwinProbe {
                inner: s.sink.probe(),
                keyless: self.twin == Twin::KeylessTable,
            }));
        }
        let s = match self.twin {
            Twin::LeakyConfig => s.with_config(&LeakyConfig {
                url: format!("memory://tk:{}@localhost/q", self.token()),
            }),
            Twin::HonestConfig => s.with_config(&HonestConfig {
                url: "memory://localhost/q".into(),
                password: Secret::new(self.token()),
            }),
            _ => s,
        };
        let twin = self.twin;
        s.map_sink(|inner| TwinSink { inner, twin })
    }
}

harness_over_memory!(TwinHarness {
    type Sink = TwinSink;
    async fn destination(&self, case: Case) -> Result<Setup<TwinSink>, BoxError> {
        Ok(self.wrap(self.inner.destination(case).await?))
    }
    async fn fault(&self, fault: Fault) -> Result<Option<Setup<TwinSink>>, BoxError> {
        Ok(self.inner.fault(fault).await?.map(|s| self.wrap(s)))
    }
    async fn warm_fault(&self, fault: Fault) -> Result<Option<WarmFault<TwinSink>>, BoxError> {
        let twin = self.twin;
        Ok(self
            .inner
            .warm_fault(fault)
            .await?
            .map(|w| w.map_sink(|inner| TwinSink { inner, twin })))
    }
    fn read_timeout(&self) -> Duration {
        // Every delivery here is synchronous: what is missing after 2 s never arrives.
        Duration::from_secs(2)
    }
});

/// Run the whole suite on `twin`: it must fail `case` alone, and the reason.
async fn only_caught_by(twin: Twin, case: Case) -> String {
    let report = run_all_with(&TwinHarness::new(twin), Output::Quiet).await;
    assert_eq!(report.failures(), vec![case], "{twin:?}: {report}");
    report.outcome(case).unwrap().text().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_key_per_insert_is_caught_by_redelivery_alone() {
    let why = only_caught_by(Twin::KeylessTable, Case::Redelivery).await;
    assert!(why.contains("carries no idempotency key"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedupe_on_a_fresh_id_is_caught_by_redelivery_alone() {
    let why = only_caught_by(Twin::DedupesOnAFreshId, Case::Redelivery).await;
    assert!(
        why.contains("declares dedupe (no window (forever))") && why.contains("2 plain copies"),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_that_loses_data_on_restart_is_caught_by_durability_alone() {
    let why = only_caught_by(Twin::VolatileDestination, Case::Durability).await;
    assert!(
        why.starts_with("after the destination restarted") && why.contains("never reached"),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_configs_debug_is_caught_by_contract_alone() {
    let why = only_caught_by(Twin::LeakyConfig, Case::Contract).await;
    assert!(
        why.starts_with("a planted secret appears in the config's Debug"),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_whose_debug_redacts_passes_and_is_counted() {
    let outcome = run_case(&TwinHarness::new(Twin::HonestConfig), Case::Contract).await;
    assert!(
        matches!(&outcome, Outcome::Pass(what) if what.contains("parsed configs' Debug")),
        "{outcome:?}"
    );
    // Without one handed over, the pass says what went unsearched.
    let outcome = run_case(&MemoryHarness::new(), Case::Contract).await;
    assert!(
        matches!(&outcome, Outcome::Pass(what) if what.contains("no parsed config handed over")),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_dedupes_forever_and_survives_a_restart() {
    let h = MemoryHarness::new();
    let redelivery = run_case(&h, Case::Redelivery).await;
    assert!(
        matches!(&redelivery, Outcome::Pass(what) if what.contains("one copy per key and replay")),
        "{redelivery:?}"
    );
    let durability = run_case(&h, Case::Durability).await;
    assert!(
        matches!(&durability, Outcome::Pass(what) if what.contains("after the destination restarted")),
        "{durability:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_restart_durability_is_a_not_provided_skip_with_the_reason() {
    /// The reference, its destination not restarted.
    struct NoRestart(MemoryHarness);
    #[async_trait]
    impl Harness for NoRestart {
        type Sink = MemorySink;
        async fn destination(&self, case: Case) -> Result<Setup<MemorySink>, BoxError> {
            self.0.destination(case).await
        }
        fn restart_destination_skip_reason(&self) -> Option<String> {
            Some("a hosted service".into())
        }
        fn takes_credentials(&self) -> bool {
            false
        }
    }
    let outcome = run_case(&NoRestart(MemoryHarness::new()), Case::Durability).await;
    assert!(
        matches!(&outcome, Outcome::NotProvided(why)
            if why.contains("20 acked hooks each readable")
                && why.ends_with("restart of the destination not provided: a hosted service")),
        "{outcome:?}"
    );
}

// ---------------------------------------------------------------------------------------
// An honest sink that opens a connection per delivery, against a line broker on loopback.

/// A broker speaking lines: `AUTH <token>` (answered `OK` or `NO`), then `PUB <Message v1
/// JSON>` (stored, answered `ACK`).
struct LineBroker {
    addr: String,
    stored: Arc<Mutex<Vec<Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LineBroker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LineBroker {
    async fn start(token: String) -> LineBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stored: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let kept = Arc::clone(&stored);
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (token, kept) = (token.clone(), Arc::clone(&kept));
                tokio::spawn(async move {
                    let (r, mut w) = conn.into_split();
                    let mut lines = BufReader::new(r).lines();
                    let mut authed = false;
                    while let Ok(Some(line)) = lines.next_line().await {
                        let answer: &[u8] = if let Some(t) = line.strip_prefix("AUTH ") {
                            authed = t == token;
                            if authed { b"OK\n" } else { b"NO\n" }
                        } else if let (true, Some(m)) = (authed, line.strip_prefix("PUB ")) {
                            kept.lock().unwrap().push(m.as_bytes().to_vec());
                            b"ACK\n"
                        } else {
                            b"NO\n"
                        };
                        if w.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        LineBroker { addr, stored, task }
    }
}

/// Why a delivery to the line broker failed.
#[derive(Debug, thiserror::Error)]
enum LineError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("no answer to the login within {0:?}")]
    LoginTimeout(Duration),
    #[error("login refused")]
    LoginRefused,
    #[error("no acknowledgement of the publish within {0:?}")]
    AckTimeout(Duration),
    #[error("connection: {0}")]
    Io(std::io::Error),
}

/// Opens a connection for each delivery: login, publish, wait for the ack.
struct ConnPerDelivery {
    addr: String,
    token: Secret,
    timeout: Duration,
    /// Sends the publish right behind the login (before its answer), and says nothing
    /// landed whatever went unanswered: a lie once the publish left.
    dishonest: bool,
}

impl fmt::Debug for ConnPerDelivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnPerDelivery")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl ConnPerDelivery {
    async fn send(&self, line: Vec<u8>) -> Result<(), LineError> {
        let conn = tokio::time::timeout(self.timeout, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| LineError::LoginTimeout(self.timeout))?
            .map_err(LineError::Connect)?;
        let (r, mut w) = conn.into_split();
        let mut answers = BufReader::new(r).lines();
        let mut answer = async |timeout: LineError| match tokio::time::timeout(
            self.timeout,
            answers.next_line(),
        )
        .await
        {
            Err(_) => Err(timeout),
            Ok(Err(e)) => Err(LineError::Io(e)),
            Ok(Ok(None)) => Err(LineError::Io(std::io::ErrorKind::UnexpectedEof.into())),
            Ok(Ok(Some(a))) => Ok(a),
        };
        let login = format!("AUTH {}\n", self.token.expose());
        if self.dishonest {
            let mut both = login.into_bytes();
            both.extend_from_slice(&line);
            w.write_all(&both).await.map_err(LineError::Io)?;
        } else {
            w.write_all(login.as_bytes()).await.map_err(LineError::Io)?;
        }
        if answer(LineError::LoginTimeout(self.timeout)).await? != "OK" {
            return Err(LineError::LoginRefused);
        }
        if !self.dishonest {
            w.write_all(&line).await.map_err(LineError::Io)?;
        }
        answer(LineError::AckTimeout(self.timeout)).await?;
        Ok(())
    }
}

#[async_trait]
impl Sink for ConnPerDelivery {
    async fn deliver(&self, env: &Envelope, ctx: &Ctx) -> Result<(), Failure> {
        let mut line = b"PUB ".to_vec();
        line.extend(encode(env, ctx, None)?);
        line.push(b'\n');
        self.send(line).await.map_err(|e| {
            let (class, landed) = match &e {
                LineError::LoginRefused => (Class::Config, Some(false)),
                // Nothing of the hook was sent before the login was answered.
                LineError::Connect(_) | LineError::LoginTimeout(_) => {
                    (Class::Transient, Some(false))
                }
                LineError::AckTimeout(_) => (Class::Transient, Some(!self.dishonest)),
                LineError::Io(_) => (Class::Transient, None),
            };
            Failure::new(class, e).with_may_have_landed(landed)
        })
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(true, None)
    }
}

/// Reads what the line broker stored.
struct LineProbe(Arc<Mutex<Vec<Vec<u8>>>>);

#[async_trait]
impl Probe for LineProbe {
    async fn received(&self) -> Result<Vec<Received>, BoxError> {
        let stored = self.0.lock().unwrap().clone();
        stored
            .iter()
            .map(|m| Received::from_message_bytes(m))
            .collect()
    }
}

/// The connection-per-delivery sink's harness: the warm unacknowledged fault only.
struct LineHarness {
    token: String,
    dishonest: bool,
    /// Whether the setup reads what the silence took (what `silent_after_warm_up` does).
    heard: bool,
}

impl LineHarness {
    fn new(dishonest: bool, heard: bool) -> Self {
        LineHarness {
            token: format!("planted-line-token-{}", ulid::Ulid::new()),
            dishonest,
            heard,
        }
    }
    /// A broker of its own, the sink reaching it through a proxy.
    async fn setup(&self) -> Result<(Setup<ConnPerDelivery>, Arc<TcpProxy>), BoxError> {
        let broker = LineBroker::start(self.token.clone()).await;
        let proxy = Arc::new(TcpProxy::start(broker.addr.clone()).await?);
        let sink = ConnPerDelivery {
            addr: proxy.addr().to_string(),
            token: Secret::new(self.token.clone()),
            timeout: Duration::from_millis(300),
            dishonest: self.dishonest,
        };
        let probe = LineProbe(Arc::clone(&broker.stored));
        let stop = Arc::clone(&proxy);
        let setup = Setup::new(sink)
            .with_probe(probe)
            .with_teardown(move || async move {
                stop.stop().await;
                drop(broker);
                Ok(())
            });
        Ok((setup, proxy))
    }
}

#[async_trait]
impl Harness for LineHarness {
    type Sink = ConnPerDelivery;
    async fn destination(&self, _case: Case) -> Result<Setup<ConnPerDelivery>, BoxError> {
        Ok(self.setup().await?.0)
    }
    async fn warm_fault(
        &self,
        fault: Fault,
    ) -> Result<Option<WarmFault<ConnPerDelivery>>, BoxError> {
        if fault != Fault::Unacknowledged {
            return Ok(None);
        }
        let (setup, proxy) = self.setup().await?;
        Ok(Some(if self.heard {
            silent_after_warm_up(setup, proxy)
        } else {
            WarmFault::new(setup, move || async move {
                proxy.blackhole();
                Ok(())
            })
        }))
    }
    fn secrets(&self) -> Vec<String> {
        vec![self.token.clone()]
    }
    fn reports_landing(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_connection_per_delivery_sink_passes_the_silent_destination() {
    let honest = LineHarness::new(false, true);
    let outcome = run_case(&honest, Case::ClassifyWarmUnacknowledged).await;
    assert!(
        matches!(&outcome, Outcome::Pass(what) if what.contains("no answer to the login")),
        "{outcome:?}"
    );
    // The same sink delivers and reads back as any other.
    for case in [Case::RoundTrip, Case::Redelivery, Case::Durability] {
        let outcome = run_case(&honest, case).await;
        assert!(
            matches!(outcome, Outcome::Pass(_) | Outcome::NotProvided(_)),
            "{case}: {outcome:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_what_the_silence_heard_the_honest_sink_is_failed_as_before() {
    // What the suite said of it before it read the silence: the false failure of issue 63.
    let outcome = run_case(
        &LineHarness::new(false, false),
        Case::ClassifyWarmUnacknowledged,
    )
    .await;
    assert!(
        matches!(&outcome, Outcome::Fail(why) if why.contains("says the opposite of what happened")),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_sent_the_hook_into_the_silence_may_not_say_nothing_landed() {
    // The dishonest twin pipelines its publish behind the login, so the hook reaches the
    // silence, and then says nothing landed.
    let outcome = run_case(
        &LineHarness::new(true, true),
        Case::ClassifyWarmUnacknowledged,
    )
    .await;
    assert!(
        matches!(&outcome, Outcome::Fail(why)
            if why.contains("says the opposite of what happened")
                && why.contains("the silent destination took the hook's bytes")),
        "{outcome:?}"
    );
}
