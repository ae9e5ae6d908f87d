"""Each local broker, as its own Python client sees it: make a fresh destination, write the
sink file's keys for it, read messages back, clean up. Shared by the interop scripts.

Each class: `Broker(tag)` makes the destination (names unique per run and tag), `toml()` the
sink file's keys, `read(n)` up to `n` messages as `(headers, body, content_type)` (headers
or attributes as text; `content_type` the AMQP property, else `None`), `cleanup()`.

`BROKERS` are the sinks whose messages carry attributes (headers), so signing applies;
`STREAMS` are Kinesis and EventBridge, whose messages are the Message v1 body alone: their
"headers" are what the service adds (the record's partition key; the event's source and
detail type).

Env: ANKUSA_KAFKA_BROKERS, ANKUSA_AMQP_URL, ANKUSA_MOTO_ENDPOINT, ANKUSA_PUBSUB_EMULATOR_HOST,
ANKUSA_NATS_URL, ANKUSA_REDIS_URL, ANKUSA_MQTT_ADDR (defaults: the brokers scripts/services
start).

Run as a script, `brokers.py mqtt-read --topic T --count N` subscribes to T with MQTT 5
(paho-mqtt), prints `ready` once the broker granted the subscription, then one JSON line:
the messages that arrived (topic, payload_b64, content_type, user_properties as [name, value]
pairs in order, retain), after N of them or the deadline (used by ankusa-sink-mqtt's
wire-format test).
"""

import asyncio
import base64
import contextlib
import json
import os
import sys
import time
import uuid

RUN = uuid.uuid4().hex[:10]
KAFKA = os.environ.get("ANKUSA_KAFKA_BROKERS", "127.0.0.1:9092")
AMQP = os.environ.get("ANKUSA_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
MOTO = os.environ.get("ANKUSA_MOTO_ENDPOINT", "127.0.0.1:4566")
PUBSUB = os.environ.get("ANKUSA_PUBSUB_EMULATOR_HOST", "127.0.0.1:8085")
NATS = os.environ.get("ANKUSA_NATS_URL", "nats://127.0.0.1:4222")
REDIS = os.environ.get("ANKUSA_REDIS_URL", "redis://127.0.0.1:6379")
MQTT = os.environ.get("ANKUSA_MQTT_ADDR", "127.0.0.1:1883")
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_EC2_METADATA_DISABLED": "true",
}
PROJECT = "ankusa-interop"
DEADLINE_S = 30


def text(v):
    return v.decode() if isinstance(v, (bytes, bytearray)) else str(v)


class Kafka:
    def __init__(self, tag="signed"):
        from confluent_kafka.admin import AdminClient, NewTopic

        self.topic = f"{tag}-{RUN}"
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
                "group.id": f"{self.topic}-reader",
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
            got.append(({k: text(v) for k, v in (m.headers() or [])}, m.value(), None))
        c.close()
        return got

    def cleanup(self):
        pass


class Amqp:
    def __init__(self, tag="signed"):
        import pika

        self.name = f"{tag}-{RUN}"
        params = pika.URLParameters(AMQP)
        # The connection idles while the binary delivers: no heartbeat to miss.
        params.heartbeat = 0
        self.conn = pika.BlockingConnection(params)
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
            got.append(({k: text(v) for k, v in (props.headers or {}).items()}, body, props.content_type))
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
            got.append((attrs, m["Body"].encode(), None))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return got


class Sqs:
    def __init__(self, tag="signed"):
        self.sqs = aws("sqs")
        self.url = self.sqs.create_queue(QueueName=f"{tag}-{RUN}")["QueueUrl"]

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

    def __init__(self, tag="signed"):
        self.sqs, self.sns = aws("sqs"), aws("sns")
        name = f"{tag}-sns-{RUN}"
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
    def __init__(self, tag="signed"):
        os.environ["PUBSUB_EMULATOR_HOST"] = PUBSUB
        from google.cloud import pubsub_v1

        self.pub, self.sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        self.short = f"{tag}-{RUN}"
        self.topic = self.pub.topic_path(PROJECT, self.short)
        self.subscription = self.sub.subscription_path(PROJECT, self.short)
        self.pub.create_topic(name=self.topic)
        self.sub.create_subscription(name=self.subscription, topic=self.topic)

    def toml(self):
        return (
            f'type = "pubsub"\nproject = "{PROJECT}"\ntopic = "{self.short}"\n'
            f'endpoint = "http://{PUBSUB}"\n'
        )

    def read(self, n):
        got, end = [], time.time() + DEADLINE_S
        while len(got) < n and time.time() < end:
            r = self.sub.pull(subscription=self.subscription, max_messages=10, timeout=5)
            for m in r.received_messages:
                got.append((dict(m.message.attributes), bytes(m.message.data), None))
            if r.received_messages:
                self.sub.acknowledge(
                    subscription=self.subscription, ack_ids=[m.ack_id for m in r.received_messages]
                )
        return got

    def cleanup(self):
        self.sub.delete_subscription(subscription=self.subscription)
        self.pub.delete_topic(topic=self.topic)


