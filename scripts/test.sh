#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up, check formatting and lints,
# run the fuzz targets of fuzz/ for a bounded time each (scripts/fuzz.sh,
# REEF_FUZZ_SECONDS per target, default 60; REEF_FUZZ_SECONDS=0 skips them),
# check the REEF KFD patch against Debian's Linux 6.12 source
# (scripts/check-rocm-patch.sh; REEF_CHECK_ROCM_PATCH=0 skips it), then run
# every test in the workspace.
#
# Tests that need root or /dev/fuse (the FUSE fake devices, the uid-switch
# tests) skip where those are missing, saying why. Run as root with
# /dev/fuse present (as CI is), a skip there is a failure:
# REEF_REQUIRE_HW_FAKES=1 is set unless the caller set it. Every skip is
# recorded in REEF_SKIP_LOG and counted at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh
# The suite builds once from nothing: incremental caches buy nothing there
# and cost gigabytes of disk (a CI run once stopped with "No space left on
# device"). A caller's own CARGO_INCREMENTAL is kept.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
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
# The REEF KFD patch applied to Debian's linux-source-6.12 and its amdkfd
# objects compiled (scripts/check-rocm-patch.sh; 4-6 minutes from nothing on
# CI's two shared cores, docs/hardware.md). REEF_CHECK_ROCM_PATCH=0 skips it,
# counted among the skips.
if [ "${REEF_CHECK_ROCM_PATCH:-1}" != 0 ]; then
    ./scripts/check-rocm-patch.sh
else
    echo "==> rocm-patch check skipped (REEF_CHECK_ROCM_PATCH=0): run scripts/check-rocm-patch.sh"
    echo "scripts/check-rocm-patch.sh: REEF_CHECK_ROCM_PATCH=0" >>"$REEF_SKIP_LOG"
fi
echo "==> tests (REEF_REQUIRE_HW_FAKES=${REEF_REQUIRE_HW_FAKES:-0})"
cargo test --workspace
skipped="$(wc -l <"$REEF_SKIP_LOG")"
echo "==> tests skipped: $skipped"
if [ "$skipped" -gt 0 ]; then
    sort "$REEF_SKIP_LOG" | uniq -c | sed 's/^/    /'
fi
