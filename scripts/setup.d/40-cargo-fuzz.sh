# cargo-fuzz for scripts/fuzz.sh (the libFuzzer targets in fuzz/,
# docs/fuzzing.md). Pinned, built from crates.io with its own lock file;
# installed only when this version is missing. Measured on the 2-core build
# machine while other builds ran: 1 min 31 s.
reef_cargo_fuzz_version=0.13.1
if ! cargo fuzz --version 2>/dev/null | grep -qx "cargo-fuzz $reef_cargo_fuzz_version"; then
    echo "    installing cargo-fuzz $reef_cargo_fuzz_version"
    cargo install --locked --quiet cargo-fuzz --version "$reef_cargo_fuzz_version"
fi
echo "    $(cargo fuzz --version)"
unset reef_cargo_fuzz_version
