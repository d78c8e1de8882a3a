"""The op registry: the one place that says everything about an op.

An :class:`OpDef` declares an op's signature (tensor arguments, then attributes), its shape and
dtype rule, the hardware unit it runs on, its cost inputs, and its NumPy kernel. The checker,
the lowering pass, the cost model, the interpreter and the emulator all read ops from here and
nowhere else, so adding an op is one ``OpDef(...)`` in the ``OPS`` of its family module
(:mod:`rtgraph.ops.cube`, :mod:`rtgraph.ops.elementwise`, …); importing :mod:`rtgraph.ops`
registers every family's ops, in the order of :data:`rtgraph.ops.FAMILIES`.

Conventions every op follows:

* ``infer(types, attrs) -> TensorType`` raises :class:`OpError` for operands or attributes that
  do not fit, naming the offending argument (``arg``) or attribute (``attr``) so the checker can
  point at it.
* ``kernel(arrays, attrs) -> ndarray`` receives arrays in *value form* (see :mod:`rtgraph.dtypes`)
  and may return any NumPy array; :func:`run_kernel` rounds the result once to the output dtype.
  Kernels are vectorised NumPy; f16/bf16 matmul-like ops compute in f32 through BLAS. An op may
  also have ``kernel_into(arrays, attrs, out)``, the same computation rounding its result
  straight into ``out`` (a float32 or float16 array of the output's shape) instead of into a
  new array; :func:`run_kernel` calls it when given ``into=`` (the emulator's device memory).
* ``cost(types, out, attrs) -> Cost`` gives flops and bytes moved, for the cost model; its
  docstring's first sentence says what it counts (the op table prints it).
* Attributes arrive validated and defaulted (``AttrSpec``); ``axis`` values are normalised by
  the op's rule, not by the checker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from rtgraph.dtypes import TensorType, to_storage, to_value

#: How an op may join a fused Vector kernel (:mod:`rtgraph.ops.fused`): ``elementwise`` — each
#: output element needs only the same-index elements of its (broadcast) operands; ``row`` — a
#: normalisation along its ``axis`` attribute, fusible when that is the last axis (a fused kernel
#: holds whole rows on chip); None — never fused.
Fusion = Literal["elementwise", "row"]

AttrKind = Literal["int", "float", "bool", "ints", "dtype", "enum", "axes", "names", "unit"]
REQUIRED: Any = object()


@dataclass(frozen=True)
class AttrSpec:
    """One keyword attribute: its kind, default (``REQUIRED`` if none) and allowed values.

    Kinds: ``int``, ``float`` (ints accepted), ``bool``, ``ints`` (a list of ints), ``axes``
    (an int or a list of ints), ``dtype`` (a dtype name), ``enum`` (an identifier from
    ``choices``), ``names`` (a list of tensor/buffer names), ``unit`` (cube/vector/dma).
    """

    kind: AttrKind
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class Cost:
    """What a task does, for the cost model: arithmetic and bytes moved to and from memory."""

    flops: int
    bytes_read: int
    bytes_written: int


class OpError(Exception):
    """Raised by an op's rule: operands or attributes that do not fit.

    ``arg`` is the index of the offending tensor argument, ``attr`` the name of the offending
    attribute; the checker turns this into a located :class:`~rtgraph.errors.CheckError`.
    ``kind`` is ``"shape"``, ``"dtype"`` or ``"attr"``.
    """

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        arg: int | None = None,
        attr: str | None = None,
        kind: Literal["shape", "dtype", "attr"] = "shape",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.arg = arg
        self.attr = attr
        self.kind = kind


Unit = Literal["cube", "vector", "dma", "link", "layout", "synthetic"]


@dataclass(frozen=True)
class OpDef:
    """Everything about one op.

    ``unit`` is the hardware unit (``layout`` ops are views where the layout allows and a
    Vector copy otherwise; ``synthetic`` is the ``kernel`` op, whose unit is an attribute).
    ``min_args``/``max_args`` bound the tensor arguments (``max_args`` None: variadic).
    ``positional_attrs`` name attributes that may also be given positionally after the
    tensor arguments (``reshape(x, [S, D])``, ``transpose(x, [1, 0])``, ``scale(x, 0.5)``).
    ``fusion`` says whether and how the optimizer may fuse it with its neighbours (see
    :data:`Fusion`). An ``internal`` op is made by the compiler, never written in a program:
    the checker does not know it and the op table leaves it out. An op with no ``fusion`` joins
    fused kernels as an elementwise op where ``fusion_when(types, attrs)`` holds for its operands
    (:func:`fusion_of`: a quantize by a per-tensor scale, whose scalar operand broadcasts).
    ``nonnegative_args`` are the operands whose values the op needs at or above zero (a
    variance): a param passed there as it is gets seeded values ``|x|``
    (:func:`rtgraph.ir.data.generate`), so a seeded run means something.
    """

    name: str
    unit: Unit
    min_args: int
    max_args: int | None
    infer: Callable[[Sequence[TensorType], Mapping[str, Any]], TensorType]
    cost: Callable[[Sequence[TensorType], TensorType, Mapping[str, Any]], Cost]
    kernel: Callable[[Sequence[np.ndarray], Mapping[str, Any]], np.ndarray] | None
    attrs: Mapping[str, AttrSpec] = field(default_factory=dict)
    positional_attrs: tuple[str, ...] = ()
    doc: str = ""
    fusion: Fusion | None = None
    internal: bool = False
    kernel_into: Callable[[Sequence[np.ndarray], Mapping[str, Any], np.ndarray], None] | None = None
    fusion_when: Callable[[Sequence[TensorType], Mapping[str, Any]], bool] | None = None
    nonnegative_args: tuple[int, ...] = ()

    def unit_for(self, attrs: Mapping[str, Any]) -> str:
        """The unit a task of this op runs on (``layout`` copies run on the Vector unit; an op
        with a ``unit`` attribute runs where it says: the ``kernel`` op, a ``fused`` Cube task)."""
        if self.unit == "synthetic":
            return str(attrs["unit"])
        if "unit" in self.attrs:
            return str(attrs.get("unit", self.attrs["unit"].default))
        return "vector" if self.unit == "layout" else self.unit


OPS: dict[str, OpDef] = {}

#: Ops that only move elements — no arithmetic: a precision means nothing to them; they keep
#: the dtype their operand arrives in (the precision pass, the checker's ``@precision``).
ELEMENT_MOVES = frozenset({"reshape", "transpose", "broadcast_to", "concat", "slice", "copy"})


def fusion_of(op: OpDef, types: Sequence[TensorType], attrs: Mapping[str, Any]) -> Fusion | None:
    """How an application of ``op`` to operands of ``types`` may fuse: its ``fusion``, else
    ``elementwise`` where its ``fusion_when`` holds for them, else None."""
    if op.fusion is not None:
        return op.fusion
    if op.fusion_when is not None and op.fusion_when(types, attrs):
        return "elementwise"
    return None


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the registry (:mod:`rtgraph.ops` does it for every family on import)."""
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} registered twice")
    OPS[op.name] = op
    return op


