"""Runs an ONNX model with ONNX Runtime on a seeded input and writes the
input and output tensors as raw little-endian files plus a manifest, the
reference the CPU build of a compiled model is checked against (issue 30;
cargo test -p reef-cpu-kernels):

    .venv/bin/python compile/tests/ort_reference.py MODEL.onnx OUTDIR [--seed N] [--int-high N]

Floats are uniform(-1, 1); integers uniform in [0, int-high) (default 2).
OUTDIR/manifest.json lists `inputs` and `outputs` in the graph's order, each
{name, dtype, shape, file}.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--int-high", type=int, default=2)
    a = p.parse_args()
    model = onnx.load(a.model)
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(a.seed)
    a.out.mkdir(parents=True, exist_ok=True)
    feeds, ins = {}, []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
        shape = [d.dim_value for d in t.shape.dim]
        if np.issubdtype(dt, np.floating):
            x = rng.uniform(-1.0, 1.0, size=shape).astype(dt)
        else:
            x = rng.integers(0, a.int_high, size=shape).astype(dt)
        feeds[vi.name] = x
        fn = f"input{len(ins)}.bin"
        x.astype(x.dtype.newbyteorder("<")).tofile(a.out / fn)
        ins.append({"name": vi.name, "dtype": str(dt), "shape": shape, "file": fn})
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # errors only
    # The plain graph: ORT's fusions would change the order of float sums.
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(a.model), opts, providers=["CPUExecutionProvider"])
    res = sess.run(None, feeds)
    outs = []
    for o, r in zip(sess.get_outputs(), res):
        fn = f"output{len(outs)}.bin"
        r.astype(r.dtype.newbyteorder("<")).tofile(a.out / fn)
        outs.append({"name": o.name, "dtype": str(r.dtype), "shape": list(r.shape), "file": fn})
    (a.out / "manifest.json").write_text(
        json.dumps({"onnxruntime": ort.__version__, "seed": a.seed, "inputs": ins, "outputs": outs}, indent=1)
        + "\n"
    )


if __name__ == "__main__":
    main()
