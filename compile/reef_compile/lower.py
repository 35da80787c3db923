"""ONNX → TVM Relax → scheduled TIR → CUDA C, and what the schedule needs.

Follows TVM 0.27's own CUDA pipeline (tvm/relax/backend/cuda/pipeline.py):
library dispatch, legalization and fusion, dlight default schedules
(Matmul, GEMV, Reduction, GeneralReduction, Fallback), dataflow lowering and
static memory planning. The planned Relax `main` gives the launch order, the
storages and which storage every kernel argument lives in; the lowered TIR
gives each device kernel's thread extents (grid and block), its parameters
and the buffers it stores to (written) and loads values from before it ran
(read: its inputs; a buffer it loads only where it stored first, as TVM's
reductions kept in global memory do, is not one, `_loads_before_stores`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field

import numpy as np
import onnx
import tvm
from tvm import relax

from .ir import children, kind, walk
from .onnx_input import CompileError


@dataclass
class Storage:
    name: str  # "null" for intermediates (REEF format), else the tensor name
    nbytes: int
    dtype: str
    role: str  # input | param | intermediate | workspace | output
    data: np.ndarray | None = None  # params and constants
    shape: list[int] = field(default_factory=list)


@dataclass
class Launch:
    name: str  # PTX entry
    prim_func: str
    grid: list[int]
    block: list[int]
    dyn_shared: int
    args: list[int]  # storage indices, in the kernel's parameter order
    reads: list[int]
    writes: list[int]
    flops: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0


@dataclass
class CpuArg:
    storage: int
    dtype: str
    shape: list[int]


@dataclass
class CpuCall:
    """One call of a TIR function by the planned `main`: its arguments in
    the function's parameter order, each a tensor at offset 0 of a storage
    (the memory plan gives every tensor its own storage or one at offset
    0), and the launches it became (run the CPU build after the last)."""

    function: str
    args: list[CpuArg]
    kernels: list[int]


@dataclass
class Lowered:
    storages: list[Storage]
    launches: list[Launch]
    inputs: list[int]
    outputs: list[int]
    params: list[int]
    cuda_source: str
    calls: list[CpuCall] = field(default_factory=list)
    # The TIR functions main calls, fused and legalized but not yet
    # scheduled for the GPU (what the CPU build compiles).
    fused_prims: dict = field(default_factory=dict)


def _target(arch: str) -> tvm.target.Target:
    return tvm.target.Target({"kind": "cuda", "arch": arch})


def import_onnx(model: onnx.ModelProto):
    """Relax module with the initializers bound as constants.

    Parameters are not kept as function inputs: the onnx package's light
    models build their weights with ConstantOfShape from shape initializers,
    which only lower when those shapes are constants. Constant folding then
    leaves each weight as one constant, which becomes a `param` storage
    (named p0, p1, ... in order of first use, as in the REEF schedules).
    """
    import tvm.relax.frontend.onnx as fo  # noqa: F401  (must be imported explicitly)

    mod = fo.from_onnx(model)
    mod, params = relax.frontend.detach_params(mod)
    return mod, [p.numpy() for p in params.get("main", [])]


def to_fp16(mod):
    """The model at fp16 with fp32 accumulation (`reef-compile --fp16`,
    issue 31 item 3): TVM's `ToMixedPrecision` casts the inputs of matmuls
    and convolutions to float16 and accumulates them in float32
    (`out_dtype`), the rest of the graph computing in float16 where the
    pass allows it; `FoldConstant` then casts the weights once, so they
    are stored as float16. fp16 inputs are what dlight's Matmul rule needs
    to tensorize a GEMM for tensor cores (docs/compile.md "Tensor cores");
    the model's inputs and outputs keep their ONNX dtypes."""
    mod = relax.transform.ToMixedPrecision(out_dtype="float32")(mod)
    return relax.transform.FoldConstant()(mod)


def uses_tensor_cores(prim) -> bool:
    """Whether a scheduled TIR function was tensorized (dlight's
    `MatmulTensorization`: wmma fragments and `tvm_mma_sync`)."""
    return "tvm_mma_sync" in prim.script(show_meta=False)


def _dtype_size(dtype: str) -> int:
    return np.dtype("bool" if dtype == "bool" else dtype).itemsize


