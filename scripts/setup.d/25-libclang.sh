# libclang for bindgen (ioctl/bindgen-check's build script generates the REEF
# KFD patch's layouts from the patched 6.12 kfd_ioctl.h; REEF §4.5): Debian's
# libclang1-14, loaded at run time by bindgen's "runtime" feature, and
# libclang-common-14-dev for clang's own headers. Installs only what is
# missing and never touches the apt sources.
reef_clang_missing=()
if ! compgen -G '/usr/lib/x86_64-linux-gnu/libclang-14.so*' >/dev/null \
    && ! compgen -G '/usr/lib/llvm-14/lib/libclang.so*' >/dev/null; then
    reef_clang_missing+=(libclang1-14)
fi
if ! compgen -G '/usr/lib/llvm-14/lib/clang/*/include/stddef.h' >/dev/null; then
    reef_clang_missing+=(libclang-common-14-dev)
fi
if [ "${#reef_clang_missing[@]}" -gt 0 ]; then
    echo "    installing: ${reef_clang_missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${reef_clang_missing[@]}" >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${reef_clang_missing[@]}" >/dev/null; }
fi
echo "    libclang: $(find /usr/lib/llvm-14/lib /usr/lib/x86_64-linux-gnu -maxdepth 1 -name 'libclang*.so.1' 2>/dev/null | head -n1)"
unset reef_clang_missing
