#!/usr/bin/env python3
"""Issue 21, "the whole pipeline": `ankusa-sink forward` against what a user writes instead.

    python3 scripts/bench_pipeline.py --cli ~/.cache/ankusa-sinks/target/release/ankusa-sink \\
        --out target/bench-results [--hooks 100000] [--body-bytes 1024] [--reps 3] \\
        [--only kafka|log|amqp|sqs|sns|pubsub|http]... [--concurrency-variants 256,4096] \\
        [--examples DIR] [--sqs-hooks 1000] [--sns-hooks 20000] [--pubsub-hooks 100000] \\
        [--rss-scaling] [--no-verify] [--keep]

One input file is generated once (`ankusa-sink gen`), then every side reads that file, each
run a separate child process timed from its start to its exit (hooks/s = hooks / wall) with
its peak RSS from `os.wait4` (ru_maxrss). Repetitions are interleaved (baseline, forward,
baseline, forward, ...); the table gives the median hooks/s and the largest peak RSS.

- kafka: scripts/bench/kafka_produce.py (confluent-kafka, acks=all, idempotence) against
  `forward --json` to a Kafka sink (brokers + topic only) at the default settings and with
  `--concurrency` 256 and 4096 (`--concurrency-variants`); beside them the example
  kafka_raw_loop, the script's loop in Rust (rdkafka, the same settings), as is and with
  `--encode` (see below). A fresh one-partition topic per run, created and deleted with the admin API;
  afterwards the topic is read back and must hold exactly `--hooks` records (`--no-verify`
  skips that). Broker: 127.0.0.1:9092 (tansu, started by scripts/services/kafka.sh) or
  $ANKUSA_KAFKA_BROKERS.
- log: `cat` of the file to a file, and a Python loop (json.loads + json.dumps per line to a
  file), against `forward` to the log sink with `messages = true` (Message v1 lines to a
  file) and to the default log sink (`--sink log`: one log line per hook on stderr, to a file).
- amqp, sqs, sns, pubsub, http: a raw-client loop in Rust, one release example per adapter
  crate (`<adapter>_raw_loop`, built by scripts/bench.sh; `--examples DIR`, default
  examples/ beside --cli), against `forward --json` with a sink file holding only what the
  adapter requires (the destination; the endpoint for SNS and Pub/Sub) at the default
  settings. Each loop sends every line of the file as is as one message (no parsing) with
  its best throughput settings, waits for every ack / confirm / 2xx and exits 1 unless all
  came: amqp_raw_loop (lapin, one confirm-mode channel, mandatory + persistent, 4096
  confirms outstanding), aws_raw_loop (the AWS SDK: SendMessageBatch / PublishBatch of 10,
  8 batches in flight), pubsub_raw_loop (google-cloud-pubsub Publisher, batches of up to
  1000 messages, 20,000 outstanding), http_raw_loop (reqwest, 32 POSTs in flight, one
  runtime thread). Every run gets a fresh destination, deleted afterwards: a durable topic exchange with a durable queue
  bound with `#` (RabbitMQ at $ANKUSA_AMQP_URL or 127.0.0.1:5672, scripts/services/rabbitmq.sh),
  an SQS queue or SNS topic (moto at $ANKUSA_MOTO_ENDPOINT or 127.0.0.1:4566,
  scripts/services/moto.sh; region and dummy credentials from the environment), a Pub/Sub
  topic with one subscription (the emulator at $ANKUSA_PUBSUB_EMULATOR_HOST or
  127.0.0.1:8085, scripts/services/pubsub.sh), a receiver (the example sink_server: HTTP/1.1
  keep-alive, 204 to every request, on a free loopback port). Afterwards the destination must
  hold exactly the hooks sent: the queue's message count (passive declare), SQS
  ApproximateNumberOfMessages, the subscription's pulled message ids, the receiver's request
  count; an SNS topic cannot be counted on moto (acknowledgements only). moto is slow per
  message, and its SQS scans the whole queue on every send (a send costs O(depth)): the sqs
  rows send the first --sqs-hooks lines of the file (default 1,000), sns the first
  --sns-hooks (default 20,000), pubsub the first --pubsub-hooks (default 100,000).
- Message v1 loops: the kafka, amqp, sqs, sns and pubsub loops also run with `--encode`:
  each line parsed into an envelope and sent as `forward`'s sink sends it (core's
  `Outgoing`: the body's SHA-256, Message v1, the `ankusa_*` attributes / headers), nothing
  else (no dispatcher, retries or outcome lines). The table's last column is `forward`
  against that loop: the format's own cost is in both sides, so what is left is
  `forward`'s own. The targets stay against the loops that send the lines as they are.
- --rss-scaling: `forward --sink log --json` of 100,000 and 1,000,000 hooks with 100-byte
  bodies: peak RSS of each and their ratio (target: within 10 %).

To try other forward settings against the same loops (amqp, sqs, sns, pubsub, http rows):
$ANKUSA_BENCH_SINK_EXTRA is appended to each generated sink file (TOML, e.g. a `[batch]`
table) and $ANKUSA_BENCH_FORWARD_ARGS (split on spaces) to forward's arguments, e.g.
`--concurrency 8192`. The table still says "default settings": record what was set.

Writes DIR/pipeline.json (a list of rows) and DIR/pipeline.md (tables). Standard library
only; the Kafka baseline and the Kafka admin calls run on the venv of
scripts/bench/setup_venv.sh, the other admin calls through the raw-loop examples (RabbitMQ,
moto) or the emulator's REST API.
Progress goes to stderr. A child's failure ends its sink's runs with its stderr's tail: that
sink has no rows, the table names the failure, the other sinks still run, and the exit is 1.
Holds $BENCH_LOCK (default /tmp/ankusa-bench.lock) while measuring, like scripts/bench.sh.
"""

