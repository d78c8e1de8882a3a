"""The ``fused`` op: a chain or tree of Vector ops run as one task, as a graph compiler's fused
kernel runs them.

The optimizer's fusion pass makes it (:mod:`rtgraph.compiler.optimizer.fuse_elementwise`); a
program cannot name it. Its ``body`` attribute lists the ops it runs, in order. Each step is
``(op, args, attrs, dtype, shape)``: a registered op whose ``fusion`` allows it, its arguments
as indices (below ``len(inputs)`` an input of the fused task, from there on an earlier step's
result), its attributes as ``(key, value)`` pairs, and the type its result has. The last step's
result is the task's output.

Numerics: each step's result is rounded to its own dtype exactly where the unfused op rounds it,
so a fused task equals the ops it replaced bit for bit. With ``fast_math`` the intermediates of a
floating-point body stay in f32 and only the output is rounded — fewer roundings, a different
answer, reported against the reference. Cost: the task reads each input once and writes one
result; the intermediates never reach device memory, which is the point of fusing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rtgraph.dtypes import DTYPES, TensorType, to_value
from rtgraph.ops.registry import AttrSpec, Cost, OpDef, OpError, lookup
from rtgraph.ops.rules import Arrays, Attrs, Types, operand_bytes

#: The most steps one fused kernel may hold (a fused kernel is one on-chip loop body).
MAX_STEPS = 64

Step = tuple[str, tuple[int, ...], tuple[tuple[str, Any], ...], str, tuple[int, ...]]


def _bad(k: int, problem: str) -> OpError:
    return OpError(f"fused: body step {k}: {problem}", attr="body", kind="attr")


def step_types(types: Sequence[TensorType], body: Any) -> list[TensorType]:
    """The type of every value of a fused body — its inputs', then each step's — checking each
    step as the op's own rule would (a body read from a file is untrusted)."""
    if not isinstance(body, tuple | list) or not 0 < len(body) <= MAX_STEPS:
        raise OpError(f"fused: body must list 1 to {MAX_STEPS} steps", attr="body", kind="attr")
    values = list(types)
    for k, step in enumerate(body):
        if not isinstance(step, tuple | list) or len(step) != 5:
            raise _bad(k, "must be (op, args, attrs, dtype, shape)")
        name, args, attrs, dtype, shape = step
        op = lookup(name) if isinstance(name, str) else None
        if op is None or op.fusion is None:
            raise _bad(k, f"{name!r} is not a fusible op")
        if not isinstance(args, tuple | list) or not all(
            isinstance(a, int) and 0 <= a < len(values) for a in args
        ):
            raise _bad(k, f"arguments must index the {len(values)} values before it")
        try:
            out = op.infer([values[a] for a in args], _attr_dict(attrs))
        except (OpError, KeyError, TypeError, ValueError) as e:
            raise _bad(k, str(e)) from None
        if (out.dtype, tuple(out.shape)) != (dtype, tuple(shape)):
            raise _bad(k, f"{name} gives {out}, the body says {dtype}{list(shape)}")
        values.append(out)
    return values


def _attr_dict(attrs: Any) -> dict[str, Any]:
    if not isinstance(attrs, tuple | list) or not all(
        isinstance(kv, tuple | list) and len(kv) == 2 and isinstance(kv[0], str) for kv in attrs
    ):
        raise TypeError("attributes must be (key, value) pairs")
    return {k: v for k, v in attrs}


def _infer(types: Types, attrs: Attrs) -> TensorType:
    return step_types(types, attrs["body"])[-1]


def _cost(types: Types, out: TensorType, attrs: Attrs) -> Cost:
    """The steps' flops; each input read once and the output written once."""
    values = step_types(types, attrs["body"])
    flops = 0
    for k, (name, args, step_attrs, _, _) in enumerate(attrs["body"]):
        op = lookup(name)
        assert op is not None
        arg_types = [values[a] for a in args]
        flops += op.cost(arg_types, values[len(types) + k], _attr_dict(step_attrs)).flops
    return Cost(flops, operand_bytes(types), out.nbytes)


def _kernel(arrays: Arrays, attrs: Attrs) -> np.ndarray:
    values = list(arrays)
    fast = bool(attrs.get("fast_math", False))
    for name, args, step_attrs, dtype, shape in attrs["body"]:
        op = lookup(name)
        assert op is not None and op.kernel is not None
        keep = "f32" if fast and DTYPES[dtype].is_float else dtype
        result = to_value(op.kernel([values[a] for a in args], _attr_dict(step_attrs)), keep)
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
    attrs={
        "body": AttrSpec("names", doc="the steps, made by the optimizer"),
        "fast_math": AttrSpec("bool", False, doc="keep intermediates in f32"),
    },
    doc="Vector ops fused by the optimizer into one task: inputs read once, one result "
    "written, each step rounded as the unfused op rounds it (unless fast_math)",
    internal=True,
)

#: This family's ops.
OPS: tuple[OpDef, ...] = (FUSED,)
