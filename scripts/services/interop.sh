#!/usr/bin/env bash
# Python clients for the interop tests: each broker's own client, the Standard Webhooks
# reference library and the official CloudEvents SDK, in a venv at
# $HOME/.cache/ankusa-sinks/interop/venv (wheels from PyPI, pinned). Nothing is started. Idempotent; the tests fail with a pointer here when it is
# missing.
set -euo pipefail

VENV="${ANKUSA_INTEROP_VENV:-$HOME/.cache/ankusa-sinks/interop/venv}"
PKGS=(
  "standardwebhooks==1.1.0"
  "confluent-kafka==2.12.2"
  "pika==1.4.4"
  "boto3==1.44.8"
  "google-cloud-pubsub==2.44.0"
  "nats-py==2.16.0"
  "redis==8.1.0"
  "cloudevents==2.2.0"
  "paho-mqtt==2.1.0"
)
CHECK='import standardwebhooks, confluent_kafka, pika, boto3, google.cloud.pubsub_v1, nats, redis, cloudevents.core.bindings.rabbitmq, paho.mqtt.client'

if "$VENV/bin/python" -c "$CHECK" >/dev/null 2>&1; then
  echo "interop.sh: $VENV has the clients"
  exit 0
fi
mkdir -p "$(dirname "$VENV")"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
timeout 600 "$VENV/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: "${PKGS[@]}"
"$VENV/bin/python" -c "$CHECK"
echo "interop.sh: installed ${PKGS[*]} into $VENV"
