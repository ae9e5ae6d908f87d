//! `type = "nats"` by config only: `check` then `deliver` to a JetStream stream on the
//! server at 127.0.0.1:4222 (scripts/services/nats.sh), read back from the stream.

use super::{NATS_URL, check_then_deliver, nats_stream, temp_file};
use ankusa_sink_testkit::support::unique_name;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_to_a_jetstream_stream_by_config_only() {
    needs!("NATS");
    let (js, name, subject) = nats_stream("cli-nats").await;
    // The token comes from the environment; the server has no auth and ignores it.
    let sink = temp_file(
        "nats.toml",
        &format!(
            "type = \"nats\"\nurl = \"{NATS_URL}\"\nsubject = \"{subject}\"\n\
             token = \"${{ANKUSA_TEST_NATS_TOKEN}}\"\ntimeout_ms = 5000\n"
        ),
    );
    let id = unique_name("hook");
    check_then_deliver(&sink, &id, &[("ANKUSA_TEST_NATS_TOKEN", "cli-token-1")]);
    let mut s = js.get_stream(&name).await.unwrap();
    let state = s.info().await.unwrap().state.clone();
    assert_eq!(state.messages, 1);
    let m = s.get_raw_message(state.last_sequence).await.unwrap();
    assert_eq!(
        m.headers.get("ankusa_id").map(|v| v.to_string()),
        Some(id.clone())
    );
    assert_eq!(
        m.headers.get("Nats-Msg-Id").map(|v| v.to_string()),
        Some(id.clone())
    );
    let body: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
    assert_eq!(body["id"], id.as_str());
    js.delete_stream(&name).await.unwrap();
}
