#!/usr/bin/env bash
# Services for ankusa-sink-http's tests. The tests run their own HTTP(S) servers on
# 127.0.0.1:0 inside the test process, so nothing is started here. This only installs the
# independent Standard Webhooks verifier (PyPI `standardwebhooks`) into a venv that the
# signature test calls. Idempotent; a missing python3 is not an error (that test then skips
# and says why).
set -euo pipefail

VENV="${ANKUSA_HTTP_VENV:-$HOME/.cache/ankusa-sinks/http-venv}"
PKG="standardwebhooks==1.1.0"

if ! command -v python3 >/dev/null 2>&1; then
  echo "http.sh: python3 not found; the standardwebhooks cross-check will be skipped" >&2
  exit 0
fi
if "$VENV/bin/python" -c 'import standardwebhooks' >/dev/null 2>&1; then
  echo "http.sh: $VENV already has standardwebhooks"
  exit 0
fi
mkdir -p "$(dirname "$VENV")"
python3 -m venv "$VENV"
timeout 300 "$VENV/bin/pip" install --quiet --disable-pip-version-check "$PKG"
"$VENV/bin/python" -c 'import standardwebhooks'
echo "http.sh: installed $PKG into $VENV"
