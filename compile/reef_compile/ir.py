"""Walking TVM IR (TIR statements and Relax expressions) in source order.

TVM 0.27's Python package has no TIR statement visitor, but every IR node
describes its fields through the FFI type information
(`__tvm_ffi_type_info__`), so a generic pre-order walk over those fields
reaches every statement and expression in the order they are printed.
"""

from __future__ import annotations

from typing import Callable, Iterator

import tvm
import tvm_ffi

_FIELDS: dict[type, list[str]] = {}


def _fields(cls: type) -> list[str]:
    got = _FIELDS.get(cls)
    if got is not None:
        return got
    names: list[str] = []
    chain = []
    info = getattr(cls, "__tvm_ffi_type_info__", None)
    while info is not None:
        chain.append(info)
        info = info.parent_type_info
    for info in reversed(chain):
        for f in info.fields:
            if f.name not in ("span", "struct_info_", "checked_type_"):
                names.append(f.name)
    _FIELDS[cls] = names
    return names


def children(node) -> Iterator:
    """The IR objects directly under `node`, in field order."""
    if isinstance(node, (list, tuple, tvm_ffi.Array)):
        yield from node
        return
    if isinstance(node, tvm_ffi.Map):
        for k, v in node.items():
            yield k
            yield v
        return
    for name in _fields(type(node)):
        try:
            v = getattr(node, name)
        except Exception:  # a field without a Python getter
            continue
        if isinstance(v, (tvm_ffi.Object, tvm_ffi.Array, tvm_ffi.Map)):
            yield v


def walk(node, visit: Callable[[object], bool | None]) -> None:
    """Pre-order walk; `visit` returning True skips the node's subtree."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (tvm.ir.Type, tvm.ir.Span)):
            continue
        if visit(n) is True:
            continue
        stack.extend(reversed(list(children(n))))


def kind(node) -> str:
    """The FFI type key of an IR node (`tirx.BufferStore`, `ir.IntImm`, …)."""
    info = getattr(type(node), "__tvm_ffi_type_info__", None)
    return info.type_key if info is not None else ""
