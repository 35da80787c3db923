#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ (docs/fuzzing.md) for a bounded
# time on a temporary copy of its seed corpus (fuzz/corpus/TARGET), so the
# repository's corpus never grows from a run. Fails when a target crashes,
# printing the crashing input's path and bytes; the inputs stay in
# fuzz/artifacts/TARGET/ (ignored by git) to be turned into a test.
#
#   REEF_FUZZ_SECONDS   seconds per target (default 60)
#   REEF_FUZZ_TARGETS   space-separated subset of targets (default: all)
#
# cargo-fuzz passes -Zsanitizer=address, a nightly flag. The toolchain here
# is stable and nightly cannot be installed, so RUSTC_BOOTSTRAP=1 lets the
# stable rustc take the -Z flags; the AddressSanitizer runtime it links
# ships with the stable toolchain (lib/rustlib/*/lib/librustc-stable_rt.asan.a).
# Builds also get -Cdebug-assertions (cargo-fuzz's default), so integer
# overflow panics as a crash instead of wrapping.
#
# cargo-fuzz itself is installed by scripts/setup.d/40-cargo-fuzz.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$(pwd)"
seconds="${REEF_FUZZ_SECONDS:-60}"
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz is missing; run scripts/setup.sh (scripts/setup.d/40-cargo-fuzz.sh)" >&2
    exit 1
fi
cd fuzz
targets="${REEF_FUZZ_TARGETS:-$(cargo fuzz list)}"

echo "==> fuzz: building the targets ($(cargo fuzz --version), sanitizer address)"
start=$SECONDS
cargo fuzz build -s address
echo "==> fuzz: built in $((SECONDS - start)) s"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
for t in $targets; do
    if [ ! -d "corpus/$t" ]; then
        echo "fuzz: no seed corpus fuzz/corpus/$t" >&2
        exit 1
    fi
    mkdir -p "$work/$t" "artifacts/$t"
    cp -r "corpus/$t/." "$work/$t/"
    touch "$work/stamp"
    seeds="$(find "$work/$t" -type f | wc -l)"
    echo "==> fuzz: $t for ${seconds} s from $seeds seed inputs"
    # -timeout: an input taking over 30 s is a hang, reported like a crash.
    status=0
    cargo fuzz run -s address "$t" "$work/$t" -- \
        -max_total_time="$seconds" -timeout=30 -print_final_stats=1 \
        >"$work/$t.log" 2>&1 || status=$?
    grep -E '^(Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/$t.log" \
        | sed 's/^/    /' || true
    echo "    corpus: $seeds seed inputs -> $(find "$work/$t" -type f | wc -l) after the run (discarded)"
    if [ "$status" -ne 0 ]; then
        failed+=("$t")
        echo "fuzz: $t FAILED (exit $status); the end of its log:" >&2
        tail -n 60 "$work/$t.log" >&2
        found=0
        while IFS= read -r a; do
            found=1
            echo "fuzz: $t: crashing input: $root/fuzz/$a" >&2
            echo "fuzz: $t: its bytes (base64): $(base64 -w0 "$a")" >&2
        done < <(find "artifacts/$t" -type f -newer "$work/stamp")
        [ "$found" = 1 ] || echo "fuzz: $t: no crashing input was written (see the log above)" >&2
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "==> fuzz: ${#failed[@]} target(s) failed: ${failed[*]}; reproduce with" >&2
    echo "    RUSTC_BOOTSTRAP=1 cargo fuzz run -s address TARGET fuzz/artifacts/TARGET/INPUT (in fuzz/)" >&2
    exit 1
fi
echo "==> fuzz: every target ran ${seconds} s without a crash"
