"""Writes a BERT encoder as ONNX (issue 31 item 3: an LC model of Aker's
Table 2 whose GEMMs run on tensor cores once compiled with `--fp16`).

The architecture is BERT-base's encoder layer (Devlin et al., 2019, §3:
hidden size 768, 12 attention heads, feed-forward size 3072, GELU;
Vaswani et al., 2017, §3.2 for the scaled dot-product attention), post-LN
as in BERT: x = LN(x + Attn(x)); x = LN(x + FFN(x)). The input is the
embedded sequence (batch x seq x 768; the embedding lookup is left out),
the weights are random from a fixed seed (the onnx package has no BERT,
and only the shapes matter to the schedule and its cost). GELU is written
with Erf, as BERT's reference code computes it.

    .venv/bin/python compile/tests/make_bert.py OUT.onnx [--layers N] [--batch B] [--seq S]

Defaults: 2 layers, batch 8, sequence 128.
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, HEADS, FFN = 768, 12, 3072


def opt(name: str, default: int) -> int:
    a = sys.argv[2:]
    return int(a[a.index(name) + 1]) if name in a else default


def main() -> None:
    out = sys.argv[1]
    layers, batch, seq = opt("--layers", 2), opt("--batch", 8), opt("--seq", 128)
    rng = np.random.default_rng(31)
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(name, shape, scale=0.02):
        return const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def node(op, ins, out, **kw):
        nodes.append(helper.make_node(op, ins, [out], **kw))
        return out

    head = HIDDEN // HEADS
    split = const("shape/heads", np.array([batch, seq, HEADS, head], np.int64))
    merge = const("shape/merge", np.array([batch, seq, HIDDEN], np.int64))
    scale = const("attn/scale", np.array(1.0 / np.sqrt(head), np.float32))
    half = const("gelu/half", np.array(0.5, np.float32))
    one = const("gelu/one", np.array(1.0, np.float32))
    rsqrt2 = const("gelu/rsqrt2", np.array(1.0 / np.sqrt(2.0), np.float32))

    def dense(p, x, n_in, n_out):
        w = weight(f"{p}/w", (n_in, n_out))
        b = weight(f"{p}/b", (n_out,))
        return node("Add", [node("MatMul", [x, w], f"{p}/mm"), b], f"{p}/out")

    def layernorm(p, x):
        g = const(f"{p}/gamma", np.ones(HIDDEN, np.float32))
        b = const(f"{p}/beta", np.zeros(HIDDEN, np.float32))
        return node("LayerNormalization", [x, g, b], f"{p}/out", axis=-1, epsilon=1e-12)

    x = "hidden/in"
    for i in range(layers):
        p = f"l{i}"

        def heads(t, perm):
            r = node("Reshape", [t, split], f"{t}/r")
            return node("Transpose", [r], f"{t}/t", perm=perm)

        q = heads(dense(f"{p}/q", x, HIDDEN, HIDDEN), [0, 2, 1, 3])
        k = heads(dense(f"{p}/k", x, HIDDEN, HIDDEN), [0, 2, 3, 1])
        v = heads(dense(f"{p}/v", x, HIDDEN, HIDDEN), [0, 2, 1, 3])
        s = node("Mul", [node("MatMul", [q, k], f"{p}/qk"), scale], f"{p}/scores")
        a = node("Softmax", [s], f"{p}/probs", axis=-1)
        ctx = node("MatMul", [a, v], f"{p}/ctx")
        ctx = node("Transpose", [ctx], f"{p}/ctx/t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, merge], f"{p}/ctx/r")
        x = layernorm(f"{p}/ln1", node("Add", [x, dense(f"{p}/o", ctx, HIDDEN, HIDDEN)], f"{p}/res1"))
        h = dense(f"{p}/ffn1", x, HIDDEN, FFN)
        erf = node("Erf", [node("Mul", [h, rsqrt2], f"{p}/gelu/x")], f"{p}/gelu/erf")
        g = node("Mul", [node("Mul", [h, half], f"{p}/gelu/h"), node("Add", [erf, one], f"{p}/gelu/e1")], f"{p}/gelu")
        x = layernorm(f"{p}/ln2", node("Add", [x, dense(f"{p}/ffn2", g, FFN, HIDDEN)], f"{p}/res2"))
    nodes.append(helper.make_node("Identity", [x], ["hidden/out"]))
    graph = helper.make_graph(
        nodes,
        "bert_encoder",
        [helper.make_tensor_value_info("hidden/in", TensorProto.FLOAT, [batch, seq, HIDDEN])],
        [helper.make_tensor_value_info("hidden/out", TensorProto.FLOAT, [batch, seq, HIDDEN])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # ONNX Runtime 1.23 (the project's reference) reads IR versions up to 11.
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, out)


if __name__ == "__main__":
    main()
