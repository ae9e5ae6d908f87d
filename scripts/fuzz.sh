#!/usr/bin/env bash
# Run every fuzz target (fuzz/fuzz_targets/) for a while each, one after the other; not
# part of CI or scripts/test.sh. Usage: scripts/fuzz.sh [SECONDS_EACH] [TARGET...]
# (default 60 s, every target). Extra cargo-fuzz build flags via FUZZ_FLAGS, e.g.
# FUZZ_FLAGS="--features all-sinks" to parse every sink type in sink_file.
#
# New inputs libFuzzer finds go to a scratch corpus outside the clone (FUZZ_CORPUS_DIR,
# default $HOME/.cache/ankusa-sinks/fuzz-corpus/<target>/; it grows to hundreds of MiB),
# seeded from the committed fuzz/corpus/<target>/, so the committed seeds stay a handful
# of real examples. A crash stops the run and is left in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

# The version this was written against: `cargo fuzz`'s flags and layout are its.
CARGO_FUZZ_VERSION=0.13.2

seconds="${1:-60}"
shift || true
case "$seconds" in
  '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS_EACH] [TARGET...]" >&2; exit 2 ;;
esac

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal

# Outside the clone, as scripts/test.sh's: nothing of a fuzz build lands in the repo.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ankusa-sinks/target-fuzz}"
export CARGO_INCREMENTAL=0

# The workspace's versions exactly: the fuzz crate's lock is derived from the root one
# (cargo adds libFuzzer and drops what the targets do not use), never kept apart to drift.
cp Cargo.lock fuzz/Cargo.lock

if (($# == 0)); then
  mapfile -t targets < <(cargo +nightly fuzz list)
else
  targets=("$@")
fi

# No sanitizer: the library forbids unsafe code, so AddressSanitizer would only slow the
# search; panics (failed invariants among them) are what the targets find.
# shellcheck disable=SC2086 # FUZZ_FLAGS is a list of flags
cargo +nightly fuzz build --sanitizer none ${FUZZ_FLAGS:-}
for t in "${targets[@]}"; do
  scratch="${FUZZ_CORPUS_DIR:-$HOME/.cache/ankusa-sinks/fuzz-corpus}/$t"
  mkdir -p "$scratch"
  printf '\n==> %s (%s s)\n' "$t" "$seconds"
  # shellcheck disable=SC2086
  cargo +nightly fuzz run --sanitizer none ${FUZZ_FLAGS:-} "$t" "$scratch" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -print_final_stats=1
done