def _shape_of(ty) -> list[int]:
    return [int(v) for v in ty.shape.values]


@relax.expr_functor.mutator
class _ClipTake(relax.PyExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if (
            isinstance(call.op, tvm.ir.Op)
            and call.op.name == "relax.take"
            and call.attrs.mode == "fast"
        ):
            return relax.op.take(call.args[0], call.args[1], call.attrs.axis, mode="clip")
        return call


def _clip_takes(mod):
    """The CPU build's copy of the module with every `take` (ONNX Gather)
    clipping its indices: TVM's default "fast" mode does no bounds check,
    which on a GPU reads stray memory but on the CPU build can crash the
    process that runs it (a daemon given an out-of-range index, or stale
    bytes after a wrong restore). In range, both give the same values; the
    operator, its fusion, the function names and signatures are unchanged."""
    m = _ClipTake(mod)
    for gv, f in mod.functions.items():
        if isinstance(f, relax.Function):
            m.builder_.update_func(gv, m.visit_expr(f))
    return m.builder_.get()


def lower(mod, param_values: list[np.ndarray], arch: str, cpu: bool = True) -> Lowered:
    from tvm.relax.backend.cuda import pipeline as cuda
    from tvm.s_tir.analysis import estimate_tir_flops
    from tvm.tirx.build import codegen_build, split_host_device_mods

    target = _target(arch)
    with target:
        # Legalization and fusion, then dlight's GPU schedules (the last of
        # TVM's legalize passes) as a separate step: the module in between
        # holds the fused TIR functions with the kernels' names and buffer
        # signatures but no GPU loop structure, which is what the CPU build
        # compiles (cpu_library).
        legalize = cuda.legalize_passes(target)
        if type(legalize[-1]).__name__ != "ApplyDefaultSchedule":
            raise CompileError(
                f"TVM's CUDA legalize passes end with {type(legalize[-1]).__name__}, "
                "expected dlight's ApplyDefaultSchedule"
            )
        fuse = tvm.transform.Sequential(cuda.library_dispatch_passes(target) + legalize[:-1])
        # dlight schedules the TIR functions in place (the fused module's
        # functions come out scheduled too), so the CPU build gets a fused
        # module of its own (the passes are deterministic: same names and
        # signatures, checked below).
        fused_copy = _fuse_for_cpu(fuse, mod) if cpu else None
        fused = fuse(mod)
        # TVM's flop estimate of each function before dlight schedules it
        # (in place): a tensorized kernel's multiply-adds are opaque
        # `tvm_mma_sync` calls that `estimate_tir_flops` does not count.
        unscheduled = {
            gv.name_hint: float(estimate_tir_flops(tvm.IRModule({"main": f})))
            for gv, f in fused.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc)
        }
        seq = tvm.transform.Sequential(legalize[-1:] + cuda.dataflow_lower_passes(target))
        scheduled = seq(fused)
        planned = relax.transform.StaticPlanBlockMemory()(scheduled)
        final = tvm.transform.Sequential(cuda.finalize_passes(target)[1:])(planned)

    prims = {
        gv.name_hint: f
        for gv, f in planned.functions.items()
        if isinstance(f, tvm.tirx.PrimFunc)
    }
    flops = {
        n: float(estimate_tir_flops(tvm.IRModule({"main": f}))) for n, f in prims.items()
    }
    for n, f in prims.items():
        if n in unscheduled and uses_tensor_cores(f):
            flops[n] = unscheduled[n]

    # TIR: the same pipeline tvm.tirx.build runs, stopped before code
    # generation so the device kernels can be read.
    # Only the kernels main launches (legalization leaves unused ones behind,
    # e.g. reshapes that became views).
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
    tir_mod = tvm.tirx.transform.BindTarget(target.with_host(tvm.target.Target("llvm")))(tir_mod)
    pipe, _fin_host, fin_dev = tvm.tirx.get_default_tir_pipeline(target)
    tir_mod = pipe(tir_mod)
    host_mod, dev_mods = split_host_device_mods(tir_mod)
    if len(dev_mods) != 1:
        raise CompileError(f"expected one CUDA device module, TVM produced {len(dev_mods)}")
    (dev_target, dev_mod), = dev_mods.items()
    kernels = _device_kernels(dev_mod)
    host_launches = _host_launches(host_mod, set(kernels))
    rt = codegen_build(fin_dev()(dev_mod), dev_target)
    source = rt.inspect_source()

    storages, launches, inputs, outputs, params, calls = _walk_main(
        planned, prims, kernels, host_launches, param_values, flops
    )
    if fused_copy is None:
        return Lowered(storages, launches, inputs, outputs, params, source, calls, {})
    fused_prims = {
        gv.name_hint: f
        for gv, f in fused_copy.functions.items()
        if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint in called
    }
    missing = called - set(fused_prims)
    if missing:
        raise CompileError(f"TIR functions {sorted(missing)} are not in the fused module")
    for n, f in fused_prims.items():
        if f.attrs.get("tirx.is_scheduled", False) or len(f.params) != len(prims[n].params):
            raise CompileError(f"{n}: the CPU build's copy is scheduled or has another signature")
    return Lowered(storages, launches, inputs, outputs, params, source, calls, fused_prims)


