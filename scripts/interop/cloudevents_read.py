#!/usr/bin/env python3
"""CloudEvents from the HTTP, Kafka, AMQP and Pub/Sub sinks, read back with the official
CloudEvents SDK for Python (`cloudevents` on PyPI, its protocol bindings).

For each mode (`format = "cloudevents"`, binary; `format = "cloudevents-structured"`) this
makes an HTTP server on 127.0.0.1 and a fresh destination on each local broker, delivers two
hooks through the `ankusa-sink` binary to all four sinks at once (a JSON hook with a tenant,
a dedupe key and a replay id; a binary hook without them), and parses every message with the
SDK: HTTP with `bindings.http`, Kafka with `bindings.kafka`, RabbitMQ with
`bindings.rabbitmq` (AMQP 0-9-1), Pub/Sub with `bindings.http` (the Pub/Sub binding names
attributes as the HTTP binding names headers). Each event must carry the hook's id, source,
type, time, data content type, extensions and data; the `x-ankusa-*` metadata must still go
out beside it. The JSON hook arrives with a W3C `traceparent` and `tracestate`: its event
must carry the Distributed Tracing extension, a child span in the hook's trace with the
hook's state; the binary hook's, a new trace. The protocol's own `traceparent` header (or
attribute) must carry the same value.

Prints one JSON object (target -> mode -> events as the SDK parsed them); exit status 0
only when every check passed, failed checks on stderr.

    cloudevents_read.py --cli PATH
"""

import argparse
import json
import os
import re
import secrets
import subprocess
import tempfile
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from brokers import RUN, Amqp, Kafka, PubSub, cleanup_all, finish
from cloudevents.core.bindings import http as ce_http
from cloudevents.core.bindings import kafka as ce_kafka
from cloudevents.core.bindings import rabbitmq as ce_rabbitmq
from cloudevents.core.formats.json import JSONFormat

MODES = {"binary": "cloudevents", "structured": "cloudevents-structured"}
TYPE = {"binary": "ankusa.hook.received", "structured": "com.example.hook.v1"}
JSON_HOOK = f"ce-json-{RUN}"
BINARY_HOOK = f"ce-bin-{RUN}"
JSON_BODY = {"event": "charge.succeeded", "amount": 4200}
BINARY_BODY = bytes(range(256))
TRACE_ID = secrets.token_hex(16)
PARENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN}-01"
TRACESTATE = "congo=t61rcWkgMzE"
W3C = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


class Http:
    """An HTTP endpoint recording every request (headers, body)."""

    def __init__(self, tag):
        got = self.got = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                got.append(({k.lower(): v for k, v in self.headers.items()}, body, None))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/{tag}"

    def toml(self):
        return f'type = "http"\nurl = "{self.url}"\n'

    def read(self, n):
        return list(self.got[:n])

    def cleanup(self):
        self.server.shutdown()


TARGETS = {"http": Http, "kafka": Kafka, "amqp": Amqp, "pubsub": PubSub}


def parse(target, headers, body, content_type):
    fmt = JSONFormat()
    if target == "kafka":
        msg = ce_kafka.KafkaMessage(
            headers={k: v.encode() for k, v in headers.items()}, key=None, value=body
        )
        return ce_kafka.from_kafka(msg, fmt)
    if target == "amqp":
        msg = ce_rabbitmq.RabbitMQMessage(headers=headers, content_type=content_type, body=body)
        return ce_rabbitmq.from_rabbitmq(msg, fmt)
    return ce_http.from_http(ce_http.HTTPMessage(headers=headers, body=body), fmt)


