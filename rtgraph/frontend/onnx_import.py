"""ONNX models in: an ONNX file becomes a readable ``.rtg`` program and the values of its params.

The analogue of Ascend's ATC converter. :func:`import_onnx` reads a model (bounded before it is
read, never executing anything from it: the file is parsed as a protobuf message, external data
and ops outside the default domain are refused), infers every value's shape with ONNX's own
shape inference, and walks the nodes in their (topological) order:

* graph inputs that are no initializer become ``input``s — every dimension must have a value,
  or be bound by ``dims`` (a dimension's name → its size);
* initializers and the values of ``Constant`` / ``ConstantOfShape`` nodes are *constants*; a
  node whose operands are all constants and that only moves shapes around (``Shape``,
  ``Gather``, ``Unsqueeze``, ``Concat``, ``Cast`` …) is computed at import (constant folding),
  as a graph compiler does; a constant that an op reads as a tensor becomes a ``param`` whose
  value is in :attr:`Imported.params` (import-time rewrites such as Gemm's ``transB`` or
  ``beta · C`` are applied to that value rather than emitted as ops);
* every other node becomes one statement, named after its output and annotated with the ONNX
  node it came from (:mod:`.onnx_ops` says how each op translates).

An op without a translation, an attribute value rtgraph's op cannot honour (a dilation, an
asymmetric padding …), a malformed file or a dimension that cannot be bound is an
:class:`~rtgraph.errors.InputError` located in the model: the *line* of a location is the
node's position in the graph (1 for its first node), shown as a one-line rendering of the node
(``%y = Conv(%x, %w) <strides = [2, 2]>``) with the caret under the op.

:func:`load_onnx` imports a model and parses its program at once, as ``rtgraph.load`` does
for a ``.onnx`` path: an :class:`OnnxProgram` is the checked program with the model's weights.

``onnx`` is an optional dependency (``pip install 'rtgraph[onnx]'``), imported by this module
only when a model is imported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from rtgraph import frontend
from rtgraph.errors import InputError
from rtgraph.frontend.onnx_graph import Imported, NodeText, rtg_name
from rtgraph.frontend.onnx_layers import LAYERS
from rtgraph.frontend.onnx_ops import TRANSLATORS, Translation
from rtgraph.frontend.onnx_tensors import TENSORS
from rtgraph.ir.graph import Program

#: Every op's translator: the basic ops, CNN layers, transformer ops.
ALL_TRANSLATORS = {**TRANSLATORS, **LAYERS, **TENSORS}

#: The largest model file read (protobuf's own limit for one message is 2 GiB).
MAX_ONNX_BYTES = 2**31 - 1
#: The largest size a named dimension may be bound to.
MAX_DIM = 2**31 - 1
#: The most nodes a model may have; each becomes at most one statement.
MAX_ONNX_NODES = 200_000


@dataclass
class OnnxProgram(Program):
    """A checked program imported from an ONNX model, with what the model holds beside its
    graph: the values of its params (``weights``, by param name — pass them as a run's
    ``params``) and which ONNX names its inputs and outputs stand for."""

    weights: dict[str, np.ndarray] = field(default_factory=dict)
    onnx_inputs: dict[str, str] = field(default_factory=dict)  # rtg name → ONNX name
    onnx_outputs: dict[str, str] = field(default_factory=dict)


def load_onnx(
    path: str | os.PathLike[str],
    dims: Mapping[str, int] | None = None,
    *,
    device: str = "ascend-910b",
    capacity_for: frontend.CapacityFor | None = None,
) -> OnnxProgram:
    """The model at ``path`` imported (:func:`import_onnx`) and its program parsed and checked
    (``capacity_for`` as for :func:`rtgraph.frontend.parse`), its weights beside it."""
    imported = import_onnx(path, device=device, dims=dims)
    stem = os.path.basename(os.fspath(path)).rsplit(".", 1)[0]
    program = frontend.parse(imported.text, f"{stem}.rtg", capacity_for=capacity_for)
    return OnnxProgram(
        **{f.name: getattr(program, f.name) for f in fields(Program)},
        weights=imported.params,
        onnx_inputs=imported.inputs,
        onnx_outputs=imported.outputs,
    )


def import_onnx(
    path: str | os.PathLike[str],
    *,
    device: str = "ascend-910b",
    dims: Mapping[str, int] | None = None,
) -> Imported:
    """The model at ``path`` as an ``.rtg`` program for ``device`` (see the module docstring)."""
    bound = dict(dims or {})
    for dim, size in bound.items():
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_DIM:
            raise InputError(
                f"dimension '{dim}' bound to {size!r}",
                hint=f"a dimension is a whole number from 1 to {MAX_DIM:,}",
            )
    onnx = _onnx()
    shown = os.fspath(path)
    try:
        size = os.stat(shown).st_size
    except OSError as err:
        raise InputError(f"cannot read '{shown}': {err.strerror}") from None
    if size > MAX_ONNX_BYTES:
        raise InputError(
            f"'{shown}' is {size:,} bytes, more than the {MAX_ONNX_BYTES:,} an ONNX model can be",
            hint="ONNX keeps models over 2 GiB as external data, which rtgraph does not read",
        )
    with open(shown, "rb") as f:
        data = f.read(MAX_ONNX_BYTES + 1)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as err:  # protobuf's DecodeError and friends
        raise InputError(
            f"'{shown}' is not an ONNX model: {type(err).__name__}",
            hint="an ONNX model is a serialized onnx.ModelProto (a .onnx file)",
        ) from None
    graph = model.graph
    if len(graph.node) > MAX_ONNX_NODES:
        raise InputError(f"'{shown}' has {len(graph.node):,} nodes, more than {MAX_ONNX_NODES:,}")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    nodes = NodeText(shown, graph)
    for k, node in enumerate(graph.node):
        if node.domain not in ("", "ai.onnx"):
            raise InputError(
                f"op '{node.op_type}' of domain '{node.domain}' is not an ONNX operator",
                span=nodes.span(k),
                hint="rtgraph imports the default ONNX domain only; custom ops are never loaded",
            )
    for init in graph.initializer:
        if init.data_location == onnx.TensorProto.EXTERNAL:
            raise InputError(
                f"initializer '{init.name}' keeps its data in an external file",
                hint="rtgraph reads only the file you name: save the model with its weights inside",
            )
    for value in graph.input:  # bind named dimensions before shapes are inferred from them
        for d in value.type.tensor_type.shape.dim:
            if d.dim_param in bound:
                d.dim_value = int(bound[d.dim_param])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    except Exception as err:
        raise InputError(
            f"ONNX shape inference failed on '{shown}': {str(err).splitlines()[0][:200]}",
            hint="check the model with onnx.checker.check_model",
        ) from None
    translation = Translation(
        source=shown,
        opset=opset,
        nodes=nodes,
        shapes=_value_shapes(onnx, inferred),
        dims=bound,
        onnx=onnx,
        translators=ALL_TRANSLATORS,
    )
    translation.declare(graph)
    for k, node in enumerate(graph.node):
        translation.node(k, node)
    stem = os.path.basename(shown).rsplit(".", 1)[0]
    return translation.finish(rtg_name(graph.name or stem, set()), device, graph)


def _onnx() -> Any:
    try:
        # onnx is an optional extra: imported when a model is imported, never with rtgraph
        import onnx
        import onnx.numpy_helper
        import onnx.shape_inference
    except ImportError:
        raise InputError(
            "importing an ONNX model needs the onnx package",
            hint="pip install 'rtgraph[onnx]'",
        ) from None
    return onnx


def _value_shapes(onnx: Any, graph: Any) -> dict[str, tuple[tuple[int | str | None, ...], int]]:
    """Each value's inferred (dims, element type): a dim is a number, a name or None."""
    found = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        t = info.type.tensor_type
        if not t.HasField("shape"):
            continue
        dims = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim
        )
        found[info.name] = (dims, t.elem_type)
    return found
