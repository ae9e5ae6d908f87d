"""The baseline of issue 21: what a user writes instead of `ankusa-sink forward`.

    python kafka_produce.py FILE.jsonl TOPIC

Produces each line of FILE, as is, as one record's value to TOPIC (acks=all, idempotent,
otherwise librdkafka's defaults). Exits 1 if any delivery failed. Broker: 127.0.0.1:9092,
or $ANKUSA_KAFKA_BROKERS.
"""
import os
import sys

from confluent_kafka import Producer

errors = 0


def on_delivery(err, _msg):
    global errors
    if err is not None:
        errors += 1


p = Producer({
    "bootstrap.servers": os.environ.get("ANKUSA_KAFKA_BROKERS", "127.0.0.1:9092"),
    "acks": "all",
    "enable.idempotence": True,
})
with open(sys.argv[1], "rb") as f:
    for line in f:
        while True:
            try:
                p.produce(sys.argv[2], line.rstrip(b"\n"), on_delivery=on_delivery)
                break
            except BufferError:  # local queue full: let deliveries drain
                p.poll(0.1)
        p.poll(0)
p.flush()
sys.exit(1 if errors else 0)
