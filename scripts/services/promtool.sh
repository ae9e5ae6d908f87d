#!/usr/bin/env bash
# Not a broker: promtool (Debian's `prometheus` package), for the unit tests of
# deploy/prometheus/ankusa-alerts.yml that scripts/test.sh runs. Idempotent: installs the
# package only when promtool is missing, and never leaves a Prometheus server running (the
# package would start one listening on every interface).
set -euo pipefail
# shellcheck source=scripts/lib/services.bash
source "$(dirname "$0")/../lib/services.bash"

log() { echo "[promtool.sh] $*" >&2; }

present promtool promtool --version && exit 0
log "installing prometheus (for promtool) via apt, its server not started"
# No daemon may start during the install (invoke-rc.d honours policy-rc.d).
policy=/usr/sbin/policy-rc.d
had_policy=0
if [ -e "$policy" ]; then had_policy=1; cp "$policy" "$policy.ankusa-saved"; fi
printf '#!/bin/sh\nexit 101\n' > "$policy"
chmod +x "$policy"
restore() {
    if [ "$had_policy" = 1 ]; then mv "$policy.ankusa-saved" "$policy"; else rm -f "$policy"; fi
}
trap restore EXIT
apt_install prometheus
# Whatever started anyway (no init system honours the policy) is stopped.
pkill -x prometheus 2>/dev/null || true
pkill -f prometheus-node-exporter 2>/dev/null || true
log "installed: $(promtool --version 2>&1 | head -1)"
