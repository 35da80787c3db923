"""Recomputes the tiny model (compile/tests/make_tiny.py) with numpy from a
compiled directory's weights.bin and reference input, and compares with the
reference output TVM's CPU build wrote: checks the weights' offsets, dtypes
and shapes and the reference pair independently of TVM.

    .venv/bin/python compile/tests/check_reference.py DIR
"""

import json
import sys
from pathlib import Path

import numpy as np


def main() -> None:
    d = Path(sys.argv[1])
    s = json.loads((d / f"{d.name}.json").read_text())
    raw = (d / s["weights"]["file"]).read_bytes()
    by_size = {}
    for e in s["weights"]["entries"]:
        a = np.frombuffer(raw, dtype=np.dtype(e["dtype"]).newbyteorder("<"), count=e["bytes"] // 4, offset=e["offset"])
        by_size[a.size] = (a, e["shape"])
    assert len(by_size) == 4, [e["shape"] for e in s["weights"]["entries"]]
    cw = by_size[216][0].reshape(8, 3, 3, 3)
    cb = by_size[8][0].reshape(8)
    fw, fshape = by_size[5120]
    fw = fw.reshape(fshape)
    if fw.shape == (512, 10):  # TVM folded the Gemm's transB into the weight
        fw = fw.T
    fb = by_size[10][0]
    ref = s["reference"]
    x = np.fromfile(d / ref["inputs"][0]["file"], dtype="<f4").reshape(1, 3, 16, 16)
    want = np.fromfile(d / ref["outputs"][0]["file"], dtype="<f4").reshape(1, 10)

    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((1, 8, 16, 16), np.float64)
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i : i + 16, j : j + 16]
            conv += np.einsum("bchw,oc->bohw", patch, cw[:, :, i, j])
    conv += cb.reshape(1, 8, 1, 1)
    relu = np.maximum(conv, 0)
    pool = relu.reshape(1, 8, 8, 2, 8, 2).max(axis=(3, 5))
    got = pool.reshape(1, 512) @ fw.T + fb
    err = np.abs(got - want).max()
    tol = ref["tolerance"]
    assert np.allclose(got, want, rtol=tol["rtol"], atol=tol["atol"]), (err, got, want)
    print(f"reference matches numpy: max |diff| = {err:.2e}")


if __name__ == "__main__":
    main()