# Linked into the CPU library: the one symbol TVM's llvm code needs from
# tvm-ffi's runtime (it reports a failed argument check through it), kept per
# thread for the caller (reef-cpu-kernels reads it after a nonzero return).
# TVM's export compiles it with g++, hence the C linkage.
_CPU_SHIM = r"""
#include <stdint.h>
#include <string.h>
#ifdef __cplusplus
extern "C" {
#endif
static __thread char reef_cpu_error[1024];
void TVMFFIErrorSetRaisedFromCStrParts(const char* kind, const char** parts, int32_t n) {
    size_t off = 0;
    reef_cpu_error[0] = 0;
    const char* all[2] = {kind, ": "};
    for (int32_t i = -2; i < n; ++i) {
        const char* p = i < 0 ? all[i + 2] : parts[i];
        if (p == 0) continue;
        size_t len = strlen(p);
        if (off + len >= sizeof(reef_cpu_error)) len = sizeof(reef_cpu_error) - 1 - off;
        memcpy(reef_cpu_error + off, p, len);
        off += len;
        reef_cpu_error[off] = 0;
    }
}
const char* reef_cpu_last_error(void) { return reef_cpu_error; }
#ifdef __cplusplus
}
#endif
"""


def _fuse_for_cpu(fuse, mod):
    return fuse(_clip_takes(mod))


def cpu_functions(mod, arch: str = "sm_80") -> dict:
    """The fused, unscheduled TIR functions of `mod` as the CPU build takes
    them (every one, launched or not), by name: for checks of the CPU
    schedule (compile/tests/check_cpu_schedule.py)."""
    from tvm.relax.backend.cuda import pipeline as cuda

    target = _target(arch)
    with target:
        legalize = cuda.legalize_passes(target)
        fuse = tvm.transform.Sequential(cuda.library_dispatch_passes(target) + legalize[:-1])
        fused = _fuse_for_cpu(fuse, mod)
    return {
        gv.name_hint: f
        for gv, f in fused.functions.items()
        if isinstance(f, tvm.tirx.PrimFunc)
    }


def _cpu_schedule(f):
    """The CPU build's loop order for one fused TIR function: in every
    reduction block whose loops are its spatial axes then its reduction
    axes (a convolution's n, f, y, x, rc, ry, rx; a matmul's i, j, k), the
    innermost spatial loop moves inside the reduction loops, the
    accumulator's initialisation is split out before them, and the inner
    loop is vectorised where TVM allows it. Each output element still sums
    its terms in the same order, so the values are bit for bit those of
    the unscheduled function (checked by compile/tests/check_cpu_schedule.py);
    the inner loop now walks the output and the input rows contiguously
    instead of striding through the filter, which made light_resnet50's
    calls 4.6 times faster on this machine (docs/compile.md "CPU build").
    Blocks of other shapes, and functions TVM cannot normalise, keep their
    loops."""
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.schedule import ScheduleError

    sch = s_tir.Schedule(f)
    try:
        infos = normalize_prim_func(sch)
    except (ScheduleError, tvm.error.InternalError):
        return f
    if infos is None:
        return f
    moved = 0
    for bi in infos:
        dk = bi.dom_kind()
        k = len(dk) - len(dk.lstrip("S"))
        if bi.is_injective() or k == 0 or set(dk[k:]) != {"R"}:
            continue
        loops = sch.get_loops(bi.block_rv)
        if len(loops) != len(dk):
            continue
        spatial, reduce = loops[:k], loops[k:]
        try:
            sch.reorder(*spatial[:-1], *reduce, spatial[-1])
            sch.decompose_reduction(bi.block_rv, reduce[0])
        except ScheduleError:
            # A refused primitive leaves the schedule as it was; a reorder
            # kept without the split is as valid (TVM runs the init at the
            # reduction's first iteration), only slower.
            continue
        moved += 1
        try:
            sch.vectorize(spatial[-1])
        except ScheduleError:
            pass
    return sch.mod["main"] if moved else f


