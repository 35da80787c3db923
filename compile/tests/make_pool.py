"""Writes a small model whose GPU kernels keep reductions in global memory
(the kernel initialises its output element, then accumulates into it: TVM's
schedules for max pooling and grouped convolution, 39 of light_shufflenet's
132 kernels):

    y = Conv(MaxPool(Relu(x), 3x3, stride 2, pad 1), W, group=2)   [1, 8, 8, 8]

x: float32 [1, 8, 16, 16]. Random weights from a fixed seed. Such a kernel
loads its output buffer, but only elements it stored itself first: the
buffer's previous contents are not an input (reef-compile leaves it out of
the kernel's `reads`), and re-running the kernel after a kill is correct.

    .venv/bin/python compile/tests/make_pool.py OUT.onnx [--split]

--split writes instead y = Dropout(AveragePool(Relu(x), 6x6)) on x float32
[1, 64, 6, 6]: TVM splits the pooling into three kernels (a sum through a
workspace, then the division, then Dropout's mask), as in
light_inception_v1, so the TIR function's arguments are spread over them.
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def split() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[6, 6]),
        helper.make_node("Dropout", ["p"], ["y"]),
    ]
    return helper.make_graph(
        nodes,
        "split",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 1, 1])],
    )


def main() -> None:
    if "--split" in sys.argv[2:]:
        model = helper.make_model(split(), opset_imports=[helper.make_opsetid("", 18)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        onnx.save(model, sys.argv[1])
        return
    rng = np.random.default_rng(31)
    w = numpy_helper.from_array(rng.standard_normal((8, 4, 1, 1)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node(
            "MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Conv", ["p", "w"], ["y"], group=2, kernel_shape=[1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, sys.argv[1])


if __name__ == "__main__":
    main()
