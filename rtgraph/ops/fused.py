"""The ``fused`` op: several ops run as one task, as a graph compiler's fused kernel runs them —
a chain or tree of Vector ops, or a Cube op with the epilogue its output path applies.

The optimizer's fusion passes make it (:mod:`rtgraph.compiler.optimizer.fuse_elementwise`,
:mod:`rtgraph.compiler.optimizer.fuse_epilogue`); a program cannot name it. Its ``body``
attribute lists the ops it runs, in order. Each step is ``(op, args, attrs, dtype, shape)``: a
registered op, its arguments as indices (below ``len(inputs)`` an input of the fused task, from
there on an earlier step's result), its attributes as ``(key, value)`` pairs, and the type its
result has. The last step's result is the task's output.

Its ``unit`` attribute says which body is which. ``vector`` (the default): every step is an op
whose ``fusion`` allows it. ``cube``: step 0 is ``matmul`` or ``conv2d`` (the head) and every
later step an epilogue (:data:`EPILOGUES`) of the step before it — the dequantize, bias, scale,
activation and quantize a Cube's output path applies as the result leaves the unit (the Ascend
910B's FixPipe), which device specs list per unit (``[units.cube] epilogues``). An ``i8 × i8``
head's i32 result may be dequantized to a float inside the body, so the dtype may change from
step to step. Which epilogues a device has is the compiler's business; this module checks only
the shape of a body.

Numerics: each step's result is rounded to its own dtype exactly where the unfused op rounds it,
so a fused task equals the ops it replaced bit for bit. With ``fast_math`` the intermediates of a
floating-point body stay in f32 and only the output is rounded — fewer roundings, a different
answer, reported against the reference. Cost: the task reads each input once and writes one
result; the intermediates never reach device memory, which is the point of fusing. A Cube
task's flops are its head's: the epilogue is fixed-function work that streams with the result
(free, as the Cube's own accumulate-and-round is), not Cube arithmetic.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rtgraph.dtypes import DTYPES, TensorType, to_value
from rtgraph.ops.registry import AttrSpec, Cost, OpDef, OpError, fusion_of, lookup, run_kernel
from rtgraph.ops.rules import Arrays, Attrs, Types, operand_bytes

#: The most steps one fused kernel may hold (a fused kernel is one on-chip loop body).
MAX_STEPS = 64

Step = tuple[str, tuple[int, ...], tuple[tuple[str, Any], ...], str, tuple[int, ...]]

#: The units a fused task may run on.
UNITS = ("vector", "cube")

#: The activations a Cube's output path may apply: unary ops of the step before.
ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid", "tanh")

#: Every epilogue a device may list (``[units.cube] epilogues``), and what it is in IR terms. A
#: Cube body applies each at most once, in the order of a Cube's output path (the 910B's
#: FixPipe): ``dequant`` while the result is still the i32 accumulator, then ``bias``,
#: ``scale``, one activation, and ``quant`` last (:func:`epilogue_may_follow`).
EPILOGUES: dict[str, str] = {
    "dequant": "dequantize of the i32 result (of an i8 × i8 Cube op): a scale per tensor or "
    "one per output channel, no zero point",
    "bias": "add of a channel vector: one value per output channel (the last axis after "
    "matmul, axis 1 after conv2d), broadcast over the rest",
    "scale": "scale(x, s), or mul by a scalar or a channel vector (a dequantize's multiply)",
    **{name: f"{name}(x)" for name in ACTIVATIONS},
    "quant": "quantize of the float result to i8: a scale per tensor, no zero point; last",
}

#: The epilogues that are ops of :mod:`rtgraph.ops.quant`, by op name.
QUANT_EPILOGUES = {"dequantize": "dequant", "quantize": "quant"}

#: The Cube ops that may head a Cube body, and the axis of their output channels.
CHANNEL_AXIS = {"matmul": -1, "conv2d": 1}


def _operand_types(values: list[TensorType], args: Any) -> list[TensorType]:
    """The types a step's ``args`` name, as far as they are valid (checked after this)."""
    if not isinstance(args, tuple | list):
        return []
    return [values[a] for a in args if isinstance(a, int) and 0 <= a < len(values)]


def _bad(k: int, problem: str) -> OpError:
    return OpError(f"fused: body step {k}: {problem}", attr="body", kind="attr")


