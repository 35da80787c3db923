"""The network of ../shared/models/mi50/resnet152 as an ONNX model: ResNet-152
at 64x64, for GV100 figures on code compiled for sm_70 (issue 31 item 2,
docs/fidelity.md "GV100 on reef-compile's sm_70 builds").

The measured `mi50/resnet152` schedule has 155 convolutions (207 kernels) on
a 3x64x64 input (`data`, 12288 elements): ResNet-152, whose bottleneck
stages have 3, 8, 36 and 3 blocks. The onnx package has no ResNet-152; its
light_resnet50 has the same stem, blocks and head with 3, 4, 6 and 3. This
script takes light_resnet50 at 64x64 with a global average pool (as
resnet50_64.py does) and repeats the last identity block of stage 3 four
more times and of stage 4 thirty more times. Each repeat gets weights of
its own (its own ConstantOfShape nodes, same shapes), as in ResNet-152;
the light models' weights are constants, so values are not ResNet-152's
trained ones (nothing here runs them for accuracy).

    .venv/bin/python compile/crosscheck/resnet152_64.py OUT.onnx
"""

import sys
from pathlib import Path

import onnx

LIGHT = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
# (stage, blocks in ResNet-50, blocks in ResNet-152): He et al. 2016, Table 1.
EXTRA = [("res3", 4, 8), ("res4", 6, 36)]


def main() -> None:
    m = onnx.load(LIGHT)
    g = m.graph
    dims = g.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [1, 3, 224, 224], dims
    dims[2].dim_value = 64
    dims[3].dim_value = 64
    for n in g.node:
        if n.op_type == "AveragePool":
            n.op_type = "GlobalAveragePool"
            del n.attribute[:]
    nodes = list(g.node)
    for stage, have, want in EXTRA:
        prefix = f"gpu_0/{stage}_{have - 1}_"
        # The last identity block: from its first Conv to the Relu after its Sum.
        first = next(
            i for i, n in enumerate(nodes) if n.op_type == "Conv" and n.input[1].startswith(prefix)
        )
        sum_i = next(i for i in range(first, len(nodes)) if nodes[i].op_type == "Sum")
        last = sum_i + 1
        assert nodes[last].op_type == "Relu", nodes[last]
        block = nodes[first : last + 1]
        block_in, block_out = block[0].input[0], nodes[last].output[0]
        assert block_in in nodes[sum_i].input, "an identity block adds its input"
        weights = {x for n in block for x in n.input[1:] if x.startswith(prefix)}
        makers = {n.output[0]: n for n in nodes if n.op_type == "ConstantOfShape"}
        copies = []
        prev = block_out
        for k in range(have, want):
            ren = {block_in: prev}
            for w in sorted(weights):
                if w not in makers:
                    continue  # a graph input: kept shared
                ren[w] = w.replace(prefix, f"gpu_0/{stage}_{k}_")
                c = onnx.NodeProto()
                c.CopyFrom(makers[w])
                c.output[0] = ren[w]
                c.name = ""
                copies.append(c)
            for n in block:
                for o in n.output:
                    ren[o] = f"{o}_{stage}_{k}"
            for n in block:
                c = onnx.NodeProto()
                c.CopyFrom(n)
                c.name = ""
                for j, x in enumerate(c.input):
                    c.input[j] = ren.get(x, x)
                for j, x in enumerate(c.output):
                    c.output[j] = ren[x]
                copies.append(c)
            prev = ren[block_out]
        # The next stage reads the last copy's output.
        for n in nodes[last + 1 :]:
            for j, x in enumerate(n.input):
                if x == block_out:
                    n.input[j] = prev
        nodes = nodes[: last + 1] + copies + nodes[last + 1 :]
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    onnx.checker.check_model(m)
    convs = sum(n.op_type == "Conv" for n in g.node)
    assert convs == 155, convs
    onnx.save(m, sys.argv[1])


if __name__ == "__main__":
    main()
