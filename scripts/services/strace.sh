#!/usr/bin/env bash
# Not a broker: strace, with which ankusa-claimcheck's durability test watches a local
# check-in fsync its pack and directory before the reference is returned (tests/it/
# durability.rs). Idempotent: installs the Debian package only when strace is missing.
set -euo pipefail

log() { echo "[strace.sh] $*" >&2; }

if command -v strace >/dev/null 2>&1; then
    log "already installed: $(strace -V | head -1)"
    exit 0
fi

log "installing strace via apt"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends strace >/dev/null
log "installed: $(strace -V | head -1)"