def step_types(
    types: Sequence[TensorType], body: Any, unit: Any = "vector", *, as_stored: bool = True
) -> list[TensorType]:
    """The type of every value of a fused body — its inputs', then each step's — checking each
    step as the op's own rule would, and a ``cube`` body's shape: a Cube head, then a chain of
    epilogues (a body read from a file is untrusted). Each step's type must be the one the body
    stores, unless ``as_stored`` is off (the body run on operands of other shapes: a padded
    run's real ones, :mod:`rtgraph.compiler.real_dims`)."""
    if unit not in UNITS:
        raise OpError(
            f"fused: unit must be 'vector' or 'cube', got {unit!r}", attr="unit", kind="attr"
        )
    if not isinstance(body, tuple | list) or not 0 < len(body) <= MAX_STEPS:
        raise OpError(f"fused: body must list 1 to {MAX_STEPS} steps", attr="body", kind="attr")
    values = list(types)
    applied: list[str] = []  # a Cube body's epilogues so far
    for k, step in enumerate(body):
        if not isinstance(step, tuple | list) or len(step) != 5:
            raise _bad(k, "must be (op, args, attrs, dtype, shape)")
        name, args, attrs, dtype, shape = step
        op = lookup(name) if isinstance(name, str) else None
        if unit == "cube":
            _cube_op(k, name, op)
        elif op is None or fusion_of(op, _operand_types(values, args), _attr_dict(attrs)) is None:
            raise _bad(k, f"{name!r} is not a fusible op")
        if not isinstance(args, tuple | list) or not all(
            isinstance(a, int) and 0 <= a < len(values) for a in args
        ):
            raise _bad(k, f"arguments must index the {len(values)} values before it")
        try:
            out = op.infer([values[a] for a in args], _attr_dict(attrs))
        except (OpError, KeyError, TypeError, ValueError) as e:
            raise _bad(k, str(e)) from None
        if as_stored and (out.dtype, tuple(out.shape)) != (dtype, tuple(shape)):
            raise _bad(k, f"{name} gives {out}, the body says {dtype}{list(shape)}")
        if unit == "cube" and k:
            kind = _epilogue_step(k, body[0][0], step, values, len(types), applied)
            applied.append(kind)
        values.append(out)
    return values


def _cube_op(k: int, name: Any, op: OpDef | None) -> None:
    """Refuse step ``k`` of a Cube body if its op cannot stand there (before its types)."""
    if k == 0 and (not isinstance(name, str) or name not in CHANNEL_AXIS):
        raise _bad(0, f"a Cube body starts with matmul or conv2d, not {name!r}")
    if k and (op is None or op.unit == "cube"):
        raise _bad(k, f"{name!r} is not an epilogue (a Cube body runs one Cube op, its step 0)")


def _epilogue_step(
    k: int,
    head: str,
    step: Sequence[Any],
    values: Sequence[TensorType],
    inputs: int,
    applied: Sequence[str],
) -> str:
    """The epilogue step ``k`` (``(op, args, attrs, …)``) of a Cube body applies, refused unless
    it is one: an op of the step before (read once) and of the task's inputs, in the output
    path's order (:func:`epilogue_may_follow`)."""
    name, args, attrs = step[0], list(step[1]), _attr_dict(step[2])
    before = len(values) - 1
    others = [a for a in args if a != before]
    kind = None
    if args.count(before) == 1 and all(a < inputs for a in others):
        operands = [values[a] for a in args]
        kind = epilogue_kind(head, name, operands, args.index(before), attrs)
    if kind is None:
        raise _bad(k, f"{name} is not an epilogue of the step before ({', '.join(EPILOGUES)})")
    if not epilogue_may_follow(applied, kind):
        raise _bad(
            k,
            f"{kind} after {', '.join(applied)}: each epilogue once, an activation last "
            "(but for a quant, last of all)",
        )
    return kind


def epilogue_may_follow(applied: Sequence[str], kind: str) -> bool:
    """Whether a Cube's output path applies epilogue ``kind`` after the ``applied`` ones: each
    at most once, nothing after a ``quant`` (its i8 result leaves the unit) and only a ``quant``
    after an activation — FixPipe's order, dequantize → bias → scale → ReLU → quantize (the
    dequantize stands where the result is still i32, so before any float step)."""
    if kind in applied or "quant" in applied:
        return False
    return kind == "quant" or not any(a in ACTIVATIONS for a in applied)


