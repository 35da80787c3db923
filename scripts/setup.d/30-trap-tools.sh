# Tools the reef-trap tests check generated machine code with (issue 6):
# LLVM 14's llvm-mc for the AMDGPU disassembler (Debian package llvm-14),
# g++ as nvcc's host compiler, make and git. NVIDIA's nvdisasm/ptxas/nvcc
# come from the PyPI wheels installed by 10-python.sh. Installs only what is missing and
# never touches the apt sources.
reef_trap_missing=()
if ! [ -x /usr/lib/llvm-14/bin/llvm-mc ] && ! command -v llvm-mc-14 >/dev/null 2>&1; then
    reef_trap_missing+=(llvm-14)
fi
if ! command -v g++ >/dev/null 2>&1 || ! command -v cc >/dev/null 2>&1; then
    reef_trap_missing+=(g++ gcc)
fi
# nvbit-tool's Makefile (`make device`) and the patch checks (`git apply`).
if ! command -v make >/dev/null 2>&1; then
    reef_trap_missing+=(make)
fi
if ! command -v git >/dev/null 2>&1; then
    reef_trap_missing+=(git)
fi
if [ "${#reef_trap_missing[@]}" -gt 0 ]; then
    echo "installing ${reef_trap_missing[*]} for the reef-trap tests"
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq && apt-get install -y -qq "${reef_trap_missing[@]}"
    else
        sudo apt-get update -qq && sudo apt-get install -y -qq "${reef_trap_missing[@]}"
    fi
fi
unset reef_trap_missing
# The KFD UAPI header the rocm-patch test applies the REEF patch to.
if ! [ -f /usr/include/linux/kfd_ioctl.h ]; then
    echo "installing linux-libc-dev for the rocm-patch test"
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq && apt-get install -y -qq linux-libc-dev
    else
        sudo apt-get update -qq && sudo apt-get install -y -qq linux-libc-dev
    fi
fi
