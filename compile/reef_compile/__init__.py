"""reef-compile: ONNX models to real GPU code for reef (issue 14).

The REEF model compiler (REEF §3 "model compiler", §5.2; the schedule format
of ../shared/models is TVM's): an ONNX graph is imported by Apache TVM's
Relax frontend, scheduled for CUDA with dlight, lowered to CUDA C, compiled
to PTX per architecture by nvcc, and assembled by ptxas for its resource
report; for AMD architectures (gfx906, gfx90a; issue 29) TVM's ROCm code
generation writes a code object per architecture for the same schedule,
its resources read from the AMDHSA metadata (amd.py). The output is a model
directory reef-model loads (docs/compile.md).
"""

__version__ = "0.1.0"
