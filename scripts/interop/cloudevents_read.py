#!/usr/bin/env python3
"""Every message-publishing sink (HTTP, Kafka, AMQP, Pub/Sub, SQS, SNS, NATS JetStream,
Redis streams, MQTT) in every `format`, signed and unsigned, read back by independent
consumers: each broker's own Python client (brokers.py), the official CloudEvents SDK for
Python (`cloudevents` on PyPI, its protocol bindings) and the Standard Webhooks reference
library (`standardwebhooks`).

A variant is a format (`message`: Message v1, HTTP's raw body; `binary`: `format =
"cloudevents"`; `structured`: `format = "cloudevents-structured"`) with or without a
`[signing]` table (HTTP: its `secrets` key). For each variant this makes an HTTP server
on 127.0.0.1 and a fresh destination on each local broker, delivers two hooks through the
`ankusa-sink` binary to all nine sinks at once (a JSON hook with a tenant, a dedupe key, a
replay id and a W3C trace context; a binary hook without them), reads every message back
and checks it:

- CloudEvents are parsed with the SDK: HTTP and Pub/Sub with `bindings.http` (the Pub/Sub
  binding names attributes as the HTTP binding names headers), Kafka with
  `bindings.kafka`, RabbitMQ with `bindings.rabbitmq` (AMQP 0-9-1). The SDK has no NATS,
  MQTT, SQS, SNS or Redis binding: their headers, user properties, message attributes or
  stream fields are mapped as the bindings (or, without one, the sink's README) say and
  parsed with `bindings.http`: NATS headers as they are (`ce-*`, `Content-Type`); MQTT 5
  user properties named by the attribute (the MQTT binding) as `ce-<name>`, the Content
  Type property as `content-type`; SQS and SNS (read through an SQS queue subscribed with
  raw message delivery) and Redis with `content_type` as `content-type`. Values of those
  raw-valued transports are percent-encoded as the HTTP binding expects first.
  Each event must carry the hook's id, source, type, time, data content type, extensions,
  data and trace context, and the `ankusa` metadata beside it. SQS and SNS keep at most
  10 attributes: for a binary-mode event the attributes must be exactly those the
  documented drop order leaves (written out here independently), and only those are
  checked; the binary hook's data (not UTF-8) must be refused there, permanent.
- Message v1 is decoded as JSON: version, id, source, tenant, replay id and body.
- Signed messages must verify under every secret over the body the consumer reads, with
  `webhook-id` the event's (or the Message v1's) id, and fail once a byte of the body is
  changed (HTTP's `webhook-id` is the hook id, replay or not, as its README says). The
  reference library takes text only: data that is not UTF-8 (a binary-mode
  event's) is checked with the same HMAC-SHA256 from the standard library.

Prints one JSON object (target -> variant -> messages as read: id, type; and `problems`,
the failed checks); exit status 0 only when every check passed. Each failed check is also
one line on stderr, starting with `<target> <variant>` (variants: `message`, `binary`,
`structured`, each also `<format>+signed` when `--secret` is given).

    cloudevents_read.py --cli PATH [--secret whsec_... ...]
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import subprocess
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import standardwebhooks.webhooks as swh
from brokers import AWS_ENV, BROKERS, RUN, destinations
from cloudevents.core.bindings import http as ce_http
from cloudevents.core.bindings import kafka as ce_kafka
from cloudevents.core.bindings import rabbitmq as ce_rabbitmq
from cloudevents.core.formats.json import JSONFormat

FORMATS = {"message": None, "binary": "cloudevents", "structured": "cloudevents-structured"}
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
# The context attributes the sinks send, by their CloudEvents names (core's cloudevents).
CE_ATTRIBUTES = {
    "id", "source", "type", "specversion", "time", "datacontenttype", "ankusatenant",
    "ankusaidempotencykey", "ankusareplayid", "traceparent", "tracestate",
}
# What the HTTP binding leaves unencoded: printable ASCII but space, `"` and `%`.
HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in ' "%')
SIGNATURE = ("webhook-id", "webhook-timestamp", "webhook-signature")
# SQS and SNS take at most 10 message attributes.
CAPPED = {"sqs", "sns"}


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


TARGETS = {"http": Http, **BROKERS}


def sqs_binary_kept(json_hook, signed):
    """The attribute names a binary-mode event keeps on SQS and SNS: the
    ankusa-sink-aws README's drop order, written out independently."""
    ours = ["ankusa_id", "ankusa_source_id"]
    ours += ["ankusa_tenant_id"] if json_hook else []
    ours += ["ankusa_idempotency_key", "content_type"]
    ours += ["ankusa_dedupe_key", "ankusa_replay_id"] if json_hook else []
    ours += list(SIGNATURE) if signed else []
    ours += ["traceparent"] + (["tracestate"] if json_hook else [])
    event = ["ce-id", "ce-source", "ce-type", "ce-specversion", "ce-time"]
    event += ["ce-ankusatenant"] if json_hook else []
    event += ["ce-ankusaidempotencykey"]
    event += ["ce-ankusareplayid"] if json_hook else []
    event += ["ce-traceparent"] + (["ce-tracestate"] if json_hook else [])
    order = [
        "ankusa_replay_id", "ankusa_source_id", "ankusa_tenant_id", "ankusa_idempotency_key",
        "ankusa_id", "traceparent", "tracestate", "ankusa_dedupe_key", "ce-ankusareplayid",
        "ce-tracestate", "ce-ankusatenant", "ce-time", "ce-traceparent",
        "ce-ankusaidempotencykey",
    ]
    names = ours + event
    dropped = [n for n in order if n in names][: max(0, len(names) - 10)]
    return {n for n in names if n not in dropped}


