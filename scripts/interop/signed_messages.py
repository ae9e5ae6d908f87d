#!/usr/bin/env python3
"""Signed broker messages, read back by each broker's own Python client and verified with
the Standard Webhooks reference library (`standardwebhooks` on PyPI).

For every Message v1 sink (Kafka, AMQP, SQS, SNS, Pub/Sub, NATS JetStream, Redis streams)
this makes a fresh destination on the local broker, writes a sink file with a `[signing]`
table of the given secrets, delivers two hooks through the `ankusa-sink` binary (one plain,
one as part of a replay), and reads both back. Each message must verify under every secret
(a rotation: the header carries one signature per key), name the hook (or
`<id>:replay:<replay_id>`) in `webhook-id`, and fail verification when its body is altered
by one byte or when the verifier's clock is ten minutes later (stale timestamp).

Prints one JSON object: broker -> list of {"headers": {...}, "body_b64": ...} as read, for
the caller to verify again (the Rust test uses `message::verify`). Exit status 0 only when
every check passed; a failed check is printed on stderr.

    signed_messages.py --cli PATH --secret whsec_... --secret whsec_... [--only BROKER]

Env: ANKUSA_KAFKA_BROKERS, ANKUSA_AMQP_URL, ANKUSA_MOTO_ENDPOINT, ANKUSA_PUBSUB_EMULATOR_HOST,
ANKUSA_NATS_URL, ANKUSA_REDIS_URL (defaults: the brokers scripts/services start).
"""

import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta

import standardwebhooks.webhooks as swh

RUN = uuid.uuid4().hex[:10]
KAFKA = os.environ.get("ANKUSA_KAFKA_BROKERS", "127.0.0.1:9092")
AMQP = os.environ.get("ANKUSA_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
MOTO = os.environ.get("ANKUSA_MOTO_ENDPOINT", "127.0.0.1:4566")
PUBSUB = os.environ.get("ANKUSA_PUBSUB_EMULATOR_HOST", "127.0.0.1:8085")
NATS = os.environ.get("ANKUSA_NATS_URL", "nats://127.0.0.1:4222")
REDIS = os.environ.get("ANKUSA_REDIS_URL", "redis://127.0.0.1:6379")
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_EC2_METADATA_DISABLED": "true",
}
PROJECT = "ankusa-signed"
HOOK = f"signed-{RUN}"
REPLAY = "replay-7"
DEADLINE_S = 30


def text(v):
    return v.decode() if isinstance(v, (bytes, bytearray)) else str(v)


# ---- one section per broker: setup() -> sink TOML lines; read() -> [(headers, body)] ----


