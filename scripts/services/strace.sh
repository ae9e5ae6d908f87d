#!/usr/bin/env bash
# Not a broker: strace, with which ankusa-claimcheck's durability test watches a local
# check-in fsync its pack and directory before the reference is returned (tests/it/
# durability.rs). Idempotent: installs the Debian package only when strace is missing.
set -euo pipefail
# shellcheck source=scripts/lib/services.bash
source "$(dirname "$0")/../lib/services.bash"

log() { echo "[strace.sh] $*" >&2; }

present strace strace -V && exit 0
log "installing strace via apt"
apt_install strace
log "installed: $(strace -V | head -1)"
