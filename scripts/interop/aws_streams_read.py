#!/usr/bin/env python3
"""Kinesis and EventBridge end to end, read back by boto3: for each, a fresh stream (or an
event bus with a rule whose target is an SQS queue) on moto, a sink file for it, `check`,
two hooks through `ankusa-sink deliver` (one plain, one a replay), twenty generated hooks
through `ankusa-sink forward` (batched), and every record or event read back with boto3.

Each read-back message must be a Message v1 (`v` 1) of a hook that was sent, the two
delivered hooks with their body, tenant, dedupe key and replay id; a Kinesis record's
partition key must be the hook's idempotency key; an event's source and detail type the
sink file's.

Prints one JSON object: sink -> list of {"headers": {...}, "body_b64": ...} as read, for
the caller to decode again (the Rust test uses `message::decode`). Exit status 0 only when
every check passed; a failed check is printed on stderr.

    aws_streams_read.py --cli PATH [--only kinesis|eventbridge]
"""

import argparse
import base64
import json
import os
import subprocess
import tempfile

from brokers import AWS_ENV, RUN, STREAMS, as_read, destinations

HOOK = f"streams-{RUN}"
REPLAY = "replay-7"
BODY = b'{"streamed":true}'
GENERATED = 20


def check_message(name, headers, body, problems):
    """The Message v1 of one read-back message, or None (a problem is recorded)."""
    try:
        m = json.loads(body)
    except ValueError as e:
        problems.append(f"{name}: not JSON: {e}")
        return None
    if m.get("v") != 1:
        problems.append(f"{name}: not a Message v1: {sorted(m)}")
        return None
    if m.get("id") == HOOK:
        if base64.b64decode(m.get("body_base64", "")) != BODY:
            problems.append(f"{name}: body {m.get('body_base64')!r}")
        if m.get("tenant_id") != "acme" or m.get("dedupe_key") != "evt_1":
            problems.append(f"{name}: tenant/dedupe {m.get('tenant_id')!r} {m.get('dedupe_key')!r}")
        if name == "kinesis" and headers.get("partition_key") != "acme:stripe:evt_1":
            problems.append(f"kinesis: partition key {headers.get('partition_key')!r}")
    if name == "eventbridge" and (
        headers.get("source") != "com.example.interop"
        or headers.get("detail-type") != "ankusa.message.v1"
    ):
        problems.append(f"eventbridge: source/detail-type {headers}")
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--only", action="append", choices=sorted(STREAMS))
    a = ap.parse_args()

    names = a.only or list(STREAMS)
    env = dict(os.environ, **AWS_ENV)
    with destinations() as (made, out, problems):
        work = tempfile.mkdtemp(prefix="ankusa-streams-")
        for name in names:
            made[name] = STREAMS[name]()
        gen = subprocess.run(
            [a.cli, "gen", "--count", str(GENERATED), "--size", "200"],
            capture_output=True, env=env, timeout=60, check=True,
        ).stdout
        hooks = os.path.join(work, "hooks.jsonl")
        with open(hooks, "wb") as f:
            f.write(gen)
        for name, b in made.items():
            path = os.path.join(work, f"{name}.toml")
            with open(path, "w") as f:
                f.write(b.toml())
            r = subprocess.run([a.cli, "check", "--sink", path], capture_output=True, env=env, timeout=60)
            if r.returncode != 0:
                problems.append(f"{name} check: exit {r.returncode}: {r.stdout!r} {r.stderr!r}")
            for extra in ([], ["--replay-id", REPLAY]):
                cmd = [a.cli, "deliver", "--sink", path, "--id", HOOK, "--tenant", "acme"]
                cmd += ["--source-id", "stripe", "--dedupe-key", "evt_1", "--json", *extra, "--body", "-"]
                r = subprocess.run(cmd, input=BODY, capture_output=True, env=env, timeout=120)
                if r.returncode != 0:
                    problems.append(f"{name} deliver {extra}: exit {r.returncode}: {r.stdout!r} {r.stderr!r}")
            r = subprocess.run(
                [a.cli, "forward", "--sink", path, "--input", hooks, "--json", "--concurrency", "16"],
                capture_output=True, env=env, timeout=180,
            )
            oks = r.stdout.decode().count('"outcome":"ok"')
            if r.returncode != 0 or oks != GENERATED:
                problems.append(f"{name} forward: exit {r.returncode}, {oks} ok: {r.stderr!r}")
            want = 2 + GENERATED
            got = b.read(want)
            if len(got) != want:
                problems.append(f"{name}: read {len(got)} messages, want {want}")
            replays = []
            for headers, body, _ in got:
                m = check_message(name, headers, body, problems)
                if m is not None and m.get("id") == HOOK:
                    replays.append(m.get("replay_id"))
            if sorted(replays, key=str) != sorted([None, REPLAY], key=str):
                problems.append(f"{name}: the delivered hooks' replay ids {replays}")
            out[name] = as_read(got)


if __name__ == "__main__":
    main()