import argparse
import datetime
import fcntl
import json
import os
import platform
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KAFKA_SH = os.path.join(ROOT, "scripts", "services", "kafka.sh")
SETUP_VENV = os.path.join(ROOT, "scripts", "bench", "setup_venv.sh")
PRODUCE = os.path.join(ROOT, "scripts", "bench", "kafka_produce.py")
DEFAULT_BROKERS = "127.0.0.1:9092"
SERVICES = os.path.join(ROOT, "scripts", "services")
ALL_SINKS = ["kafka", "log", "amqp", "sqs", "sns", "pubsub", "http"]
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2f"
DEFAULT_MOTO = "http://127.0.0.1:4566"
DEFAULT_PUBSUB_HOST = "127.0.0.1:8085"
PUBSUB_PROJECT = "ankusa-pipeline"

# Run with the venv's python: create / delete a topic, count its records.
KAFKA_ADMIN = r"""
import sys, time
from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.admin import AdminClient, NewTopic
cmd, brokers, topic = sys.argv[1:4]
if cmd == "create":
    a = AdminClient({"bootstrap.servers": brokers})
    a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)],
                    operation_timeout=30)[topic].result(30)
    deadline = time.time() + 30
    while True:  # until the metadata shows it with its one partition
        t = a.list_topics(topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == 1:
            break
        if time.time() > deadline:
            sys.exit("topic %s not visible after 30 s" % topic)
        time.sleep(0.1)
elif cmd == "delete":
    a = AdminClient({"bootstrap.servers": brokers})
    a.delete_topics([topic], operation_timeout=30)[topic].result(30)
elif cmd == "count":
    # Read partition 0 from the start; the high watermark is not trusted (tansu's lags the
    # last batch), so count records until offset want-1 is seen, then read 1 s more.
    want = int(sys.argv[4])
    c = Consumer({"bootstrap.servers": brokers, "group.id": "ankusa-bench-count",
                  "enable.auto.commit": False, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    n, nbytes, last, idle_since, done_at = 0, 0, -1, time.time(), None
    while True:
        now = time.time()
        if done_at is not None and now - done_at > 1.0:
            break
        if now - idle_since > 15:
            break
        msgs = c.consume(10000, 0.5)
        for m in msgs:
            if m.error():
                sys.exit("consume: %s" % m.error())
            n += 1
            nbytes += len(m.value() or b"") + len(m.key() or b"")
            last = max(last, m.offset())
        if msgs:
            idle_since = time.time()
        if done_at is None and last >= want - 1:
            done_at = time.time()
    c.close()
    print(n, nbytes)
else:
    sys.exit("unknown command " + cmd)
"""

# Forks and execs argv[2:], waits for it with wait4 and writes "exit-code wall-seconds
# ru_maxrss-KiB" to argv[1]. Run with `python -S -I` to stay small (see run_timed).
LAUNCHER = r"""
import os, sys, time
report, argv = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        os.write(2, ("cannot run %s: %s\n" % (argv[0], e)).encode())
    os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(report, "w") as f:
    f.write("%d %.6f %d" % (os.waitstatus_to_exitcode(status), wall, ru.ru_maxrss))
"""

# The Python side of the log rows: parse every line and write it back out.
PY_LOOP = r"""
import json, sys
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "w") as out:
    for line in f:
        out.write(json.dumps(json.loads(line)) + "\n")
"""

SUMMARY_RE = re.compile(
    r"delivered (\d+) failed (\d+) \(.*?\)(?: abandoned (\d+))? invalid (\d+) in ([0-9.]+)s, ([0-9]+) hooks/s"
)


class BenchError(Exception):
    pass


def say(msg):
    print("bench_pipeline: " + msg, file=sys.stderr, flush=True)


def tail(path, n=20):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 8192))
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join("    " + l for l in lines[-n:])
    except OSError:
        return "    (no output)"


def child_env():
    env = dict(os.environ)
    env.pop("RUST_LOG", None)  # every side at its defaults
    return env


def run_timed(argv, stdout_path, stderr_path, label, env=None):
    """Run one child, stdout and stderr to files: (wall seconds, peak RSS KiB). Exit 0 or raise.

    The child is forked by a small launcher (LAUNCHER), not by this process: on Linux a
    child's ru_maxrss includes the RSS of the process it was forked from at exec time, so
    spawned from here every figure would be at least this orchestrator's RSS. The
    launcher's is about 6 MB: a peak RSS below that reads as that floor."""
    report = stdout_path + ".rusage"
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        p = subprocess.Popen([sys.executable, "-S", "-I", "-c", LAUNCHER, report] + argv,
                             stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                             env=env or child_env())
        launcher = p.wait()
    try:
        with open(report) as f:
            code, wall, maxrss = f.read().split()
        os.remove(report)
    except (OSError, ValueError):
        raise BenchError("%s: the launcher exited %d without a report: %s\n  stderr tail:\n%s"
                         % (label, launcher, " ".join(argv), tail(stderr_path)))
    if int(code) != 0:
        raise BenchError("%s exited %s: %s\n  stderr tail:\n%s"
                         % (label, code, " ".join(argv), tail(stderr_path)))
    return float(wall), int(maxrss)