def cpu_library(fused_prims: dict, path) -> None:
    """Compiles the fused, unscheduled TIR functions for the host CPU
    (TVM's llvm target, with `_cpu_schedule`'s loop order) into a shared
    object at `path`: each function is
    exported as `__tvm_ffi_<name>` with tvm-ffi's C calling convention
    (DLTensor arguments in the TIR function's parameter order), and the
    library needs nothing outside libc (docs/compile.md "CPU build")."""
    cpu = tvm.IRModule(
        {
            tvm.ir.GlobalVar(name): _cpu_schedule(f).with_attr("global_symbol", name)
            for name, f in sorted(fused_prims.items())
        }
    )
    lib = tvm.tirx.build(cpu, target=tvm.target.Target("llvm"))
    with tempfile.TemporaryDirectory(prefix="reef-compile-cpu-") as tmp:
        shim = os.path.join(tmp, "reef_cpu_shim.c")
        with open(shim, "w") as f:
            f.write(_CPU_SHIM)
        lib.export_library(str(path), addons=[shim], workspace_dir=tmp)


@dataclass
class _Kernel:
    name: str
    params: list[str]  # buffer names of the device parameters (`<buffer>_ptr`)
    extents: dict[str, int]
    stored: set[str]  # buffers stored to
    loaded: set[str]  # buffers loaded from
    dyn_shared: bool
    decls: dict[str, tuple[int, str]]  # buffer name -> (bytes, dtype) declared in the kernel
    # Buffers some load of which may see a value from before the kernel:
    # `loaded` less the buffers whose every load reads an element the same
    # thread stored earlier in the kernel (`_loads_before_stores`).
    inputs: set[str] = field(default_factory=set)


def _device_kernels(dev_mod) -> dict[str, _Kernel]:
    out = {}
    for gv, f in dev_mod.functions.items():
        extents: dict[str, int] = {}
        stored: set[str] = set()
        loaded: set[str] = set()
        decls: dict[str, tuple[int, str]] = {}

        def visit(n, extents=extents, stored=stored, loaded=loaded, decls=decls):
            if kind(n) == "tirx.DeclBuffer":
                b = n.buffer
                try:
                    elems = 1
                    for d in b.shape:
                        elems *= int(d)
                    decls[b.name] = (elems * _dtype_size(str(b.dtype)), str(b.dtype))
                except (TypeError, ValueError):
                    pass
            if kind(n) == "tirx.AttrStmt" and n.attr_key == "thread_extent":
                tag = n.node.thread_tag
                if not kind(n.value) == "ir.IntImm":
                    raise CompileError(
                        f"kernel {gv.name_hint}: {tag} extent {n.value} is not a constant"
                    )
                v = int(n.value)
                if extents.get(tag, v) != v:
                    raise CompileError(f"kernel {gv.name_hint}: two extents for {tag}")
                extents[tag] = v
            elif kind(n) == "tirx.BufferStore":
                stored.add(n.buffer.name)
            elif kind(n) in ("tirx.BufferLoad", "ir.TensorLoad"):
                loaded.add(_loaded_buffer(n))
            elif kind(n) in ("tirx.Call", "ir.Call") and getattr(n.op, "name", "") in (
                "tirx.address_of",
                "tirx.tvm_access_ptr",
                "tirx.ptx_cp_async",
            ):
                # Pointers taken for asynchronous copies or intrinsics: count
                # the buffer as both read and written (conservative).
                def inner(m):
                    if kind(m) in ("tirx.BufferLoad", "ir.TensorLoad"):
                        stored.add(_loaded_buffer(m))
                        loaded.add(_loaded_buffer(m))

                for a in n.args:
                    walk(a, inner)

        walk(f.body, visit)
        inputs = _loads_before_stores(f.body) & loaded
        tags = [str(t) for t in f.attrs.get("tirx.kernel_launch_params", [])]
        out[gv.name_hint] = _Kernel(
            name=gv.name_hint,
            params=[p.name[: -len("_ptr")] if p.name.endswith("_ptr") else p.name for p in f.params],
            extents=extents,
            stored=stored,
            loaded=loaded,
            inputs=inputs,
            dyn_shared="tirx.use_dyn_shared_memory" in tags,
            decls=decls,
        )
        for p in f.params:
            if not str(p.ty).startswith("T.handle"):
                raise CompileError(
                    f"kernel {gv.name_hint}: scalar parameter {p.name} ({p.ty}); "
                    "only static-shape models are supported"
                )
    return out


