#!/usr/bin/env bash
# The Python baseline's venv for scripts/bench_pipeline.py (issue 21): confluent-kafka in
# $HOME/.cache/ankusa-sinks/venv-bench. Idempotent; installs from PyPI only (a manylinux
# wheel, nothing is compiled). Prints the venv's python path on stdout.
#
#   bash scripts/bench/setup_venv.sh
#
# confluent-kafka 2.12.2 bundles librdkafka 2.12.1; the Kafka sink links librdkafka 2.12 (rdkafka
# 0.39 bundled), so both sides of the benchmark run the same Kafka client underneath.
set -euo pipefail

VERSION=2.12.2
VENV="$HOME/.cache/ankusa-sinks/venv-bench"
PY=${PYTHON:-python3}

say() { echo "setup_venv.sh: $*" >&2; }

have() {
  [ -x "$VENV/bin/python" ] &&
    "$VENV/bin/python" -c "import sys, confluent_kafka, importlib.metadata as m; sys.exit(m.version('confluent-kafka') != '$VERSION')" 2>/dev/null
}

if ! have; then
  mkdir -p "$(dirname "$VENV")"
  [ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PY" -m venv "$VENV"; }
  say "installing confluent-kafka==$VERSION (wheel only) into $VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --only-binary=:all: "confluent-kafka==$VERSION"
  have || { say "confluent-kafka $VERSION did not import from $VENV"; exit 1; }
fi
echo "$VENV/bin/python"