def run_checked(argv, label, env=None, stdout=subprocess.PIPE):
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE,
                       env=env or child_env())
    if p.returncode != 0:
        err = (p.stderr or b"").decode("utf-8", "replace").strip()
        raise BenchError("%s exited %d: %s\n%s" % (label, p.returncode, " ".join(argv), err[-4000:]))
    return (p.stdout or b"").decode("utf-8", "replace") if stdout == subprocess.PIPE else ""


def count_lines(path, needle=None):
    """Lines in a file, or lines containing `needle` (bytes)."""
    n = 0
    with open(path, "rb") as f:
        for line in f:
            if needle is None or needle in line:
                n += 1
    return n


def last_summary(stderr_path):
    """forward's summary line (the last one on stderr), parsed."""
    with open(stderr_path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 65536))
        text = f.read().decode("utf-8", "replace")
    m = None
    for m in SUMMARY_RE.finditer(text):
        pass
    if m is None:
        return None
    return {"delivered": int(m.group(1)), "failed": int(m.group(2)),
            "abandoned": int(m.group(3) or 0), "invalid": int(m.group(4)),
            "seconds": float(m.group(5)), "hooks_per_s": int(m.group(6))}


def unique_name(prefix):
    """Time-ordered and random, like a ULID: prefix-<ms since epoch, base 36>-<random hex>."""
    ms = int(time.time() * 1000)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    t = ""
    while ms:
        ms, r = divmod(ms, 36)
        t = digits[r] + t
    return "%s-%s-%s" % (prefix, t, secrets.token_hex(5))


def gen(cli, count, size, path):
    say("gen: %s hooks of %d-byte bodies -> %s" % (f"{count:,}", size, path))
    with open(path, "wb") as out:
        run_checked([cli, "gen", "--count", str(count), "--size", str(size)], "ankusa-sink gen",
                    stdout=out)
    n = count_lines(path)
    if n != count:
        raise BenchError("ankusa-sink gen wrote %d lines, expected %d" % (n, count))
    say("gen: %.1f MB" % (os.path.getsize(path) / 1e6))


class Kafka:
    def __init__(self, python, brokers, tmp):
        self.python, self.brokers, self.tmp = python, brokers, tmp
        self.topics = []  # created and not yet deleted

    def admin(self, *args):
        return run_checked([self.python, "-c", KAFKA_ADMIN, args[0], self.brokers] + list(args[1:]),
                           "kafka admin " + args[0])

    def create(self):
        topic = unique_name("ankusa-pipeline")
        self.admin("create", topic)
        self.topics.append(topic)
        return topic

    def delete(self, topic):
        self.admin("delete", topic)
        self.topics.remove(topic)

    def count(self, topic, want):
        """(records, key + value bytes) in the topic."""
        n, nbytes = self.admin("count", topic, str(want)).split()
        return int(n), int(nbytes)

    def cleanup(self):
        for t in list(self.topics):
            try:
                self.delete(t)
            except BenchError as e:
                say("warning: could not delete topic %s: %s" % (t, e))


def kafka_sides(variants):
    """(name, side, kind, concurrency) of the Kafka rows, in run order."""
    return [
        ("kafka python confluent-kafka", "baseline: confluent-kafka script", "baseline", None),
        ("kafka rust loop", "reference: the script's loop in Rust (rdkafka)", "rust", None),
        ("kafka rust loop encode", "reference: the Rust loop, Message v1 per line (`--encode`)",
         "rust_encode", None),
        ("kafka forward default", "forward (default settings)", "forward", None),
    ] + [("kafka forward c%d" % c, "forward --concurrency %d" % c, "forward", c) for c in variants]


def run_kafka(args, inp, tmp, results):
    say("kafka: broker and venv")
    if "ANKUSA_KAFKA_BROKERS" not in os.environ:
        run_checked(["bash", KAFKA_SH], "scripts/services/kafka.sh")
    brokers = os.environ.get("ANKUSA_KAFKA_BROKERS", DEFAULT_BROKERS)
    python = run_checked(["bash", SETUP_VENV], "scripts/bench/setup_venv.sh").strip().splitlines()[-1]
    kafka = Kafka(python, brokers, tmp)
    rust_loop = example(args, "kafka_raw_loop")
    env = child_env()
    env["ANKUSA_KAFKA_BROKERS"] = brokers
    try:
        for rep in range(args.reps):
            for name, side, kind, conc in kafka_sides(args.concurrency_variants):
                topic = kafka.create()
                rundir = os.path.join(tmp, "run")
                shutil.rmtree(rundir, ignore_errors=True)
                os.makedirs(rundir)
                out, err = os.path.join(rundir, "stdout"), os.path.join(rundir, "stderr")
                label = "%s (rep %d/%d, topic %s)" % (side, rep + 1, args.reps, topic)
                say("kafka: " + label)
                reported = None
                if kind == "baseline":
                    argv = [python, PRODUCE, inp, topic]
                    wall, rss = run_timed(argv, out, err, label, env)
                elif kind in ("rust", "rust_encode"):
                    argv = [rust_loop, inp, topic] + (["--encode"] if kind == "rust_encode" else [])
                    wall, rss = run_timed(argv, out, err, label, env)
                else:
                    sink = os.path.join(rundir, "kafka.toml")
                    with open(sink, "w") as f:
                        f.write('type = "kafka"\nbrokers = [%s]\ntopic = "%s"\n' % (
                            ", ".join('"%s"' % b for b in brokers.split(",")), topic))
                    argv = [args.cli, "forward", "--sink", sink, "--input", inp, "--json"]
                    if conc is not None:
                        argv += ["--concurrency", str(conc)]
                    wall, rss = run_timed(argv, out, err, label, env)
                    check_outcomes(out, err, args.hooks, label)
                    reported = last_summary(err)
                record_bytes = None
                if args.verify:
                    n, nbytes = kafka.count(topic, args.hooks)
                    if n != args.hooks:
                        raise BenchError("%s: topic %s holds %d records, expected %d"
                                         % (label, topic, n, args.hooks))
                    record_bytes = round(nbytes / n)
                kafka.delete(topic)
                row = record(results, name, "kafka", side, args, wall, rss, reported, argv)
                if record_bytes is not None:
                    row["record_key_value_bytes"] = record_bytes
    finally:
        kafka.cleanup()


