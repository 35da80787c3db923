"""NVIDIA's tools from the repository's virtualenv (PyPI nvidia-cuda-nvcc):
nvcc turns TVM's CUDA C into PTX, `ptxas -v` assembles it and reports each
kernel's registers, shared memory, stack and spills (the numbers the
simulator's occupancy uses, docs/compile.md).
"""

from __future__ import annotations

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


def _run(tool: str, args: list[str], what: str) -> subprocess.CompletedProcess:
    d = bin_dir()
    env = dict(os.environ)
    env["PATH"] = f"{d}{os.pathsep}{env.get('PATH', '')}"
    p = subprocess.run([str(d / tool), *args], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        lines = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()]
        msg = next((l for l in lines if "fatal" in l or "error" in l), lines[0] if lines else "")
        raise CompileError(f"{what}: {tool} failed: {msg.strip()}")
    return p


def check_arch(arch: str) -> None:
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise CompileError(f"--arch {arch!r}: expected an NVIDIA architecture such as sm_80 or sm_90")
    p = subprocess.run(
        [str(bin_dir() / "ptxas"), "--help"], capture_output=True, text=True
    )
    # ptxas lists the values --gpu-name accepts; refuse others up front.
    m = re.search(r"--gpu-name.*?Allowed values for this option:(.*?)(?:\n\s*\n|\n--)", p.stdout, re.S)
    if m:
        allowed = re.findall(r"'(sm_\w+)'", m.group(1))
        if allowed and arch not in allowed:
            plain = ", ".join(
                sorted({a for a in allowed if re.fullmatch(r"sm_\d+", a)}, key=lambda a: int(a[3:]))
            )
            raise CompileError(f"--arch {arch}: ptxas does not accept it (accepted: {plain})")


def cuda_to_ptx(cu: Path, ptx: Path, arch: str) -> None:
    # -lineinfo off, no debug: the PTX a release build would ship.
    _run("nvcc", ["-ptx", f"-arch={arch}", "-O3", "-o", str(ptx), str(cu)], f"nvcc -arch={arch}")


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
    p = _run("ptxas", ["-v", f"-arch={arch}", str(ptx), "-o", str(cubin)], f"ptxas -arch={arch}")
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
