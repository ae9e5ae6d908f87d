#!/usr/bin/env bash
# Start moto (AWS SQS/SNS/Kinesis/EventBridge/S3 emulator) on 127.0.0.1, idempotently, for the aws sink's tests.
#
#   scripts/services/moto.sh          # moto on 127.0.0.1:4566 (ANKUSA_MOTO_PORT)
#
# - Installs moto + flask + flask-cors with pip when `moto_server` is missing.
# - Starts it in the background (nohup) only when the port does not answer; logs to
#   $HOME/.cache/ankusa-sinks/moto.log; waits (bounded) for /moto-api/ to answer.
# - Never resets moto's state: other crates' tests share this server.
# The IAM-denial tests start their own moto (INITIAL_NO_AUTH_ACTION_COUNT) on a free
# loopback port and stop it themselves; they find `moto_server` via ANKUSA_MOTO_SERVER or PATH.
set -euo pipefail
# shellcheck source=scripts/lib/services.bash
source "$(dirname "$0")/../lib/services.bash"

port="${ANKUSA_MOTO_PORT:-4566}"
logdir="$HOME/.cache/ankusa-sinks"
mkdir -p "$logdir"
url="http://127.0.0.1:${port}/moto-api/"

if answering "$url"; then
  echo "moto: already answering on 127.0.0.1:${port}"
  exit 0
fi

py=""
for cand in python3.11 python3; do
  if command -v "$cand" >/dev/null 2>&1; then py="$cand"; break; fi
done
[ -n "$py" ] || { echo "moto: no python3 found" >&2; exit 1; }

if ! command -v moto_server >/dev/null 2>&1 \
   || ! "$py" -c 'import moto, flask, flask_cors' >/dev/null 2>&1; then
  echo "moto: installing moto, flask, flask-cors with pip"
  "$py" -m pip install --quiet 'moto[server]' flask flask-cors \
    || "$py" -m pip install --quiet --break-system-packages 'moto[server]' flask flask-cors
  hash -r
fi

server="$(command -v moto_server || true)"
if [ -z "$server" ]; then
  # pip may have put the entry point outside PATH; run the module instead.
  server_cmd=("$py" -m moto.server)
else
  server_cmd=("$server")
fi

start_and_wait moto "$logdir/moto.log" "$logdir/moto-${port}.pid" "$url" \
  "${server_cmd[@]}" -H 127.0.0.1 -p "$port"