def example(args, name):
    """A release example binary of the adapter crates (built by scripts/bench.sh)."""
    path = os.path.join(args.examples, name)
    if not os.access(path, os.X_OK):
        raise BenchError("%s is missing: cargo build --release --locked -p ankusa-sink-amqp "
                         "--example amqp_raw_loop -p ankusa-sink-kafka --example kafka_raw_loop "
                         "-p ankusa-sink-aws --example aws_raw_loop -p "
                         "ankusa-sink-pubsub --example pubsub_raw_loop -p ankusa-sink-http "
                         "--example http_raw_loop --example sink_server (or pass --examples DIR)"
                         % path)
    return path


def service(name):
    run_checked(["bash", os.path.join(SERVICES, name + ".sh")], "scripts/services/%s.sh" % name)


def prefix_input(inp, tmp, count, total):
    """The first `count` lines of the input (the whole file when count >= total)."""
    if count >= total:
        return inp
    path = os.path.join(tmp, "input-%d.jsonl" % count)
    if not os.path.exists(path):
        with open(inp, "rb") as src, open(path, "wb") as out:
            for i, line in enumerate(src):
                if i == count:
                    break
                out.write(line)
    return path


class ExampleAdmin:
    """A destination whose admin steps are subcommands of its raw-loop example (self.tool)."""

    def admin(self, *argv):
        return run_checked([self.tool] + list(argv),
                           "%s %s" % (os.path.basename(self.tool), argv[0]), env=self.env)


class Amqp(ExampleAdmin):
    """RabbitMQ: a fresh durable topic exchange and a durable queue bound with `#` per run."""
    sink = "amqp"
    baseline_side = "baseline: lapin loop (one confirm channel, 4096 confirms outstanding)"

    def __init__(self, args, env):
        self.tool, self.env = example(args, "amqp_raw_loop"), env
        self.url = env.get("ANKUSA_AMQP_URL", DEFAULT_AMQP_URL)
        self.live = []

    def create(self):
        name = unique_name("ankusa-pipeline")
        self.admin("setup", name, name)
        self.live.append(name)
        return name

    def baseline(self, name, inp):
        return [self.tool, "send", inp, name]

    def toml(self, name):
        return 'type = "amqp"\nurl = "%s"\nexchange = "%s"\n' % (self.url, name)

    def count(self, name):
        return int(self.admin("count", name).strip())

    def delete(self, name):
        self.admin("delete", name, name)
        self.live.remove(name)


class Aws(ExampleAdmin):
    """moto: a fresh SQS queue or SNS topic per run."""

    def __init__(self, args, env, sink):
        self.tool, self.env, self.sink = example(args, "aws_raw_loop"), env, sink
        self.endpoint = env.get("ANKUSA_MOTO_ENDPOINT", DEFAULT_MOTO)
        self.baseline_side = "baseline: AWS SDK loop (%s of 10, 8 in flight)" % (
            "SendMessageBatch" if sink == "sqs" else "PublishBatch")
        self.live = []

    def create(self):
        name = unique_name("ankusa-pipeline")
        kind = "queue" if self.sink == "sqs" else "topic"
        dest = self.admin("create-" + kind, name).strip()
        self.live.append(dest)
        return dest

    def baseline(self, dest, inp):
        return [self.tool, self.sink, inp, dest]

    def toml(self, dest):
        if self.sink == "sqs":  # region and credentials: the environment (the standard chain)
            return 'type = "sqs"\nqueue_url = "%s"\n' % dest
        return 'type = "sns"\ntopic_arn = "%s"\nendpoint = "%s"\n' % (dest, self.endpoint)

    def count(self, dest):
        # moto keeps SNS publishes only internally: an SNS topic cannot be counted (every
        # publish was acknowledged with a message id: forward's outcomes, the loop's exit).
        if self.sink == "sns":
            return None
        return int(self.admin("count", dest).strip())

    def delete(self, dest):
        self.admin("delete-queue" if self.sink == "sqs" else "delete-topic", dest)
        self.live.remove(dest)


