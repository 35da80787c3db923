"""AMD GPUs (issue 29): the model's kernels as an AMDGPU code object per
architecture (`--arch gfx906`, `--arch gfx90a`), beside the PTX.

The schedule is the one every architecture shares: the Relax module is
legalized and scheduled with dlight exactly as for NVIDIA (lower.py, under
the first NVIDIA architecture's target, or sm_80 when only AMD
architectures are asked for), so the kernels, their grid, block, arguments,
reads and writes are the same. Only the TIR lowering that follows the
schedule (thread all-reduce with AMD's 64-wide wavefronts, intrinsics) and
the code generation use TVM's ROCm target; its LLVM AMDGPU back end links
ROCm's device library bitcode (Debian's `rocm-device-libs`) and `ld.lld`
(Debian's `lld-19`) links the relocatable object into the code object
(`kernels.ARCH.hsaco`, an ELF for amdgcn-amd-amdhsa).

Each kernel's resources come from the code object's AMDHSA metadata (the
NT_AMDGPU_METADATA note, a msgpack map), printed by `llvm-readelf --notes`:
VGPRs, SGPRs, LDS (group segment), scratch (private segment), wavefront
size, kernel argument bytes, the maximum work-group size it was built for.
scripts/setup.d/16-rocm-compile.sh installs the tools.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .onnx_input import CompileError

# Architectures reef-compile builds for: REEF's MI50 (gfx906) and the MI200
# series (gfx90a). ROCm's device library ships bitcode for both.
ARCHS = ("gfx906", "gfx90a")
# Where Debian's rocm-device-libs puts the bitcode (ROCM_PATH/amdgcn/bitcode).
DEBIAN_ROCM_PATH = "/usr/lib/x86_64-linux-gnu"
LLVM_MAJOR = 19  # lld 15 refuses TVM's code objects ("unknown abi version")
EM_AMDGPU = 224
# The largest work group a kernel may be launched with on GCN/CDNA; the
# shared (CUDA-scheduled) launches use up to 1024 threads per block.
MAX_THREADS = 1024

INSTALL_HINT = (
    "run scripts/setup.sh (scripts/setup.d/16-rocm-compile.sh installs Debian's "
    "rocm-device-libs, lld-19 and llvm-19)"
)


def is_amd(arch: str) -> bool:
    return arch.startswith("gfx")


def check_arch(arch: str) -> None:
    if arch not in ARCHS:
        raise CompileError(
            f"--arch {arch}: not an AMD architecture reef-compile builds for "
            f"(accepted: {', '.join(ARCHS)})"
        )


def rocm_path() -> str:
    return os.environ.get("ROCM_PATH", DEBIAN_ROCM_PATH)


def _tool(name: str) -> str:
    for cand in (f"{name}-{LLVM_MAJOR}", f"/usr/lib/llvm-{LLVM_MAJOR}/bin/{name}"):
        found = shutil.which(cand)
        if found:
            return found
    raise CompileError(f"{name}-{LLVM_MAJOR} not found; {INSTALL_HINT}")


def check_tools() -> dict[str, str]:
    """The ROCm bitcode, ld.lld and llvm-readelf, or one line naming what is
    missing and how to install it."""
    bc = Path(rocm_path()) / "amdgcn" / "bitcode"
    if not (bc / "ocml.bc").is_file():
        raise CompileError(
            f"ROCm device library bitcode not found: no {bc}/ocml.bc "
            f"(ROCM_PATH={rocm_path()}); install Debian's rocm-device-libs or "
            f"set ROCM_PATH; {INSTALL_HINT}"
        )
    return {"ld.lld": _tool("ld.lld"), "llvm-readelf": _tool("llvm-readelf")}


def target(arch: str):
    import tvm

    return tvm.target.Target(
        {"kind": "rocm", "mcpu": arch, "max_num_threads": MAX_THREADS},
        host=tvm.target.Target("llvm"),
    )


@dataclass
class Built:
    code_object: bytes
    launches: list  # lower.Launch, from the ROCm device module
    llvm_ir: str  # the device module TVM generated, as compiled


def build(mod, param_values, sched_arch: str, arch: str) -> Built:
    """Schedule as for `sched_arch` (NVIDIA), lower and generate for `arch`."""
    import tvm
    from tvm import relax
    from tvm.relax.backend.cuda import pipeline as cuda
    from tvm.s_tir.analysis import estimate_tir_flops
    from tvm.tirx.build import codegen_build, split_host_device_mods

    from . import lower
    from .ir import kind, walk

    tools = check_tools()
    sched_target = tvm.target.Target({"kind": "cuda", "arch": sched_arch})
    with sched_target:
        seq = tvm.transform.Sequential(
            cuda.library_dispatch_passes(sched_target)
            + cuda.legalize_passes(sched_target)
            + cuda.dataflow_lower_passes(sched_target)
        )
        scheduled = seq(mod)
        planned = relax.transform.StaticPlanBlockMemory()(scheduled)
        final = tvm.transform.Sequential(cuda.finalize_passes(sched_target)[1:])(planned)
    prims = {
        gv.name_hint: f for gv, f in planned.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
    }
    flops = {n: float(estimate_tir_flops(tvm.IRModule({"main": f}))) for n, f in prims.items()}
    called: set[str] = set()

    def find_calls(n):
        if kind(n) == "ir.Call" and kind(n.op) == "ir.GlobalVar":
            called.add(n.op.name_hint)

    walk(planned["main"].body, find_calls)
    tir_mod = tvm.IRModule(
        {
            gv: f
            for gv, f in final.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint in called
        },
        attrs=final.attrs,
    )
    # The scheduled functions carry no target yet: bind ROCm's from here on.
    tgt = target(arch)
    tir_mod = tvm.tirx.transform.BindTarget(tgt)(tir_mod)
    pipe, _fin_host, fin_dev = tvm.tirx.get_default_tir_pipeline(tgt)
    old_root = os.environ.get("ROCM_PATH")
    # TVM finds the device library through ROCM_PATH (its bitcode callback)
    # and links through the `tvm_callback_rocm_link` global function, which
    # looks for ld.lld-<its own LLVM major> or ld.lld: link with lld-19.
    os.environ["ROCM_PATH"] = rocm_path()
    _register_link(lambda obj: _link_bytes(bytes(obj), tools["ld.lld"]))
    try:
        with tgt:
            tir_mod = pipe(tir_mod)
            host_mod, dev_mods = split_host_device_mods(tir_mod)
            if len(dev_mods) != 1:
                raise CompileError(f"expected one ROCm device module, TVM produced {len(dev_mods)}")
            ((dev_target, dev_mod),) = dev_mods.items()
            kernels = lower._device_kernels(dev_mod)
            host_launches = lower._host_launches(host_mod, set(kernels))
            rt = codegen_build(fin_dev()(dev_mod), dev_target)
    finally:
        _register_link(None)
        if old_root is None:
            os.environ.pop("ROCM_PATH", None)
        else:
            os.environ["ROCM_PATH"] = old_root
    _storages, launches, *_ = lower._walk_main(
        planned, prims, kernels, host_launches, param_values, flops
    )
    bounds: dict[str, int] = {}
    for ln in launches:
        n = ln.block[0] * ln.block[1] * ln.block[2]
        bounds[ln.name] = max(bounds.get(ln.name, 1), n)
    ir = _retarget_ir(str(rt.inspect_source("llvm")), arch, bounds)
    ir = inject_preempt_check(ir, set(bounds))
    return Built(_emit(ir, tools["ld.lld"]), launches, ir)


# The code object version: 4, what the ROCm 5.x compilers emit by default
# and every ROCm 5 runtime loads (Debian 12's ROCm is 5.2.3; version 5 became
# the default with ROCm 6). TVM links the device library's
# oclc_abi_version_500, which only matters to code reading the implicit
# (hidden) kernel arguments; compile_arch refuses a code object whose
# kernels take any.
CODE_OBJECT_VERSION = 4


def _retarget_ir(ir: str, arch: str, bounds: dict[str, int]) -> str:
    """TVM's device LLVM IR, with what TVM decides from a GPU it cannot see
    made explicit for `arch`:

    - each kernel's `amdgpu-flat-work-group-size`: TVM asks the ROCm
      runtime for the device's maximum threads per block and, without a GPU,
      falls back to 256, while the shared schedule launches blocks of up to
      1024 threads. Each kernel gets `1,<its block size>` (the bound PTX
      carries as `.maxntid`), so the register budget is the one its launch
      allows;
    - the triple `amdgcn-amd-amdhsa` (TVM writes the old `-hcc`
      environment), so the code object's target id is
      `amdgcn-amd-amdhsa--ARCH`;
    - the code object version and the target, as module flags.
    """

    ir, n = re.subn(
        r'^target triple = "amdgcn-amd-amdhsa[^"]*"$',
        'target triple = "amdgcn-amd-amdhsa"',
        ir,
        flags=re.M,
    )
    if n != 1:
        raise CompileError("TVM's ROCm LLVM IR has no amdgcn-amd-amdhsa target triple")
    groups = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^attributes #(\d+) = \{(.*)\}$", ir, re.M)
    }
    extra: list[str] = []
    next_id = max((int(g) for g in groups), default=0) + 1
    seen: set[str] = set()

    def kernel(m):
        nonlocal next_id
        name, group = m.group(2), m.group(4)
        if name not in bounds:
            return m.group(0)
        seen.add(name)
        attrs = groups.get(group)
        if attrs is None or '"amdgpu-flat-work-group-size"' not in attrs:
            raise CompileError(f"kernel {name}: no amdgpu-flat-work-group-size in TVM's LLVM IR")
        attrs = re.sub(
            r'"amdgpu-flat-work-group-size"="[^"]*"',
            f'"amdgpu-flat-work-group-size"="1,{bounds[name]}"',
            attrs,
        )
        extra.append(f"attributes #{next_id} = {{{attrs}}}")
        new = f"{m.group(1)}#{next_id}{m.group(5)}"
        next_id += 1
        return new

    ir = re.sub(
        r"^(define [^@\n]*amdgpu_kernel [^@\n]*@([\w.$]+)\((?:[^()]|\([^()]*\))*\)([^#\n]*))#(\d+)( \{)$",
        kernel,
        ir,
        flags=re.M,
    )
    missing = sorted(set(bounds) - seen)
    if missing:
        raise CompileError(f"kernels {', '.join(missing)} are not defined in TVM's ROCm LLVM IR")
    m = re.search(r"^!llvm\.module\.flags = !\{(.*)\}$", ir, re.M)
    if m is None:
        raise CompileError("TVM's ROCm LLVM IR has no module flags")
    tvm_target = (
        '{\\22kind\\22: \\22llvm\\22, \\22mtriple\\22: \\22amdgcn-amd-amdhsa\\22, '
        f'\\22mcpu\\22: \\22{arch}\\22}}'
    )
    ir = (
        ir[: m.start()]
        + f"!llvm.module.flags = !{{{m.group(1)}, !90000, !90001}}"
        + ir[m.end():]
        + "\n".join(extra)
        + f'\n!90000 = !{{i32 1, !"tvm_target", !"{tvm_target}"}}'
        + f'\n!90001 = !{{i32 1, !"amdhsa_code_object_version", i32 {CODE_OBJECT_VERSION * 100}}}\n'
    )
    return ir


# REEF's preempt flag and execution index (REEF §4.3 Fig. 8), the names
# reef-ptx-inject gives them in PTX (trap-handler/src/ptx.rs), so reefd's
# launch path treats both architectures alike.
PREEMPT_FLAG = "reef_preempt_flag"
EXEC_INDEX = "reef_exec_index"
INDEX_PARAM = "__reef_exec_idx"

_KERNEL_HEAD = re.compile(
    r"^(define [^@\n]*amdgpu_kernel [^@\n]*@([\w.$]+))\(((?:[^()]|\([^()]*\))*)\)([^{\n]*)\{$"
)
_ALLOCA = re.compile(r"^\s+%[\w.]+ = alloca ")


def inject_preempt_check(ir: str, names: set[str]) -> str:
    """REEF §4.3 Fig. 8 lines 1-4 in the device LLVM IR of each kernel in
    `names`, as reef-ptx-inject writes them in PTX for NVIDIA: a trailing
    `i32 %__reef_exec_idx` parameter, and a first block that returns when
    the module global `reef_preempt_flag` is set and otherwise stores the
    index to `reef_exec_index`. Every work group runs the check when it is
    dispatched, so a kernel flagged while it runs ends its later work
    groups at entry. The flag is read `volatile` (from memory at every
    dispatch, never hoisted). The kernel's static allocas move into the new
    first block, so they stay static (an alloca outside the entry block is a
    dynamic stack object)."""
    lines = ir.split("\n")
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        m = _KERNEL_HEAD.match(lines[i])
        if not m or m.group(2) not in names or i + 1 >= len(lines) or lines[i + 1] != "entry:":
            out.append(lines[i])
            i += 1
            continue
        name, params = m.group(2), m.group(3)
        seen.add(name)
        sep = ", " if params.strip() else ""
        out.append(f"{m.group(1)}({params}{sep}i32 %{INDEX_PARAM}){m.group(4)}{{")
        out.append("reef.check:")
        i += 2
        while i < len(lines) and _ALLOCA.match(lines[i]):
            out.append(lines[i])
            i += 1
        out += [
            f"  %reef.flag = load volatile i32, ptr addrspace(1) @{PREEMPT_FLAG}, align 4",
            "  %reef.stop = icmp ne i32 %reef.flag, 0",
            "  br i1 %reef.stop, label %reef.exit, label %reef.pass",
            "reef.exit:",
            "  ret void",
            "reef.pass:",
            f"  store volatile i32 %{INDEX_PARAM}, ptr addrspace(1) @{EXEC_INDEX}, align 4",
            "  br label %entry",
            "entry:",
        ]
    missing = sorted(names - seen)
    if missing:
        raise CompileError(
            f"kernels {', '.join(missing)}: no `entry:` block after their definition in TVM's "
            "ROCm LLVM IR, where the preempt-flag check goes"
        )
    ir = "\n".join(out)
    m = re.search(r'^target triple = .*$', ir, re.M)
    if m is None:
        raise CompileError("TVM's ROCm LLVM IR has no target triple")
    globals_ = (
        f"\n@{PREEMPT_FLAG} = addrspace(1) externally_initialized global i32 0, align 4"
        f"\n@{EXEC_INDEX} = addrspace(1) externally_initialized global i32 0, align 4"
    )
    return ir[: m.end()] + globals_ + ir[m.end():]


def _emit(ir: str, lld: str) -> bytes:
    """The IR through TVM's own LLVM (its AMDGPU back end) to a relocatable
    object, linked by ld.lld into the code object."""
    import tempfile

    import tvm_ffi

    with tempfile.TemporaryDirectory(prefix="reef-compile-rocm-") as d:
        ll, obj = Path(d) / "kernels.ll", Path(d) / "kernels.o"
        ll.write_text(ir)
        m = tvm_ffi.get_global_func("ffi.Module.load_from_file.ll")(str(ll), "ll")
        m.write_to_file(str(obj), "o")
        return _link_bytes(obj.read_bytes(), lld)


def _register_link(fn) -> None:
    """Install `fn` as TVM's `tvm_callback_rocm_link`, or TVM's own back."""
    import tvm_ffi
    from tvm.support import rocm as tvm_rocm

    tvm_ffi.register_global_func(
        "tvm_callback_rocm_link", fn or tvm_rocm.callback_rocm_link, override=True
    )


def _link_bytes(obj: bytes, lld: str) -> bytearray:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="reef-compile-rocm-") as d:
        o, co = Path(d) / "kernels.o", Path(d) / "kernels.hsaco"
        o.write_bytes(obj)
        p = subprocess.run(
            [lld, "--no-undefined", "-shared", str(o), "-o", str(co)],
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            first = next((l for l in (p.stderr + p.stdout).splitlines() if l.strip()), "")
            raise CompileError(f"{Path(lld).name} cannot link the AMDGPU object: {first.strip()}")
        return bytearray(co.read_bytes())


@dataclass
class Resources:
    """One kernel's resources from the AMDHSA metadata."""

    vgpr_count: int = 0
    sgpr_count: int = 0
    agpr_count: int = 0
    group_segment_fixed_size: int = 0  # LDS bytes per work group
    private_segment_fixed_size: int = 0  # scratch bytes per work item
    wavefront_size: int = 0
    kernarg_segment_size: int = 0
    max_flat_workgroup_size: int = 0
    vgpr_spill_count: int = 0
    sgpr_spill_count: int = 0
    symbol: str = ""


