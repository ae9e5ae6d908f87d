#!/usr/bin/env bash
# Tools for ankusa-sink-cli's AsyncAPI test, which checks `describe` against the official
# AsyncAPI 3.0 JSON Schema: the schema from the npm package @asyncapi/specs (unpacked, no
# node_modules), and the `jsonschema` validator from PyPI in a venv. Nothing is started.
# Idempotent; the test fails with a pointer here when either is missing.
set -euo pipefail

DIR="${ANKUSA_ASYNCAPI_DIR:-$HOME/.cache/ankusa-sinks/asyncapi}"
SPECS="@asyncapi/specs@6.11.1"
PKG="jsonschema==4.26.0"
SCHEMA="$DIR/asyncapi-3.0.0.json"

mkdir -p "$DIR"
if [ -s "$SCHEMA" ]; then
  echo "asyncapi.sh: $SCHEMA present"
else
  tmp=$(mktemp -d)
  (cd "$tmp" && timeout 300 npm pack --silent "$SPECS" >/dev/null && tar xzf ./*.tgz)
  cp "$tmp/package/schemas/3.0.0-without-\$id.json" "$SCHEMA.part"
  mv "$SCHEMA.part" "$SCHEMA"
  rm -rf "$tmp"
  echo "asyncapi.sh: unpacked the AsyncAPI 3.0.0 schema of $SPECS into $SCHEMA"
fi
if "$DIR/venv/bin/python" -c 'import jsonschema' >/dev/null 2>&1; then
  echo "asyncapi.sh: $DIR/venv already has jsonschema"
else
  python3 -m venv "$DIR/venv"
  timeout 300 "$DIR/venv/bin/pip" install --quiet --disable-pip-version-check "$PKG"
  "$DIR/venv/bin/python" -c 'import jsonschema'
  echo "asyncapi.sh: installed $PKG into $DIR/venv"
fi
