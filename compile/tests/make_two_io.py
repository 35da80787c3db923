"""Writes a model with two inputs (one int64) and two outputs, made with
onnx.helper (issue 30: the CPU build checked against ONNX Runtime):

    feat:0    = Relu(x + mean_j(E[ids[:, j]]) @ W1 + b1)         [2, 8]
    probs/out = Softmax(feat:0 @ W2)                             [2, 3]

x: float32 [2, 16]; ids: int64 [2, 4] indexing the 10 rows of E. Random
weights from a fixed seed.

    .venv/bin/python compile/tests/make_two_io.py OUT.onnx
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB = 10


def main() -> None:
    rng = np.random.default_rng(30)

    def init(name, shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.5, name)

    inits = [
        init("emb", (VOCAB, 16)),
        init("w1", (16, 8)),
        init("b1", (8,)),
        init("w2", (8, 3)),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
    ]
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["rows"], axis=0),
        helper.make_node("ReduceMean", ["rows", "axis1"], ["mean"], keepdims=0),
        helper.make_node("Add", ["x", "mean"], ["h"]),
        helper.make_node("MatMul", ["h", "w1"], ["mm1"]),
        helper.make_node("Add", ["mm1", "b1"], ["pre"]),
        helper.make_node("Relu", ["pre"], ["feat:0"]),
        helper.make_node("MatMul", ["feat:0", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs/out"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "two_io",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 4]),
        ],
        [
            helper.make_tensor_value_info("feat:0", TensorProto.FLOAT, [2, 8]),
            helper.make_tensor_value_info("probs/out", TensorProto.FLOAT, [2, 3]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, sys.argv[1])


if __name__ == "__main__":
    main()
