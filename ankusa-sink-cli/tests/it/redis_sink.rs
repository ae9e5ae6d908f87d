//! The Redis sink through the binary, by config only, against the Redis on 127.0.0.1:6379.

use super::{
    assert_describe_hides, check_deliver_then_forward_20, check_says_config, deliver_says_config,
    run_with, temp_file, text,
};
use ankusa_sink_testkit::support::unique_name;
use std::path::Path;

/// One stream entry as `XRANGE` answers it: the id and the (field, value) list.
type Entry = (String, Vec<(String, Vec<u8>)>);

fn redis_url() -> String {
    std::env::var("ANKUSA_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

async fn conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url())
        .unwrap()
        // The client's default response timeout (500 ms) is shorter than a loaded machine
        // sometimes needs to answer a test's reads.
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(std::time::Duration::from_secs(10)))
                .set_response_timeout(Some(std::time::Duration::from_secs(10))),
        )
        .await
        .expect("Redis is running (scripts/services/redis.sh)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stream_from_a_config_file_read_back() {
    needs!("Redis");
    let stream = unique_name("cli-stream");
    let f = temp_file(
        "redis.toml",
        &format!(
            "type = \"redis\"\nurl = \"{}\"\nstream = \"{stream}\"\nmaxlen = 100000\n",
            redis_url()
        ),
    );
    check_deliver_then_forward_20(&f, "r-1");
    let entries: Vec<Entry> = redis::cmd("XRANGE")
        .arg(&stream)
        .arg("-")
        .arg("+")
        .query_async(&mut conn().await)
        .await
        .unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg(&stream)
        .query_async(&mut conn().await)
        .await
        .unwrap();
    assert_eq!(entries.len(), 21);
    for (_, fields) in &entries {
        assert_eq!(fields[0].0, "message");
        let m = ankusa_message::decode(&fields[0].1).expect("Message v1");
        assert_eq!(
            fields[1],
            ("ankusa_id".to_owned(), m.id.clone().into_bytes())
        );
    }
    assert_eq!(
        ankusa_message::decode(&entries[0].1[0].1).unwrap().id,
        "r-1"
    );
    // The example file passes the preflight (which writes nothing).
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sinks/redis.toml");
    let out = run_with(
        &["check", "--sink", example.to_str().unwrap()],
        &[("ANKUSA_REDIS_URL", &redis_url())],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

#[test]
fn redis_channel_without_subscriber_is_config_and_never_shows_the_password() {
    needs!("Redis");
    let host = redis_url().trim_start_matches("redis://").to_owned();
    let f = temp_file(
        "redis.toml",
        &format!(
            "type = \"redis\"\nurl = \"redis://default:cli-pa55word@{host}\"\nchannel = \"{}\"\n",
            unique_name("cli-nobody")
        ),
    );
    check_says_config(&f, &[]);
    deliver_says_config(&f, &[]);
    assert_describe_hides(&f, &["cli-pa55word"]);
}
