"""The network of ../shared/models/mi50/vgg as an ONNX model, for the MI50
cost-model cross-check (docs/compile.md "MI50 cross-check").

The measured `mi50/vgg` schedule is not VGG-19: its first convolution has
64x3x7x7 weights (storage p1, 9408 elements) on a 3x64x64 input (`data`,
12288), it has 1x1 bottleneck convolutions (64x256, 512x1024, ...), residual
additions (`conv2d_add_add`), a 512x512x3x3 stage and a global average pool
over 2048 channels: ResNet-50 at 64x64. The onnx package's light_resnet50 is
that network at 224x224; this script fixes its input to 1x3x64x64 and
replaces the final 7x7 AveragePool (which needs a 7x7 map) by
GlobalAveragePool, so every convolution has the measured one's shape.

    .venv/bin/python compile/crosscheck/resnet50_64.py OUT.onnx
"""

import sys
from pathlib import Path

import onnx

LIGHT = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"


def main() -> None:
    m = onnx.load(LIGHT)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [1, 3, 224, 224], dims
    dims[2].dim_value = 64
    dims[3].dim_value = 64
    for n in m.graph.node:
        if n.op_type == "AveragePool":
            n.op_type = "GlobalAveragePool"
            del n.attribute[:]
    del m.graph.value_info[:]
    onnx.checker.check_model(m)
    onnx.save(m, sys.argv[1])


if __name__ == "__main__":
    main()