def epilogue_kind(
    head: str,
    name: str,
    operands: Sequence[TensorType],
    chained: int,
    attrs: Mapping[str, Any] | None = None,
) -> str | None:
    """Which epilogue (:data:`EPILOGUES`) the op ``name`` on ``operands`` (with ``attrs``) is,
    when ``operands[chained]`` is the result of a Cube op ``head`` or of its epilogue so far
    (None: none). The other operands are what the Cube's output path reads besides the result.

    Without ``attrs`` a ``quantize`` is no epilogue (its result dtype is an attribute), and a
    ``dequantize``'s per-channel scale counts only when the channel axis is the one axis of the
    result of that length (so whatever its ``axis`` attribute, the scale runs along channels).
    """
    x = operands[chained]
    others = [t for i, t in enumerate(operands) if i != chained]
    if x.dtype == "i8":  # only a quantize makes an i8 in a Cube chain, and its result leaves
        return None
    if name in QUANT_EPILOGUES:
        return _quant_kind(head, name, operands, chained, attrs)
    if not others and (name in ACTIVATIONS or name == "scale"):
        return name
    if len(others) != 1 or head not in CHANNEL_AXIS:
        return None
    (other,) = others
    channel = _channel_vector(other, x, CHANNEL_AXIS[head])
    if name == "add" and channel:
        return "bias"
    if name == "mul" and (channel or all(d == 1 for d in other.shape)) and other.rank <= x.rank:
        return "scale"
    return None


def _quant_kind(
    head: str,
    name: str,
    operands: Sequence[TensorType],
    chained: int,
    attrs: Mapping[str, Any] | None,
) -> str | None:
    """``dequant`` or ``quant`` when the ``quantize`` / ``dequantize`` fits the output path: the
    result is its first operand, the scale per tensor (``quant``) or per tensor or per output
    channel (``dequant`` of the i32 accumulator), no zero point."""
    if chained != 0 or len(operands) != 2:
        return None
    x, scale = operands
    if name == "quantize":
        fits = attrs is not None and attrs.get("dtype", "i8") == "i8" and scale.rank == 0
        return "quant" if fits and DTYPES[x.dtype].is_float else None
    if x.dtype != "i32" or scale.rank > 1:
        return None
    if scale.rank == 0:
        return "dequant"
    if head not in CHANNEL_AXIS or not x.rank:
        return None
    channel = CHANNEL_AXIS[head] % x.rank
    if scale.shape != (x.shape[channel],):
        return None
    if attrs is None:
        along = x.shape.count(x.shape[channel]) == 1
    else:
        along = isinstance(attrs.get("axis", 1), int) and attrs.get("axis", 1) % x.rank == channel
    return "dequant" if along else None


def _channel_vector(t: TensorType, x: TensorType, axis: int) -> bool:
    """Whether ``t`` holds one value per channel of ``x`` (its ``axis``), broadcast over the
    rest: right-aligned to ``x``, every dimension 1 but the channel's, which is ``x``'s."""
    if t.rank > x.rank or not x.rank:
        return False
    axis %= x.rank
    padded = (1,) * (x.rank - t.rank) + tuple(t.shape)
    return all(d == (x.shape[i] if i == axis else 1) for i, d in enumerate(padded))


def _attr_dict(attrs: Any) -> dict[str, Any]:
    if not isinstance(attrs, tuple | list) or not all(
        isinstance(kv, tuple | list) and len(kv) == 2 and isinstance(kv[0], str) for kv in attrs
    ):
        raise TypeError("attributes must be (key, value) pairs")
    return {k: v for k, v in attrs}


def _infer(types: Types, attrs: Attrs) -> TensorType:
    return step_types(types, attrs["body"], attrs.get("unit", "vector"))[-1]


def _cost(types: Types, out: TensorType, attrs: Attrs) -> Cost:
    return body_cost(types, out, attrs)


