"""What the ONNX importer's modules share: the imported result, language names for ONNX
names, the element types rtgraph holds, and the model's nodes as the text errors point into."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rtgraph.errors import Source, Span

#: Names the language reserves (docs/language.md); an ONNX name equal to one is suffixed.
RESERVED = frozenset({
    "device", "fn", "program", "return", "input", "param", "const", "buffer", "at", "output",
    "stream", "event", "on", "record", "wait", "barrier", "sync", "callback", "after",
    "blocking", "for", "in", "fused", "graph", "replay", "dyn",
})  # fmt: skip
#: ONNX element types rtgraph holds as tensors, by TensorProto data type number.
TENSOR_DTYPES = {1: "f32", 10: "f16", 16: "bf16", 3: "i8", 6: "i32"}
#: ... and those it folds as constants only (shapes, indices): int64, int32, bool, double.
CONSTANT_DTYPES = {7: np.int64, 6: np.int32, 9: np.bool_, 11: np.float64, 1: np.float32}
#: The NumPy type a param of each rtgraph element type is stored in.
NUMPY_DTYPE = {"f32": np.float32, "f16": np.float16, "i8": np.int8, "i32": np.int32}


@dataclass(frozen=True)
class Imported:
    """An imported model: the ``.rtg`` text, the values of its params by name, and which ONNX
    names its inputs and outputs stand for."""

    name: str
    text: str
    params: dict[str, np.ndarray]
    inputs: dict[str, str] = field(default_factory=dict)  # rtg name → ONNX name
    outputs: dict[str, str] = field(default_factory=dict)


def ints(values: Sequence[int]) -> str:
    """A list of ints as ``.rtg`` writes it: ``[1, 2]``."""
    return f"[{', '.join(str(int(v)) for v in values)}]"


def num(x: float) -> str:
    """A float as ``.rtg`` writes it (always with a point or an exponent)."""
    text = repr(float(x))
    return text if "e" in text or "." in text else f"{text}.0"


_NAME = re.compile(r"[^A-Za-z0-9_]")


def rtg_name(onnx_name: str, taken: set[str]) -> str:
    """A language name for ``onnx_name``, unique among ``taken`` (which it joins)."""
    name = _NAME.sub("_", onnx_name) or "v"
    if name[0].isdigit():
        name = f"v{name}"
    if name in RESERVED:
        name = f"{name}_"
    base, k = name, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


class NodeText:
    """The model's nodes, one per line, as the source errors point into."""

    def __init__(self, path: str, graph: Any) -> None:
        self.graph = graph
        self.path = path
        self._source: Source | None = None

    def _line(self, node: Any) -> str:
        outs = ", ".join(f"%{o}" for o in node.output)
        ins = ", ".join(f"%{i}" if i else "_" for i in node.input)
        attrs = ", ".join(a.name for a in node.attribute)
        shown = f" <{attrs}>" if attrs else ""
        label = f"  # node '{node.name}'" if node.name else ""
        return f"{outs} = {node.op_type}({ins}){shown}{label}"

    def span(self, k: int) -> Span:
        if self._source is None:
            text = "\n".join(self._line(n) for n in self.graph.node)
            self._source = Source(f"{self.path} (nodes)", text)
        node = self.graph.node[k]
        line = self._source.line(k + 1)
        col = line.find(f"= {node.op_type}(") + 3
        return Span(self._source, k + 1, col, k + 1, col + len(node.op_type))
