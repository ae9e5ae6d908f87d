#!/usr/bin/env bash
# Redis on 127.0.0.1:6379 for ankusa-sink-redis and the example third-party sink (examples/third-party-sink):
# idempotent; installs redis-server with apt when missing; starts it loopback-only when
# nothing answers; bounded wait. Never touches a Redis that already answers.
set -euo pipefail

port="${ANKUSA_REDIS_PORT:-6379}"
log() { echo "[redis.sh] $*" >&2; }

if command -v redis-cli >/dev/null 2>&1 \
    && [ "$(timeout 5 redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = "PONG" ]; then
    log "already answering on 127.0.0.1:${port}"
    exit 0
fi

if ! command -v redis-server >/dev/null 2>&1; then
    log "installing redis-server via apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
fi

log "starting redis-server on 127.0.0.1:${port}"
redis-server --bind 127.0.0.1 --port "$port" --protected-mode yes --daemonize yes \
    --save '' --logfile /tmp/ankusa-redis.log

for _ in $(seq 1 60); do
    if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = "PONG" ]; then
        log "ready on 127.0.0.1:${port}"
        exit 0
    fi
    sleep 0.5
done
log "redis did not answer on 127.0.0.1:${port} within 30 s"
exit 1