def as_http_headers(target, headers, content_type):
    """The message's metadata as the CloudEvents HTTP binding's headers."""
    if target == "mqtt":
        # The Content Type property tells the modes apart (the MQTT binding): a structured
        # event's user properties are ours alone (`traceparent` among them).
        structured = (content_type or "").startswith("application/cloudevents")
        h = {
            f"ce-{k}": quote(v, safe=HEADER_SAFE)
            for k, v in headers.items()
            if k in CE_ATTRIBUTES and not structured
        }
        if content_type is not None:
            h["content-type"] = content_type
        return h
    if target in ("nats", "http", "pubsub"):
        return {k.lower(): v for k, v in headers.items()}
    # SQS, SNS, Redis: `content_type` is the content type; values are raw text.
    h = {k: quote(v, safe=HEADER_SAFE) for k, v in headers.items() if k.startswith("ce-")}
    if "content_type" in headers:
        h["content-type"] = headers["content_type"]
    return h


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
    h = as_http_headers(target, headers, content_type)
    return ce_http.from_http(ce_http.HTTPMessage(headers=h, body=body), fmt)


def check_trace(tp, ts, json_hook, fail, what):
    m = W3C.fullmatch(tp or "")
    if not m:
        fail(f"{what} traceparent {tp!r}")
    elif json_hook and (m[1] != TRACE_ID or m[2] == PARENT_SPAN or ts != TRACESTATE):
        fail(f"{what}: not a child of the hook's trace: {tp!r} {ts!r}")
    elif not json_hook and (m[1] == TRACE_ID or ts is not None):
        fail(f"{what}: not a trace of its own: {tp!r} {ts!r}")


def check_event(target, mode, signed, event, headers, fail):
    hook = event.get_id().split(":")[0]
    json_hook = hook == JSON_HOOK
    # On SQS and SNS a binary-mode event keeps what the cap leaves: check exactly that.
    kept = None
    if target in CAPPED and mode == "binary":
        kept = sqs_binary_kept(json_hook, signed)
        if set(headers) != kept:
            fail(f"attributes {sorted(headers)} != {sorted(kept)}")
    has = lambda name: kept is None or name in kept  # noqa: E731
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
    if has("ce-time"):
        t = event.get_time()
        now = datetime.now(timezone.utc)
        if t is None or abs(now - t) > timedelta(minutes=5):
            fail(f"time {t!r} is not the hook's received_at")
    ext = {
        k: event.get_extension(k)
        for k in ("ankusatenant", "ankusaidempotencykey", "ankusareplayid")
        if has(f"ce-{k}")
    }
    if json_hook:
        full = {
            "ankusatenant": "acme",
            "ankusaidempotencykey": "acme:stripe:evt_1",
            "ankusareplayid": "r1",
        }
        if ext != {k: v for k, v in full.items() if k in ext}:
            fail(f"extensions {ext}")
    elif ext.get("ankusatenant") is not None or ext.get("ankusareplayid") is not None:
        fail(f"extensions {ext}")
    elif "ankusaidempotencykey" in ext and not ext["ankusaidempotencykey"]:
        fail("no ankusaidempotencykey")
    tp, ts = event.get_extension("traceparent"), event.get_extension("tracestate")
    if has("ce-traceparent"):
        check_trace(tp, ts if has("ce-tracestate") else (TRACESTATE if json_hook else None),
                    json_hook, fail, "extension")
    if has("traceparent") and headers.get("traceparent") != tp:
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
    elif has("ankusa_id") and (headers.get("x-ankusa-id") or headers.get("ankusa_id")) != hook:
        fail(f"no ankusa id beside the event: {sorted(headers)}")
    return event.get_id(), event.get_type()


