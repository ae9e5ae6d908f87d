#!/usr/bin/env bash
# Mosquitto (MQTT 5) on 127.0.0.1:1883, anonymous, for ankusa-sink-mqtt: idempotent;
# installs mosquitto with apt when missing; starts it loopback-only when nothing listens;
# bounded wait. Never touches a broker that already listens. The tests start private
# brokers (passwords, ACLs, limits) from the same binary.
set -euo pipefail

port="${ANKUSA_MQTT_PORT:-1883}"
log() { echo "[mosquitto.sh] $*" >&2; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }

if listening; then
    log "already listening on 127.0.0.1:${port}"
    exit 0
fi

if ! command -v mosquitto >/dev/null 2>&1 && [ ! -x /usr/sbin/mosquitto ]; then
    log "installing mosquitto via apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends mosquitto mosquitto-clients >/dev/null
fi
bin="$(command -v mosquitto || echo /usr/sbin/mosquitto)"

conf=/tmp/ankusa-mosquitto.conf
printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest file /tmp/ankusa-mosquitto.log\n' "$port" > "$conf"
log "starting mosquitto on 127.0.0.1:${port}"
"$bin" -d -c "$conf"

for _ in $(seq 1 60); do
    if listening; then
        log "ready on 127.0.0.1:${port}"
        exit 0
    fi
    sleep 0.5
done
log "mosquitto did not listen on 127.0.0.1:${port} within 30 s"
exit 1
