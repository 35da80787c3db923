#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, then on the simulated MI50
# (1) compare simulated with measured stand-alone model latencies and
# (2) run DISB workload A under every scheduling policy side by side.
# Extra arguments go to `reef-bench disb` (e.g. --json, --policy reef,wait).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh
cargo build --release --workspace
./target/release/reef-bench standalone
exec ./target/release/reef-bench disb A "$@"
