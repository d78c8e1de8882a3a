"""Operations on device tensors, one function per registry op that has a kernel.

``ops.matmul(a, b)``, ``ops.relu(x)``, ``ops.softmax(x, axis=-1)``, ``ops.scale(x, 0.5)``: the
functions are made from :mod:`rtgraph.ops.registry` (tensor arguments first, then the op's
attributes as keywords, or positionally for its ``positional_attrs``). Each call checks the
operands with the op's own shape and dtype rule, allocates the output in device memory for the
current stream, and enqueues one task on the current stream — unit from the registry, flops
and bytes from ``OpDef.cost``, block dim from :func:`rtgraph.timing.costmodel.block_dim_for`. Layout
ops (``reshape``, ``transpose``, ``broadcast_to``) return a view, with no task, when NumPy's
stride rules allow one (the compiler's rule, :func:`rtgraph.compiler.passes.lower.layout_view`).

Nothing runs until the host needs a value; a stream never waits for another stream's data
unless an event says so (see :mod:`rtgraph.runtime`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rtgraph.compiler.passes.lower import LAYOUT_OPS, layout_view
from rtgraph.compiler.taskgraph import View
from rtgraph.dtypes import DTYPES
from rtgraph.errors import CheckError, DTypeError, InputError, ShapeError, UsageError, did_you_mean
from rtgraph.ir.graph import UNITS, TensorType
from rtgraph.ops.registry import OpDef, OpError, language_ops
from rtgraph.runtime.context import Context
from rtgraph.runtime.state import locked
from rtgraph.runtime.tensor_data import TensorData, dtype_name
from rtgraph.timing.costmodel import block_dim_for, compute_us

_ERRORS = {"shape": ShapeError, "dtype": DTypeError, "attr": CheckError}


# --- attributes ----------------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def _ints(v: Any) -> tuple[int, ...] | None:
    if _is_int(v):
        return (int(v),)
    if isinstance(v, list | tuple | np.ndarray) and all(_is_int(x) for x in v):
        return tuple(int(x) for x in v)
    return None


def _convert(kind: str, value: Any, choices: tuple[str, ...]) -> tuple[bool, Any, str]:
    """(ok, converted value, what was expected) for an attribute value of ``kind``."""
    if kind == "int":
        return _is_int(value), int(value) if _is_int(value) else value, "an integer"
    if kind == "float":
        ok = _is_int(value) or isinstance(value, float | np.floating)
        return ok, float(value) if ok else value, "a number"
    if kind == "bool":
        ok = isinstance(value, bool | np.bool_)
        return ok, bool(value) if ok else value, "True or False"
    if kind == "ints":
        got = _ints(value)
        return got is not None, got, "a list of integers"
    if kind == "axes":
        if _is_int(value):
            return True, int(value), "an axis or a list of axes"
        got = _ints(value)
        return got is not None, got, "an axis or a list of axes"
    if kind == "dtype":
        try:
            return True, dtype_name(value), ""
        except InputError:
            return False, value, f"a dtype ({', '.join(DTYPES)})"
    if kind in ("enum", "unit"):
        allowed = choices if kind == "enum" else UNITS
        return value in allowed, value, f"one of {', '.join(allowed)}"
    return False, value, f"a {kind} (not available from the runtime API)"


def attributes(op: OpDef, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` keyword attributes checked against ``op``'s specs, defaults filled in."""
    for name in given:
        if name not in op.attrs:
            known = sorted(op.attrs)
            raise CheckError(
                f"{op.name}: unknown attribute '{name}'",
                hint=did_you_mean(name, known)
                or f"its attributes are: {', '.join(known) or '(none)'}",
            )
    out: dict[str, Any] = {}
    for name, spec in op.attrs.items():
        if name not in given:
            if spec.required:
                raise CheckError(
                    f"{op.name}: attribute '{name}' is required",
                    hint=f"pass {name}=... ({spec.kind})",
                )
            out[name] = spec.default
            continue
        value = given[name]
        if value is None and spec.default is None:
            out[name] = None
            continue
        ok, converted, expected = _convert(spec.kind, value, spec.choices)
        if not ok:
            raise CheckError(f"{op.name}: attribute '{name}' must be {expected}, got {value!r}")
        out[name] = converted
    return out


# --- enqueueing ----------------------------------------------------------------------------


def _context_of(op: OpDef, tensors: Sequence[TensorData]) -> Context:
    ctx = None
    for i, t in enumerate(tensors):
        if not isinstance(t, TensorData):
            raise UsageError(f"{op.name}: argument {i + 1} is a {type(t).__name__}, not a Tensor")
        here = t.context(f"{op.name} (argument {i + 1})")
        if ctx is not None and here is not ctx:
            raise UsageError(
                f"{op.name}: operands on different devices ({tensors[0].device}, {t.device})",
                hint="copy them to one device first",
            )
        ctx = here
    if ctx is None:
        raise UsageError(f"{op.name} needs at least one tensor argument")
    return ctx