def check_message(target, headers, body, fail):
    """Message v1 (HTTP: the raw body) as a consumer decodes it."""
    if target == "http":
        hook = headers.get("x-ankusa-id")
        if body not in (json.dumps(JSON_BODY).encode(), BINARY_BODY):
            fail(f"raw body {body!r:.60}")
        json_hook = hook == JSON_HOOK
        ident = f"{hook}:replay:r1" if json_hook else hook
    else:
        m = json.loads(body)
        hook = m.get("id")
        json_hook = hook == JSON_HOOK
        want_body = json.dumps(JSON_BODY).encode() if json_hook else BINARY_BODY
        got = (m.get("v"), m.get("source_id"), m.get("tenant_id"), m.get("replay_id"))
        if got != (1, "stripe", "acme" if json_hook else None, "r1" if json_hook else None):
            fail(f"Message v1 fields {got}")
        if base64.b64decode(m.get("body_base64", "")) != want_body:
            fail("Message v1 body is not the hook's")
        if target != "amqp" and headers.get("ankusa_id") != hook:
            fail(f"no ankusa_id beside the message: {sorted(headers)}")
        ident = f"{hook}:replay:r1" if json_hook else hook
    if hook not in (JSON_HOOK, BINARY_HOOK):
        fail(f"not one of the hooks: {hook!r}")
    check_trace(headers.get("traceparent"), headers.get("tracestate"), json_hook, fail, "protocol")
    return ident, None


