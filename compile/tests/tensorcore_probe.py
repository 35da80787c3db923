"""What TVM 0.27's dlight Matmul rule does with an fp16 GEMM on sm_80 and
later (issue 31 item 3, step 2: latency-critical models with tensor-core
schedules). Prints one JSON object; docs/compile.md "Tensor cores" reads it.

1. *The decision.* `dlight.gpu.Matmul.apply` hands a matmul to
   `MatmulTensorization` (wmma 16x16x16, fp16 inputs, f32 or f16
   accumulator) when the target is CUDA with `arch` sm_70 or later, the
   inputs are float16 and every non-batch extent is above 64
   (tvm/s_tir/dlight/gpu/matmul.py, `Matmul.apply`, "Step 1. Check Tensor
   Core support"). Probed here with `MatmulTensorization.apply` replaced by
   a recorder that declines, so the CUDA-core fallback is what gets built.
2. *The fallback's PTX.* That schedule compiled by TVM's CUDA codegen and
   the venv's nvcc (`-ptx -arch=ARCH`): the count of tensor-core
   instructions (`mma.sync`, `wmma.mma`, `wgmma`) in it.
3. *The tensorization itself.* `Schedule.tensorize` in a child process,
   first on dlight's own wmma path and then on a trivial 4-element copy
   intrinsic registered here: the child's exit status (a negative number
   is the signal that killed it; -11 = SIGSEGV). With apache-tvm-ffi
   0.1.15.post2 beside apache-tvm 0.27.0.post1 both died with SIGSEGV in
   tvm_ffi::ToJSONGraph; the setup pins apache-tvm-ffi 0.1.14.post1
   (scripts/setup.d/15-compile.sh).
4. *The tensorized kernel.* dlight's schedule with tensorization allowed,
   built the same way: its PTX's tensor-core instruction count, and
   whether `ptxas -arch=ARCH` assembles it.

Usage: tensorcore_probe.py [ARCH ...]   (default sm_80 sm_89)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# CCCL headers of the CUDA 12.9 wheels the setup puts beside the venv for
# sm_70 (issue 31 item 2), if present.
CCCL = Path(__file__).resolve().parents[2] / ".tools/cuda-12.9/nvidia/cuda_cccl/include"

TC_INSTR = re.compile(r"\b(mma\.sync|wmma\.mma|wgmma\.mma_async)\b")


def matmul(m: int, k: int, n: int, dtype: str):
    import tvm
    from tvm import te

    a = te.placeholder((m, k), dtype, name="A")
    b = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    f = te.create_prim_func([a, b, c]).with_attr("global_symbol", "mm")
    return tvm.IRModule({"mm": f})


def tensorized(arch: str) -> dict:
    """dlight's wmma schedule of a 256x1024x1024 fp16 GEMM: PTX tensor-core
    instruction count and ptxas's verdict."""
    import tvm
    import tvm.s_tir.dlight as dl

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from reef_compile import nvidia

    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    with target:
        sched = dl.ApplyDefaultSchedule(dl.gpu.Matmul())(matmul(256, 1024, 1024, "float16"))
    cu = tvm.tirx.build(sched, target=target).imports[0].inspect_source()
    with tempfile.TemporaryDirectory() as d:
        src, ptx = Path(d, "k.cu"), Path(d, "k.ptx")
        src.write_text(cu)
        nvidia.cuda_to_ptx(src, ptx, arch)
        text = ptx.read_text()
        p = subprocess.run(
            [str(nvidia.bin_dir() / "ptxas"), f"-arch={arch}", str(ptx), "-o", str(Path(d, "k.cubin"))],
            capture_output=True,
            text=True,
        )
    return {
        "tc_instructions": len(TC_INSTR.findall(text)),
        "mma_per_entry": nvidia.mma_counts(text),
        "ptxas_exit": p.returncode,
    }


