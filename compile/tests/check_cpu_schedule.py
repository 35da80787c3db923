"""Checks reef-compile's CPU loop order (lower._cpu_schedule) against the
unscheduled TIR functions it came from: every fused function of MODEL.onnx
is built for `llvm` both ways and run on the same random inputs, and every
output buffer must be equal bit for bit (each element sums its terms in
the same order). Prints one line per function with both times.

    .venv/bin/python compile/tests/check_cpu_schedule.py MODEL.onnx

Exits 1 if an output differs or no function was rescheduled (a model with
a convolution or a matmul must have one)."""

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tvm  # noqa: E402

from reef_compile import lower, onnx_input  # noqa: E402


def build(f, name):
    lib = tvm.tirx.build(
        tvm.IRModule({tvm.ir.GlobalVar(name): f.with_attr("global_symbol", name)}),
        target=tvm.target.Target("llvm"),
    )
    return lib[name]


def run(fn, f, seed):
    rng = np.random.default_rng(seed)
    args = []
    for b in f.params:
        shape = [int(d) for d in b.shape]
        dt = str(b.dtype)
        if dt.startswith("float"):
            a = rng.uniform(-1, 1, size=shape).astype(dt)
        elif dt == "bool":
            a = rng.integers(0, 2, size=shape).astype(dt)
        else:
            a = rng.integers(0, 2, size=shape).astype(dt)
        args.append(tvm.runtime.tensor(a))
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t, [a.numpy() for a in args]


def main() -> int:
    model = onnx_input.load(Path(sys.argv[1]))
    onnx_input.sanitize(model)
    mod, _ = lower.import_onnx(model)
    funcs = lower.cpu_functions(mod)
    changed = bad = 0
    t_before = t_after = 0.0
    for name, f in sorted(funcs.items()):
        g = lower._cpu_schedule(f)
        moved = not g.same_as(f)
        changed += moved
        t0, before = run(build(f, name), f, 7)
        t1, after = run(build(g, name), g, 7)
        t_before += t0
        t_after += t1
        same = all(np.array_equal(x, y, equal_nan=True) for x, y in zip(before, after))
        bad += not same
        print(f"{name}: {'rescheduled' if moved else 'kept'} {t0 * 1e3:.2f} -> {t1 * 1e3:.2f} ms"
              f"{'' if same else '  OUTPUTS DIFFER'}")
    print(f"{len(funcs)} functions, {changed} rescheduled, {bad} differing; "
          f"{t_before * 1e3:.1f} -> {t_after * 1e3:.1f} ms")
    return 1 if bad or not changed else 0


if __name__ == "__main__":
    sys.exit(main())
