#!/usr/bin/env bash
# Start the official Google Cloud Pub/Sub emulator on 127.0.0.1, idempotently, for the
# pubsub sink's tests.
#
#   scripts/services/pubsub.sh        # emulator on 127.0.0.1:8085 (ANKUSA_PUBSUB_PORT)
#
# - The emulator ships with the machine image (google-cloud-sdk's pubsub-emulator plus a
#   Java runtime); its apt source is off, so it cannot be installed here: when it is
#   missing this script fails with a clear message.
# - Starts it in the background (nohup) only when the port does not answer; logs to
#   ${XDG_CACHE_HOME:-$HOME/.cache}/ankusa-sinks/pubsub-emulator.log; waits (bounded) until
#   it answers.
# - Never wipes state: tests create uniquely named topics and delete them.
# The recovery tests start their own emulator on a free loopback port and stop it
# themselves; they find the binary via ANKUSA_PUBSUB_EMULATOR or the path below (where the
# google-cloud-cli package installs it).
set -euo pipefail
# shellcheck source=scripts/lib/services.bash
source "$(dirname "$0")/../lib/services.bash"

port="${ANKUSA_PUBSUB_PORT:-8085}"
bin="${ANKUSA_PUBSUB_EMULATOR:-/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator}"
logdir="${XDG_CACHE_HOME:-$HOME/.cache}/ankusa-sinks"
log="$logdir/pubsub-emulator.log"
mkdir -p "$logdir"
url="http://127.0.0.1:${port}/"

if answering "$url"; then
  echo "pubsub: emulator already answering on 127.0.0.1:${port}"
  exit 0
fi

if [ ! -x "$bin" ]; then
  cat >&2 <<MSG
pubsub: the Google Cloud Pub/Sub emulator is missing ($bin).
It is part of this machine image (google-cloud-sdk pubsub-emulator + Java 17) and cannot be
reinstalled here (its apt source is disabled). Use a machine image that has it, or point
ANKUSA_PUBSUB_EMULATOR at a cloud-pubsub-emulator launcher.
MSG
  exit 1
fi
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  echo "pubsub: the emulator needs a Java runtime (java not on PATH, JAVA_HOME unset)" >&2
  exit 1
fi

start_and_wait pubsub "$log" "$logdir/pubsub-emulator-${port}.pid" "$url" \
  "$bin" --host=127.0.0.1 --port="$port"
