# reef-compile --arch gfx906 / gfx90a (issue 29, docs/compile.md "AMD GPUs"):
# TVM's ROCm code generation links ROCm's device library bitcode (Debian's
# rocm-device-libs, under /usr/lib/x86_64-linux-gnu/amdgcn/bitcode) and links
# the code object with ld.lld-19 (lld-15 refuses it: "unknown abi version");
# llvm-readelf-19 reads each kernel's resources from the code object's
# AMDHSA metadata, llvm-objdump-19 disassembles it. All three are in
# bookworm's main archive (LLVM 19.1.7, ROCm 5.2.3), no backports needed.
#
# Sourced by scripts/setup.sh; idempotent, quiet when everything is there.
reef_missing=()
[ -f /usr/lib/x86_64-linux-gnu/amdgcn/bitcode/ocml.bc ] || reef_missing+=(rocm-device-libs)
command -v ld.lld-19 >/dev/null 2>&1 || reef_missing+=(lld-19)
{ command -v llvm-readelf-19 >/dev/null 2>&1 && command -v llvm-objdump-19 >/dev/null 2>&1; } \
    || reef_missing+=(llvm-19)
if [ "${#reef_missing[@]}" -gt 0 ]; then
    echo "    installing: ${reef_missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${reef_missing[@]}" >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${reef_missing[@]}" >/dev/null; }
fi
unset reef_missing