class PubSub:
    """The emulator: a fresh topic and one subscription on it per run (REST, stdlib)."""
    sink = "pubsub"
    baseline_side = "baseline: google-cloud-pubsub Publisher loop (batches of 1000, 20,000 outstanding)"

    def __init__(self, args, env):
        self.tool, self.env = example(args, "pubsub_raw_loop"), env
        self.host = env.get("ANKUSA_PUBSUB_EMULATOR_HOST", DEFAULT_PUBSUB_HOST)
        self.live = []

    def rest(self, method, path, body=None):
        import urllib.request
        req = urllib.request.Request(
            "http://%s/v1/projects/%s/%s" % (self.host, PUBSUB_PROJECT, path), method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read() or b"{}")
        except OSError as e:
            raise BenchError("pubsub emulator %s %s: %s" % (method, path, e))

    def create(self):
        name = unique_name("ankusa-pipeline")
        self.rest("PUT", "topics/" + name)
        self.live.append(name)
        self.rest("PUT", "subscriptions/" + name, {
            "topic": "projects/%s/topics/%s" % (PUBSUB_PROJECT, name), "ackDeadlineSeconds": 600})
        return name

    def baseline(self, name, inp):
        return [self.tool, inp, PUBSUB_PROJECT, name]

    def toml(self, name):
        return 'type = "pubsub"\nproject = "%s"\ntopic = "%s"\nendpoint = "http://%s"\n' % (
            PUBSUB_PROJECT, name, self.host)

    def count(self, name):
        """Distinct message ids pulled from the subscription (600 s ack deadline: a pulled
        message is not handed out again while counting) until three empty pulls."""
        seen, empty = set(), 0
        while empty < 3:
            got = self.rest("POST", "subscriptions/%s:pull" % name,
                            {"maxMessages": 1000, "returnImmediately": True})
            msgs = got.get("receivedMessages", [])
            if msgs:
                empty = 0
                seen.update(m["message"]["messageId"] for m in msgs)
            else:
                empty += 1
                time.sleep(0.2)
        return len(seen)

    def delete(self, name):
        self.rest("DELETE", "subscriptions/" + name)
        self.rest("DELETE", "topics/" + name)
        self.live.remove(name)


class Http:
    """examples/sink_server.rs, one per run on a free loopback port; it counts requests."""
    sink = "http"
    baseline_side = "baseline: reqwest loop (32 requests in flight, one thread)"

    def __init__(self, args, env):
        self.tool, self.server, self.env = (example(args, "http_raw_loop"),
                                            example(args, "sink_server"), env)
        self.live = []

    def create(self):
        p = subprocess.Popen([self.server], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, env=self.env)
        line = p.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "listening":
            p.kill()
            p.wait()
            raise BenchError("sink_server did not start: %r" % line)
        run = (p, "http://%s/hooks" % line[1])
        self.live.append(run)
        return run

    def baseline(self, run, inp):
        return [self.tool, inp, run[1]]

    def toml(self, run):
        return 'type = "http"\nurl = "%s"\n' % run[1]

    def count(self, run):
        p = run[0]
        p.send_signal(signal.SIGTERM)
        out = p.stdout.read().decode().split()
        p.wait(30)
        self.live.remove(run)
        if p.returncode != 0 or len(out) != 2 or out[0] != "requests":
            raise BenchError("sink_server exited %s: %r" % (p.returncode, out))
        return int(out[1])

    def delete(self, run):
        if run in self.live:
            run[0].kill()
            run[0].wait()
            self.live.remove(run)


