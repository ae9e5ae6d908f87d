#!/usr/bin/env python3
"""Signed broker messages, read back by each broker's own Python client and verified with
the Standard Webhooks reference library (`standardwebhooks` on PyPI).

For every Message v1 sink (Kafka, AMQP, SQS, SNS, Pub/Sub, NATS JetStream, Redis streams,
MQTT) this makes a fresh destination on the local broker, writes a sink file with a
`[signing]` table of the given secrets, delivers two hooks through the `ankusa-sink` binary (one plain,
one as part of a replay), and reads both back. Each message must verify under every secret
(a rotation: the header carries one signature per key), name the hook (or
`<id>:replay:<replay_id>`) in `webhook-id`, and fail verification when its body is altered
by one byte or when the verifier's clock is ten minutes later (stale timestamp).

Each message also carries the attempt's W3C trace context: the plain hook arrives with a
`traceparent` and a `tracestate`, and its message must carry a child span in that trace
with that state; the replay arrives without one, and its message must carry a new trace.

Prints one JSON object: broker -> list of {"headers": {...}, "body_b64": ...} as read, for
the caller to verify again (the Rust test uses `message::verify`). Exit status 0 only when
every check passed; a failed check is printed on stderr.

    signed_messages.py --cli PATH --secret whsec_... --secret whsec_... [--only BROKER]

The brokers are brokers.py's (its environment variables name them).
"""

import argparse
import os
import re
import secrets
import subprocess
import tempfile
from datetime import datetime, timedelta

import standardwebhooks.webhooks as swh
from brokers import AWS_ENV, BROKERS, RUN, as_read, destinations

HOOK = f"signed-{RUN}"
REPLAY = "replay-7"
TRACE_ID = secrets.token_hex(16)
PARENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN}-01"
TRACESTATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
W3C = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-01")


# ---- verification ----


class Later(datetime):
    """`datetime` as the verifier sees it ten minutes from now."""

    @classmethod
    def now(cls, tz=None):
        return datetime.now(tz) + timedelta(minutes=10)


def verify(broker, headers, body, secrets, want_id, problems):
    def fail(what):
        problems.append(f"{broker} {want_id}: {what}")

    sig = {k: headers.get(k) for k in ("webhook-id", "webhook-timestamp", "webhook-signature")}
    if None in sig.values():
        return fail(f"signature headers missing: {sorted(headers)}")
    if sig["webhook-id"] != want_id:
        fail(f"webhook-id {sig['webhook-id']!r}")
    if len(sig["webhook-signature"].split(" ")) != len(secrets):
        fail("not one signature per secret")
    for s in secrets:
        try:
            msg = swh.Webhook(s).verify(body, sig)
        except swh.WebhookVerificationError as e:
            fail(f"genuine message refused: {e}")
            continue
        if msg.get("v") != 1 or f"{msg['id']}" not in want_id:
            fail(f"not the Message v1 of the hook: {msg.get('id')}")
    tampered = bytearray(body)
    tampered[len(tampered) // 2] ^= 0x01
    try:
        swh.Webhook(secrets[0]).verify(bytes(tampered), sig, json_parse=False)
        fail("a tampered body verified")
    except (swh.WebhookVerificationError, UnicodeDecodeError):
        pass
    real = swh.datetime
    swh.datetime = Later
    try:
        swh.Webhook(secrets[0]).verify(body, sig)
        fail("a stale timestamp verified")
    except swh.WebhookVerificationError as e:
        if "too old" not in str(e):
            fail(f"stale message refused for another reason: {e}")
    finally:
        swh.datetime = real


def verify_trace(broker, headers, want_id, problems):
    tp, ts = headers.get("traceparent"), headers.get("tracestate")
    m = W3C.fullmatch(tp or "")
    if not m:
        problems.append(f"{broker} {want_id}: traceparent {tp!r}")
    elif ":replay:" not in want_id:
        if m[1] != TRACE_ID or m[2] == PARENT_SPAN or ts != TRACESTATE:
            problems.append(f"{broker} {want_id}: not a child of the hook's trace: {tp!r} {ts!r}")
    elif m[1] == TRACE_ID or ts is not None:
        problems.append(f"{broker} {want_id}: not a trace of its own: {tp!r} {ts!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--secret", action="append", required=True)
    ap.add_argument("--only", action="append", choices=sorted(BROKERS))
    a = ap.parse_args()

    names = a.only or list(BROKERS)
    with destinations() as (made, out, problems):
        work = tempfile.mkdtemp(prefix="ankusa-signed-")
        for name in names:
            made[name] = BROKERS[name]()
        signing = "\n[signing]\nsecrets = [" + ", ".join(f'"{s}"' for s in a.secret) + "]\n"
        sinks = []
        for name, b in made.items():
            path = os.path.join(work, f"{name}.toml")
            with open(path, "w") as f:
                f.write(b.toml() + signing)
            sinks += ["--sink", path]
        env = dict(os.environ, **AWS_ENV)
        traced = ["--header", f"traceparent: {TRACEPARENT}", "--header", f"tracestate: {TRACESTATE}"]
        for extra in (traced, ["--replay-id", REPLAY]):
            cmd = [a.cli, "deliver", *sinks, "--id", HOOK, "--tenant", "acme", "--json", *extra]
            cmd += ["--dedupe-key", "evt_1", "--header", "x-provider: p", "--body", "-"]
            r = subprocess.run(cmd, input=b'{"signed":true}', capture_output=True, env=env, timeout=120)
            if r.returncode != 0:
                problems.append(f"deliver {extra}: exit {r.returncode}: {r.stdout!r} {r.stderr!r}")
        for name, b in made.items():
            got = b.read(2)
            if len(got) != 2:
                problems.append(f"{name}: read {len(got)} messages, want 2")
            for (headers, body, _), want in zip(got, [HOOK, f"{HOOK}:replay:{REPLAY}"]):
                verify(name, headers, body, a.secret, want, problems)
                verify_trace(name, headers, want, problems)
            out[name] = as_read(got)


if __name__ == "__main__":
    main()
