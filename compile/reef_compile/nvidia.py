"""NVIDIA's tools from the repository's virtualenv (PyPI nvidia-cuda-nvcc):
nvcc turns TVM's CUDA C into PTX, `ptxas -v` assembles it and reports each
kernel's registers, shared memory, stack and spills (the numbers the
simulator's occupancy uses, docs/compile.md).

sm_70 (Volta, the paper's GV100) is not among CUDA 13's targets. For it
(and only it: `CUDA12_ARCHS`) the CUDA C goes through NVRTC 12.9 and
ptxas 12.9 from `.tools/cuda-12.9` (scripts/setup.d/15-compile.sh), the last
CUDA release that has Volta: same source, same checks, same resource report.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .onnx_input import CompileError


def bin_dir() -> Path:
    """`<venv>/lib/python3.X/site-packages/nvidia/<pkg>/bin` holding nvcc."""
    here = Path(sys.prefix) / "lib"
    found = sorted(here.glob("python*/site-packages/nvidia/*/bin/nvcc"))
    if not found:
        raise CompileError(
            f"nvcc not found under {here}/python*/site-packages/nvidia/*/bin; "
            "run scripts/setup.sh (it installs nvidia-cuda-nvcc)"
        )
    return found[-1].parent


# Architectures CUDA 13 no longer has that reef-compile builds with the CUDA
# 12.9 tools in `.tools/cuda-12.9` instead (issue 31 item 2). Only sm_70:
# the paper's GV100; the 12.9 tools accept older ones too, but nothing here
# needs or tests them.
CUDA12_ARCHS = ("sm_70",)
CUDA12_SETUP = (
    "run scripts/setup.sh (scripts/setup.d/15-compile.sh installs NVRTC, ptxas and CCCL 12.9 "
    "into .tools/cuda-12.9 for sm_70)"
)


def cuda12_root() -> Path:
    """`<repository>/.tools/cuda-12.9/nvidia`: the wheels nvidia-cuda-nvrtc-cu12,
    nvidia-cuda-nvcc-cu12 (ptxas) and nvidia-cuda-cccl-cu12 (libcu++)."""
    return Path(__file__).resolve().parents[2] / ".tools" / "cuda-12.9" / "nvidia"


def _cuda12(rel: str) -> Path:
    p = cuda12_root() / rel
    if not p.exists():
        raise CompileError(f"{p} not found; {CUDA12_SETUP}")
    return p


def _run(tool: str, args: list[str], what: str, d: Path | None = None) -> subprocess.CompletedProcess:
    d = d or bin_dir()
    env = dict(os.environ)
    env["PATH"] = f"{d}{os.pathsep}{env.get('PATH', '')}"
    p = subprocess.run([str(d / tool), *args], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        lines = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()]
        msg = next((l for l in lines if "fatal" in l or "error" in l), lines[0] if lines else "")
        raise CompileError(f"{what}: {tool} failed: {msg.strip()}")
    return p


def _ptxas_accepts(ptxas: Path) -> list[str]:
    """The sm_ values `ptxas --help` lists for --gpu-name."""
    p = subprocess.run([str(ptxas), "--help"], capture_output=True, text=True)
    m = re.search(r"--gpu-name.*?Allowed values for this option:(.*?)(?:\n\s*\n|\n--)", p.stdout, re.S)
    return re.findall(r"'(sm_\w+)'", m.group(1)) if m else []


_ROUTE: dict[str, str] = {}


def uses_cuda12(arch: str) -> bool:
    """Whether `arch` is built by the CUDA 12.9 tools (check_arch decides,
    once per architecture)."""
    if arch not in _ROUTE:
        check_arch(arch)
    return _ROUTE[arch] == "cuda12"


def check_arch(arch: str) -> None:
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise CompileError(f"--arch {arch!r}: expected an NVIDIA architecture such as sm_80 or sm_90")
    # ptxas lists the values --gpu-name accepts; refuse others up front.
    allowed = _ptxas_accepts(bin_dir() / "ptxas")
    if not allowed or arch in allowed:
        _ROUTE[arch] = "nvcc"
        return
    if arch in CUDA12_ARCHS:
        ptxas12 = _cuda12("cuda_nvcc/bin/ptxas")
        _cuda12("cuda_nvrtc/lib/libnvrtc.so.12")
        _cuda12("cuda_cccl/include/cuda/std/cstdint")
        if arch not in _ptxas_accepts(ptxas12):
            raise CompileError(f"--arch {arch}: {ptxas12} does not accept it; {CUDA12_SETUP}")
        _ROUTE[arch] = "cuda12"
        return
    plain = sorted(
        {a for a in allowed if re.fullmatch(r"sm_\d+", a)} | set(CUDA12_ARCHS), key=lambda a: int(a[3:])
    )
    raise CompileError(
        f"--arch {arch}: ptxas does not accept it (accepted: {', '.join(plain)}; "
        f"{', '.join(CUDA12_ARCHS)} through CUDA 12.9's NVRTC and ptxas)"
    )


def cuda_to_ptx(cu: Path, ptx: Path, arch: str) -> None:
    if uses_cuda12(arch):
        _nvrtc_ptx(cu, ptx, arch)
        return
    # -lineinfo off, no debug: the PTX a release build would ship.
    args = ["-ptx", f"-arch={arch}", "-O3", "-o", str(ptx), str(cu)]
    if "cuda_fp16.h" in cu.read_text():
        # TVM's fp16 source includes cuda_fp16.h, which includes CCCL's
        # <nv/target>; PyPI's nvidia-cuda-nvcc does not ship CCCL, the CUDA
        # 12.9 wheels of .tools do (docs/compile.md "Tensor cores").
        args = ["-I", str(_cuda12("cuda_cccl/include"))] + args
    _run("nvcc", args, f"nvcc -arch={arch}")


def _nvrtc_ptx(cu: Path, ptx: Path, arch: str) -> None:
    """TVM's CUDA C → PTX with NVRTC 12.9. API: NVIDIA, "NVRTC User Guide"
    (CUDA 12.9), "User Interface" > "Compilation": nvrtcCreateProgram,
    nvrtcCompileProgram, nvrtcGetProgramLogSize/nvrtcGetProgramLog,
    nvrtcGetPTXSize/nvrtcGetPTX, nvrtcDestroyProgram; the same text is the
    doc comment of the wheel's cuda_nvrtc/include/nvrtc.h.

    Options (same guide, "Supported Compile Options"; nvrtc.h group
    `options`):
    - `--gpu-architecture=compute_70`: PTX for the virtual architecture
      compute_70, i.e. `.target sm_70`, what `nvcc -ptx -arch=sm_70` writes;
    - `--include-path=<CCCL include>`: NVRTC has no header search path of
      its own, and TVM's source includes libcu++'s <cuda/std/cstdint> and
      <cuda/std/type_traits> when `__CUDACC_RTC__` is defined.
    Everything else stays at its documented default, as nvcc's does: device
    optimisation on (`-dopt=on` is implicit without -G), `--fmad=true`,
    `--ftz=false`, `--prec-div=true`, `--prec-sqrt=true`, `--std=c++17`, no
    line info; the same as `nvcc -ptx -O3` for the device code."""
    lib = ctypes.CDLL(str(_cuda12("cuda_nvrtc/lib/libnvrtc.so.12")))
    include = _cuda12("cuda_cccl/include")
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    prog = ctypes.c_void_p()

    def check(r: int, call: str) -> None:
        if r != 0:
            raise CompileError(f"NVRTC --arch {arch}: {call}: {lib.nvrtcGetErrorString(r).decode()}")

    check(
        lib.nvrtcCreateProgram(ctypes.byref(prog), cu.read_bytes(), cu.name.encode(), 0, None, None),
        "nvrtcCreateProgram",
    )
    try:
        opts = [f"--gpu-architecture=compute_{arch[3:]}", f"--include-path={include}"]
        argv = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
        r = lib.nvrtcCompileProgram(prog, len(opts), argv)
        n = ctypes.c_size_t()
        check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)), "nvrtcGetProgramLogSize")
        log = ctypes.create_string_buffer(n.value)
        check(lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        if r != 0:
            lines = [l for l in log.value.decode(errors="replace").splitlines() if l.strip()]
            msg = next((l for l in lines if "error" in l), lines[0] if lines else "")
            raise CompileError(
                f"NVRTC --gpu-architecture=compute_{arch[3:]}: {lib.nvrtcGetErrorString(r).decode()}: "
                f"{msg.strip()}"
            )
        check(lib.nvrtcGetPTXSize(prog, ctypes.byref(n)), "nvrtcGetPTXSize")
        text = ctypes.create_string_buffer(n.value)
        check(lib.nvrtcGetPTX(prog, text), "nvrtcGetPTX")
        ptx.write_bytes(text.value)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def toolchain(arch: str) -> dict[str, str]:
    """Which compiler wrote the PTX and which ptxas read its resources."""

    def version(tool: Path) -> str:
        p = subprocess.run([str(tool), "--version"], capture_output=True, text=True)
        m = re.search(r"release [\d.]+, V([\d.]+)", p.stdout)
        return m.group(1) if m else "unknown"

    if uses_cuda12(arch):
        lib = ctypes.CDLL(str(_cuda12("cuda_nvrtc/lib/libnvrtc.so.12")))
        major, minor = ctypes.c_int(), ctypes.c_int()
        lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return {
            "ptx": f"nvrtc {major.value}.{minor.value}",
            "ptxas": version(_cuda12("cuda_nvcc/bin/ptxas")),
        }
    return {"ptx": f"nvcc {version(bin_dir() / 'nvcc')}", "ptxas": version(bin_dir() / "ptxas")}


@dataclass
class Resources:
    registers: int = 0
    shared_static: int = 0
    stack: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    constant: int = 0


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")


def ptxas_resources(ptx: Path, arch: str, cubin: Path) -> dict[str, Resources]:
    d = _cuda12("cuda_nvcc/bin") if uses_cuda12(arch) else None
    p = _run("ptxas", ["-v", f"-arch={arch}", str(ptx), "-o", str(cubin)], f"ptxas -arch={arch}", d)
    out: dict[str, Resources] = {}
    cur: Resources | None = None
    for line in (p.stderr + p.stdout).splitlines():
        m = _ENTRY.search(line)
        if m:
            cur = out.setdefault(m.group(1), Resources())
            continue
        if cur is None:
            continue
        if m := _FRAME.search(line):
            cur.stack, cur.spill_stores, cur.spill_loads = (int(x) for x in m.groups())
        if m := _USED.search(line):
            cur.registers = int(m.group(1))
            if s := _SMEM.search(line):
                cur.shared_static = int(s.group(1))
            if c := _CMEM.search(line):
                cur.constant = int(c.group(1))
    return out


def ptx_entries(ptx_text: str) -> dict[str, int]:
    """`.entry NAME(` → number of parameters, as the PTX declares them."""
    out = {}
    for m in re.finditer(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\((.*?)\)", ptx_text, re.S):
        params = [p for p in m.group(2).split(",") if ".param" in p]
        out[m.group(1)] = len(params)
    return out


# Tensor-core matrix multiply-accumulate instructions (PTX ISA, "Warp Level
# Matrix Multiply-Accumulate Instructions": wmma.mma, mma.sync; "Asynchronous
# Warpgroup Level Matrix Multiply-Accumulate": wgmma.mma_async).
_MMA = re.compile(r"^\s*(?:@\S+\s+)?(wmma\.mma|mma\.sync|wgmma\.mma_async)\b", re.M)


def mma_counts(ptx_text: str) -> dict[str, int]:
    """`.entry NAME` → number of tensor-core MMA instructions in its body
    (static count, not executions)."""
    out = {}
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"\.entry\s+([A-Za-z_$][\w$]*)", ptx_text)]
    for i, (pos, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(ptx_text)
        out[name] = len(_MMA.findall(ptx_text, pos, end))
    return out
