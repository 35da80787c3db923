#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up, check formatting and lints,
# then run every test in the workspace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
