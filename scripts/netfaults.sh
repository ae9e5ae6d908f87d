#!/usr/bin/env bash
# Network faults against `ankusa-sink forward --from` (issue 64; figures in docs/faults.md).
# The forwarder runs in a network namespace of its own, joined to the host by two veth links:
# one to its source's broker, one to its HTTP sink. A partition is the link set down inside
# the namespace (no reset: packets stop); latency and stalls come from a userspace relay
# (this kernel has no netem). Each case is scripts/netfaults.py; this script makes and
# always removes the namespace, the links and the processes.
#
#   scripts/netfaults.sh quick     one 8 s partition of a NATS source (~30 s; scripts/test.sh)
#   scripts/netfaults.sh full      30 s partitions of a NATS, a RabbitMQ and a Kafka source
#                                  and of the sink; 200 ms latency with 5 % of connections
#                                  stalled for a minute; a 45 s partition past a 15 s ack_wait
#                                  while a second forwarder on the host takes over (~10 min)
#   scripts/netfaults.sh CASE [netfaults.py flags...]   one case (see netfaults.py)
#
# Skips (exit 0, one line) where namespaces cannot be made: not root, no `ip netns`, or no
# nats-server / interop venv. Env: ANKUSA_SINK_BIN (default: the debug build in
# $CARGO_TARGET_DIR), ANKUSA_INTEROP_VENV, ANKUSA_AMQP_URL.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-quick}"
shift || true
skip() { echo "SKIP netfaults: $*"; exit 0; }

[ "$(id -u)" = 0 ] || skip "needs root to make network namespaces"
command -v ip >/dev/null || skip "no ip(8)"
command -v nats-server >/dev/null || skip "no nats-server"
venv="${ANKUSA_INTEROP_VENV:-$HOME/.cache/ankusa-sinks/interop/venv}"
py="$venv/bin/python"
[ -x "$py" ] || skip "no interop venv at $venv (scripts/services/interop.sh)"

target="${CARGO_TARGET_DIR:-$HOME/.cache/ankusa-sinks/target}"
bin="${ANKUSA_SINK_BIN:-$target/debug/ankusa-sink}"
if [ -z "${ANKUSA_SINK_BIN:-}" ]; then
  cargo build -q -p ankusa-sink-cli --all-features --locked
fi
[ -x "$bin" ] || { echo "netfaults: no binary at $bin" >&2; exit 1; }

# Names and addresses unique to this run: a /30 per link in 10.200/10.201.
n=$(( $$ % 250 + 1 ))
ns="ankf$$"
src_h="ankfs$$h" src_n="ankfs$$n" sink_h="ankfk$$h" sink_n="ankfk$$n"
src_host="10.200.$n.1" sink_host="10.201.$n.1"
work="$(mktemp -d /tmp/netfaults.XXXXXX)"
keep_work="${NETFAULTS_KEEP:-}"

case_pid=
cleanup() {
  # The forwarder and every helper are children of netfaults.py, which kills them on
  # SIGTERM; any left inside the namespace are killed by pid before it goes.
  if [ -n "$case_pid" ]; then
    kill "$case_pid" 2>/dev/null || true
    wait "$case_pid" 2>/dev/null || true
  fi
  local pids
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  ip link del "$src_h" 2>/dev/null || true
  ip link del "$sink_h" 2>/dev/null || true
  if [ -z "$keep_work" ]; then rm -rf "$work"; else echo "netfaults: kept $work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$ns" 2>/dev/null || skip "ip netns add failed (no network namespaces here)"
ip -n "$ns" link set lo up
link() { # host-end ns-end host-addr ns-addr
  ip link add "$1" type veth peer name "$2" &&
    ip link set "$2" netns "$ns" &&
    ip addr add "$3/30" dev "$1" &&
    ip link set "$1" up &&
    ip -n "$ns" addr add "$4/30" dev "$2" &&
    ip -n "$ns" link set "$2" up
}
link "$src_h" "$src_n" "$src_host" "10.200.$n.2" || skip "cannot make a veth link here"
link "$sink_h" "$sink_n" "$sink_host" "10.201.$n.2" || skip "cannot make a veth link here"

# Kafka: a tansu of the run's own (installed by scripts/services/kafka.sh); without it the
# Kafka case is left out with a line saying so.
tansu=$(bash scripts/services/kafka.sh bin 2>/dev/null || true)

run_case() { # case [flags...]
  local c="$1"; shift
  local d="$work/$c"
  mkdir -p "$d"
  echo "==> netfaults: $c $*"
  # In the background and waited for, so a signal to this script runs the trap at once
  # (the trap stops the case, which stops what it started).
  "$py" scripts/netfaults.py --case "$c" --bin "$bin" --ns "$ns" \
    --src-host "$src_host" --sink-host "$sink_host" --src-link "$src_n" --sink-link "$sink_n" \
    --dir "$d" ${tansu:+--tansu "$tansu"} "$@" &
  case_pid=$!
  local rc=0
  wait "$case_pid" || rc=$?
  case_pid=
  return "$rc"
}

status=0
case "$mode" in
  quick)
    run_case nats-source --hooks 200 --publish-s 12 --cut-at 3 --cut-s 8 --ack-wait-ms 10000 \
      --recover-limit 60 || status=1 ;;
  full)
    run_case nats-source "$@" || status=1
    run_case amqp-source "$@" || status=1
    if [ -n "$tansu" ]; then
      run_case kafka-source "$@" || status=1
    else
      echo "SKIP netfaults kafka-source: no tansu (scripts/services/kafka.sh)"
    fi
    run_case nats-sink "$@" || status=1
    run_case latency --publish-s 90 --recover-limit 120 "$@" || status=1
    run_case nats-takeover --cut-s 45 --ack-wait-ms 15000 "$@" || status=1 ;;
  *)
    run_case "$mode" "$@" || status=1 ;;
esac
exit "$status"