_LOADS = ("tirx.BufferLoad", "ir.TensorLoad")
_CALLS = ("tirx.Call", "ir.Call")
# Calls a guard or an index may hold and still name the same value
# wherever it is evaluated in a thread (no memory, no side effects).
_PURE_OPS = {"tirx.likely", "tirx.if_then_else", "tirx.shift_left", "tirx.shift_right",
             "tirx.bitwise_and", "tirx.bitwise_or", "tirx.bitwise_xor", "tirx.bitwise_not"}


def _pure(e) -> bool:
    """Whether `e` reads no memory and calls nothing impure, so two
    occurrences of it in one thread (same variables) have one value."""
    ok = [True]

    def v(n):
        k = kind(n)
        if k in _LOADS or (k in _CALLS and getattr(n.op, "name", "") not in _PURE_OPS):
            ok[0] = False
            return True
        return None

    walk(e, v)
    return ok[0]


def _loads_before_stores(body) -> set[str]:
    """The buffers of a device kernel some load of which may read a value
    from before the kernel ran: every loaded buffer except those whose
    every load reads an element the same thread certainly stored earlier.

    TVM's GPU schedules keep many reductions in global memory: the
    thread's output element is initialised (`X[i] = 0`, `-inf` for max
    pooling) and then accumulated (`X[i] = X[i] + ...`). The kernel loads
    X, but only what it stored itself, so X's previous contents are not an
    input: re-running the kernel after a kill gives the same result (REEF
    §4.4's condition for idempotence: the first access to each location is
    a write), and the version tracker must not make its output depend on
    X's previous version. A load `X[e]` counts as covered when an earlier
    store `X[e']` in program order has `e'` structurally equal to `e`
    (pure: no loads), sits under a subset of the load's guards (pure `if`
    conditions, same branch) and inside a subset of its loops (same
    iteration). Anything else (another thread's element, a store in a loop
    the load is not in, a pointer taken for an intrinsic) is an input.
    """
    import tvm

    read: set[str] = set()
    stores: list[tuple[str, list, list, list]] = []  # buffer, indices, guards, loops

    def same(a, b) -> bool:
        if isinstance(a, _Opaque) or isinstance(b, _Opaque):
            return a is b
        return _same(a, b)

    def guard_in(g, gs) -> bool:
        return any(h[1] == g[1] and same(h[0], g[0]) for h in gs)

    def covered(name, indices, guards, loops) -> bool:
        if not all(_pure(i) for i in indices):
            return False
        for b, idx, gs, ls in stores:
            if b != name or len(idx) != len(indices):
                continue
            if not all(_same(a, c) for a, c in zip(idx, indices)):
                continue
            if not all(guard_in(g, guards) for g in gs):
                continue
            if not all(any(same(lv, x) for x in loops) for lv in ls):
                continue
            return True
        return False

    def loads(e, guards, loops):
        def v(n):
            k = kind(n)
            if k in _LOADS:
                name = _loaded_buffer(n)
                if not covered(name, list(n.indices), guards, loops):
                    read.add(name)
                for i in n.indices:
                    walk(i, v)
                return True
            if k in _CALLS and getattr(n.op, "name", "") in (
                "tirx.address_of",
                "tirx.tvm_access_ptr",
                "tirx.ptx_cp_async",
            ):
                def inner(m):
                    if kind(m) in _LOADS:
                        read.add(_loaded_buffer(m))

                for a in n.args:
                    walk(a, inner)
                return True
            return None

        walk(e, v)

    def stmt(n, guards, loops):
        k = kind(n)
        if k == "tirx.SeqStmt":
            for x in n.seq:
                stmt(x, guards, loops)
        elif k == "tirx.IfThenElse":
            c = n.condition
            loads(c, guards, loops)
            # An impure condition is a guard only inside its own branch.
            key = c if _pure(c) else _Opaque()
            stmt(n.then_case, guards + [(key, True)], loops)
            if n.else_case is not None:
                stmt(n.else_case, guards + [(key, False)], loops)
        elif k == "tirx.For":
            loads(n.min, guards, loops)
            loads(n.extent, guards, loops)
            stmt(n.body, guards, loops + [n.loop_var])
        elif k == "tirx.While":
            # Runs its body any number of times: a store in it covers
            # only later loads of the same iteration.
            loads(n.condition, guards, loops)
            stmt(n.body, guards, loops + [_Opaque()])
        elif k == "tirx.BufferStore":
            # The value's loads happen before the store.
            loads(n.value, guards, loops)
            for i in n.indices:
                loads(i, guards, loops)
            if all(_pure(i) for i in n.indices):
                stores.append((n.buffer.name, list(n.indices), guards, loops))
        elif isinstance(n, tvm.tirx.Stmt):
            for c in children(n):
                if isinstance(c, tvm.tirx.Stmt):
                    stmt(c, guards, loops)
                else:
                    loads(c, guards, loops)
        else:
            loads(n, guards, loops)

    stmt(body, [], [])
    return read