def raw_env():
    """Every side of the broker rows: the tests' endpoints, dummy AWS credentials and region,
    and no instance metadata lookups (loopback only)."""
    env = child_env()
    env.setdefault("AWS_REGION", "us-east-1")
    env.setdefault("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    env.setdefault("AWS_SECRET_ACCESS_KEY", "moto-secret-not-checked")
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


def broker_hooks(args, sink):
    return {"sqs": args.sqs_hooks, "sns": args.sns_hooks,
            "pubsub": args.pubsub_hooks}.get(sink, args.hooks)


def run_broker(args, sink, inp, tmp, results):
    """The raw-client loop against `forward --json` at the default settings, interleaved,
    each run on a fresh destination that is counted and deleted afterwards."""
    env = raw_env()
    if sink == "amqp":
        if "ANKUSA_AMQP_URL" not in os.environ:
            service("rabbitmq")
        b = Amqp(args, env)
    elif sink in ("sqs", "sns"):
        if "ANKUSA_MOTO_ENDPOINT" not in os.environ:
            service("moto")
        b = Aws(args, env, sink)
    elif sink == "pubsub":
        if "ANKUSA_PUBSUB_EMULATOR_HOST" not in os.environ:
            service("pubsub")
        b = PubSub(args, env)
    else:
        b = Http(args, env)
    hooks = min(broker_hooks(args, sink), args.hooks)
    inp = prefix_input(inp, tmp, hooks, args.hooks)
    sides = [("%s raw loop" % sink, b.baseline_side, "baseline")]
    if sink != "http":  # the HTTP sink sends the hook's own body: no Message v1
        sides.append(("%s raw loop encode" % sink, "reference: the loop, Message v1 per line "
                      "(`--encode`)", "encode"))
    sides.append(("%s forward default" % sink, "forward (default settings)", "forward"))
    try:
        for rep in range(args.reps):
            for name, side, kind in sides:
                dest = b.create()
                rundir = os.path.join(tmp, "run")
                shutil.rmtree(rundir, ignore_errors=True)
                os.makedirs(rundir)
                out, err = os.path.join(rundir, "stdout"), os.path.join(rundir, "stderr")
                label = "%s %s (rep %d/%d, %s hooks)" % (sink, side, rep + 1, args.reps,
                                                         f"{hooks:,}")
                say(label)
                reported = None
                if kind in ("baseline", "encode"):
                    argv = b.baseline(dest, inp) + (["--encode"] if kind == "encode" else [])
                    wall, rss = run_timed(argv, out, err, label, env)
                else:
                    cfg = os.path.join(rundir, sink + ".toml")
                    with open(cfg, "w") as f:
                        f.write(b.toml(dest))
                        f.write(os.environ.get("ANKUSA_BENCH_SINK_EXTRA", ""))
                    argv = [args.cli, "forward", "--sink", cfg, "--input", inp, "--json"]
                    argv += os.environ.get("ANKUSA_BENCH_FORWARD_ARGS", "").split()
                    wall, rss = run_timed(argv, out, err, label, env)
                    check_outcomes(out, err, hooks, label)
                    reported = last_summary(err)
                received = None
                if args.verify:
                    received = b.count(dest)
                    if received is not None and received != hooks:
                        raise BenchError("%s: the destination received %d messages, expected %d"
                                         % (label, received, hooks))
                b.delete(dest)
                row = record(results, name, sink, side, args, wall, rss, reported, argv, hooks)
                row["received_counted"] = received is not None
    finally:
        for dest in list(b.live):
            try:
                b.delete(dest)
            except (BenchError, OSError) as e:
                say("warning: could not delete %s: %s" % (dest, e))


def check_outcomes(out, err, hooks, label):
    """forward --json: exactly `hooks` lines, every one "outcome":"ok"."""
    total, ok = 0, 0
    with open(out, "rb") as f:
        for line in f:
            total += 1
            if b'"outcome":"ok"' in line:
                ok += 1
    if total != hooks or ok != hooks:
        raise BenchError("%s: %d outcome lines, %d ok, expected %d ok\n  stderr tail:\n%s"
                         % (label, total, ok, hooks, tail(err)))


def check_summary(err, hooks, label):
    s = last_summary(err)
    if s is None or s["delivered"] != hooks or s["failed"] or s["abandoned"] or s["invalid"]:
        raise BenchError("%s: summary %s, expected %d delivered\n  stderr tail:\n%s"
                         % (label, s, hooks, tail(err)))
    return s


def run_log(args, inp, tmp, results):
    msg_sink = os.path.join(tmp, "log.toml")
    with open(msg_sink, "w") as f:
        f.write('type = "log"\nmessages = true\n')
    sides = [
        ("log python loop", "baseline: Python loop, json.loads + json.dumps per line to a file"),
        ("log cat", "reference: cat FILE > file"),
        ("log forward messages", "forward, log sink messages = true (Message v1 lines to a file)"),
        ("log forward default", "forward --sink log --json (a log line per hook, stderr to a file)"),
    ]
    for rep in range(args.reps):
        for name, side in sides:
            out, err = os.path.join(tmp, "log.stdout"), os.path.join(tmp, "log.stderr")
            label = "%s (rep %d/%d)" % (side, rep + 1, args.reps)
            say("log: " + label)
            reported = None
            if name == "log python loop":
                argv = [sys.executable, "-c", PY_LOOP, inp, out]
                wall, rss = run_timed(argv, os.devnull, err, label)
                if count_lines(out) != args.hooks:
                    raise BenchError("%s: wrote %d lines" % (label, count_lines(out)))
            elif name == "log cat":
                argv = ["cat", inp]
                wall, rss = run_timed(argv, out, err, label)
                if os.path.getsize(out) != os.path.getsize(inp):
                    raise BenchError("%s: output size differs from the input's" % label)
            elif name == "log forward messages":
                argv = [args.cli, "forward", "--sink", msg_sink, "--input", inp]
                wall, rss = run_timed(argv, out, err, label)
                n = count_lines(out)
                if n != args.hooks:
                    raise BenchError("%s: %d Message v1 lines, expected %d" % (label, n, args.hooks))
                reported = check_summary(err, args.hooks, label)
            else:
                argv = [args.cli, "forward", "--sink", "log", "--input", inp, "--json"]
                wall, rss = run_timed(argv, out, err, label)
                check_outcomes(out, err, args.hooks, label)
                reported = check_summary(err, args.hooks, label)
            for p in (out, err):
                if os.path.exists(p):
                    os.remove(p)
            record(results, name, "log", side, args, wall, rss, reported, argv)


def run_rss_scaling(args, tmp, results):
    rows = []
    for count in (100_000, 1_000_000):
        inp = os.path.join(tmp, "scaling-%d.jsonl" % count)
        gen(args.cli, count, 100, inp)
        out, err = os.path.join(tmp, "scaling.stdout"), os.path.join(tmp, "scaling.stderr")
        label = "rss-scaling: forward --sink log --json, %s hooks of 100 bytes" % f"{count:,}"
        say(label)
        argv = [args.cli, "forward", "--sink", "log", "--input", inp, "--json"]
        wall, rss = run_timed(argv, out, err, label)
        check_outcomes(out, err, count, label)
        reported = check_summary(err, count, label)
        for p in (inp, out, err):
            os.remove(p)
        row = {"name": "rss-scaling log %d" % count, "sink": "log",
               "side": "forward --sink log --json (default settings)", "hooks": count,
               "body_bytes": 100, "reps": 1, "hooks_per_s": round(count / wall, 1),
               "all_hooks_per_s": [round(count / wall, 1)], "wall_s": [round(wall, 3)],
               "peak_rss_mb": round(rss / 1024, 1), "ratio_vs_baseline": None,
               "forward_reported_hooks_per_s": [reported["hooks_per_s"]], "argv": argv}
        say("  %s hooks/s, peak RSS %.1f MB" % (f"{count / wall:,.0f}", rss / 1024))
        rows.append(row)
    ratio = rows[1]["peak_rss_mb"] / rows[0]["peak_rss_mb"]
    for r in rows:
        r["rss_ratio_1m_vs_100k"] = round(ratio, 3)
    results.extend(rows)


def record(results, name, sink, side, args, wall, rss, reported, argv, hooks=None):
    hooks = args.hooks if hooks is None else hooks
    rate = hooks / wall
    say("  %.2f s, %s hooks/s, peak RSS %.1f MB%s" % (
        wall, f"{rate:,.0f}", rss / 1024,
        ", forward's own summary %s hooks/s" % f"{reported['hooks_per_s']:,}" if reported else ""))
    row = next((r for r in results if r["name"] == name), None)
    if row is None:
        row = {"name": name, "sink": sink, "side": side, "hooks": hooks,
               "body_bytes": args.body_bytes, "reps": 0, "hooks_per_s": None,
               "all_hooks_per_s": [], "wall_s": [], "peak_rss_mb": 0.0, "all_peak_rss_mb": [],
               "ratio_vs_baseline": None, "forward_reported_hooks_per_s": [],
               "argv": [os.path.basename(a) if a.startswith(tempfile.gettempdir()) else a for a in argv]}
        results.append(row)
    row["reps"] += 1
    row["all_hooks_per_s"].append(round(rate, 1))
    row["wall_s"].append(round(wall, 3))
    row["all_peak_rss_mb"].append(round(rss / 1024, 1))
    row["peak_rss_mb"] = max(row["all_peak_rss_mb"])
    row["hooks_per_s"] = round(statistics.median(row["all_hooks_per_s"]), 1)
    if reported:
        row["forward_reported_hooks_per_s"].append(reported["hooks_per_s"])
    return row


def ratios(results):
    pairs = [("kafka", "kafka python confluent-kafka"), ("log", "log python loop")]
    pairs += [(s, "%s raw loop" % s) for s in ("amqp", "sqs", "sns", "pubsub", "http")]
    for sink, base in pairs:
        b = next((r for r in results if r["name"] == base), None)
        if b is None:
            continue
        for r in results:
            if r["sink"] == sink and not r["name"].startswith("rss-scaling"):
                r["ratio_vs_baseline"] = round(r["hooks_per_s"] / b["hooks_per_s"], 3)
    # forward against the loop that pays the same Message v1 encode.
    for sink, enc in [("kafka", "kafka rust loop encode")] + [
            (s, "%s raw loop encode" % s) for s in ("amqp", "sqs", "sns", "pubsub")]:
        e = next((r for r in results if r["name"] == enc), None)
        if e is None:
            continue
        for r in results:
            if r["sink"] == sink and r["name"].startswith("%s forward" % sink):
                r["ratio_vs_encode_loop"] = round(r["hooks_per_s"] / e["hooks_per_s"], 3)


def machine():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = "%.1f GiB" % (int(f.readline().split()[1]) / 1024 / 1024)
    except (OSError, ValueError, IndexError):
        pass
    return "%d CPUs (%s), %s, load average %s" % (
        os.cpu_count() or 0, cpu, mem, " ".join("%.2f" % x for x in os.getloadavg()))


def write_md(path, results, args, version, started, load_before, failed):
    lines = [
        "Pipeline benchmark (issue 21), `scripts/bench_pipeline.py`, %s UTC; `%s`." % (started, version),
        "",
        "%s hooks of %s-byte bodies read from one `ankusa-sink gen` file; %d interleaved "
        "repetition(s); hooks/s = hooks / wall time of the process (start to exit), median; "
        "peak RSS = ru_maxrss of the process, largest of the repetitions. Machine: %s "
        "(load average before the run)." % (f"{args.hooks:,}", f"{args.body_bytes:,}", args.reps,
                                           load_before),
        "",
        "| sink | side | hooks | hooks/s | peak RSS | of baseline | of the Message v1 loop |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if r["name"].startswith("rss-scaling"):
            continue
        ratio = "%.2f" % r["ratio_vs_baseline"] if r["ratio_vs_baseline"] is not None else "–"
        enc = "%.2f" % r["ratio_vs_encode_loop"] if r.get("ratio_vs_encode_loop") else "–"
        lines.append("| %s | %s | %s | %s | %.1f MB | %s | %s |" % (
            r["sink"], r["side"], f"{r['hooks']:,}", f"{r['hooks_per_s']:,.0f}",
            r["peak_rss_mb"], ratio, enc))
    if any(r["hooks"] != args.hooks for r in results if not r["name"].startswith("rss-scaling")):
        lines += ["", "Rows with fewer hooks send the first lines of the same file: moto is slow "
                  "per message, and its SQS scans the whole queue on every send (--sqs-hooks, "
                  "--sns-hooks, --pubsub-hooks)."]
    counted = [r for r in results if "received_counted" in r]
    if counted:
        lines += ["", "After every run the destination held exactly the hooks sent (RabbitMQ "
                  "queue message count, SQS ApproximateNumberOfMessages, Pub/Sub message ids "
                  "pulled, the HTTP receiver's request count)%s." % (
                      "; SNS topics are not countable on moto: every publish acknowledged"
                      if any(not r["received_counted"] for r in counted) else "")
                  if args.verify else "Destinations not counted (--no-verify)."]
    scaling = [r for r in results if r["name"].startswith("rss-scaling")]
    if scaling:
        ratio = scaling[0]["rss_ratio_1m_vs_100k"]
        lines += [
            "",
            "Peak RSS against input size: `forward --sink log --json` (default settings), "
            "**100-byte bodies**, one run each (target: 1,000,000 within 10 % of 100,000).",
            "",
            "| hooks | hooks/s | peak RSS | of 100,000 |",
            "|---:|---:|---:|---:|",
        ]
        for r in scaling:
            lines.append("| %s | %s | %.1f MB | %.2f |" % (
                f"{r['hooks']:,}", f"{r['hooks_per_s']:,.0f}", r["peak_rss_mb"],
                r["peak_rss_mb"] / scaling[0]["peak_rss_mb"]))
        lines += ["", "Ratio 1,000,000 / 100,000: **%.2f** (%s)." % (
            ratio, "ok" if ratio <= 1.10 else "MISS")]
    if failed:
        lines += ["", "**Failed, no rows:** " + "; ".join(
            "%s (%s)" % (k, v) for k, v in failed.items()) + "."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True, help="the release ankusa-sink binary")
    ap.add_argument("--out", required=True, help="directory for pipeline.json and pipeline.md")
    ap.add_argument("--hooks", type=int, default=100_000)
    ap.add_argument("--body-bytes", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions of every side")
    ap.add_argument("--concurrency-variants", default="256,4096", metavar="N,N...",
                    help="Kafka: also run forward with these --concurrency values (default "
                         "256,4096; empty for none)")
    ap.add_argument("--only", action="append", choices=ALL_SINKS,
                    help="run only these sinks (repeatable; default all)")
    ap.add_argument("--examples", metavar="DIR",
                    help="the release examples amqp_raw_loop, kafka_raw_loop, aws_raw_loop, "
                         "pubsub_raw_loop, "
                         "http_raw_loop, sink_server (default: examples/ beside --cli)")
    ap.add_argument("--sqs-hooks", type=int, default=1_000, metavar="N",
                    help="sqs rows: the first N hooks of the input (moto scans the whole queue "
                         "on every send; default 1,000)")
    ap.add_argument("--sns-hooks", type=int, default=20_000, metavar="N",
                    help="sns rows: the first N hooks of the input (moto is slow per message; "
                         "default 20,000)")
    ap.add_argument("--pubsub-hooks", type=int, default=100_000, metavar="N",
                    help="pubsub rows: the first N hooks of the input (default 100,000)")
    ap.add_argument("--rss-scaling", action="store_true",
                    help="also forward 100,000 and 1,000,000 hooks (100-byte bodies) to the log sink")
    ap.add_argument("--no-verify", dest="verify", action="store_false",
                    help="do not count what each destination received")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    try:
        args.concurrency_variants = [int(c) for c in args.concurrency_variants.split(",") if c.strip()]
    except ValueError:
        ap.error("--concurrency-variants takes numbers separated by commas")
    if any(c < 1 for c in args.concurrency_variants):
        ap.error("--concurrency-variants: each at least 1")
    if min(args.hooks, args.reps, args.sqs_hooks, args.sns_hooks, args.pubsub_hooks) < 1 \
            or args.body_bytes < 0:
        ap.error("--hooks, --reps, --sqs-hooks, --sns-hooks and --pubsub-hooks must be at least "
                 "1, --body-bytes at least 0")
    args.cli = os.path.abspath(args.cli)
    if not os.access(args.cli, os.X_OK):
        ap.error("--cli %s is not an executable file" % args.cli)
    args.examples = os.path.abspath(args.examples or os.path.join(os.path.dirname(args.cli),
                                                                  "examples"))
    only = args.only or ALL_SINKS
    version = run_checked([args.cli, "--version"], "ankusa-sink --version").strip()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    load_before = machine()
    say("%s; %s" % (version, load_before))
    os.makedirs(args.out, exist_ok=True)

    lock_path = os.environ.get("BENCH_LOCK", "/tmp/ankusa-bench.lock")
    lock = open(lock_path, "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        say("waiting for %s (another benchmark is measuring)" % lock_path)
        fcntl.flock(lock, fcntl.LOCK_EX)

    tmp = tempfile.mkdtemp(prefix="ankusa-pipeline-")
    results, failed = [], {}
    t0 = time.time()

    def attempt(key, run):
        # One sink's failure (a slow broker, a miscount) costs that sink's rows, not the
        # others': they are written, the failure is named in the table, and the exit is 1.
        try:
            run()
        except BenchError as e:
            say("FAILED: %s" % e)
            failed[key] = str(e).splitlines()[0]
            results[:] = [r for r in results if r["sink"] != key]

    try:
        inp = os.path.join(tmp, "input.jsonl")
        gen(args.cli, args.hooks, args.body_bytes, inp)
        if "kafka" in only:
            attempt("kafka", lambda: run_kafka(args, inp, tmp, results))
        if "log" in only:
            attempt("log", lambda: run_log(args, inp, tmp, results))
        for sink in ("amqp", "sqs", "sns", "pubsub", "http"):
            if sink in only:
                attempt(sink, lambda sink=sink: run_broker(args, sink, inp, tmp, results))
        if args.rss_scaling:  # adds its rows only once both runs passed
            attempt("rss-scaling", lambda: run_rss_scaling(args, tmp, results))
    except BenchError as e:  # the input could not be generated: nothing to measure
        say("FAILED: %s" % e)
        return 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        if args.keep:
            say("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        lock.close()
    ratios(results)
    jpath, mpath = os.path.join(args.out, "pipeline.json"), os.path.join(args.out, "pipeline.md")
    with open(jpath, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    write_md(mpath, results, args, version, started, load_before, failed)
    say("done in %.0f s: %s, %s" % (time.time() - t0, jpath, mpath))
    with open(mpath) as f:
        sys.stderr.write(f.read())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