class Kafka:
    def __init__(self):
        from confluent_kafka.admin import AdminClient, NewTopic

        self.topic = f"signed-{RUN}"
        admin = AdminClient({"bootstrap.servers": KAFKA})
        for f in admin.create_topics([NewTopic(self.topic, 1, 1)]).values():
            f.result(timeout=DEADLINE_S)

    def toml(self):
        return f'type = "kafka"\nbrokers = ["{KAFKA}"]\ntopic = "{self.topic}"\n'

    def read(self, n):
        from confluent_kafka import Consumer

        c = Consumer(
            {
                "bootstrap.servers": KAFKA,
                "group.id": f"signed-{RUN}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        c.subscribe([self.topic])
        got, end = [], time.time() + DEADLINE_S
        while len(got) < n and time.time() < end:
            m = c.poll(1.0)
            if m is None or m.error():
                continue
            got.append(({k: text(v) for k, v in (m.headers() or [])}, m.value()))
        c.close()
        return got

    def cleanup(self):
        pass


class Amqp:
    def __init__(self):
        import pika

        self.name = f"signed-{RUN}"
        self.conn = pika.BlockingConnection(pika.URLParameters(AMQP))
        ch = self.conn.channel()
        ch.exchange_declare(self.name, exchange_type="topic", durable=False, auto_delete=False)
        ch.queue_declare(self.name, durable=False)
        ch.queue_bind(self.name, self.name, routing_key="#")
        self.ch = ch

    def toml(self):
        return f'type = "amqp"\nurl = "{AMQP}"\nexchange = "{self.name}"\n'

    def read(self, n):
        got, end = [], time.time() + DEADLINE_S
        while len(got) < n and time.time() < end:
            method, props, body = self.ch.basic_get(self.name, auto_ack=True)
            if method is None:
                time.sleep(0.1)
                continue
            got.append(({k: text(v) for k, v in (props.headers or {}).items()}, body))
        return got

    def cleanup(self):
        self.ch.queue_delete(self.name)
        self.ch.exchange_delete(self.name)
        self.conn.close()


def aws(service):
    import boto3

    return boto3.client(
        service,
        endpoint_url=f"http://{MOTO}",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def sqs_read(sqs, url, n):
    got, end = [], time.time() + DEADLINE_S
    while len(got) < n and time.time() < end:
        r = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=1
        )
        for m in r.get("Messages", []):
            attrs = {k: v["StringValue"] for k, v in m.get("MessageAttributes", {}).items()}
            got.append((attrs, m["Body"].encode()))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return got


class Sqs:
    def __init__(self):
        self.sqs = aws("sqs")
        self.url = self.sqs.create_queue(QueueName=f"signed-{RUN}")["QueueUrl"]

    def toml(self):
        return (
            f'type = "sqs"\nqueue_url = "{self.url}"\nregion = "us-east-1"\n'
            f'endpoint = "http://{MOTO}"\n'
        )

    def read(self, n):
        return sqs_read(self.sqs, self.url, n)

    def cleanup(self):
        self.sqs.delete_queue(QueueUrl=self.url)


class Sns:
    """Read back through a raw-delivery SQS subscription: the message attributes arrive as
    SQS message attributes, the body as it was published."""

    def __init__(self):
        self.sqs, self.sns = aws("sqs"), aws("sns")
        name = f"signed-sns-{RUN}"
        self.url = self.sqs.create_queue(QueueName=name)["QueueUrl"]
        self.arn = self.sns.create_topic(Name=name)["TopicArn"]
        self.sns.subscribe(
            TopicArn=self.arn,
            Protocol="sqs",
            Endpoint=f"arn:aws:sqs:us-east-1:123456789012:{name}",
            Attributes={"RawMessageDelivery": "true"},
        )

    def toml(self):
        return (
            f'type = "sns"\ntopic_arn = "{self.arn}"\nregion = "us-east-1"\n'
            f'endpoint = "http://{MOTO}"\n'
        )

    def read(self, n):
        return sqs_read(self.sqs, self.url, n)

    def cleanup(self):
        self.sns.delete_topic(TopicArn=self.arn)
        self.sqs.delete_queue(QueueUrl=self.url)


class PubSub:
    def __init__(self):
        os.environ["PUBSUB_EMULATOR_HOST"] = PUBSUB
        from google.cloud import pubsub_v1

        self.pub, self.sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        self.topic = self.pub.topic_path(PROJECT, f"signed-{RUN}")
        self.subscription = self.sub.subscription_path(PROJECT, f"signed-{RUN}")
        self.pub.create_topic(name=self.topic)
        self.sub.create_subscription(name=self.subscription, topic=self.topic)

    def toml(self):
        return (
            f'type = "pubsub"\nproject = "{PROJECT}"\ntopic = "signed-{RUN}"\n'
            f'endpoint = "http://{PUBSUB}"\n'
        )

    def read(self, n):
        got, end = [], time.time() + DEADLINE_S
        while len(got) < n and time.time() < end:
            r = self.sub.pull(subscription=self.subscription, max_messages=10, timeout=5)
            for m in r.received_messages:
                got.append((dict(m.message.attributes), bytes(m.message.data)))
            if r.received_messages:
                self.sub.acknowledge(
                    subscription=self.subscription, ack_ids=[m.ack_id for m in r.received_messages]
                )
        return got

    def cleanup(self):
        self.sub.delete_subscription(subscription=self.subscription)
        self.pub.delete_topic(topic=self.topic)


class Nats:
    def __init__(self):
        self.stream, self.subject = f"SIGNED_{RUN}", f"signed.{RUN}"

        async def setup(js):
            await js.add_stream(name=self.stream, subjects=[self.subject])

        self.js_call(setup)

    def js_call(self, f):
        import nats

        async def go():
            nc = await nats.connect(NATS)
            try:
                return await f(nc.jetstream())
            finally:
                await nc.close()

        return asyncio.run(go())

    def toml(self):
        return f'type = "nats"\nurl = "{NATS}"\nsubject = "{self.subject}"\n'

    def read(self, n):
        async def get(js):
            got = []
            for seq in range(1, n + 1):
                m = await js.get_msg(self.stream, seq)
                got.append(({k: text(v) for k, v in (m.headers or {}).items()}, m.data))
            return got

        return self.js_call(get)

    def cleanup(self):
        async def delete(js):
            await js.delete_stream(self.stream)

        self.js_call(delete)


class Redis:
    def __init__(self):
        import redis

        self.r = redis.Redis.from_url(REDIS)
        self.key = f"signed-{RUN}"

    def toml(self):
        return f'type = "redis"\nurl = "{REDIS}"\nstream = "{self.key}"\n'

    def read(self, n):
        got = []
        for _id, fields in self.r.xrange(self.key, count=n):
            fields = {text(k): v for k, v in fields.items()}
            body = fields.pop("message")
            got.append(({k: text(v) for k, v in fields.items()}, body))
        return got

    def cleanup(self):
        self.r.delete(self.key)


BROKERS = {
    "kafka": Kafka,
    "amqp": Amqp,
    "sqs": Sqs,
    "sns": Sns,
    "pubsub": PubSub,
    "nats": Nats,
    "redis": Redis,
}

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--secret", action="append", required=True)
    ap.add_argument("--only", action="append", choices=sorted(BROKERS))
    a = ap.parse_args()

    names = a.only or list(BROKERS)
    made = {}
    problems = []
    out = {}
    work = tempfile.mkdtemp(prefix="ankusa-signed-")
    try:
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
        for extra in ([], ["--replay-id", REPLAY]):
            cmd = [a.cli, "deliver", *sinks, "--id", HOOK, "--tenant", "acme", "--json", *extra]
            cmd += ["--dedupe-key", "evt_1", "--header", "x-provider: p", "--body", "-"]
            r = subprocess.run(cmd, input=b'{"signed":true}', capture_output=True, env=env, timeout=120)
            if r.returncode != 0:
                problems.append(f"deliver {extra}: exit {r.returncode}: {r.stdout!r} {r.stderr!r}")
        for name, b in made.items():
            got = b.read(2)
            if len(got) != 2:
                problems.append(f"{name}: read {len(got)} messages, want 2")
            for (headers, body), want in zip(got, [HOOK, f"{HOOK}:replay:{REPLAY}"]):
                verify(name, headers, body, a.secret, want, problems)
            out[name] = [
                {"headers": h, "body_b64": base64.b64encode(body).decode()} for h, body in got
            ]
    finally:
        for name, b in made.items():
            try:
                b.cleanup()
            except Exception as e:  # noqa: BLE001 (cleanup must not hide the result)
                print(f"cleanup {name}: {e}", file=sys.stderr)
    print(json.dumps(out))
    for p in problems:
        print(p, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
