#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up, check formatting and lints,
# run the fuzz targets of fuzz/ for a bounded time each (scripts/fuzz.sh,
# REEF_FUZZ_SECONDS per target, default 60; REEF_FUZZ_SECONDS=0 skips them),
# then run every test in the workspace.
#
# Tests that need root or /dev/fuse (the FUSE fake devices, the uid-switch
# tests) skip where those are missing, saying why. Run as root with
# /dev/fuse present (as CI is), a skip there is a failure:
# REEF_REQUIRE_HW_FAKES=1 is set unless the caller set it. Every skip is
# recorded in REEF_SKIP_LOG and counted at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh
cargo fmt --all -- --check
# The fuzz crate is outside the workspace; its formatting is checked too.
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
cargo clippy --workspace --all-targets -- -D warnings
# Before the tests, so that cargo test's summary stays the run's last lines.
if [ "${REEF_FUZZ_SECONDS:-60}" != 0 ]; then
    ./scripts/fuzz.sh
fi
if [ "$(id -u)" = 0 ] && [ -c /dev/fuse ]; then
    export REEF_REQUIRE_HW_FAKES="${REEF_REQUIRE_HW_FAKES:-1}"
fi
REEF_SKIP_LOG="$(mktemp)"
export REEF_SKIP_LOG
trap 'rm -f "$REEF_SKIP_LOG"' EXIT
echo "==> tests (REEF_REQUIRE_HW_FAKES=${REEF_REQUIRE_HW_FAKES:-0})"
cargo test --workspace
skipped="$(wc -l <"$REEF_SKIP_LOG")"
echo "==> tests skipped: $skipped"
if [ "$skipped" -gt 0 ]; then
    sort "$REEF_SKIP_LOG" | uniq -c | sed 's/^/    /'
fi
