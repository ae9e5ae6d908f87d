//! Dead letters: a JSON-lines file or a sink.

use crate::*;
use ankusa_dispatch::{DeadLetter, DeadLetterInfo, Dispatcher, Hook, Outcome, split_record};
use std::time::Duration;

#[tokio::test]
async fn the_jsonl_file_gets_one_replayable_line_per_dead_letter() {
    let dir = scratch("dispatch-dl");
    let path = dir.join("dead.jsonl");
    let (d, mut out) = Dispatcher::builder()
        .sink("gone", Script::new(Step::Permanent).arc())
        .sink("flaky", Script::new(Step::Transient).arc())
        .sink("fine", Script::new(Step::Ok).arc())
        .dead_letter(DeadLetter::jsonl(&path).unwrap())
        .config(config(policy(
            Duration::from_millis(5),
            2,
            Duration::from_secs(60),
        )))
        .build()
        .unwrap();
    let e = Envelope::builder("h1", "stripe", "{\"a\":1}")
        .tenant_id("acme")
        .build()
        .unwrap();
    d.submit(Hook::new(e).replay_id("r1")).await.unwrap();
    let got = recv_n(&mut out, 3, Duration::from_secs(10)).await;
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    for line in lines {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let dl = &value["dead_letter"];
        for field in [
            "sink",
            "class",
            "error_class",
            "reason",
            "attempts",
            "first_attempt_ms",
            "last_attempt_ms",
        ] {
            assert!(!dl[field].is_null(), "{field} in {line}");
        }
        let (env_json, info) = split_record(value).unwrap();
        let info: DeadLetterInfo = info.unwrap();
        let back: Envelope = serde_json::from_value(env_json).unwrap();
        assert_eq!(back.id(), "h1");
        assert_eq!(back.tenant_id(), Some("acme"));
        let delivery = got.iter().find(|x| *x.sink == *info.sink).unwrap();
        assert_eq!(info.attempts, delivery.attempts);
        assert_eq!(info.first_attempt_ms, delivery.first_attempt_ms);
        assert_eq!(info.last_attempt_ms, delivery.last_attempt_ms);
        match &*info.sink {
            "gone" => {
                assert_eq!(
                    (&*info.class, &*info.error_class, info.attempts),
                    ("permanent", "permanent", 1)
                )
            }
            "flaky" => {
                assert_eq!(
                    (&*info.class, &*info.error_class, info.attempts),
                    ("transient", "transient", 2)
                )
            }
            other => panic!("{other}"),
        }
        match &delivery.outcome {
            Outcome::DeadLettered { store_error, .. } => assert_eq!(store_error, &None),
            o => panic!("{o:?}"),
        }
    }
    assert!(got.iter().all(|x| x.replay_id.as_deref() == Some("r1")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_sink_gets_the_hook_and_a_failing_one_is_reported() {
    let dl = Script::new(Step::Ok).first([Step::Permanent]).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink("gone", Script::new(Step::Permanent).arc())
        .dead_letter(DeadLetter::sink(dl.clone()))
        .build()
        .unwrap();
    d.submit(Hook::new(env("h1"))).await.unwrap();
    let first = recv_n(&mut out, 1, Duration::from_secs(1)).await;
    match &first[0].outcome {
        Outcome::DeadLettered { store_error, .. } => assert!(store_error.is_some()),
        o => panic!("{o:?}"),
    }
    d.submit(Hook::new(env("h2"))).await.unwrap();
    let second = recv_n(&mut out, 1, Duration::from_secs(1)).await;
    match &second[0].outcome {
        Outcome::DeadLettered { store_error, .. } => assert_eq!(store_error, &None),
        o => panic!("{o:?}"),
    }
    // Each dead letter goes as its record: a message of its own, named after the hook.
    assert_eq!(
        dl.seen()
            .iter()
            .map(|s| s.hook.split(".dead.gone.").next().unwrap())
            .collect::<Vec<_>>(),
        ["h1", "h2"]
    );
}

#[test]
fn a_dead_letter_file_has_one_writer_and_the_second_is_told_who() {
    let dir = scratch("dl-lock");
    let path = dir.join("dead.jsonl");
    let first = DeadLetter::jsonl(&path).unwrap();
    let e = DeadLetter::jsonl(&path).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains(&path.display().to_string()) && text.contains("in use by another run"),
        "{text}"
    );
    match e {
        ankusa_dispatch::DeadLetterOpenError::Locked { holder, .. } => {
            assert_eq!(holder, Some(std::process::id()), "this process holds it")
        }
        other => panic!("{other:?}"),
    }
    // Released with the last handle: the next run takes it.
    drop(first);
    DeadLetter::jsonl(&path).unwrap();
    // A device is never cut back, so never locked: runs may share /dev/null.
    let _a = DeadLetter::jsonl("/dev/null").unwrap();
    let _b = DeadLetter::jsonl("/dev/null").unwrap();
}

#[test]
fn an_existing_dead_letter_file_others_could_read_or_another_user_owns_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = scratch("dl-mode");
    let path = dir.join("dead.jsonl");
    std::fs::write(&path, "").unwrap();
    for mode in [0o644, 0o620, 0o604] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = DeadLetter::jsonl(&path).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&path.display().to_string()) && text.contains(&format!("{mode:04o}")),
            "{text}"
        );
        assert!(
            matches!(e, ankusa_dispatch::DeadLetterOpenError::Mode { mode: m, .. } if m == mode),
            "{e:?}"
        );
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    drop(DeadLetter::jsonl(&path).unwrap());
    // Another user's file (root can hand it over; elsewhere the case is not reachable).
    let nobody = 65_534;
    if std::os::unix::fs::chown(&path, Some(nobody), None).is_ok() {
        let e = DeadLetter::jsonl(&path).unwrap_err();
        assert!(
            matches!(e, ankusa_dispatch::DeadLetterOpenError::Owner { uid, .. } if uid == nobody),
            "{e:?}"
        );
        assert!(e.to_string().contains("uid 65534"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_dead_letter_keeps_the_paths_query_names_and_masks_their_values() {
    let dir = scratch("dl-query");
    let path = dir.join("dead.jsonl");
    let (d, mut out) = Dispatcher::builder()
        .sink("gone", Script::new(Step::Permanent).arc())
        .dead_letter(DeadLetter::jsonl(&path).unwrap())
        .build()
        .unwrap();
    let e = Envelope::builder("hq", "stripe", "{}")
        .path("/in/stripe?token=SECRET-TOKEN&v=2#frag")
        .build()
        .unwrap();
    d.submit(Hook::new(e)).await.unwrap();
    recv_n(&mut out, 1, Duration::from_secs(10)).await;
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("SECRET-TOKEN"), "{text}");
    let value: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let (env_json, _) = split_record(value).unwrap();
    let back: Envelope = serde_json::from_value(env_json).unwrap();
    assert_eq!(back.path(), "/in/stripe?token=REDACTED&v=REDACTED");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(start_paused = true)]
async fn stored_dead_letters_and_store_errors_are_counted_by_sink() {
    recorder();
    let name = unique_name("dlm");
    // The store refuses the first dead letter once (held: a hook from no source is
    // reported with its error instead), then takes the second.
    let store = Script::new(Step::Ok).first([Step::Transient]).arc();
    let (d, mut out) = Dispatcher::builder()
        .sink(&name, Script::new(Step::Permanent).arc())
        .dead_letter(DeadLetter::sink(store))
        .build()
        .unwrap();
    let labels = |class: &str| format!("class={class},sink={name}");
    assert_eq!(
        counter(ankusa_dispatch::metrics::DEAD_LETTERS, &labels("permanent")),
        Some(0)
    );
    d.submit(Hook::new(env("h1"))).await.unwrap();
    let first = recv_n(&mut out, 1, Duration::from_secs(5)).await;
    assert!(
        matches!(
            &first[0].outcome,
            Outcome::DeadLettered {
                store_error: Some(_),
                ..
            }
        ),
        "not stored"
    );
    d.submit(Hook::new(env("h2"))).await.unwrap();
    recv_n(&mut out, 1, Duration::from_secs(5)).await;
    assert_eq!(
        counter(ankusa_dispatch::metrics::DEAD_LETTERS, &labels("permanent")),
        Some(1)
    );
    assert_eq!(
        counter(
            ankusa_dispatch::metrics::DEAD_LETTER_ERRORS,
            &format!("sink={name}")
        ),
        Some(1)
    );
    d.shutdown(Duration::ZERO).await;
}

/// A queue-like dead-letter sink: Message v1 with a 64-byte inline threshold, kept.
#[derive(Debug, Default)]
struct SmallQueue(std::sync::Mutex<Vec<Vec<u8>>>);

#[ankusa_sink_core::async_trait]
impl ankusa_sink_core::Sink for SmallQueue {
    async fn deliver(
        &self,
        env: &Envelope,
        ctx: &ankusa_sink_core::Ctx,
    ) -> Result<(), ankusa_sink_core::Failure> {
        let wire = ankusa_message::encode(env, ctx, std::num::NonZeroUsize::new(64))?;
        self.0.lock().unwrap().push(wire);
        Ok(())
    }
    fn capabilities(&self) -> ankusa_sink_core::Capabilities {
        ankusa_sink_core::Capabilities::new(true, std::num::NonZeroUsize::new(64))
    }
}

#[tokio::test]
async fn a_dead_letter_over_its_sinks_threshold_goes_by_claim_from_the_dispatchers_store() {
    let store = ankusa_claimcheck::ClaimStore::in_memory();
    let queue = std::sync::Arc::new(SmallQueue::default());
    let (d, mut out) = Dispatcher::builder()
        .sink("gone", Script::new(Step::Permanent).arc())
        .claim_store(store.clone())
        .dead_letter(DeadLetter::sink(queue.clone()))
        .build()
        .unwrap();
    // Small enough for the main sink's inline body, too large as a record in the queue.
    let e = Envelope::builder("h1", "stripe", "x".repeat(200))
        .build()
        .unwrap();
    d.submit(Hook::new(e)).await.unwrap();
    let got = recv_n(&mut out, 1, Duration::from_secs(5)).await;
    match &got[0].outcome {
        Outcome::DeadLettered { store_error, .. } => assert_eq!(store_error, &None),
        o => panic!("{o:?}"),
    }
    let sent = queue.0.lock().unwrap().clone();
    let msg = ankusa_message::decode(&sent[0]).unwrap();
    assert!(matches!(msg.body, ankusa_message::MessageBody::Claim(_)));
    let record = store.redeem_message(&msg).await.unwrap();
    let back = ankusa_dispatch::record::PairRecord::parse(&record).unwrap();
    assert_eq!(
        (back.envelope.id(), back.info.sink.as_str()),
        ("h1", "gone")
    );
    d.shutdown(Duration::ZERO).await;
}