def decision(arch: str, m: int, k: int, n: int, dtype: str) -> tuple[bool, int | str]:
    """Whether dlight asks for tensorization, and the tensor-core
    instruction count of the PTX it then builds (the fallback)."""
    import tvm
    import tvm.s_tir.dlight as dl
    from tvm.s_tir.dlight.gpu import matmul as mm

    asked = []
    orig = mm.MatmulTensorization.apply
    mm.MatmulTensorization.apply = lambda self, *a, **kw: asked.append(True)  # declines
    try:
        target = tvm.target.Target({"kind": "cuda", "arch": arch})
        with target:
            sched = dl.ApplyDefaultSchedule(dl.gpu.Matmul())(matmul(m, k, n, dtype))
        lib = tvm.tirx.build(sched, target=target)
        cu = lib.imports[0].inspect_source()
    finally:
        mm.MatmulTensorization.apply = orig
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from reef_compile import nvidia

    with tempfile.TemporaryDirectory() as d:
        src, ptx = Path(d, "k.cu"), Path(d, "k.ptx")
        src.write_text(cu)
        # cuda_fp16.h includes CCCL's <nv/target>, which PyPI's
        # nvidia-cuda-nvcc does not ship (docs/compile.md "Tensor cores").
        args = ["-ptx", f"-arch={arch}", "-O3", "-o", str(ptx), str(src)]
        if CCCL.is_dir():
            args = ["-I", str(CCCL)] + args
        p = subprocess.run([str(nvidia.bin_dir() / "nvcc")] + args, capture_output=True, text=True)
        if p.returncode != 0:
            return bool(asked), "nvcc: " + next(
                (l for l in p.stderr.splitlines() if "error" in l), p.stderr.strip()[:200]
            )
        n_tc = len(TC_INSTR.findall(ptx.read_text()))
    return bool(asked), n_tc


CHILD_DLIGHT = """
import tvm, tvm.s_tir.dlight as dl, sys
sys.path.insert(0, {here!r})
from tensorcore_probe import matmul
t = tvm.target.Target({{"kind": "cuda", "arch": {arch!r}}})
with t:
    dl.ApplyDefaultSchedule(dl.gpu.Matmul())(matmul(256, 1024, 1024, "float16"))
"""

CHILD_TRIVIAL = """
import tvm, tvm.s_tir as s_tir
from tvm.script import tirx as T
@T.prim_func(s_tir=True)
def desc(A: T.Buffer((4,), "float32", offset_factor=1), C: T.Buffer((4,), "float32", offset_factor=1)):
    with T.sblock("root"):
        T.reads(A[0:4]); T.writes(C[0:4])
        for i in range(4):
            with T.sblock("copy"):
                vi = T.axis.remap("S", [i])
                C[vi] = A[vi]
@T.prim_func(s_tir=True)
def impl(A: T.Buffer((4,), "float32", offset_factor=1), C: T.Buffer((4,), "float32", offset_factor=1)):
    with T.sblock("root"):
        T.reads(A[0:4]); T.writes(C[0:4])
        T.evaluate(T.call_extern("int32", "copy4", C.data, A.data))
s_tir.TensorIntrin.register("probe_copy4", desc, impl)
@T.prim_func(s_tir=True)
def f(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("copy"):
            vi = T.axis.remap("S", [i])
            C[vi] = A[vi]
sch = s_tir.Schedule(f)
(i,) = sch.get_loops(sch.get_sblock("copy"))
_, ii = sch.split(i, [None, 4])
sch.tensorize(ii, "probe_copy4")
"""


def child(code: str) -> int:
    # From a file: TVMScript reads the decorated function's source.
    with tempfile.TemporaryDirectory() as d:
        f = Path(d, "child.py")
        f.write_text(code)
        p = subprocess.run([sys.executable, str(f)], capture_output=True, text=True)
    if p.returncode > 0:
        sys.stderr.write(p.stderr[-2000:])
    return p.returncode


def main() -> None:
    import tvm

    archs = sys.argv[1:] or ["sm_80", "sm_89"]
    here = str(Path(__file__).resolve().parent)
    import tvm_ffi

    out = {"tvm": tvm.__version__, "tvm_ffi": tvm_ffi.__version__, "cases": [], "tensorize_exit": {},
           "tensorized": {}}
    for arch in archs:
        for m, k, n, dt in [
            (256, 1024, 1024, "float16"),
            (64, 1024, 1024, "float16"),
            (256, 1024, 1024, "float32"),
        ]:
            asked, n_tc = decision(arch, m, k, n, dt)
            out["cases"].append(
                {"arch": arch, "mkn": [m, k, n], "dtype": dt, "tensorize_asked": asked,
                 "fallback_tc_instructions": n_tc}
            )
        out["tensorize_exit"][f"dlight_{arch}"] = child(CHILD_DLIGHT.format(here=here, arch=arch))
        if out["tensorize_exit"][f"dlight_{arch}"] == 0:
            out["tensorized"][arch] = tensorized(arch)
    out["tensorize_exit"]["trivial_copy4"] = child(CHILD_TRIVIAL)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
