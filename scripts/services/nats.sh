#!/usr/bin/env bash
# NATS with JetStream on 127.0.0.1:4222 for ankusa-sink-nats: idempotent; installs the
# Debian nats-server package when missing; starts it loopback-only with JetStream (-js),
# its store under $HOME/.cache/ankusa-sinks/nats, when nothing answers; bounded wait.
# Never touches a server that already answers.
set -euo pipefail

port="${ANKUSA_NATS_PORT:-4222}"
store="${HOME}/.cache/ankusa-sinks/nats"
log() { echo "[nats.sh] $*" >&2; }

# A NATS server greets every connection with an INFO line.
answers() {
    timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/${port} && head -c 4 <&3" 2>/dev/null \
        | grep -q '^INFO'
}

if answers; then
    log "already answering on 127.0.0.1:${port}"
    exit 0
fi

if ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ]; then
    log "installing nats-server via apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nats-server >/dev/null
fi
bin="$(command -v nats-server || echo /usr/sbin/nats-server)"

mkdir -p "$store"
log "starting nats-server with JetStream on 127.0.0.1:${port} (store ${store})"
setsid nohup "$bin" -a 127.0.0.1 -p "$port" -js -sd "$store" >/tmp/ankusa-nats.log 2>&1 &

for _ in $(seq 1 60); do
    if answers; then
        log "ready on 127.0.0.1:${port}"
        exit 0
    fi
    sleep 0.5
done
log "nats-server did not answer on 127.0.0.1:${port} within 30 s"
exit 1