class Nats:
    def __init__(self, tag="signed"):
        self.stream, self.subject = f"{tag.upper()}_{RUN}", f"{tag}.{RUN}"

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
                got.append(({k: text(v) for k, v in (m.headers or {}).items()}, m.data, None))
            return got

        return self.js_call(get)

    def cleanup(self):
        async def delete(js):
            await js.delete_stream(self.stream)

        self.js_call(delete)


class Redis:
    def __init__(self, tag="signed"):
        import redis

        self.r = redis.Redis.from_url(REDIS)
        self.key = f"{tag}-{RUN}"

    def toml(self):
        return f'type = "redis"\nurl = "{REDIS}"\nstream = "{self.key}"\n'

    def read(self, n):
        got = []
        for _id, fields in self.r.xrange(self.key, count=n):
            fields = {text(k): v for k, v in fields.items()}
            body = fields.pop("message")
            got.append(({k: text(v) for k, v in fields.items()}, body, None))
        return got

    def cleanup(self):
        self.r.delete(self.key)


class Mqtt:
    """A topic with an MQTT 5 subscriber (paho-mqtt, QoS 1) made before anything is
    published: MQTT keeps nothing for a subscriber that comes later."""

    def __init__(self, tag="signed", topic=None):
        import threading

        import paho.mqtt.client as mqtt

        self.topic = topic or f"{tag}/{RUN}"
        self.got = []
        subscribed = threading.Event()
        host, port = MQTT.rsplit(":", 1)
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)

        def on_connect(client, _userdata, _flags, _rc, _props):
            client.subscribe(self.topic, qos=1)

        def on_subscribe(_client, _userdata, _mid, _codes, _props):
            subscribed.set()

        def on_message(_client, _userdata, m):
            props = getattr(m, "properties", None)
            self.got.append(
                {
                    "topic": m.topic,
                    "payload": bytes(m.payload),
                    "content_type": getattr(props, "ContentType", None),
                    "user_properties": [list(p) for p in getattr(props, "UserProperty", [])],
                    "retain": bool(m.retain),
                }
            )

        c.on_connect, c.on_subscribe, c.on_message = on_connect, on_subscribe, on_message
        c.connect(host, int(port))
        c.loop_start()
        self.client = c
        if not subscribed.wait(DEADLINE_S):
            raise RuntimeError(f"no SUBACK for {self.topic}")

    def toml(self):
        return f'type = "mqtt"\nurl = "mqtt://{MQTT}"\ntopic = "{self.topic}"\n'

    def messages(self, n):
        end = time.time() + DEADLINE_S
        while len(self.got) < n and time.time() < end:
            time.sleep(0.02)
        return self.got[:n]

    def read(self, n):
        return [
            ({k: v for k, v in m["user_properties"]}, m["payload"], m["content_type"])
            for m in self.messages(n)
        ]

    def cleanup(self):
        self.client.disconnect()
        self.client.loop_stop()