@locked
def launch(
    op: OpDef,
    tensors: Sequence[TensorData],
    attrs: Mapping[str, Any],
    out: TensorData | None = None,
) -> TensorData:
    """Check ``op`` on ``tensors`` and enqueue its task on the current stream; the result is a
    new device tensor (or ``out``, which must have the result's shape and dtype)."""
    ctx = _context_of(op, tensors)
    types = [TensorType(t.shape, t.dtype) for t in tensors]
    try:
        result = op.infer(types, attrs)
    except OpError as e:
        raise _ERRORS[e.kind](e.message, hint=e.hint) from None
    if out is None and op.name in LAYOUT_OPS:
        src = tensors[0]
        base = View("", src.operand().tensor, src._offset, src.shape, src.strides, src.dtype)
        view = layout_view(base, op.name, dict(attrs), result.shape)
        if view is not None:
            return src._view(view.offset, view.shape, view.strides)
    cost = op.cost(types, result, attrs)
    unit = op.unit_for(attrs)
    block_dim = block_dim_for(
        unit, cost.flops, cost.bytes_read + cost.bytes_written, ctx.spec, None
    )
    if cost.flops and unit != "dma":
        compute_us(unit, result.dtype, cost.flops, block_dim, ctx.spec)  # the device can do it?
    if out is None:
        out = type(tensors[0])._allocate(ctx, result.shape, result.dtype)  # operands' class
    elif out.context(op.name) is not ctx or (out.shape, out.dtype) != (
        result.shape,
        result.dtype,
    ):
        raise ShapeError(
            f"{op.name}: the output must be {result} on {tensors[0].device}, got "
            f"{out.dtype}{list(out.shape)} on {out.device}"
        )
    writers = tuple(t.producer for t in tensors if t.producer is not None)
    task = ctx.recorder.launch(
        ctx.current_stream,
        op=op.name,
        unit=unit,
        inputs=tuple(t.operand() for t in tensors),
        output=out.operand(),
        flops=cost.flops,
        bytes_read=cost.bytes_read,
        bytes_written=cost.bytes_written,
        block_dim=block_dim,
        attrs=attrs,
        deps=writers,
    )
    assert out._storage is not None
    out._storage.writer = task
    capture = ctx.recorder.capture
    if capture is not None:  # for the graph: what it writes, and its static inputs
        capture.written.append(out._storage)
        capture.inputs += [t for t in tensors if not any(t._storage is k for k in capture.keep)]
    return out


def _split(op: OpDef, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[TensorData]:
    """Tensor arguments come first; the rest are positional attributes (moved into kwargs)."""
    n = 0
    while n < len(args) and isinstance(args[n], TensorData):
        n += 1
    tensors, rest = list(args[:n]), args[n:]
    if any(isinstance(a, TensorData) for a in rest):
        raise CheckError(f"{op.name}: tensor arguments come before attributes")
    if len(rest) > len(op.positional_attrs):
        allowed = ", ".join(op.positional_attrs) or "none"
        raise CheckError(
            f"{op.name}: {len(rest)} positional attribute(s) given; it takes {allowed}",
            hint="pass attributes as keywords",
        )
    for name, value in zip(op.positional_attrs, rest, strict=False):
        if name in kwargs:
            raise CheckError(f"{op.name}: attribute '{name}' given twice")
        kwargs[name] = value
    high = op.max_args
    if len(tensors) < op.min_args or (high is not None and len(tensors) > high):
        wanted = f"{op.min_args}" if high == op.min_args else f"{op.min_args}..{high or 'any'}"
        raise CheckError(f"{op.name} takes {wanted} tensor argument(s), got {len(tensors)}")
    return tensors


def _make(op: OpDef) -> Callable[..., TensorData]:
    @locked
    def call(*args: Any, **kwargs: Any) -> TensorData:
        tensors = _split(op, args, kwargs)
        return launch(op, tensors, attributes(op, kwargs))

    call.__name__ = call.__qualname__ = op.name
    attrs = ", ".join(f"{k}: {a.kind}" for k, a in op.attrs.items())
    call.__doc__ = f"{op.doc or op.name} — enqueued on the current stream ({op.unit})." + (
        f" Attributes: {attrs}." if attrs else ""
    )
    return call


_FUNCTIONS: dict[str, Callable[..., TensorData]] = {
    name: _make(op) for name, op in sorted(language_ops().items()) if op.kernel is not None
}


def names() -> list[str]:
    """The operations available (every registry op with a kernel), sorted."""
    return list(_FUNCTIONS)


def __getattr__(name: str) -> Callable[..., TensorData]:
    found = _FUNCTIONS.get(name)
    if found is None:
        raise AttributeError(
            f"rtgraph.runtime.ops has no operation '{name}'"
            + (f" ({hint})" if (hint := did_you_mean(name, _FUNCTIONS)) else "")
        )
    return found


def __dir__() -> list[str]:
    return sorted([*globals(), *_FUNCTIONS])
