"""Gives one of the onnx package's light models random weights: those
models build every weight in the graph with ConstantOfShape (one constant
value per tensor), so all their outputs are equal (light_squeezenet's 1000
probabilities are all exactly 0.001) and a comparison of outputs checks
little. Each ConstantOfShape whose shape is an initializer becomes a seeded
random initializer of that shape: He-scaled normal weights for tensors of
two or more dimensions (std sqrt(2 / fan_in)), uniform(0.5, 1.5) for
one-dimensional ones (biases and batch-norm parameters, whose variance must
stay positive).

    .venv/bin/python compile/tests/randomize_light.py IN.onnx OUT.onnx [--seed N]
"""

import argparse

import numpy as np
import onnx
from onnx import numpy_helper


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=30)
    a = p.parse_args()
    m = onnx.load(a.model)
    g = m.graph
    rng = np.random.default_rng(a.seed)
    inits = {i.name: i for i in g.initializer}
    keep, replaced = [], 0
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input and n.input[0] in inits:
            shape = [int(d) for d in numpy_helper.to_array(inits[n.input[0]])]
            if len(shape) >= 2:
                fan_in = int(np.prod(shape[1:]))
                w = rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))
            else:
                w = rng.uniform(0.5, 1.5, size=shape)
            g.initializer.append(numpy_helper.from_array(w.astype(np.float32), n.output[0]))
            replaced += 1
        else:
            keep.append(n)
    del g.node[:]
    g.node.extend(keep)
    # IR 3 (these models' version) wants every initializer listed as a
    # graph input; from IR 4 on it needs not be one, and ONNX Runtime treats
    # one that is as an overridable input rather than a constant.
    m.ir_version = max(m.ir_version, 4)
    names = {i.name for i in g.initializer}
    inputs = [i for i in g.input if i.name not in names]
    del g.input[:]
    g.input.extend(inputs)
    onnx.checker.check_model(m)
    onnx.save(m, a.out)
    print(f"{a.model}: {replaced} ConstantOfShape weights made random")


if __name__ == "__main__":
    main()
