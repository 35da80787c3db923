# Python tools named in DESIGN.md, in a virtualenv of the repository's own:
# nvdisasm and ptxas/nvcc (NVIDIA's PyPI wheels) and onnx (its test data holds
# real model topologies for reef-check-idem).
if [ ! -x "$REEF_ROOT/.venv/bin/python" ]; then
    python3 -m venv "$REEF_ROOT/.venv"
fi
"$REEF_ROOT/.venv/bin/pip" install --quiet --disable-pip-version-check \
    nvidia-cuda-nvdisasm nvidia-cuda-nvcc onnx
