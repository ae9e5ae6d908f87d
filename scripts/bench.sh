#!/usr/bin/env bash
# Benchmarks (issue 11): start the brokers, run every adapter's `vs_raw` bench (sink vs its
# raw client, side by side) and the core benches, then write the chart and the ratio table.
#
#   bash scripts/bench.sh                 everything
#   BENCH_ADAPTERS="http kafka" bash scripts/bench.sh    a subset of adapters (core still runs)
#
# Results: target/bench-results/{<adapter>.json,<adapter>.txt,core.txt,allocs.txt,table.md,
# pipeline.json,pipeline.md} (pipeline: scripts/bench_pipeline.py, forward vs a user's script or
# raw-client loop, every sink: kafka, log, amqp, sqs, sns, pubsub, http; isolation.txt: one
# failing sink of two, per source);
# chart: docs/benchmarks-throughput.svg. Measurements hold /tmp/ankusa-bench.lock so two
# benchmark runs on this machine never overlap; builds happen before, outside the lock.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ankusa-sinks/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export BENCH_OUT_DIR="${BENCH_OUT_DIR:-$PWD/target/bench-results}"
LOCK="${BENCH_LOCK:-/tmp/ankusa-bench.lock}"
mkdir -p "$BENCH_OUT_DIR"

step() { printf '\n==> %s\n' "$*"; }

for svc in scripts/services/*.sh; do
  step "service: $svc"
  bash "$svc"
done

adapters=()
for a in ${BENCH_ADAPTERS:-http amqp kafka aws pubsub nats redis mqtt}; do
  if [ -f "ankusa-sink-$a/benches/vs_raw.rs" ]; then
    adapters+=("$a")
  else
    echo "bench.sh: no ankusa-sink-$a/benches/vs_raw.rs, skipping $a" >&2
  fi
done

step "build (bench profile)"
for a in "${adapters[@]}"; do
  cargo bench -p "ankusa-sink-$a" --bench vs_raw --no-run
done
cargo bench -p ankusa-dispatch --bench core --bench allocs --bench dispatcher --bench tenants --bench adaptive --no-run

failed=()
for a in "${adapters[@]}"; do
  step "vs_raw: $a"
  if ! flock "$LOCK" cargo bench -p "ankusa-sink-$a" --bench vs_raw 2>&1 | tee "$BENCH_OUT_DIR/$a.txt"; then
    failed+=("$a")
  fi
  # SQS and SNS again against the fast in-process server, where the client bounds both
  # sides instead of moto (sqs-fast.json, sns-fast.json).
  if [ "$a" = aws ]; then
    step "vs_raw: aws against the fast in-process server"
    if ! flock "$LOCK" cargo bench -p ankusa-sink-aws --bench vs_raw -- fast 2>&1 | tee "$BENCH_OUT_DIR/aws-fast.txt"; then
      failed+=("aws-fast")
    fi
  fi
done

step "forward --from kafka to kafka (release binary)"
cargo bench -p ankusa-sink-cli --bench from_kafka --no-run
if ! flock "$LOCK" cargo bench -p ankusa-sink-cli --bench from_kafka 2>&1 | tee "$BENCH_OUT_DIR/from_kafka.txt"; then
  failed+=("from_kafka")
fi

step "one bad destination: forward --from kafka, nats, amqp to a good and a failing HTTP sink (release binary)"
cargo bench -p ankusa-sink-cli --bench isolation --no-run
if ! flock "$LOCK" cargo bench -p ankusa-sink-cli --bench isolation 2>&1 | tee "$BENCH_OUT_DIR/isolation.txt"; then
  failed+=("isolation")
fi

step "pipeline: forward against what a user would write instead (release binary)"
cargo build --release --locked -p ankusa-sink-cli
# The raw-client loops of the amqp, sqs/sns, pubsub and http rows, and the HTTP receiver.
cargo build --release --locked -p ankusa-sink-amqp --example amqp_raw_loop \
  -p ankusa-sink-kafka --example kafka_raw_loop -p ankusa-sink-aws --example aws_raw_loop -p ankusa-sink-pubsub --example pubsub_raw_loop \
  -p ankusa-sink-http --example http_raw_loop --example sink_server
if ! python3 scripts/bench_pipeline.py --cli "$CARGO_TARGET_DIR/release/ankusa-sink" \
    --out "$BENCH_OUT_DIR" --concurrency-variants 32,4096 --rss-scaling \
    2>&1 | tee "$BENCH_OUT_DIR/pipeline.txt"; then
  failed+=("pipeline")
fi

step "core (criterion)"
flock "$LOCK" cargo bench -p ankusa-dispatch --bench core -- --warm-up-time 1 --measurement-time 3 \
  2>&1 | tee "$BENCH_OUT_DIR/core.txt"
step "the dispatcher's own overhead per delivery"
flock "$LOCK" cargo bench -p ankusa-dispatch --bench dispatcher 2>&1 | tee "$BENCH_OUT_DIR/dispatcher.txt"
step "tenant fairness: one tenant's backlog against another's first hooks"
flock "$LOCK" cargo bench -p ankusa-dispatch --bench tenants 2>&1 | tee "$BENCH_OUT_DIR/tenants.txt"
step "adaptive concurrency against the best fixed one, and against a rate-limiting server"
flock "$LOCK" cargo bench -p ankusa-dispatch --bench adaptive 2>&1 | tee "$BENCH_OUT_DIR/adaptive.txt"
step "core allocations (dhat)"
flock "$LOCK" cargo bench -p ankusa-dispatch --bench allocs 2>&1 | tee "$BENCH_OUT_DIR/allocs.txt"

step "chart and table"
python3 scripts/bench_chart.py "$BENCH_OUT_DIR" docs/benchmarks-throughput.svg "$BENCH_OUT_DIR/table.md"
if [ -f "$BENCH_OUT_DIR/pipeline.md" ]; then
  printf '\n' >> "$BENCH_OUT_DIR/table.md"
  cat "$BENCH_OUT_DIR/pipeline.md" >> "$BENCH_OUT_DIR/table.md"
fi

if ((${#failed[@]})); then
  echo "bench.sh: these benches failed: ${failed[*]}" >&2
  exit 1
fi
