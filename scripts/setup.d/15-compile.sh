# reef-compile (issue 14, docs/compile.md): Apache TVM from PyPI compiles ONNX
# models to CUDA C (then PTX with the nvcc of 10-python.sh). Pinned: the 0.27
# API (dict targets, relax.frontend.onnx, s_tir.dlight) is what
# compile/reef_compile uses. Measured on the 2-core build machine (busy with
# other builds): installing it into an empty venv from cached wheels took
# 34 s and adds 320 MB; with it installed, setup.sh reruns in 5 s.
#
# apache-tvm-ffi pinned too (issue 31 item 3, docs/compile.md "Tensor
# cores"): apache-tvm 0.27.0.post1 asks for apache-tvm-ffi>=0.1.14.post0, so
# pip takes the newest, and with 0.1.15.post2 `Schedule.tensorize` dies with
# SIGSEGV inside tvm_ffi::ToJSONGraph (gdb backtrace: s_tir::Tensorize ->
# libtvm_ffi.so), on any intrinsic. With 0.1.14.post0 or 0.1.14.post1, the
# releases the wheel was built against, it works and dlight's wmma schedule
# builds (compile/tests/tensorcore_probe.py).
"$REEF_ROOT/.venv/bin/pip" install --quiet --disable-pip-version-check \
    "apache-tvm==0.27.0.post1" "apache-tvm-ffi==0.1.14.post1"
# ONNX Runtime: the reference independent of TVM that the CPU builds of the
# compiled kernels are checked against (issue 30, docs/compile.md "CPU
# build"; cargo test -p reef-cpu-kernels). Pinned so the compared numbers do
# not move under the tests; 1.23.2 has wheels for the venv's Python 3.11 and
# works with the numpy 2 apache-tvm pulls in.
"$REEF_ROOT/.venv/bin/pip" install --quiet --disable-pip-version-check \
    "onnxruntime==1.23.2"
# The compiler runs from the repository's source (like an editable install,
# without needing setuptools' wheel support): a .pth puts compile/ on the
# venv's path and .venv/bin/reef-compile is its entry point.
for reef_site in "$REEF_ROOT"/.venv/lib/python3*/site-packages; do
    echo "$REEF_ROOT/compile" > "$reef_site/reef_compile.pth"
done
unset reef_site
cat > "$REEF_ROOT/.venv/bin/reef-compile" <<PY
#!$REEF_ROOT/.venv/bin/python
import sys
from reef_compile.cli import main
sys.exit(main())
PY
chmod +x "$REEF_ROOT/.venv/bin/reef-compile"
# sm_70 (Volta, the paper's GV100; issue 31 item 2): CUDA 13 dropped it (its
# ptxas accepts sm_75 and later), and PyPI's CUDA 12 nvcc wheel ships ptxas
# but neither nvcc nor cicc. reef-compile therefore turns TVM's CUDA C into
# sm_70 PTX with NVRTC 12.9 (libnvrtc, loaded with ctypes) and assembles it
# with ptxas 12.9 for its resources (compile/reef_compile/nvidia.py). NVRTC
# defines __CUDACC_RTC__, under which TVM's CUDA C includes
# <cuda/std/cstdint> and <cuda/std/type_traits> (libcu++, in the CCCL
# wheel). The three wheels go to their own prefix, .tools/cuda-12.9, not
# into .venv: beside nvidia/cu13 their nvidia/cuda_nvcc/bin/ptxas would be
# found by every lookup of `nvidia/*/bin/ptxas` (the reef-trap tests take
# the last in name order), and ptxas 12.9 refuses CUDA 13's PTX (ISA 9.x).
# Used for sm_70 only. Pinned: 12.9 is the last CUDA release with Volta.
# Measured: 330 MB unpacked (libnvrtc 217 MB, ptxas and libnvvm 95 MB,
# CCCL 17 MB).
reef_cu12="$REEF_ROOT/.tools/cuda-12.9"
reef_cu12_pins="nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-cccl-cu12==12.9.27"
if [ "$(cat "$reef_cu12/.pins" 2>/dev/null)" != "$reef_cu12_pins" ]; then
    rm -rf "$reef_cu12"
    # shellcheck disable=SC2086 # the pins are separate arguments
    "$REEF_ROOT/.venv/bin/pip" install --quiet --disable-pip-version-check \
        --no-deps --target "$reef_cu12" $reef_cu12_pins
    echo "$reef_cu12_pins" > "$reef_cu12/.pins"
fi
unset reef_cu12 reef_cu12_pins
