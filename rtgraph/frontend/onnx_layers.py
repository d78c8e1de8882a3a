"""How the ONNX ops of CNN layers become ``.rtg``: Conv (with a BatchNormalization after it
folded in at import), Gemm, BatchNormalization, the pools and LRN — the translators
:mod:`.onnx_ops` applies (see there for what a translator is).

ONNX writes a 2-D window's padding as ``pads = [top, left, bottom, right]``, the order
``conv2d`` and ``pool2d`` take four paddings in; ``auto_pad`` is worked out from the input's
static shape here, as ONNX defines it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rtgraph.frontend.onnx_graph import NUMPY_DTYPE, ints, num
from rtgraph.frontend.onnx_ops import Translation, Translator


def _window(t: Translation, node: Any, kernel: list[int]) -> tuple[list[int], list[int], str]:
    """A window's strides and dilations, and its padding as the ``.rtg`` attribute text
    (``[h, w]`` when both sides of each axis agree, ``[top, left, bottom, right]`` else), for
    a 2-D window — a 1-D one (``kernel`` of one size) as a 2-D one of height 1."""
    r = len(kernel)
    stride = [int(s) for s in t.attr(node, "strides", [1] * r)]
    dilation = [int(d) for d in t.attr(node, "dilations", [1] * r)]
    auto = t.attr(node, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if auto in ("NOTSET", ""):
        pads = [int(p) for p in t.attr(node, "pads", [0] * (2 * r))]
    elif auto == "VALID":
        pads = [0] * (2 * r)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):  # the output is ceil(input / stride)
        size = t.shape_of(node, 0)[2:]
        total = [
            max(0, (-(-n // s) - 1) * s + d * (k - 1) + 1 - n)
            for n, s, d, k in zip(size, stride, dilation, kernel, strict=True)
        ]
        small = [p // 2 for p in total]
        big = [p - p // 2 for p in total]
        pads = [*small, *big] if auto == "SAME_UPPER" else [*big, *small]
    else:
        t.fail(f"{node.op_type}: auto_pad {auto!r} is not an ONNX value", None)
    if r == 1:
        stride, dilation, pads = [1, *stride], [1, *dilation], [0, pads[0], 0, pads[1]]
    begin, end = pads[:2], pads[2:]
    return stride, dilation, ints(begin if begin == end else pads)


def _as_2d(t: Translation, node: Any) -> tuple[str, list[int] | None]:
    """Operand 0 of a Conv or pool, NCHW: a 1-D NCL input as N, C, 1, L; and the output
    shape to reshape the 2-D result back to (None when the op is 2-D already)."""
    x = t.shape_of(node, 0)
    if len(x) == 4:
        return t.operand(node, 0), None
    if len(x) != 3:
        t.fail(f"{node.op_type}: only 1-D and 2-D windows (NCL, NCHW) are supported", None)
    out = t.inferred.get(node.output[0], ((),))[0]
    if not out or not all(isinstance(d, int) and d > 0 for d in out):
        t.fail(f"ONNX shape inference gives '{node.output[0]}' no static shape", None)
    return f"reshape({t.operand(node, 0)}, {ints([x[0], x[1], 1, x[2]])})", list(out)


def _conv(t: Translation, node: Any) -> str:
    w = t.shape_of(node, 1)
    if len(w) not in (3, 4):
        t.fail("Conv: only 1-D and 2-D convolutions (NCL, NCHW) are supported", None)
    x, back = _as_2d(t, node)
    stride, dilation, pad = _window(t, node, list(w[2:]))
    groups = int(t.attr(node, "group", 1))
    extra = f", groups = {groups}" if groups != 1 else ""
    if dilation != [1, 1]:
        extra += f", dilation = {ints(dilation)}"
    folded = _fold_batchnorm(t, node) if back is None else None
    if folded is not None:
        weights = folded[0]
    elif back is None:
        weights = t.operand(node, 1)
    elif node.input[1] in t.const:  # OCK weights as OC1K
        weights = t.param(node.input[1], t.const[node.input[1]].reshape(*w[:2], 1, w[2]), "2d")
    else:
        weights = f"reshape({t.operand(node, 1)}, {ints([*w[:2], 1, w[2]])})"
    expr = f"conv2d({x}, {weights}, stride = {ints(stride)}, padding = {pad}{extra})"
    if folded is not None:
        expr = f"{expr} + {folded[1]}"
    elif len(node.input) > 2 and node.input[2]:
        bias = node.input[2]
        if bias in t.const:
            b = t.param(bias, t.const[bias].reshape(1, -1, 1, 1), "nchw")
        else:
            b = f"reshape({t.tensor(bias)}, [1, {w[0]}, 1, 1])"
        expr = f"{expr} + {b}"
    return expr if back is None else f"reshape({expr}, {ints(back)})"


def _fold_batchnorm(t: Translation, conv: Any) -> tuple[str, str] | None:
    """When the conv's only reader is an inference BatchNormalization and every weight of both
    is a constant, the two as one conv, as ATC converts them: weights W·s and bias
    (b − mean)·s + beta with s = gamma / sqrt(var + eps), computed in float64 at import. The
    names of the folded weight and bias params, or None when it does not apply."""
    out = conv.output[0]
    readers = t.readers.get(out, [])
    if len(readers) != 1 or readers[0] is None or readers[0].op_type != "BatchNormalization":
        return None
    bn = readers[0]
    if len(t.shape_of(conv, 1)) != 4:
        return None
    bias = conv.input[2] if len(conv.input) > 2 else ""
    needed = [conv.input[1], *bn.input[1:5], *([bias] if bias else [])]
    if t.attr(bn, "training_mode", 0) or not all(v in t.const for v in needed):
        return None
    gamma, beta, mean, var = (t.const[v].astype(np.float64) for v in bn.input[1:5])
    scale = gamma / np.sqrt(var + float(t.attr(bn, "epsilon", 1e-5)))
    w = t.const[conv.input[1]].astype(np.float64) * scale[:, None, None, None]
    b = t.const[bias].astype(np.float64) if bias else np.zeros_like(scale)
    shift = ((b - mean) * scale + beta).reshape(1, -1, 1, 1)
    t.folded.add(out)
    name = bn.output[0]
    weights = t.param(name + "_w", w.astype(np.float32))
    return weights, t.param(name + "_b", shift.astype(np.float32))


def _gemm(t: Translation, node: Any) -> str:
    alpha = float(t.attr(node, "alpha", 1.0))
    beta = float(t.attr(node, "beta", 1.0))
    ops = []
    for i, flag in ((0, "transA"), (1, "transB")):
        transposed = bool(t.attr(node, flag, 0))
        value = node.input[i]
        if value in t.const and transposed:
            ops.append(t.param(value, t.const[value].T, "t"))
        elif transposed:
            ops.append(f"transpose({t.operand(node, i)}, [1, 0])")
        else:
            ops.append(t.operand(node, i))
    expr = f"{ops[0]} @ {ops[1]}"
    if alpha != 1.0:
        expr = f"({expr}) * {num(alpha)}"
    if len(node.input) > 2 and node.input[2] and beta != 0.0:
        c = node.input[2]
        if c in t.const:
            term = t.param(c, t.const[c] * beta, "" if beta == 1.0 else "scaled")
        else:
            term = t.tensor(c) if beta == 1.0 else f"{t.tensor(c)} * {num(beta)}"
        expr = f"{expr} + {term}"
    return expr


def _batchnorm(t: Translation, node: Any) -> str | None:
    if node.input[0] in t.folded:  # folded into the conv before it
        t.alias(node)
        return None
    if t.attr(node, "training_mode", 0):
        t.fail("BatchNormalization: training mode is not supported", "export for inference")
    eps = float(t.attr(node, "epsilon", 1e-5))
    args = ", ".join(t.operand(node, i) for i in range(5))
    return f"batchnorm({args}, eps = {num(eps)})"


def _pool(kind: str) -> Translator:
    def translate(t: Translation, node: Any) -> str:
        if t.attr(node, "ceil_mode", 0):
            t.fail(f"{node.op_type}: ceil_mode is not supported", "export with ceil_mode = 0")
        if kind == "max" and t.attr(node, "storage_order", 0):
            t.fail("MaxPool: column-major storage_order is not supported", None)
        kernel = [int(k) for k in t.attr(node, "kernel_shape", [])]
        if len(kernel) not in (1, 2) or len(t.shape_of(node, 0)) != len(kernel) + 2:
            t.fail(f"{node.op_type}: only 1-D and 2-D pooling (NCL, NCHW) is supported", None)
        x, back = _as_2d(t, node)
        stride, dilation, pad = _window(t, node, kernel)
        extra = f", dilation = {ints(dilation)}" if dilation != [1, 1] else ""
        if kind == "avg" and pad != "[0, 0]" and not t.attr(node, "count_include_pad", 0):
            extra += ", count_include_pad = false"
        expr = (
            f"pool2d({x}, kind = {kind}, kernel = {ints([1] * (2 - len(kernel)) + kernel)}, "
            f"stride = {ints(stride)}, padding = {pad}{extra})"
        )
        return expr if back is None else f"reshape({expr}, {ints(back)})"

    return translate


def _global_pool(kind: str) -> Translator:
    op = "reduce_mean" if kind == "avg" else "reduce_max"
    return lambda t, node: f"{op}({t.operand(node, 0)}, axis = [2, 3], keepdims = true)"


def _lrn(t: Translation, node: Any) -> str:
    size = int(t.attr(node, "size", 0))
    alpha, beta = float(t.attr(node, "alpha", 1e-4)), float(t.attr(node, "beta", 0.75))
    bias = float(t.attr(node, "bias", 1.0))
    return (
        f"lrn({t.operand(node, 0)}, size = {size}, alpha = {num(alpha)}, beta = {num(beta)}, "
        f"bias = {num(bias)})"
    )


def _instance_norm(t: Translation, node: Any) -> str:
    channels = t.shape_of(node, 0)[1]
    eps = float(t.attr(node, "epsilon", 1e-5))
    args = ", ".join(t.operand(node, i) for i in range(3))
    return f"groupnorm({args}, groups = {channels}, eps = {num(eps)})"


def _pad(t: Translation, node: Any) -> str | None:
    """Pad as a concat along each padded axis: of constant params (``constant``), of width-1
    slices mirrored (``reflect``) or repeated (``edge``); negative pads crop (a slice)."""
    shape = list(t.shape_of(node, 0))
    rank = len(shape)
    mode = t.attr(node, "mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if t.opset < 11:
        pads, value = [int(p) for p in t.attr(node, "pads", [])], float(t.attr(node, "value", 0.0))
        axes = list(range(rank))
    else:
        pads = [int(p) for p in t.constant(node, 1, "the pads")]
        given = len(node.input) > 2 and node.input[2]
        value = float(t.constant(node, 2, "the value").reshape(())) if given else 0.0
        has_axes = len(node.input) > 3 and node.input[3]
        axes = [int(a) % rank for a in t.constant(node, 3, "the axes")] if has_axes else []
        axes = axes or list(range(rank))
    if mode not in ("constant", "reflect", "edge") or len(pads) != 2 * len(axes):
        t.fail(f"Pad: mode {mode!r} with pads {pads} is not supported", None)
    x = t.operand(node, 0)
    dtype = NUMPY_DTYPE.get(t.dtype.get(node.input[0], "f32"), np.float32)
    todo = [(a, b, e) for a, b, e in zip(axes, pads[: len(axes)], pads[len(axes) :], strict=True)]
    todo = [(a, b, e) for a, b, e in todo if b or e]
    if not todo:
        t.alias(node)
        return None
    for k, (a, b, e) in enumerate(todo):
        if b < 0 or e < 0:  # crop first
            x = f"slice({x}, start = {max(-b, 0)}, stop = {shape[a] - max(-e, 0)}, axis = {a})"
            shape[a] -= max(-b, 0) + max(-e, 0)
            b, e = max(b, 0), max(e, 0)
            if b or e:  # the slices below read it
                x = t.let(x, f"crop{a}")
        n = shape[a]
        if mode == "reflect" and (b >= n or e >= n):
            t.fail(f"Pad: reflecting {max(b, e)} over an axis of size {n}", None)
        sides = {}
        for side, count in (("before", b), ("after", e)):
            if mode == "constant" and count:
                fill = np.full([count if i == a else d for i, d in enumerate(shape)], value, dtype)
                picked = [t.param(node.output[0], fill, f"pad{a}_{side}")]
            elif mode == "constant":
                picked = []
            else:
                if mode == "edge":
                    picks = [0 if side == "before" else n - 1] * count
                else:
                    picks = list(
                        range(count, 0, -1) if side == "before" else range(n - 2, n - 2 - count, -1)
                    )
                picked = [f"slice({x}, start = {i}, stop = {i + 1}, axis = {a})" for i in picks]
            sides[side] = picked
        parts = [*sides["before"], x, *sides["after"]]
        shape[a] += b + e
        expr = f"concat({', '.join(parts)}, axis = {a})"
        x = expr if k == len(todo) - 1 else t.let(expr, f"pad{a}")
    return x


def _tile(t: Translation, node: Any) -> str | None:
    repeats = [int(r) for r in t.constant(node, 1, "the repeats")]
    x, todo = t.operand(node, 0), [(a, r) for a, r in enumerate(repeats) if r != 1]
    if any(r < 1 for r in repeats):
        t.fail(f"Tile: repeats {repeats} must be at least 1", None)
    if not todo:
        t.alias(node)
        return None
    for k, (a, r) in enumerate(todo):
        expr = f"concat({', '.join([x] * r)}, axis = {a})"
        x = expr if k == len(todo) - 1 else t.let(expr, f"tile{a}")
    return x


LAYERS: dict[str, Translator] = {
    "Conv": _conv,
    "Gemm": _gemm,
    "BatchNormalization": _batchnorm,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": _global_pool("avg"),
    "GlobalMaxPool": _global_pool("max"),
    "LRN": _lrn,
    "InstanceNormalization": _instance_norm,
    "Pad": _pad,
    "Tile": _tile,
}