def hmac_verify(secret, sig, body):
    """The Standard Webhooks check over bytes that are not UTF-8, which the reference
    library (text only) cannot take: HMAC-SHA256 of `<id>.<timestamp>.<body>`."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{sig['webhook-id']}.{sig['webhook-timestamp']}.".encode() + body
    want = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    fresh = abs(time.time() - int(sig["webhook-timestamp"])) <= 300
    entries = [e.split(",", 1) for e in sig["webhook-signature"].split(" ")]
    return fresh and any(v == "v1" and hmac.compare_digest(s, want) for v, s in entries)


def verify(headers, body, secret_list, want_id, fail):
    sig = {k: headers.get(k) for k in SIGNATURE}
    if None in sig.values():
        return fail(f"signature missing: {sorted(headers)}")
    if sig["webhook-id"] != want_id:
        fail(f"webhook-id {sig['webhook-id']!r} != {want_id!r}")
    if len(sig["webhook-signature"].split(" ")) != len(secret_list):
        fail("not one signature per secret")

    def genuine(secret, data):
        try:
            data.decode()
        except UnicodeDecodeError:
            return hmac_verify(secret, sig, data)
        try:
            swh.Webhook(secret).verify(data, sig, json_parse=False)
            return True
        except swh.WebhookVerificationError:
            return False

    for s in secret_list:
        if not genuine(s, body):
            fail("genuine message refused")
    tampered = bytearray(body)
    tampered[len(tampered) // 2] ^= 0x01
    if genuine(secret_list[0], bytes(tampered)):
        fail("a tampered body verified")


def deliver(cli, sinks, hook, body, extra, env):
    cmd = [cli, "deliver", *sinks, "--id", hook, "--source-id", "stripe"]
    cmd += ["--json", "--body", "-", *extra]
    return subprocess.run(cmd, input=body, capture_output=True, timeout=180, env=env)


def outcomes(stdout):
    lines = [json.loads(l) for l in stdout.decode().splitlines() if l.strip()]
    return {l.get("sink"): l for l in lines}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--secret", action="append", default=[])
    a = ap.parse_args()

    variants = [(mode, False) for mode in FORMATS]
    if a.secret:
        variants += [(mode, True) for mode in FORMATS]
    env = dict(os.environ, **AWS_ENV)
    with destinations() as (made, out, problems):
        work = tempfile.mkdtemp(prefix="ankusa-ce-")
        for mode, signed in variants:
            variant = mode + ("+signed" if signed else "")
            tag = f"ce-{mode}{'-s' if signed else ''}"
            sinks = []
            for name, cls in TARGETS.items():
                dest = made[(name, variant)] = cls(tag)
                path = os.path.join(work, f"{name}-{variant}.toml")
                keys = dest.toml()
                if FORMATS[mode]:
                    keys += f'format = "{FORMATS[mode]}"\ncloudevents_type = "{TYPE[mode]}"\n'
                if signed and name == "http":
                    keys += "secrets = [" + ", ".join(f'"{s}"' for s in a.secret) + "]\n"
                elif signed:
                    keys += "\n[signing]\nsecrets = [" + ", ".join(f'"{s}"' for s in a.secret) + "]\n"
                with open(path, "w") as f:
                    f.write(keys)
                sinks += ["--sink", path]
            json_extra = ["--tenant", "acme", "--dedupe-key", "evt_1", "--replay-id", "r1"]
            json_extra += ["--content-type", "application/json"]
            json_extra += ["--header", f"traceparent: {TRACEPARENT}"]
            json_extra += ["--header", f"tracestate: {TRACESTATE}"]
            r = deliver(a.cli, sinks, JSON_HOOK, json.dumps(JSON_BODY).encode(), json_extra, env)
            if r.returncode != 0:
                problems.append(f"deliver {variant} {JSON_HOOK}: exit {r.returncode}: {r.stdout!r} {r.stderr!r}")
            bin_extra = ["--content-type", "application/octet-stream"]
            r = deliver(a.cli, sinks, BINARY_HOOK, BINARY_BODY, bin_extra, env)
            got = outcomes(r.stdout)
            for name in TARGETS:
                line = got.get(f"{name}-{variant}", {})
                refused = mode == "binary" and name in CAPPED
                if refused and (line.get("outcome"), line.get("class")) != ("failed", "permanent"):
                    problems.append(f"{name} {variant}: binary data not refused permanent: {line}")
                elif not refused and line.get("outcome") != "ok":
                    problems.append(f"{name} {variant}: {BINARY_HOOK} not delivered: {line} {r.stderr!r}")
        for (name, variant), dest in made.items():
            mode, signed = variant.split("+")[0], variant.endswith("+signed")
            fail_at = lambda what, name=name, variant=variant: problems.append(  # noqa: E731
                f"{name} {variant}: {what}"
            )
            want = 1 if mode == "binary" and name in CAPPED else 2
            got = dest.read(want)
            if len(got) != want:
                fail_at(f"read {len(got)} messages, want {want}")
            read = []
            for headers, body, content_type in got:
                try:
                    if mode == "message":
                        ident, kind = check_message(name, headers, body, fail_at)
                    else:
                        event = parse(name, headers, body, content_type)
                        ident, kind = check_event(name, mode, signed, event, headers, fail_at)
                except Exception as e:  # noqa: BLE001 (a consumer refusing is the finding)
                    fail_at(f"the consumer refused the message: {e!r}")
                    continue
                if signed:
                    # HTTP signs a replay under the hook id (its README); the others
                    # under the event's id, `<id>:replay:<replay_id>`.
                    want_id = ident.split(":")[0] if name == "http" else ident
                    verify(headers, body, a.secret, want_id, fail_at)
                read.append({"id": ident, "type": kind})
            out.setdefault(name, {})[variant] = read
        # Also in the object: brokers' client libraries log on stderr too (librdkafka).
        out["problems"] = problems


if __name__ == "__main__":
    main()
