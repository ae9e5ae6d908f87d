#!/usr/bin/env bash
# Install (if missing), configure loopback-only and start (if not running) RabbitMQ for the
# ankusa-sink-amqp tests. Idempotent; bounded waits; exits 0 when the broker is ready on
# 127.0.0.1:5672 (guest/guest, which RabbitMQ only allows from loopback).
set -euo pipefail

READY_TIMEOUT_S="${RABBITMQ_READY_TIMEOUT_S:-90}"

log() { echo "[rabbitmq.sh] $*" >&2; }

if ! command -v rabbitmq-server >/dev/null 2>&1 || ! command -v rabbitmqctl >/dev/null 2>&1; then
    log "installing rabbitmq-server via apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # policy-rc.d keeps the Debian postinst from starting the broker on 0.0.0.0 before
    # the loopback-only config below is in place.
    created_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        created_policy=1
    fi
    apt-get install -y -qq --no-install-recommends rabbitmq-server >/dev/null
    if [ "$created_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

# Loopback only (see /work/shared/services/README.md).
mkdir -p /etc/rabbitmq
want_env='NODENAME=rabbit@localhost
NODE_IP_ADDRESS=127.0.0.1
export ERL_EPMD_ADDRESS=127.0.0.1
SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"'
# Keep an existing config that already pins the node to loopback (the machine image's).
if ! grep -q '^NODENAME=rabbit@localhost' /etc/rabbitmq/rabbitmq-env.conf 2>/dev/null \
    || ! grep -q 'ERL_EPMD_ADDRESS=127.0.0.1' /etc/rabbitmq/rabbitmq-env.conf 2>/dev/null; then
    log "writing /etc/rabbitmq/rabbitmq-env.conf"
    printf '%s\n' "$want_env" >/etc/rabbitmq/rabbitmq-env.conf
fi
if ! grep -Eq '^listeners\.tcp\.[a-z]+ *= *127\.0\.0\.1:5672' /etc/rabbitmq/rabbitmq.conf 2>/dev/null; then
    log "writing /etc/rabbitmq/rabbitmq.conf"
    printf 'listeners.tcp.default = 127.0.0.1:5672\n' >/etc/rabbitmq/rabbitmq.conf
fi
export ERL_EPMD_ADDRESS=127.0.0.1

if timeout 15 rabbitmqctl -q ping >/dev/null 2>&1; then
    # The node is up; the app may have been stopped (stop_app) by an interrupted test.
    running="$(timeout 15 rabbitmqctl -q eval 'rabbit:is_running().' 2>/dev/null || echo false)"
    if [ "$running" != "true" ]; then
        log "node up but app not running: start_app"
        timeout 60 rabbitmqctl -q start_app >/dev/null 2>&1 || true
    fi
else
    log "starting rabbitmq-server -detached"
    rabbitmq-server -detached >/dev/null 2>&1 || true
fi

deadline=$((SECONDS + READY_TIMEOUT_S))
until timeout 20 rabbitmqctl -q await_startup >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        log "RabbitMQ not ready after ${READY_TIMEOUT_S}s"
        exit 1
    fi
    sleep 1
done

# A test killed mid-way may have left the memory alarm on; the default watermark is 0.4.
wm="$(timeout 15 rabbitmqctl -q eval 'vm_memory_monitor:get_vm_memory_high_watermark().' 2>/dev/null || echo '')"
if [ "$wm" = "0.0" ] || [ "$wm" = "0" ]; then
    log "restoring vm_memory_high_watermark 0.4"
    timeout 15 rabbitmqctl -q set_vm_memory_high_watermark 0.4 >/dev/null
fi

# Likewise the lowered max_message_size of the broker_refusing_the_size test (default 128 MiB).
mms="$(timeout 15 rabbitmqctl -q eval 'application:get_env(rabbit, max_message_size).' 2>/dev/null || echo '')"
if [ "$mms" = "{ok,4096}" ]; then
    log "restoring max_message_size 134217728"
    timeout 15 rabbitmqctl -q eval 'application:set_env(rabbit, max_message_size, 134217728).' >/dev/null
fi

# Wait for the AMQP port itself.
until (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        log "port 127.0.0.1:5672 not open after ${READY_TIMEOUT_S}s"
        exit 1
    fi
    sleep 0.5
done
log "ready on 127.0.0.1:5672"