def lookup(name: str) -> OpDef | None:
    """The op called ``name``, or None if the language has no such op."""
    return OPS.get(name)


def all_ops() -> dict[str, OpDef]:
    """Every registered op by name, in registration order."""
    return OPS


def language_op(name: str) -> OpDef | None:
    """The op a program may call ``name`` — None for unknown and compiler-internal ops."""
    op = OPS.get(name)
    return None if op is None or op.internal else op


def language_ops() -> dict[str, OpDef]:
    """The ops a program may call, in registration order (internal ops left out)."""
    return {name: op for name, op in OPS.items() if not op.internal}


#: Output dtypes whose value form is their storage form and a float, so a kernel's f32 (or
#: f16) result is rounded into them by a plain NumPy cast, exactly as :func:`to_value` rounds.
CAST_INTO = ("f32", "f16")


def run_kernel(
    op: OpDef,
    arrays: Sequence[np.ndarray],
    attrs: Mapping[str, Any],
    out: TensorType,
    *,
    into: np.ndarray | None = None,
) -> np.ndarray:
    """Apply ``op``'s kernel and round the result once to ``out``'s dtype (value form).

    With ``into`` (a writable array of ``out``'s shape in *storage* form, see
    :mod:`rtgraph.dtypes`) the result is written there — by the op's ``kernel_into`` when it has
    one and ``out`` is f32 or f16, so no result array is made — and ``into`` is returned. The
    bits are the same either way.
    """
    if op.kernel is None:
        raise TypeError(f"op {op.name!r} has no kernel")
    if into is not None and out.dtype in CAST_INTO:
        with np.errstate(over="ignore", invalid="ignore"):  # as to_value: overflow is inf
            if op.kernel_into is not None:
                op.kernel_into(arrays, attrs, into)
            else:
                np.copyto(into, op.kernel(arrays, attrs), casting="unsafe")
        return into
    result = to_value(op.kernel(arrays, attrs), out.dtype)
    if result.shape != out.shape:
        result = np.broadcast_to(result, out.shape)
    if into is None:
        return result
    into[...] = to_storage(result, out.dtype)
    return into
