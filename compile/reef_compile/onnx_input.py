"""Reading and checking an ONNX model before TVM sees it.

Every refusal is a `CompileError` with a one-line message that says what is
wrong and what to do (docs/compile.md "Errors").
"""

from __future__ import annotations

import re
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError


class CompileError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


def load(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        raise CompileError(f"{path}: no such file; pass an .onnx model")
    data = path.read_bytes()
    if not data:
        raise CompileError(f"{path}: empty file, not an ONNX model")
    try:
        model = onnx.ModelProto()
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CompileError(
            f"{path}: not an ONNX model or truncated ({first}); pass a complete .onnx file"
        ) from None
    # Protobuf accepts many byte strings (a field it does not know is kept as
    # unknown); a real model has a graph with nodes and an opset.
    if not model.HasField("graph") or not model.graph.node or not model.opset_import:
        raise CompileError(
            f"{path}: not an ONNX model (no graph nodes or no opset); pass a .onnx file"
        )
    return model


def validate(path: Path, model: onnx.ModelProto) -> None:
    """ONNX's own checker (after the operator check, so an operator TVM
    cannot lower is reported as such)."""
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0]
        raise CompileError(
            f"{path}: invalid or truncated ONNX model ({first}); re-export it"
        ) from None


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph's real inputs (older exporters list initializers as inputs)."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def check_static(path: Path, model: onnx.ModelProto) -> None:
    """Every input dimension must be a fixed positive number."""
    for inp in graph_inputs(model):
        t = inp.type.tensor_type
        if not inp.type.HasField("tensor_type") or not t.HasField("shape"):
            raise CompileError(
                f"{path}: input {inp.name!r} has no static tensor shape; "
                "reef-compile needs fixed shapes (export with a fixed batch and size)"
            )
        for d, dim in enumerate(t.shape.dim):
            if not dim.HasField("dim_value") or dim.dim_value <= 0:
                what = dim.dim_param or "?"
                raise CompileError(
                    f"{path}: input {inp.name!r} dimension {d} is dynamic ({what}); "
                    "reef-compile needs static shapes: fix it, e.g. "
                    "onnx.tools.update_model_dims.update_inputs_outputs_dims"
                )


def check_operators(path: Path, model: onnx.ModelProto) -> None:
    """Refuse operators TVM's ONNX frontend has no converter for, by name."""
    from tvm.relax.frontend.onnx import onnx_frontend

    known = onnx_frontend._get_convert_map()
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx") or n.op_type not in known:
            dom = f"{n.domain}." if n.domain else ""
            raise CompileError(
                f"{path}: operator {dom}{n.op_type} (node {n.name or n.output[0]!r}) "
                "cannot be lowered by TVM's ONNX frontend; replace it or export "
                "the model without it"
            )


_BAD = re.compile(r"[^A-Za-z0-9_]")


def sanitize(model: onnx.ModelProto) -> dict[str, str]:
    """Renames every value of the graph to a C identifier, in place.

    ONNX names such as `gpu_0/data_0` (light_resnet50) reach TVM's CUDA source
    as parameter names and break nvcc (issue 14). Returns new → original.
    """
    g = model.graph
    names: list[str] = []
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        names.append(vi.name)
    names += [i.name for i in g.initializer]
    for n in g.node:
        names += list(n.input) + list(n.output)
    mapping: dict[str, str] = {}
    used: set[str] = set()
    for old in names:
        if not old or old in mapping:
            continue
        new = _BAD.sub("_", old)
        if not new or new[0].isdigit():
            new = "v_" + new
        base, i = new, 1
        while new in used:
            new = f"{base}_{i}"
            i += 1
        used.add(new)
        mapping[old] = new
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        vi.name = mapping[vi.name]
    for i in g.initializer:
        i.name = mapping[i.name]
    for n in g.node:
        for k, v in enumerate(n.input):
            if v:
                n.input[k] = mapping[v]
        for k, v in enumerate(n.output):
            if v:
                n.output[k] = mapping[v]
    return {new: old for old, new in mapping.items()}