class Kinesis:
    """Read back from the stream's one shard, from its start (reads do not consume)."""

    def __init__(self, tag="streams"):
        self.k = aws("kinesis")
        self.name = f"{tag}-{RUN}"
        self.k.create_stream(StreamName=self.name, ShardCount=1)
        self.k.get_waiter("stream_exists").wait(
            StreamName=self.name, WaiterConfig={"Delay": 1, "MaxAttempts": DEADLINE_S}
        )

    def toml(self):
        return (
            f'type = "kinesis"\nstream = "{self.name}"\nregion = "us-east-1"\n'
            f'endpoint = "http://{MOTO}"\n'
        )

    def read(self, n):
        shard = self.k.list_shards(StreamName=self.name)["Shards"][0]["ShardId"]
        it = self.k.get_shard_iterator(
            StreamName=self.name, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        got, end = [], time.time() + DEADLINE_S
        while it and len(got) < n and time.time() < end:
            r = self.k.get_records(ShardIterator=it, Limit=1000)
            for rec in r["Records"]:
                got.append(({"partition_key": rec["PartitionKey"]}, rec["Data"], None))
            it = r.get("NextShardIterator")
            if not r["Records"]:
                time.sleep(0.1)
        return got

    def cleanup(self):
        self.k.delete_stream(StreamName=self.name, EnforceConsumerDeletion=True)


class EventBridge:
    """Read back through a rule on the bus whose target is an SQS queue: each message is the
    event, whose `detail` is the Message v1 (EventBridge re-serializes it: the same JSON
    value, returned here as compact JSON bytes)."""

    SOURCE = "com.example.interop"

    def __init__(self, tag="streams"):
        self.sqs, self.events = aws("sqs"), aws("events")
        self.name = f"{tag}-eb-{RUN}"
        self.events.create_event_bus(Name=self.name)
        self.url = self.sqs.create_queue(QueueName=self.name)["QueueUrl"]
        self.events.put_rule(
            Name=self.name,
            EventBusName=self.name,
            EventPattern=json.dumps({"source": [self.SOURCE]}),
        )
        self.events.put_targets(
            Rule=self.name,
            EventBusName=self.name,
            Targets=[
                {
                    "Id": "queue",
                    "Arn": f"arn:aws:sqs:us-east-1:123456789012:{self.name}",
                    # The whole event, as without a transformer: moto compiles a JSONPath
                    # grammar per path per event, eight by default (~0.7 s an event).
                    "InputTransformer": {
                        "InputPathsMap": {"id": "$.id"},
                        "InputTemplate": "<aws.events.event.json>",
                    },
                }
            ],
        )

    def toml(self):
        return (
            f'type = "eventbridge"\nevent_bus_name = "{self.name}"\nsource = "{self.SOURCE}"\n'
            f'region = "us-east-1"\nendpoint = "http://{MOTO}"\n'
        )

    def read(self, n):
        got = []
        for _attrs, body, _ in sqs_read(self.sqs, self.url, n):
            event = json.loads(body)
            headers = {"source": event["source"], "detail-type": event["detail-type"]}
            detail = json.dumps(event["detail"], separators=(",", ":")).encode()
            got.append((headers, detail, None))
        return got

    def cleanup(self):
        self.events.remove_targets(Rule=self.name, EventBusName=self.name, Ids=["queue"])
        self.events.delete_rule(Name=self.name, EventBusName=self.name)
        self.events.delete_event_bus(Name=self.name)
        self.sqs.delete_queue(QueueUrl=self.url)


STREAMS = {"kinesis": Kinesis, "eventbridge": EventBridge}


BROKERS = {
    "kafka": Kafka,
    "amqp": Amqp,
    "sqs": Sqs,
    "sns": Sns,
    "pubsub": PubSub,
    "nats": Nats,
    "redis": Redis,
    "mqtt": Mqtt,
}


def cleanup_all(made):
    """Clean every destination up; a failed cleanup is reported, never raised (it must
    not hide the result)."""
    for name, dest in made.items():
        try:
            dest.cleanup()
        except Exception as e:  # noqa: BLE001
            print(f"cleanup {name}: {e}", file=sys.stderr)


def as_read(got):
    """The messages `read` returned as the Rust side takes them: headers, base64 body."""
    return [{"headers": h, "body_b64": base64.b64encode(body).decode()} for h, body, _ in got]


@contextlib.contextmanager
def destinations():
    """What an interop script makes and finds, as `(made, out, problems)`: on leaving, every
    destination in `made` is cleaned up (also after an exception, which then goes on), then
    `finish` prints `out` and the problems."""
    made, out, problems = {}, {}, []
    try:
        yield made, out, problems
    finally:
        cleanup_all(made)
    finish(out, problems)


def finish(out, problems):
    """Print `out` as JSON and each problem on stderr; exit 0 only without problems."""
    print(json.dumps(out))
    for p in problems:
        print(p, file=sys.stderr)
    sys.exit(1 if problems else 0)


def mqtt_read(argv):
    import argparse

    ap = argparse.ArgumentParser(prog="brokers.py mqtt-read")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, required=True)
    a = ap.parse_args(argv)
    m = Mqtt(topic=a.topic)
    print("ready", flush=True)
    got = m.messages(a.count)
    m.cleanup()
    for g in got:
        g["payload_b64"] = base64.b64encode(g.pop("payload")).decode()
    print(json.dumps(got), flush=True)
    sys.exit(0 if len(got) == a.count else 1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["mqtt-read"]:
        mqtt_read(sys.argv[2:])
    else:
        print("usage: brokers.py mqtt-read --topic T --count N", file=sys.stderr)
        sys.exit(2)
