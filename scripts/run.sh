#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, and run the simulated MI50
# against the measured data in ../shared. Extra arguments go to reef-bench.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh
cargo build --release --workspace
exec ./target/release/reef-bench standalone "$@"
