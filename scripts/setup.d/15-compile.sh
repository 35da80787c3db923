# reef-compile (issue 14, docs/compile.md): Apache TVM from PyPI compiles ONNX
# models to CUDA C (then PTX with the nvcc of 10-python.sh). Pinned: the 0.27
# API (dict targets, relax.frontend.onnx, s_tir.dlight) is what
# compile/reef_compile uses. Measured on the 2-core build machine (busy with
# other builds): installing it into an empty venv from cached wheels took
# 34 s and adds 320 MB; with it installed, setup.sh reruns in 5 s.
"$REEF_ROOT/.venv/bin/pip" install --quiet --disable-pip-version-check \
    "apache-tvm==0.27.0.post1"
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
