"""`reef-compile MODEL.onnx --arch sm_80 [--arch sm_90] [--arch gfx906] -o DIR`
(issue 14; AMD architectures: issue 29).

Writes DIR/NAME.json (NAME = DIR's last component; the REEF kernel schedule
reef-model loads, extended with read/write sets, resources and work),
DIR/kernels.ARCH.ptx, DIR/kernels.ARCH.hsaco for AMD architectures (amd.py),
DIR/kernels.cu, DIR/weights.bin and DIR/reference/.
The layout and every field are described in docs/compile.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .onnx_input import CompileError

WEIGHT_ALIGN = 256  # bytes; cudaMalloc's alignment, so each weight can be copied in place
CPU_LIBRARY = "cpu.so"  # the CPU build of the launched TIR functions (docs/compile.md)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="reef-compile",
        description="Compile an ONNX model with Apache TVM to PTX (and AMD code objects), a REEF kernel "
        "schedule, weights and per-kernel resources (docs/compile.md).",
    )
    p.add_argument("model", type=Path, help="the .onnx model (static shapes)")
    p.add_argument(
        "--arch",
        action="append",
        required=True,
        help="NVIDIA architecture, e.g. sm_80, or AMD gfx906 / gfx90a; repeat for several "
        "(the first NVIDIA one's schedule is written, the others must launch the same "
        "kernels; AMD architectures get a code object each, docs/compile.md)",
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="model directory to write")
    p.add_argument(
        "--no-reference",
        action="store_true",
        help="skip the CPU (llvm) reference input/output pair",
    )
    p.add_argument(
        "--fp16",
        action="store_true",
        help="compute at fp16 with fp32 accumulation (TVM ToMixedPrecision): dlight then "
        "tensorizes large GEMMs for tensor cores on sm_70 and later (docs/compile.md "
        "\"Tensor cores\"); each kernel's mma count is in resources",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the reference input (default 0)")
    p.add_argument(
        "--no-cpu",
        action="store_true",
        help="skip the CPU build (cpu.so) the simulated devices compute real values with; "
        "they then keep version tracking for this model",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        compile_model(args)
    except CompileError as e:
        print(f"reef-compile: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("reef-compile: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # TVM raises its own errors with long C++ traces
        first = next((l for l in str(e).splitlines() if l.strip()), type(e).__name__)
        print(
            f"reef-compile: error: TVM cannot compile {args.model}: {type(e).__name__}: "
            f"{first.strip()} (set REEF_COMPILE_TRACE=1 for the trace)",
            file=sys.stderr,
        )
        if os.environ.get("REEF_COMPILE_TRACE"):
            raise
        return 1
    return 0


def compile_model(args) -> None:
    from . import amd, nvidia, onnx_input

    t0 = time.monotonic()
    archs = list(dict.fromkeys(args.arch))
    amd_archs = [a for a in archs if amd.is_amd(a)]
    archs = [a for a in archs if not amd.is_amd(a)]
    for a in amd_archs:
        amd.check_arch(a)
    if amd_archs:
        if not archs:
            raise CompileError(
                f"--arch {amd_archs[0]} needs an NVIDIA --arch too (e.g. --arch sm_80): the "
                "AMD code objects share its schedule"
            )
        amd.check_tools()
    for a in archs:
        nvidia.check_arch(a)
    model = onnx_input.load(args.model)
    onnx_input.check_operators(args.model, model)
    onnx_input.validate(args.model, model)
    onnx_input.check_static(args.model, model)
    names = onnx_input.sanitize(model)

    import tvm

    from . import lower

    try:
        mod, param_values = lower.import_onnx(model)
    except tvm.error.OpNotImplemented as e:
        raise CompileError(f"{args.model}: {str(e).splitlines()[0]}") from None
    if args.fp16:
        mod = lower.to_fp16(mod)

    out = args.output
    name = out.resolve().name
    out.mkdir(parents=True, exist_ok=True)
    per_arch = {}
    timing = {}
    for arch in archs:
        t = time.monotonic()
        try:
            lowered = lower.lower(mod, param_values, arch, cpu=not args.no_cpu and arch == archs[0])
        except CompileError:
            raise
        except Exception as e:  # TVM's own errors: first line only
            first = next((l for l in str(e).splitlines() if l.strip()), type(e).__name__)
            raise CompileError(
                f"{args.model}: TVM cannot lower the model for {arch}: {first.strip()}"
            ) from None
        timing[f"tvm_{arch}_s"] = round(time.monotonic() - t, 3)
        per_arch[arch] = lowered
    first = per_arch[archs[0]]
    # Output storages carry the model's output names (sanitized).
    for si, o in zip(first.outputs, model.graph.output):
        first.storages[si].name = o.name
    for arch in archs[1:]:
        if _launch_key(per_arch[arch]) != _launch_key(first):
            raise CompileError(
                f"TVM schedules the model differently for {archs[0]} and {arch}; "
                "compile each architecture into its own directory"
            )

    resources = {}
    ptx_files = {}
    toolchain = {}
    with tempfile.TemporaryDirectory(prefix="reef-compile-") as tmp:
        for arch in archs:
            cu = out / "kernels.cu" if arch == archs[0] else Path(tmp) / f"{arch}.cu"
            cu.write_text(per_arch[arch].cuda_source)
            ptx = out / f"kernels.{arch}.ptx"
            t = time.monotonic()
            nvidia.cuda_to_ptx(cu, ptx, arch)
            # nvrtc_sm_70_s for the CUDA 12.9 route (nvidia.CUDA12_ARCHS).
            ptx_tool = "nvrtc" if nvidia.uses_cuda12(arch) else "nvcc"
            timing[f"{ptx_tool}_{arch}_s"] = round(time.monotonic() - t, 3)
            if not args.no_cpu:
                with open(ptx, "a") as f:
                    f.write(_cpu_annotations(first, (out / CPU_LIBRARY).resolve()))
            t = time.monotonic()
            res = nvidia.ptxas_resources(ptx, arch, Path(tmp) / f"{arch}.cubin")
            timing[f"ptxas_{arch}_s"] = round(time.monotonic() - t, 3)
            entries = nvidia.ptx_entries(ptx.read_text())
            for ln in first.launches:
                if ln.name not in entries or ln.name not in res:
                    raise CompileError(f"{arch}: kernel {ln.name} is not an entry of {ptx.name}")
                if entries[ln.name] != len(ln.args):
                    raise CompileError(
                        f"{arch}: kernel {ln.name} has {entries[ln.name]} PTX parameters, "
                        f"the schedule passes {len(ln.args)}"
                    )
            mma = nvidia.mma_counts(ptx.read_text())
            resources[arch] = {k: vars(v) | {"mma": mma.get(k, 0)} for k, v in sorted(res.items())}
            ptx_files[arch] = ptx.name
            toolchain[arch] = nvidia.toolchain(arch)
    code_objects = {}
    for arch in amd_archs:
        resources[arch], code_objects[arch], t_amd = amd.compile_arch(
            mod, param_values, archs[0], arch, first.launches, out
        )
        timing.update(t_amd)

    if args.no_cpu:
        (out / CPU_LIBRARY).unlink(missing_ok=True)
    else:
        t = time.monotonic()
        lower.cpu_library(first.fused_prims, out / CPU_LIBRARY)
        timing["cpu_s"] = round(time.monotonic() - t, 3)
    weights = _write_weights(out, first.storages)
    reference = None
    if not args.no_reference:
        t = time.monotonic()
        reference = _reference(out, mod, param_values, first, args.seed, args.fp16)
        timing["reference_s"] = round(time.monotonic() - t, 3)
    timing["total_s"] = round(time.monotonic() - t0, 3)

    schedule = _schedule(first, resources, archs[0])
    schedule.update(
        {
            "format": "reef-compile/1",
            "source": {
                "onnx": str(args.model),
                "sha256": hashlib.sha256(args.model.read_bytes()).hexdigest(),
            },
            "tvm": tvm.__version__,
            "fp16": args.fp16,
            "archs": archs,
            "ptx": ptx_files,
            "toolchain": toolchain,
            "cuda": "kernels.cu",
            "inputs": first.inputs,
            "outputs": first.outputs,
            "params": first.params,
            "weights": weights,
            "reference": reference,
            "cpu": None if args.no_cpu else _cpu_section(first),
            "names": {k: v for k, v in names.items() if k != v},
            "resources": resources,
            "amd_archs": amd_archs,
            "code_objects": code_objects,
            "compile_time": timing,
        }
    )
    (out / f"{name}.json").write_text(json.dumps(schedule, indent=1) + "\n")
    print(
        f"reef-compile: {args.model} -> {out}/{name}.json: {len(first.launches)} kernels, "
        f"{len(first.storages)} storages, {', '.join(archs + amd_archs)}, {timing['total_s']:.1f} s",
        file=sys.stderr,
    )


def _launch_key(lowered):
    return [(l.name, l.grid, l.block, l.args, l.reads, l.writes) for l in lowered.launches]


def _schedule(lowered, resources, arch0) -> dict:
    storage = []
    for s in lowered.storages:
        dt = "uint1" if s.dtype == "bool" else s.dtype
        es = np.dtype("bool" if s.dtype == "bool" else s.dtype).itemsize
        if s.nbytes % es:
            raise CompileError(f"storage {s.name}: {s.nbytes} B is not whole {dt} elements")
        entry = {"name": s.name, "size": s.nbytes // es, "stype": dt, "role": s.role}
        # The tensor shapes a request sends and gets back, also without a
        # reference run (reefd declares them: `models show`).
        if s.role in ("input", "output") and s.shape and int(np.prod(s.shape)) == s.nbytes // es:
            entry["shape"] = [int(d) for d in s.shape]
        storage.append(entry)
    kernels = []
    shared = {}
    for ln in lowered.launches:
        kernels.append(
            {
                "name": ln.name,
                "launch_params": ln.grid + ln.block,
                "args": ln.args,
                "reads": ln.reads,
                "writes": ln.writes,
                "flops": round(ln.flops),
                "bytes_read": ln.bytes_read,
                "bytes_written": ln.bytes_written,
                "prim_func": ln.prim_func,
                "dynamic_shared_bytes": ln.dyn_shared,
            }
        )
        shared[ln.name] = resources[arch0][ln.name]["shared_static"] + ln.dyn_shared
    return {
        "storage": storage,
        "kernels": kernels,
        "args": lowered.inputs + lowered.params,
        "shared_memory": shared,
    }


def _cpu_section(lowered) -> dict:
    """What runs each kernel's computation on the CPU: one entry per call of
    a TIR function, in launch order; its CPU build runs once the last of its
    `kernels` completes."""
    return {
        "library": CPU_LIBRARY,
        "target": "llvm",
        "abi": "tvm-ffi",
        "calls": [
            {
                "function": c.function,
                "symbol": f"__tvm_ffi_{c.function}",
                "args": [{"storage": a.storage, "dtype": a.dtype, "shape": a.shape} for a in c.args],
                "kernels": c.kernels,
            }
            for c in lowered.calls
        ],
    }


def _cpu_annotations(lowered, library: Path) -> str:
    """`// reef-cpu:` lines for the simulated libcuda (driver-sim/src/cpu.rs):
    which function of `library` a kernel computes and in which of its PTX
    parameters each argument's pointer is, on the call's last kernel. A
    function TVM split into several kernels (a reduction in two passes
    through a workspace) names its earlier kernels in `after=`, which must
    all have run whole before the last one for the call to give real
    values, and an argument the last kernel does not carry as `K.P`:
    parameter P of the latest launch of kernel K on the stream. A call with
    an argument none of its kernels takes keeps the stand-in values."""
    lines = [f"// reef-cpu: library={library}"]
    seen: dict[str, str] = {}
    for c in lowered.calls:
        ln = lowered.launches[c.kernels[-1]]
        earlier = [lowered.launches[k] for k in c.kernels[:-1]]

        def where(storage, ln=ln, earlier=earlier):
            if storage in ln.args:
                return str(ln.args.index(storage))
            for e in reversed(earlier):
                if storage in e.args:
                    if "." in e.name:
                        raise CompileError(f"kernel {e.name}: a '.' in its name")
                    return f"{e.name}.{e.args.index(storage)}"
            return None

        if any(where(a.storage) is None for a in c.args):
            # An argument no kernel of the call takes: the call keeps the
            # stand-in values (none of the tested models has one).
            continue
        args = ",".join(
            f"{where(a.storage)}:{a.dtype}:{'x'.join(map(str, a.shape)) or '_'}" for a in c.args
        )
        written = {w for k in c.kernels for w in lowered.launches[k].writes}
        writes = ",".join(where(a.storage) for a in c.args if a.storage in written)
        line = f"// reef-cpu: kernel={ln.name} function={c.function} args={args} writes={writes}"
        if earlier:
            line += " after=" + ",".join(e.name for e in earlier)
        if seen.get(ln.name, line) != line:
            raise CompileError(f"kernel {ln.name}: two calls give it different CPU arguments")
        if ln.name not in seen:
            seen[ln.name] = line
            lines.append(line)
    return "\n".join(lines) + "\n"


def _write_weights(out: Path, storages) -> dict:
    entries = []
    off = 0
    with open(out / "weights.bin", "wb") as f:
        for i, s in enumerate(storages):
            if s.data is None:
                continue
            pad = (-off) % WEIGHT_ALIGN
            f.write(b"\0" * pad)
            off += pad
            data = np.ascontiguousarray(s.data).astype(s.data.dtype.newbyteorder("<"))
            raw = data.tobytes()
            f.write(raw)
            entries.append(
                {
                    "storage": i,
                    "name": s.name,
                    "offset": off,
                    "bytes": len(raw),
                    "dtype": str(s.data.dtype),
                    "shape": list(s.data.shape),
                }
            )
            off += len(raw)
    return {"file": "weights.bin", "bytes": off, "align": WEIGHT_ALIGN, "entries": entries}


def _reference(out: Path, mod, param_values, lowered, seed: int, fp16: bool = False) -> dict:
    """Inputs and outputs of the same Relax module compiled for the CPU."""
    import tvm
    from tvm import relax

    ex = tvm.compile(mod, tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    rng = np.random.default_rng(seed)
    ref = out / "reference"
    if ref.exists():
        shutil.rmtree(ref)
    ref.mkdir()
    ins = []
    args = []
    for si in lowered.inputs:
        s = lowered.storages[si]
        if np.issubdtype(np.dtype(s.dtype), np.floating):
            a = rng.uniform(-1.0, 1.0, size=s.shape).astype(s.dtype)
        else:
            a = rng.integers(0, 2, size=s.shape).astype(s.dtype)
        fn = f"input{len(ins)}.bin"
        a.astype(a.dtype.newbyteorder("<")).tofile(ref / fn)
        ins.append({"storage": si, "name": s.name, "file": f"reference/{fn}", "dtype": s.dtype, "shape": s.shape})
        args.append(tvm.runtime.tensor(a))
    args += [tvm.runtime.tensor(p) for p in param_values]
    res = vm["main"](*args)
    # One output is a tensor; several come back as a sequence of tensors.
    res = [res] if hasattr(res, "numpy") else list(res)
    outs = []
    for si, r in zip(lowered.outputs, res):
        a = r.numpy()
        fn = f"output{len(outs)}.bin"
        a.astype(a.dtype.newbyteorder("<")).tofile(ref / fn)
        outs.append({"storage": si, "name": lowered.storages[si].name, "file": f"reference/{fn}", "dtype": str(a.dtype), "shape": list(a.shape)})
    return {
        "target": "llvm",
        "seed": seed,
        "input_distribution": "uniform(-1, 1) for floats, {0, 1} for integers",
        "inputs": ins,
        "outputs": outs,
        # fp16 (--fp16): the CPU computes the same fp16 module, but not in
        # the GPU's order (tensor cores accumulate 16-wide tiles); half a
        # percent is a few fp16 ulps (2^-11 relative) over the reduction.
        "tolerance": {"rtol": 1e-2, "atol": 1e-2} if fp16 else {"rtol": 1e-4, "atol": 1e-4},
    }


if __name__ == "__main__":
    sys.exit(main())
