"""Aker's best-effort kernels (Aker §3.1 Fig. 3, §9.2 Table 2) described
from Parboil's public CUDA source as reef model schedules (issue 31 item 3,
step 3; bench/aker-be/README.md).

    make.py PARBOIL_DIR [OUT_DIR]

PARBOIL_DIR is a checkout of github.com/yuhc/gpu-parboil (the Parboil 2.5
CUDA sources; `fetch github:yuhc/gpu-parboil`, commit ccf3d31). For each
kernel the script compiles the benchmark's CUDA file with the venv's nvcc
(`-ptx -arch=sm_89`, Ada) and reads `ptxas -v` (registers, static shared
memory, spills); counts the kernel's floating-point work per thread in its
PTX when the kernel is straight-line, or from its loop in the source
otherwise (each count is spelled out below); takes the launch geometry from
the benchmark's host code; and takes the problem size from Parboil's
dataset (the datasets are not in that repository: the sizes are those of
Parboil's published runs, cited below). DRAM bytes are each buffer's bytes
once (compulsory traffic), as reef-compile records `bytes_read` and
`bytes_written` (docs/compile.md).

Written to OUT_DIR/NAME/: NAME.json (committed) and kernels.sm_89.ptx,
the PTX the schedule names (regenerated, not committed: .gitignore; it is
compiled from Parboil's code).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCH = "sm_89"
F32 = 4


def nv_bin() -> Path:
    found = sorted(REPO.glob(".venv/lib/python*/site-packages/nvidia/*/bin/nvcc"))
    if not found:
        sys.exit("nvcc not found under .venv: run scripts/setup.sh")
    return found[0].parent


# cuda headers include CCCL's <nv/target>, not shipped by PyPI's
# nvidia-cuda-nvcc; the CUDA 12.9 wheels under .tools have it.
CCCL = REPO / ".tools/cuda-12.9/nvidia/cuda_cccl/include"


def compile_ptx(src: Path, extra: list[str], out: Path) -> str:
    args = ["-ptx", f"-arch={ARCH}", "-O3", "-o", str(out), str(src)] + extra
    if CCCL.is_dir():
        args = ["-I", str(CCCL)] + args
    subprocess.run([str(nv_bin() / "nvcc")] + args, check=True)
    return out.read_text()


def ptxas(ptx: Path, d: Path) -> dict[str, dict]:
    p = subprocess.run(
        [str(nv_bin() / "ptxas"), "-v", f"-arch={ARCH}", str(ptx), "-o", str(d / "k.cubin")],
        check=True, capture_output=True, text=True,
    )
    out, cur = {}, None
    for line in p.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            cur = m.group(1)
            out[cur] = {"registers": 0, "shared_static": 0, "stack": 0,
                        "spill_stores": 0, "spill_loads": 0}
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            out[cur].update(stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            out[cur]["registers"] = int(m[1])
        m = re.search(r"(\d+) bytes smem", line)
        if m and cur:
            out[cur]["shared_static"] = int(m[1])
    return out


def ptx_flops(ptx: str) -> int:
    """FP32 operations in a kernel's PTX, each instruction once: fma counts
    two, add/sub/mul/div one (neg, compares and moves none). The dynamic
    count per thread for a kernel whose only branch skips arithmetic
    (lbm's obstacle cells, below)."""
    body = ptx[ptx.index(".entry"):]
    fma = len(re.findall(r"^\s+fma\.rn\.f32", body, re.M))
    one = len(re.findall(r"^\s+(add|sub|mul|div\.rn)\.f32", body, re.M))
    return 2 * fma + one


def schedule(name, kernel, grid, block, buffers, reads, writes, flops, res, dyn_shared=0):
    storage = [{"name": n, "size": size // F32, "stype": "float32"} for n, size in buffers]
    idx = {n: i for i, (n, _) in enumerate(buffers)}
    rd = sum(dict(buffers)[b] for b in reads)
    wr = sum(dict(buffers)[b] for b in writes)
    return {
        "format": "reef-compile/1",
        "archs": [ARCH],
        "ptx": {ARCH: f"kernels.{ARCH}.ptx"},
        "storage": storage,
        "args": [idx[n] for n, _ in buffers],
        "inputs": [idx[b] for b in reads if b not in writes],
        "params": [],
        "outputs": [idx[b] for b in writes],
        "shared_memory": {kernel: dyn_shared} if dyn_shared else {},
        "kernels": [{
            "name": kernel,
            "launch_params": list(grid) + list(block),
            "args": [idx[n] for n, _ in buffers],
            "reads": [idx[b] for b in reads],
            "writes": [idx[b] for b in writes],
            "flops": float(flops),
            "bytes_read": rd,
            "bytes_written": wr,
        }],
        "resources": {ARCH: {kernel: res[kernel]}},
        "source": name,
    }


def main() -> None:
    src = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).parent
    b = src / "benchmarks"
    with tempfile.TemporaryDirectory() as t:
        d = Path(t)
        models = {}

        # sgemm (compute-prefer, Aker §3.1): benchmarks/sgemm/src/cuda/
        # sgemm_kernel.cu, mysgemmNT; regtileSgemm launches grid
        # (m/TILE_M, n/TILE_N), block (TILE_N, TILE_TB_HEIGHT) = (16, 8),
        # TILE_M = 128. Dataset "medium": A 1024x992, B^T 1056x992 (Parboil
        # run log "Matrix dimension: 1024x992", "1056x992"), so m = 1024,
        # k = 992, n = 1056. Work from the loop: per thread, k/8 steps of
        # 8 x 16 FMAs (c[kk] += a * b_s[j][kk]) = 32 k flops, then 16
        # outputs of C*beta + alpha*c (3 flops): 2 m n k + 3 m n in all.
        ptxs = {}
        ptx = ptxs["sgemm"] = compile_ptx(b / "sgemm/src/cuda/sgemm_kernel.cu",
                          ["-include", "iostream", "-include", "cstdio"], d / "sgemm.ptx")
        res = ptxas(d / "sgemm.ptx", d)
        (kname,) = res
        m, k, n = 1024, 992, 1056
        models["sgemm"] = schedule(
            "parboil sgemm (medium)", kname, (m // 128, n // 16, 1), (16, 8, 1),
            [("A", m * k * F32), ("B", n * k * F32), ("C", m * n * F32)],
            ["A", "B", "C"], ["C"], 2 * m * n * k + 3 * m * n, res,
        )

        # stencil (memory-prefer): benchmarks/stencil/src/cuda/kernels.cu,
        # block2D_hybrid_coarsen_x; main.cu launches block (32, 4), grid
        # ((nx + 63) / 64, (ny + 3) / 4), dynamic shared 2 x 32 x 4 floats.
        # Dataset "default": 512 x 512 x 64 (Parboil's
        # datasets/stencil/default/input/512x512x64x100.bin, run as
        # "-- 512 512 64 100"). Work from the loop: each of the
        # (nx-2)(ny-2)(nz-2) interior points is 5 adds, 2 muls and a sub
        # (Anext = (top+bottom+up+down+right+left)*c1 - centre*c0) = 8 flops
        # (the PTX has 10 add, 4 mul, 2 sub per loop trip for its 2 points).
        ptx = ptxs["stencil"] = compile_ptx(b / "stencil/src/cuda/kernels.cu",
                          ["-I", str(b / "stencil/src/cuda")], d / "stencil.ptx")
        res = ptxas(d / "stencil.ptx", d)
        (kname,) = res
        nx, ny, nz = 512, 512, 64
        interior = (nx - 2) * (ny - 2) * (nz - 2)
        models["stencil"] = schedule(
            "parboil stencil (default)", kname, ((nx + 63) // 64, (ny + 3) // 4, 1), (32, 4, 1),
            [("A0", nx * ny * nz * F32), ("Anext", nx * ny * nz * F32)],
            ["A0"], ["Anext"], 8 * interior, res, dyn_shared=2 * 32 * 4 * F32,
        )
        # Only the interior is written.
        models["stencil"]["kernels"][0]["bytes_written"] = interior * F32

        # lbm (memory-prefer): benchmarks/lbm/src/cuda/lbm.cu,
        # performStreamCollide_kernel; block (SIZE_X), grid (SIZE_Y,
        # SIZE_Z), one thread per cell of the fixed 120 x 120 x 150 lattice
        # (layout_config.h), SCATTER layout: each cell reads its 19
        # distributions and its flag word and writes 19 distributions.
        # Each grid is TOTAL_PADDED_CELLS x N_CELL_ENTRIES floats, padded
        # 128 x 120 x 154. Work: the PTX's FP32 operations, counted once:
        # the fluid-cell path (rho, u, the 19 relaxations); the kernel's one
        # branch skips all of it for obstacle cells (a swap of registers),
        # so flops = cells x that count is an upper bound (the obstacle
        # fraction is in the dataset file, not in the repository).
        ptx = ptxs["lbm"] = compile_ptx(b / "lbm/src/cuda/lbm.cu",
                          ["-I", str(b / "lbm/src/cuda"), "-I", str(src / "common/include"),
                           "-DcudaThreadSynchronize=cudaDeviceSynchronize"], d / "lbm.ptx")
        res = ptxas(d / "lbm.ptx", d)
        (kname,) = res
        cells = 120 * 120 * 150
        padded = 128 * 120 * 154 * 20 * F32
        per_cell = ptx_flops(ptx)
        models["lbm"] = schedule(
            "parboil lbm", kname, (120, 150, 1), (120, 1, 1),
            [("src", padded), ("dst", padded)], ["src"], ["dst"], per_cell * cells, res,
        )
        models["lbm"]["kernels"][0]["bytes_read"] = cells * 20 * F32
        models["lbm"]["kernels"][0]["bytes_written"] = cells * 19 * F32

    for name, s in models.items():
        del s["source"]
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / f"{name}.json").write_text(json.dumps(s, indent=1) + "\n")
        (out / name / f"kernels.{ARCH}.ptx").write_text(ptxs[name])
        k = s["kernels"][0]
        print(name, k["launch_params"], s["resources"][ARCH], k["flops"], k["bytes_read"], k["bytes_written"])


if __name__ == "__main__":
    main()