def body_cost(types: Types, out: TensorType, attrs: Attrs, *, as_stored: bool = True) -> Cost:
    """The steps' flops (a Cube body's: its head's); each input read once, the output written
    once (``as_stored``: see :func:`step_types`). The optimizer asks for the same body's cost
    at the same types many times (a tile count per candidate, an order per schedule): a valid
    body's answer is kept (:data:`COST_CACHE` of them), an invalid one raises every time."""
    unit = attrs.get("unit", "vector")
    key = (tuple(types), out, attrs["body"], unit, as_stored)
    try:
        hash(key)
    except TypeError:  # a body from a file may hold lists: costed, not kept
        return _body_cost(types, out, attrs["body"], unit, as_stored)
    return _kept_cost(*key)


#: How many fused bodies' costs :func:`body_cost` keeps.
COST_CACHE = 4096


@functools.lru_cache(maxsize=COST_CACHE)
def _kept_cost(
    types: tuple[TensorType, ...], out: TensorType, body: Any, unit: Any, as_stored: bool
) -> Cost:
    return _body_cost(types, out, body, unit, as_stored)


def _body_cost(
    types: Sequence[TensorType], out: TensorType, body: Any, unit: Any, as_stored: bool
) -> Cost:
    values = step_types(types, body, unit, as_stored=as_stored)
    steps = body[:1] if unit == "cube" else body
    flops = 0
    for k, (name, args, step_attrs, _, _) in enumerate(steps):
        op = lookup(name)
        assert op is not None
        arg_types = [values[a] for a in args]
        flops += op.cost(arg_types, values[len(types) + k], _attr_dict(step_attrs)).flops
    return Cost(flops, operand_bytes(types), out.nbytes)


def _kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    return _run_body(arrays, attrs, None)


def _kernel_into(arrays: Arrays, attrs: Attrs, out: np.ndarray) -> None:
    """The kernel, its last step's result rounded straight into ``out``."""
    _run_body(arrays, attrs, out)


def _run_body(arrays: Arrays, attrs: Attrs, out: np.ndarray | None) -> np.ndarray:
    values = list(arrays)
    fast = bool(attrs.get("fast_math", False))
    body = attrs["body"]
    for k, (name, args, step_attrs, dtype, shape) in enumerate(body):
        op = lookup(name)
        assert op is not None and op.kernel is not None
        keep = "f32" if fast and DTYPES[dtype].is_float else dtype
        operands, step = [values[a] for a in args], _attr_dict(step_attrs)
        if out is not None and k == len(body) - 1:
            return run_kernel(op, operands, step, TensorType(tuple(shape), keep), into=out)
        result = to_value(op.kernel(operands, step), keep)
        if result.shape != tuple(shape):
            result = np.broadcast_to(result, tuple(shape))
        values.append(result)
    return values[-1]


def describe_body(body: Sequence[Step], inputs: Sequence[str]) -> str:
    """A fused body in one line, for listings: ``scale(%0, s=0.125) → add(·, mask) → softmax``."""
    names = list(inputs)
    parts = []
    for k, (name, args, attrs, _, _) in enumerate(body):
        shown = ["·" if k and a == len(inputs) + k - 1 else names[a] for a in args]
        shown += [f"{key}={_show(v)}" for key, v in attrs]
        parts.append(f"{name}({', '.join(shown)})")
        names.append(f"%s{k}")
    return " → ".join(parts)


def _show(value: Any) -> str:
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def body_attrs(attrs: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """An op's attributes as the ``(key, value)`` pairs a body step holds (lists as tuples)."""
    return tuple((k, _frozen(v)) for k, v in attrs.items())


def _frozen(value: Any) -> Any:
    return tuple(_frozen(v) for v in value) if isinstance(value, list | tuple) else value


FUSED = OpDef(
    name="fused",
    unit="vector",
    min_args=1,
    max_args=None,
    infer=_infer,
    cost=_cost,
    kernel=_kernel,
    kernel_into=_kernel_into,
    attrs={
        "body": AttrSpec("names", doc="the steps, made by the optimizer"),
        "fast_math": AttrSpec("bool", False, doc="keep intermediates in f32"),
        "unit": AttrSpec("unit", "vector", doc="vector, or cube: a Cube op and its epilogue"),
    },
    doc="ops fused by the optimizer into one task (Vector ops, or a Cube op and its epilogue): "
    "inputs read once, one result written, each step rounded as the unfused op rounds it "
    "(unless fast_math)",
    internal=True,
)

#: This family's ops.
OPS: tuple[OpDef, ...] = (FUSED,)
