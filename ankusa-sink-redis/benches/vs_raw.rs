//! RedisSink vs the raw `redis` client (one ConnectionManager, the same `XADD` with the same
//! Message v1 bytes and fields, built once) on the Redis at 127.0.0.1:6379.
//! `cargo bench -p ankusa-sink-redis --bench vs_raw`; JSON goes to `$BENCH_OUT_DIR/redis.json`.
#![allow(missing_docs)]

use ankusa_bench_support::vs_raw::{self, Op, VsRawBench};
use ankusa_message::{DEFAULT_INLINE_MAX_BYTES, EmptyValues, Layout, Outgoing};
use ankusa_sink_core::Envelope;
use ankusa_sink_redis::{MESSAGE_FIELD, RedisConfig, RedisSink};
use redis::aio::ConnectionManager;
use std::sync::Arc;

const URL: &str = "redis://127.0.0.1:6379";
const SINK_STREAM: &str = "ankusa-bench-vs-raw-sink";
const RAW_STREAM: &str = "ankusa-bench-vs-raw-raw";

struct Redis {
    sink: Arc<RedisSink>,
    raw: ConnectionManager,
}

impl Redis {
    async fn setup() -> Redis {
        let client = redis::Client::open(URL).unwrap();
        let raw = ConnectionManager::new(client)
            .await
            .expect("Redis on 127.0.0.1:6379 (run scripts/services/redis.sh)");
        let sink = RedisSink::new(RedisConfig::stream(URL, SINK_STREAM).unwrap()).unwrap();
        let bench = Redis {
            sink: Arc::new(sink),
            raw,
        };
        bench.after_run().await;
        bench
    }
}

/// The sink's layout at its defaults.
fn layout() -> Layout {
    Layout::message(Some(DEFAULT_INLINE_MAX_BYTES), EmptyValues::Keep)
}

/// The sink's `XADD` of `out`: the Message v1 bytes, then the `ankusa_*` fields. Sized
/// once, as the sink sizes its command (the bench's field names and values fit in 1 KiB).
fn xadd(out: &Outgoing<'_>) -> redis::Cmd {
    let attributes = out.attributes();
    let mut cmd = redis::Cmd::with_capacity(4 + 2 * attributes.len(), out.body().len() + 1024);
    cmd.arg("XADD")
        .arg(RAW_STREAM)
        .arg("*")
        .arg(MESSAGE_FIELD)
        .arg(out.body());
    for (attr, value) in attributes {
        cmd.arg(attr.as_attr()).arg(value.as_ref());
    }
    cmd
}

impl VsRawBench for Redis {
    const ADAPTER: &'static str = "redis";
    const MIN_N: usize = 300;
    /// Both streams are deleted after every run.
    const MAX_BYTES: usize = 256 << 20;
    const ONLY_N: (usize, usize) = (5_000, 1_000);
    type Sink = RedisSink;

    fn sink(&self) -> &Arc<RedisSink> {
        &self.sink
    }

    /// The sink's exact command (`XADD`, the Message v1 bytes, the same fields), built once.
    fn raw_op(&self, env: &Arc<Envelope>) -> Op {
        let ctx = ankusa_bench_support::vs_raw::raw_ctx(env);
        let cmd = Arc::new(xadd(&Outgoing::new(env, &ctx, &layout()).unwrap()));
        let conn = self.raw.clone();
        Arc::new(move || {
            let (cmd, mut conn) = (Arc::clone(&cmd), conn.clone());
            Box::pin(async move { cmd.query_async::<redis::Value>(&mut conn).await.is_ok() })
        })
    }

    /// The same command, its Message v1 encoded per delivery.
    fn raw_encode_op(&self, env: &Arc<Envelope>) -> Option<Op> {
        let (env, ctx) = (
            Arc::clone(env),
            Arc::new(ankusa_bench_support::vs_raw::raw_ctx(env)),
        );
        let layout = Arc::new(layout());
        let conn = self.raw.clone();
        Some(Arc::new(move || {
            let (env, ctx, layout) = (Arc::clone(&env), Arc::clone(&ctx), Arc::clone(&layout));
            let mut conn = conn.clone();
            Box::pin(async move {
                let Ok(out) = Outgoing::new(&env, &ctx, &layout) else {
                    return false;
                };
                let cmd = xadd(&out);
                cmd.query_async::<redis::Value>(&mut conn).await.is_ok()
            })
        }))
    }

    async fn after_run(&self) {
        let mut conn = self.raw.clone();
        let _: Result<i64, _> = redis::cmd("DEL")
            .arg(SINK_STREAM)
            .arg(RAW_STREAM)
            .query_async(&mut conn)
            .await;
    }

    async fn teardown(&self) {
        self.after_run().await;
    }
}

fn main() {
    vs_raw::run(Redis::setup());
}