class _Opaque:
    """A guard or loop that matches only itself."""


def _same(a, b) -> bool:
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(a, b, map_free_vars=False))


def _loaded_buffer(n) -> str:
    """The buffer a load reads (TVM 0.27 prints it as `ir.TensorLoad` whose
    `source` is the buffer)."""
    b = getattr(n, "buffer", None) or getattr(n, "source", None)
    return str(getattr(b, "name", b))


def _host_launches(host_mod, kernel_names: set[str]) -> dict[str, list[tuple[str, int]]]:
    """Per host PrimFunc: (kernel, dynamic shared bytes) in launch order."""
    out: dict[str, list[tuple[str, int]]] = {}
    for gv, f in host_mod.functions.items():
        seq: list[tuple[str, int]] = []

        def visit(n, seq=seq):
            if kind(n) in ("tirx.Call", "ir.Call") and n.args and kind(n.args[0]) == "ir.StringImm":
                k = n.args[0].value
                if k in kernel_names:
                    seq.append((k, n.args))
                    return True
            return None

        walk(f.body, visit)
        out[gv.name_hint] = seq
    return out


def _walk_main(planned, prims, kernels, host_launches, param_values, flops):
    main = planned["main"]
    num_input = int(main.attrs.get("num_input", len(main.params)))
    storages: list[Storage] = []
    where: dict = {}  # relax Var -> storage index
    inputs, params = [], []
    if len(main.params) - num_input != len(param_values):
        raise CompileError(
            f"TVM kept {len(main.params) - num_input} parameters but returned "
            f"{len(param_values)} values"
        )
    for i, p in enumerate(main.params):
        shape = _shape_of(p.ty)
        dtype = str(p.ty.dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * _dtype_size(dtype)
        is_input = i < num_input
        storages.append(
            Storage(
                name=p.name,
                nbytes=nbytes,
                dtype=dtype,
                role="input" if is_input else "param",
                data=None if is_input else param_values[i - num_input],
                shape=shape,
            )
        )
        where[p] = len(storages) - 1
        (inputs if is_input else params).append(len(storages) - 1)

    def storage_of(e, what: str) -> int:
        k = kind(e)
        if k == "ir.Var":
            if e in where:
                return where[e]
            raise CompileError(f"{what}: {e.name} is not backed by a planned storage")
        if k.endswith("Constant") or (k == "ir.GenericConst" and hasattr(e.value, "numpy")):
            arr = (e.data if hasattr(e, "data") else e.value).numpy()
            storages.append(
                Storage(
                    name=f"p{sum(s.role == 'param' for s in storages)}",
                    nbytes=arr.nbytes,
                    dtype=str(arr.dtype),
                    role="param",
                    data=arr,
                    shape=list(arr.shape),
                )
            )
            where[e] = len(storages) - 1
            params.append(len(storages) - 1)
            return len(storages) - 1
        raise CompileError(f"{what}: unsupported argument {k}")

    def op_name(c) -> str:
        return str(getattr(c.op, "name", "")) if kind(c.op) == "ir.Op" else ""

    launches: list[Launch] = []
    calls: list[CpuCall] = []
    tuples: dict = {}  # relax Var bound to a tuple -> its storages
    body = main.body
    for block in body.blocks:
        for b in block.bindings:
            v, e = b.var, b.value
            ke = kind(e)
            op = op_name(e) if ke == "ir.Call" else ""
            if ke == "ir.Var" and e in tuples:
                tuples[v] = tuples[e]
            elif ke == "ir.Var":
                where[v] = storage_of(e, v.name)
            elif ke.endswith("Tuple"):
                tuples[v] = [storage_of(f, v.name) for f in e.fields]
            elif ke.endswith("TupleGetItem"):
                tup = getattr(e, "tuple_value", None)
                if tup is None or tup not in tuples:
                    raise CompileError(f"{v.name}: element of an unknown tuple")
                where[v] = tuples[tup][int(e.index)]
            elif op == "relax.memory.alloc_storage":
                size = int(e.args[0].values[0])
                dtype = str(e.args[3].value)
                storages.append(Storage("null", size, dtype, "intermediate"))
                where[v] = len(storages) - 1
            elif op == "relax.memory.alloc_tensor":
                off = int(e.args[1].value)
                if off != 0:
                    raise CompileError(f"{v.name}: tensor at offset {off} in its storage")
                where[v] = storage_of(e.args[0], v.name)
                storages[where[v]].shape = _shape_of(v.ty)
            elif op == "relax.builtin.alloc_tensor":
                shape = _shape_of(v.ty)
                dtype = str(v.ty.dtype)
                nbytes = int(np.prod(shape, dtype=np.int64)) * _dtype_size(dtype)
                storages.append(Storage(v.name, nbytes, dtype, "intermediate", shape=shape))
                where[v] = len(storages) - 1
            elif op in ("relax.reshape", "relax.memory.view", "relax.memory.ensure_zero_offset"):
                # Views: no kernel, same bytes.
                where[v] = storage_of(e.args[0], v.name)
            elif ke == "ir.Call" and kind(e.op) == "ir.GlobalVar":
                fname = e.op.name_hint
                if fname not in prims:
                    raise CompileError(f"call to {fname}, which is not a TIR kernel")
                arg_storages = [storage_of(a, fname) for a in e.args]
                new = _launches_of(
                    fname,
                    prims[fname],
                    arg_storages,
                    kernels,
                    host_launches.get(fname, []),
                    storages,
                    flops.get(fname, 0.0),
                )
                calls.append(
                    CpuCall(
                        function=fname,
                        args=_cpu_args(fname, prims[fname], arg_storages, storages),
                        kernels=list(range(len(launches), len(launches) + len(new))),
                    )
                )
                launches += new
            else:
                what = op or ke
                raise CompileError(
                    f"{v.name}: TVM lowered the graph to {what}, which reef-compile "
                    "cannot express as a kernel launch"
                )
    ret = body.body
    if kind(ret).endswith("Tuple"):
        out_idx = [storage_of(r, "output") for r in ret.fields]
    elif ret in tuples:
        out_idx = list(tuples[ret])
    else:
        out_idx = [storage_of(ret, "output")]
    outputs = []
    for si in out_idx:
        storages[si].role = "output"
        outputs.append(si)
    return storages, launches, inputs, outputs, params, calls


def _cpu_args(fname, prim, arg_storages, storages) -> list[CpuArg]:
    """The TIR function's parameters as tensors in their storages: dtype and
    shape from the function's own buffers (what its CPU build checks)."""
    out = []
    bmap = getattr(prim, "buffer_map", None)
    for p, s in zip(prim.params, arg_storages):
        b = bmap[p] if bmap is not None and p in bmap else p
        try:
            shape = [int(d) for d in b.shape]
        except (TypeError, ValueError):
            raise CompileError(f"{fname}: parameter {b.name} has a symbolic shape") from None
        dtype = str(b.dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * _dtype_size(dtype)
        if nbytes > storages[s].nbytes:
            raise CompileError(
                f"{fname}: parameter {b.name} ({nbytes} B) does not fit its storage "
                f"{s} ({storages[s].nbytes} B)"
            )
        out.append(CpuArg(storage=s, dtype=dtype, shape=shape))
    return out


def _launches_of(fname, prim, arg_storages, kernels, host_seq, storages, flops):
    # Device kernel parameter `X_ptr` is the data of the PrimFunc's buffer X.
    data_to_arg: dict[str, int] = {}
    for i, p in enumerate(prim.params):
        # TVM 0.27 (tirx): a PrimFunc parameter is the buffer itself.
        bmap = getattr(prim, "buffer_map", None)
        bname = bmap[p].name if bmap is not None and p in bmap else p.name
        if bname in data_to_arg:
            raise CompileError(f"{fname}: two parameters use the buffer name {bname}")
        data_to_arg[bname] = i
    if len(arg_storages) != len(prim.params):
        raise CompileError(f"{fname}: called with {len(arg_storages)} args, has {len(prim.params)}")
    if not host_seq:
        raise CompileError(f"{fname}: lowered to no GPU kernel (host-only code)")
    out = []
    # Global-memory buffers the PrimFunc allocates itself (TVM's workspace,
    # e.g. a split reduction's partial results) become storages of their own,
    # shared by the kernels of this call.
    workspace: dict[str, int] = {}
    loaded_by: list[list[int]] = []
    total_threads = 0
    for kname, _ in host_seq:
        k = kernels[kname]
        total_threads += _prod(_grid(k)) * _prod(_block(k))
    for kname, call_args in host_seq:
        k = kernels[kname]
        # reads: what the kernel's result depends on (loads of values from
        # before it ran); loaded: the storages it loads from at all (its
        # traffic, bytes_read).
        args, reads, writes, loaded = [], [], [], []
        for pname in k.params:
            if pname in data_to_arg:
                s = arg_storages[data_to_arg[pname]]
            elif pname in workspace:
                s = workspace[pname]
            elif pname in k.decls:
                nbytes, dtype = k.decls[pname]
                storages.append(Storage("null", nbytes, dtype, "workspace"))
                s = workspace[pname] = len(storages) - 1
            else:
                raise CompileError(f"{kname}: parameter {pname} matches no argument of {fname}")
            args.append(s)
            if pname in k.stored and s not in writes:
                writes.append(s)
            if pname in k.inputs and s not in reads:
                reads.append(s)
            if pname in k.loaded and s not in loaded:
                loaded.append(s)
        if not writes:
            raise CompileError(f"{kname}: writes none of its parameters")
        dyn = 0
        if k.dyn_shared:
            last = call_args[-1]
            if not kind(last) == "ir.IntImm":
                raise CompileError(f"{kname}: dynamic shared memory size is not constant")
            dyn = int(last)
        grid, block = _grid(k), _block(k)
        share = _prod(grid) * _prod(block) / total_threads if total_threads else 1.0
        out.append(
            Launch(
                name=kname,
                prim_func=fname,
                grid=grid,
                block=block,
                dyn_shared=dyn,
                args=args,
                reads=reads,
                writes=writes,
                flops=flops * share,
                bytes_read=sum(storages[s].nbytes for s in loaded),
                bytes_written=sum(storages[s].nbytes for s in writes),
            )
        )
        loaded_by.append(loaded)
    # A workspace only one kernel uses holds nothing before that kernel runs:
    # whatever it loads from it, it stored there itself (a correct kernel
    # never reads uninitialised memory), so it is not an input of the kernel
    # and re-executing the kernel is unaffected by it.
    for ws in workspace.values():
        users = [(i, ln) for i, ln in enumerate(out) if ws in ln.args]
        if len(users) == 1 and ws in loaded_by[users[0][0]]:
            if ws in users[0][1].reads:
                users[0][1].reads.remove(ws)
            users[0][1].bytes_read -= storages[ws].nbytes
    return out


def _grid(k: _Kernel) -> list[int]:
    return [k.extents.get(f"blockIdx.{a}", 1) for a in "xyz"]


def _block(k: _Kernel) -> list[int]:
    return [k.extents.get(f"threadIdx.{a}", 1) for a in "xyz"]


def _prod(v) -> int:
    p = 1
    for x in v:
        p *= x
    return p