def check(target, mode, event, headers, problems):
    def fail(what):
        problems.append(f"{target} {mode} {event.get_id()}: {what}")

    hook = event.get_id().split(":")[0]
    json_hook = hook == JSON_HOOK
    want = {
        "id": f"{JSON_HOOK}:replay:r1" if json_hook else BINARY_HOOK,
        "source": "/sources/stripe",
        "type": TYPE[mode],
        "specversion": "1.0",
        "datacontenttype": "application/json" if json_hook else "application/octet-stream",
    }
    got = {
        "id": event.get_id(),
        "source": event.get_source(),
        "type": event.get_type(),
        "specversion": event.get_specversion(),
        "datacontenttype": event.get_datacontenttype(),
    }
    if got != want:
        fail(f"attributes {got} != {want}")
    t = event.get_time()
    now = datetime.now(timezone.utc)
    if t is None or abs(now - t) > timedelta(minutes=5):
        fail(f"time {t!r} is not the hook's received_at")
    ext = {
        k: event.get_extension(k)
        for k in ("ankusatenant", "ankusaidempotencykey", "ankusareplayid")
    }
    if json_hook:
        if ext != {
            "ankusatenant": "acme",
            "ankusaidempotencykey": "acme:stripe:evt_1",
            "ankusareplayid": "r1",
        }:
            fail(f"extensions {ext}")
    elif ext["ankusatenant"] is not None or ext["ankusareplayid"] is not None:
        fail(f"extensions {ext}")
    elif not ext["ankusaidempotencykey"]:
        fail("no ankusaidempotencykey")
    tp, ts = event.get_extension("traceparent"), event.get_extension("tracestate")
    m = W3C.fullmatch(tp or "")
    if not m:
        fail(f"traceparent extension {tp!r}")
    elif json_hook and (m[1] != TRACE_ID or m[2] == PARENT_SPAN or ts != TRACESTATE):
        fail(f"not a child of the hook's trace: {tp!r} {ts!r}")
    elif not json_hook and (m[1] == TRACE_ID or ts is not None):
        fail(f"not a trace of its own: {tp!r} {ts!r}")
    if headers.get("traceparent") != tp:
        fail(f"protocol traceparent {headers.get('traceparent')!r} != extension {tp!r}")
    data = event.get_data()
    if isinstance(data, (bytes, bytearray)) and json_hook:
        data = json.loads(data)
    if data != (JSON_BODY if json_hook else BINARY_BODY):
        fail(f"data {data!r:.80}")
    # Our own metadata still rides beside the event (AMQP: the hook id is the message_id
    # property, the idempotency key a header).
    if target == "amqp":
        if "ankusa_idempotency_key" not in headers:
            fail(f"no ankusa_idempotency_key beside the event: {sorted(headers)}")
    elif (headers.get("x-ankusa-id") or headers.get("ankusa_id")) != hook:
        fail(f"no ankusa id beside the event: {sorted(headers)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    a = ap.parse_args()

    made, problems, out = {}, [], {}
    work = tempfile.mkdtemp(prefix="ankusa-ce-")
    try:
        for mode, fmt in MODES.items():
            sinks = []
            for name, cls in TARGETS.items():
                dest = made[(name, mode)] = cls(f"ce-{mode}")
                path = os.path.join(work, f"{name}-{mode}.toml")
                with open(path, "w") as f:
                    f.write(dest.toml() + f'format = "{fmt}"\ncloudevents_type = "{TYPE[mode]}"\n')
                sinks += ["--sink", path]
            for hook, body, extra in [
                (
                    JSON_HOOK,
                    json.dumps(JSON_BODY).encode(),
                    ["--tenant", "acme", "--dedupe-key", "evt_1", "--replay-id", "r1"]
                    + ["--content-type", "application/json"]
                    + ["--header", f"traceparent: {TRACEPARENT}"]
                    + ["--header", f"tracestate: {TRACESTATE}"],
                ),
                (BINARY_HOOK, BINARY_BODY, ["--content-type", "application/octet-stream"]),
            ]:
                cmd = [a.cli, "deliver", *sinks, "--id", hook, "--source-id", "stripe"]
                cmd += ["--json", "--body", "-", *extra]
                r = subprocess.run(cmd, input=body, capture_output=True, timeout=120)
                if r.returncode != 0:
                    problems.append(
                        f"deliver {mode} {hook}: exit {r.returncode}: {r.stdout!r} {r.stderr!r}"
                    )
        for (name, mode), dest in made.items():
            got = dest.read(2)
            if len(got) != 2:
                problems.append(f"{name} {mode}: read {len(got)} messages, want 2")
            events = []
            for headers, body, content_type in got:
                try:
                    event = parse(name, headers, body, content_type)
                except Exception as e:  # noqa: BLE001 (the SDK refusing is the finding)
                    problems.append(f"{name} {mode}: the SDK refused the message: {e!r}")
                    continue
                check(name, mode, event, headers, problems)
                events.append({"id": event.get_id(), "type": event.get_type()})
            out.setdefault(name, {})[mode] = events
    finally:
        cleanup_all(made)
    finish(out, problems)


if __name__ == "__main__":
    main()
