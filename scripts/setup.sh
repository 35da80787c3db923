#!/usr/bin/env bash
# Installs everything the build and the test suite need, idempotently.
# Each part lives in scripts/setup.d/*.sh and is sourced in name order with
# REEF_ROOT set to the repository root. Tools land in $REEF_ROOT/.tools and
# the Python virtualenv in $REEF_ROOT/.venv; the system's apt sources are
# never changed.
set -euo pipefail
REEF_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export REEF_ROOT
mkdir -p "$REEF_ROOT/.tools"
for part in "$REEF_ROOT"/scripts/setup.d/*.sh; do
    [ -e "$part" ] || continue
    echo "==> setup: $(basename "$part")"
    # shellcheck source=/dev/null
    source "$part"
done
echo "==> setup: done"