def elf_header(code: bytes) -> dict:
    if code[:4] != b"\x7fELF" or len(code) < 64:
        raise CompileError("the code object is not an ELF file")
    (e_machine,) = struct.unpack_from("<H", code, 18)
    (e_flags,) = struct.unpack_from("<I", code, 48)
    return {"class": code[4], "osabi": code[7], "abiversion": code[8], "machine": e_machine, "flags": e_flags}


_KEY = re.compile(r"^(\s*)(-\s+)?\.([\w]+):\s*(.*)$")


def read_metadata(path: Path) -> tuple[str, dict[str, Resources], str]:
    """`llvm-readelf --notes`: (target id, resources per kernel name, the
    readelf version line)."""
    readelf = check_tools()["llvm-readelf"]
    p = subprocess.run([readelf, "--notes", str(path)], capture_output=True, text=True)
    if p.returncode != 0:
        raise CompileError(f"{path.name}: llvm-readelf --notes failed: {p.stderr.strip()}")
    text = p.stdout
    if "NT_AMDGPU_METADATA" not in text:
        raise CompileError(f"{path.name}: no NT_AMDGPU_METADATA note (llvm-readelf --notes)")
    m = re.search(r"amdhsa\.target:\s*'?([\w.:+-]+)'?", text)
    target_id = m.group(1) if m else ""
    kernels: dict[str, Resources] = {}
    cur: dict | None = None
    in_kernels = False
    kernel_indent = None
    depth_args = None
    for line in text.splitlines():
        if re.match(r"^\s*amdhsa\.kernels:", line):
            in_kernels = True
            continue
        if not in_kernels:
            continue
        if re.match(r"^\s*amdhsa\.\w+:", line):
            in_kernels = False
            continue
        m = _KEY.match(line)
        if not m:
            continue
        indent, dash, key, val = len(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
        if dash and (kernel_indent is None or indent == kernel_indent):
            kernel_indent = indent
            cur = {}
            kernels[f"#{len(kernels)}"] = cur  # renamed below
            depth_args = None
        if cur is None:
            continue
        own = indent + (len(dash) if dash else 0)
        if key == "args":
            depth_args = own
            continue
        if depth_args is not None and own > depth_args:
            continue  # a kernel argument's fields
        depth_args = None
        cur[key] = val.strip("'\"")
    out: dict[str, Resources] = {}
    for d in kernels.values():
        name = d.get("name")
        if not name:
            continue
        r = Resources()
        for f in vars(r):
            if f == "symbol":
                r.symbol = d.get("symbol", "")
            elif f in d:
                try:
                    setattr(r, f, int(d[f]))
                except ValueError:
                    pass
        out[name] = r
    version = ""
    v = subprocess.run([readelf, "--version"], capture_output=True, text=True)
    for line in v.stdout.splitlines():
        if "version" in line.lower():
            version = line.strip()
            break
    return target_id, out, version


def _notes(path: Path) -> str:
    p = subprocess.run(
        [check_tools()["llvm-readelf"], "--notes", str(path)], capture_output=True, text=True
    )
    return p.stdout


def data_symbols(path: Path) -> dict[str, int]:
    """The code object's global STT_OBJECT symbols other than kernel
    descriptors (`NAME.kd`), with their sizes: its module globals."""
    readelf = check_tools()["llvm-readelf"]
    p = subprocess.run([readelf, "--symbols", "--wide", str(path)], capture_output=True, text=True)
    if p.returncode != 0:
        raise CompileError(f"{path.name}: llvm-readelf --symbols failed: {p.stderr.strip()}")
    out = {}
    for line in p.stdout.splitlines():
        cols = line.split()
        if len(cols) >= 8 and cols[3] == "OBJECT" and cols[4] == "GLOBAL" and not cols[7].endswith(".kd"):
            out[cols[7]] = int(cols[2], 0)
    return out


def kernel_symbols(path: Path) -> set[str]:
    """Names of the code object's STT_FUNC symbols (the kernels' entries)."""
    readelf = check_tools()["llvm-readelf"]
    p = subprocess.run([readelf, "--symbols", "--wide", str(path)], capture_output=True, text=True)
    if p.returncode != 0:
        raise CompileError(f"{path.name}: llvm-readelf --symbols failed: {p.stderr.strip()}")
    out = set()
    for line in p.stdout.splitlines():
        cols = line.split()
        if len(cols) >= 8 and cols[3] == "FUNC" and cols[4] == "GLOBAL":
            out.add(cols[7])
    return out


def compile_arch(mod, param_values, sched_arch: str, arch: str, launches, out: Path) -> tuple[dict, dict, dict]:
    """Writes OUT/kernels.ARCH.hsaco for the launches of the NVIDIA schedule
    and returns (resources per kernel, the code object's entry, timings)."""
    import time

    t = time.monotonic()
    try:
        built = build(mod, param_values, sched_arch, arch)
    except CompileError:
        raise
    except Exception as e:  # TVM's own errors: first line only
        first = next((l for l in str(e).splitlines() if l.strip()), type(e).__name__)
        raise CompileError(f"TVM cannot compile the model for {arch}: {first.strip()}") from None
    timing = {f"tvm_{arch}_s": round(time.monotonic() - t, 3)}
    key = lambda ls: [(l.name, l.grid, l.block, l.args, l.reads, l.writes) for l in ls]  # noqa: E731
    if key(built.launches) != key(launches):
        raise CompileError(
            f"TVM lowers the schedule of {sched_arch} differently for {arch}; "
            "compile each architecture into its own directory"
        )
    path = out / f"kernels.{arch}.hsaco"
    path.write_bytes(built.code_object)
    t = time.monotonic()
    hdr = elf_header(built.code_object)
    if hdr["machine"] != EM_AMDGPU:
        raise CompileError(f"{path.name}: e_machine {hdr['machine']}, not EM_AMDGPU ({EM_AMDGPU})")
    target_id, res, readelf = read_metadata(path)
    if target_id.split(":")[0] != f"amdgcn-amd-amdhsa--{arch}":
        raise CompileError(f"{path.name}: target id {target_id!r}, not amdgcn-amd-amdhsa--{arch}")
    if CODE_OBJECT_VERSION < 5 and re.search(r"\.value_kind:\s+hidden_", _notes(path)):
        raise CompileError(
            f"{path.name}: a kernel takes hidden arguments, whose layout differs between "
            f"code object versions {CODE_OBJECT_VERSION} and 5 (the device library's ABI)"
        )
    symbols = kernel_symbols(path)
    data = data_symbols(path)
    for g in (PREEMPT_FLAG, EXEC_INDEX):
        if data.get(g) != 4:
            raise CompileError(f"{path.name}: no 4-byte global {g} (the injected preempt check)")
    for ln in launches:
        if ln.name not in symbols:
            raise CompileError(f"{arch}: kernel {ln.name} is not a symbol of {path.name}")
        if ln.name not in res:
            raise CompileError(f"{arch}: kernel {ln.name} has no AMDHSA metadata in {path.name}")
        bound = ln.block[0] * ln.block[1] * ln.block[2]
        if res[ln.name].max_flat_workgroup_size < bound:
            raise CompileError(
                f"{arch}: kernel {ln.name} is launched with {bound} threads per block, "
                f"its code object allows {res[ln.name].max_flat_workgroup_size}"
            )
    timing[f"readelf_{arch}_s"] = round(time.monotonic() - t, 3)
    resources = {}
    for name, r in sorted(res.items()):
        d = {k: v for k, v in vars(r).items()}
        # The fields reef-model reads for every architecture (as ptxas's):
        # registers per work item, static LDS per block, scratch per item.
        d.update(
            registers=r.vgpr_count,
            shared_static=r.group_segment_fixed_size,
            stack=r.private_segment_fixed_size,
        )
        resources[name] = d
    entry = {
        "file": path.name,
        "target_id": target_id,
        "code_object_version": hdr["abiversion"] + 2,  # ELFABIVERSION_AMDGPU_HSA_V4 = 2
        "e_machine": hdr["machine"],
        "e_flags": hdr["flags"],
        "bytes": len(built.code_object),
        "metadata_read_with": readelf,
    }
    return resources, entry, timing
