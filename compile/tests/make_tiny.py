"""Writes the tiny ONNX model the end-to-end test compiles (issue 14 item 2):
a convolution with bias, ReLU, max pooling, flatten and a fully connected
layer (Gemm) on a 1x3x16x16 input, random weights from a fixed seed.

    .venv/bin/python compile/tests/make_tiny.py OUT.onnx [--dynamic] [--depth N]

--dynamic writes the same model with a symbolic batch dimension (the
dynamic-shape error case); --celu ends it with Celu, a valid ONNX operator
TVM's ONNX frontend has no converter for (the unsupported-operator case).
--depth N (default 1) stacks N convolution + ReLU layers (8 channels, 3x3)
before the pooling: more kernels per inference, for the CUDA daemon tests
that need best-effort work still queued when a real-time request arrives.
--two-inputs adds a second input, `bias/in:0` (1x10), added to the logits:
a model with two inputs (the AMD code object test, issue 29).
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main() -> None:
    out = sys.argv[1]
    dynamic = "--dynamic" in sys.argv[2:]
    depth = 1
    if "--depth" in sys.argv[2:]:
        depth = int(sys.argv[sys.argv.index("--depth") + 1])
    rng = np.random.default_rng(14)

    def init(name, shape):
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * 0.1).astype(np.float32), name
        )

    inits = [
        init("conv/w:0", (8, 3, 3, 3)),
        init("conv/b:0", (8,)),
        init("fc/w:0", (10, 8 * 8 * 8)),
        init("fc/b:0", (10,)),
    ]
    nodes = [
        helper.make_node("Conv", ["data/in:0", "conv/w:0", "conv/b:0"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
    ]
    for i in range(1, depth):
        inits += [init(f"conv{i}/w:0", (8, 8, 3, 3)), init(f"conv{i}/b:0", (8,))]
        prev = "relu" if i == 1 else f"relu{i - 1}"
        nodes += [
            helper.make_node("Conv", [prev, f"conv{i}/w:0", f"conv{i}/b:0"], [f"conv{i}"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"]),
        ]
    last = "relu" if depth == 1 else f"relu{depth - 1}"
    nodes += [
        helper.make_node("MaxPool", [last], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc/w:0", "fc/b:0"], ["logits"], transB=1),
    ]
    out_name = "logits"
    batch = "N" if dynamic else 1
    inputs = [helper.make_tensor_value_info("data/in:0", TensorProto.FLOAT, [batch, 3, 16, 16])]
    if "--two-inputs" in sys.argv[2:]:
        nodes[-1].output[0] = "fc"
        nodes.append(helper.make_node("Add", ["fc", "bias/in:0"], ["logits"]))
        inputs.append(helper.make_tensor_value_info("bias/in:0", TensorProto.FLOAT, [batch, 10]))
    if "--celu" in sys.argv[2:]:
        nodes[-1].output[0] = "pre"
        nodes.append(helper.make_node("Celu", ["pre"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "tiny",
        inputs,
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, [batch, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, out)


if __name__ == "__main__":
    main()
