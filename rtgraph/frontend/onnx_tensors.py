"""How the ONNX ops of transformer graphs become ``.rtg``: LayerNormalization, Gelu and Erf,
Pow, Where, Gather and Slice with constant indices, Split, Cast and the reductions — the
translators :mod:`.onnx_ops` applies (see there for what a translator is).

Index operands (Gather's indices, Slice's starts and ends, Split's sizes, a reduction's axes)
must be constants: rtgraph compiles static shapes. A Gather is written as the slices it reads
(joined by a concat), so it needs no gather op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rtgraph.frontend.onnx_graph import TENSOR_DTYPES, ints, num
from rtgraph.frontend.onnx_ops import Translation, Translator

#: The most slices one Gather may become.
MAX_GATHER_RUNS = 256


def _axis(t: Translation, node: Any, default: int, rank: int) -> int:
    axis = int(t.attr(node, "axis", default))
    if not -rank <= axis < rank:
        t.fail(f"{node.op_type}: axis {axis} is out of range for rank {rank}", None)
    return axis % rank


def _layernorm(t: Translation, node: Any) -> str:
    shape = t.shape_of(node, 0)
    axis = _axis(t, node, -1, len(shape))
    eps = float(t.attr(node, "epsilon", 1e-5))
    inner = int(np.prod(shape[axis:]))
    x = t.operand(node, 0)
    if axis != len(shape) - 1:  # normalise over the trailing axes flattened into one
        x = f"reshape({x}, {ints([*shape[:axis], inner])})"
    params = []
    for i in (1, 2):
        value = node.input[i] if i < len(node.input) else ""
        if not value:
            continue
        if value in t.const:
            params.append(
                t.param(value, np.broadcast_to(t.const[value], shape[axis:]).ravel(), "ln")
            )
        elif t.shape_of(node, i) == (inner,):
            params.append(t.operand(node, i))
        else:
            params.append(
                f"reshape(broadcast_to({t.operand(node, i)}, {ints(shape[axis:])}), [{inner}])"
            )
    if len(params) == 1 and len(node.input) > 2 and node.input[2]:
        t.fail("LayerNormalization: a bias without a scale", None)
    expr = f"layernorm({', '.join([x, *params])}, axis = -1, eps = {num(eps)})"
    return expr if axis == len(shape) - 1 else f"reshape({expr}, {ints(shape)})"


def _gelu(t: Translation, node: Any) -> str:
    approximate = t.attr(node, "approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else str(approximate)
    x = t.operand(node, 0)
    if approximate == "tanh":
        return f"gelu({x})"
    return f"{x} * 0.5 * (erf({x} * {num(float(np.float32(1 / np.sqrt(2))))}) + 1.0)"


def _pow(t: Translation, node: Any) -> str:
    exponent = node.input[1]
    if exponent in t.const and t.const[exponent].size == 1:
        p = float(t.const[exponent].reshape(()))
        x = t.operand(node, 0)
        if p == 2.0:
            return f"{x} * {x}"
        if p == 1.0:
            return f"{x} * 1.0"
        if p == 0.5:
            return f"sqrt({x})"
    base = t.operand(node, 0)
    if exponent in t.const:
        b = t.param(exponent, t.const[exponent].astype(np.float32), "f32")
    else:
        b = t.operand(node, 1)
    return f"pow({base}, {b})"


def _where(t: Translation, node: Any) -> str:
    cond = node.input[0]
    if cond in t.const:
        c = t.param(cond, t.const[cond].astype(np.int8), "mask")
    else:
        c = t.operand(node, 0)
    return f"where({c}, {t.operand(node, 1)}, {t.operand(node, 2)})"


def _slice_of(x: str, axis: int, start: int, stop: int) -> str:
    return f"slice({x}, start = {start}, stop = {stop}, axis = {axis})"


def _gather(t: Translation, node: Any) -> str:
    shape = t.shape_of(node, 0)
    axis = _axis(t, node, 0, len(shape))
    indices = t.constant(node, 1, "the indices").astype(np.int64)
    size = shape[axis]
    if np.any(indices < -size) or np.any(indices >= size):
        t.fail(f"Gather: an index is out of range for axis {axis} of size {size}", None)
    flat = [int(i) % size for i in indices.ravel()]
    runs: list[list[int]] = []  # [start, stop) of consecutive indices
    for i in flat:
        if runs and runs[-1][1] == i:
            runs[-1][1] += 1
        else:
            runs.append([i, i + 1])
    if len(runs) > MAX_GATHER_RUNS:
        t.fail(f"Gather: {len(runs)} slices, more than {MAX_GATHER_RUNS}", None)
    x = t.operand(node, 0)
    parts = [_slice_of(x, axis, a, b) for a, b in runs]
    joined = parts[0] if len(parts) == 1 else f"concat({', '.join(parts)}, axis = {axis})"
    out = [*shape[:axis], *indices.shape, *shape[axis + 1 :]]
    return f"reshape({joined}, {ints(out)})" if len(out) else f"reshape({joined}, [])"


def _slice(t: Translation, node: Any) -> str:
    shape = t.shape_of(node, 0)
    if t.opset < 10:
        starts, ends = t.attr(node, "starts", []), t.attr(node, "ends", [])
        axes = t.attr(node, "axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = t.constant(node, 1, "starts")
        ends = t.constant(node, 2, "ends")
        has = [len(node.input) > i and node.input[i] for i in (3, 4)]
        axes = t.constant(node, 3, "axes") if has[0] else list(range(len(starts)))
        steps = t.constant(node, 4, "steps") if has[1] else [1] * len(starts)
    expr = t.operand(node, 0)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if int(step) != 1:
            t.fail("Slice: steps other than 1 are not supported", None)
        a = int(axis) % len(shape)
        lo, hi, _ = slice(int(start), int(end)).indices(shape[a])
        if (lo, hi) != (0, shape[a]):
            expr = _slice_of(expr, a, lo, hi)
    return expr


def _split(t: Translation, node: Any) -> str:
    shape = t.shape_of(node, 0)
    axis = _axis(t, node, 0, len(shape))
    outs = list(node.output)
    if t.opset >= 13 and len(node.input) > 1 and node.input[1]:
        sizes = [int(s) for s in t.constant(node, 1, "the split sizes")]
    elif t.attr(node, "split", None) is not None:
        sizes = [int(s) for s in t.attr(node, "split")]
    else:  # equal parts, the last one smaller (opset 18's num_outputs)
        part = -(-shape[axis] // len(outs))
        sizes = [min(part, shape[axis] - k * part) for k in range(len(outs))]
    if len(sizes) != len(outs) or sum(sizes) != shape[axis] or min(sizes) < 1:
        t.fail(f"Split: sizes {sizes} do not split axis {axis} of size {shape[axis]}", None)
    x, start, exprs = t.operand(node, 0), 0, []
    for size in sizes:
        exprs.append(_slice_of(x, axis, start, start + size))
        start += size
    for out, expr in zip(outs[1:], exprs[1:], strict=True):
        if out:
            t.define(out, expr)
    return exprs[0]


def _cast(t: Translation, node: Any) -> str:
    to = int(t.attr(node, "to", 1))
    dtype = TENSOR_DTYPES.get(to)
    if dtype is None:
        t.fail(f"Cast: rtgraph has no tensors of element type {to}", "f32, f16, bf16, i8, i32")
    return f"cast({t.operand(node, 0)}, dtype = {dtype})"


def _reduce(op: str) -> Translator:
    def translate(t: Translation, node: Any) -> str | None:
        rank = len(t.shape_of(node, 0))
        from_input = (node.op_type == "ReduceSum" and t.opset >= 13) or t.opset >= 18
        if from_input and len(node.input) > 1 and node.input[1]:
            axes = [int(a) for a in t.constant(node, 1, "the axes")]
        else:
            axes = [int(a) for a in t.attr(node, "axes", [])]
        if not axes:
            if from_input and t.attr(node, "noop_with_empty_axes", 0):
                t.alias(node)
                return None
            axes = list(range(rank))
        keep = "true" if t.attr(node, "keepdims", 1) else "false"
        return f"{op}({t.operand(node, 0)}, axis = {ints(axes)}, keepdims = {keep})"

    return translate


def _variadic(op: str) -> Translator:
    def translate(t: Translation, node: Any) -> str:
        expr = t.operand(node, 0)
        for i in range(1, len(node.input)):
            expr = f"{op}({expr}, {t.operand(node, i)})"
        return expr

    return translate


TENSORS: dict[str, Translator] = {
    "LayerNormalization": _layernorm,
    "Gelu": _gelu,
    "Erf": lambda t, node: f"erf({t.operand(node, 0)})",
    "Pow": _pow,
    "Where": _where,
    "Gather": _gather,
    "Slice": _slice,
    "Split": _split,
    "Cast": _cast,
    "ReduceMean": _reduce("reduce_mean"),
    "ReduceSum": _reduce("reduce_sum"),
    "ReduceMax": _reduce("reduce_max"),
    "Max": _variadic("maximum"),
    "Min": _variadic("minimum"),
}
