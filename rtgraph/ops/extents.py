"""Run-time extents: the leading part of an axis a padded run's kernel computes on.

A program compiled for the gear above a run's size runs on zero-padded inputs
(:mod:`rtgraph.compiler.padding`). Most ops compute each element along a padded axis on its
own, so the padding never reaches a real element. Some do not: a ``softmax`` (or a layernorm,
an rmsnorm) normalises along its axis, a reduction reduces over it, and a ``matmul`` sums
along its inner dimension (and BLAS blocks its columns by the call's width, so a real
column's bits depend on how many columns share the call). A dynamic-shape kernel, as
Ascend's take their tiling data at launch, is told how much of such an axis is real and
computes on that part alone — the same arithmetic, in calls of the same shape, as the program
at the real size, so the run stays bit for bit.

The compiler marks such an op with ``<extent>_of = "S"`` (an attribute a program cannot write:
the dynamic parameter whose value is the extent); a padded run binds it, setting
``<extent> = S`` on each marked task (:func:`bind`). Unbound (0, the default) the kernel
computes on the whole axis. Past the extent, along the output axis it sets, the kernel writes
zeros.

=========  ==========  =====================================================  ==============
op         extent      operand axes cut to it                                 result axis
=========  ==========  =====================================================  ==============
softmax    ``length``  the normalised axis                                    the same
layernorm  ``length``  the normalised axis; gamma's and beta's only one       the same
rmsnorm    ``length``  the same                                               the same
reduce_*   ``length``  the one reduced axis (a mean divides by the extent)    none (reduced)
matmul     ``cols``    the right operand's last (its columns)                 the last
matmul     ``inner``   the left operand's last and the right's second-last   none (summed)
=========  ==========  =====================================================  ==============
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rtgraph.dtypes import TensorType
from rtgraph.ops.registry import OpError
from rtgraph.ops.rules import axes

__all__ = [
    "EXTENTS",
    "POSITIONS",
    "axes_of",
    "bind",
    "check",
    "check_positions",
    "cut",
    "describe",
    "extent",
    "moves",
    "reduced_axis",
    "zero_past",
]

#: The positions an op can take at run time, by op: a slice's ``start`` and ``stop`` along a
#: padded axis, each the parameter's value plus ``<position>_shift`` (``start = S - 1``: the
#: last real row). The slice keeps its length; its task reads its whole operand, since where it
#: reads is known only at run time.
POSITIONS: dict[str, tuple[str, ...]] = {"slice": ("start", "stop")}

#: The extents each op's kernel can take at run time, by op.
EXTENTS: dict[str, tuple[str, ...]] = {
    "softmax": ("length",),
    "matmul": ("cols", "inner"),
    **{op: ("length",) for op in ("reduce_sum", "reduce_mean", "reduce_max")},
    **{op: ("length",) for op in ("layernorm", "rmsnorm")},
}
_NAMES = frozenset(name for names in EXTENTS.values() for name in names)
#: Every name a run may set, extent or position: what ``<name>_of`` marks.
_MARKABLE = _NAMES | frozenset(name for names in POSITIONS.values() for name in names)


def axes_of(
    op: str, name: str, types: Sequence[TensorType], attrs: Mapping[str, Any]
) -> tuple[tuple[int | None, ...], int | None]:
    """For extent ``name`` of ``op`` on operands of ``types``: the axis of each operand cut to
    it (None: not cut) and the axis of the result it sets (None: none, the axis is summed)."""
    if op == "softmax":
        ax = attrs.get("axis", -1) % types[0].rank
        return (ax,), ax
    if op in ("layernorm", "rmsnorm"):  # x along its axis, gamma and beta along theirs
        ax = attrs.get("axis", -1) % types[0].rank
        return (ax, *(0 for _ in types[1:])), ax
    if op != "matmul":  # a reduction: along its one axis, which its result keeps as 1 or drops
        ax = reduced_axis(attrs, types[0].rank)
        return (ax,), None
    a, b = types
    if name == "cols":
        return (None, b.rank - 1), max(a.rank, b.rank) - 1
    return (a.rank - 1, b.rank - 2), None


def check(op: str, types: Sequence[TensorType], attrs: Mapping[str, Any]) -> None:
    """An :class:`~rtgraph.ops.registry.OpError` for a run-time extent ``op`` cannot take: on
    an op without it, for a matmul with a rank-1 operand, or a value outside 0..the axis."""
    names = EXTENTS.get(op, ())
    for key in attrs:
        base = key[:-3] if key.endswith("_of") else key
        if base in _NAMES and base not in names:
            raise OpError(f"{op}: takes no run-time extent '{key}'", attr=key)
        if key.endswith("_shift") and key[:-6] in _NAMES:  # a position's, never an extent's
            raise OpError(f"{op}: an extent takes no shift, got '{key}'", attr=key)
    for name in names:
        if name not in attrs and f"{name}_of" not in attrs:
            continue
        if op == "matmul" and min(t.rank for t in types) < 2:
            raise OpError("matmul: a run-time extent needs operands of rank 2 or more", attr=name)
        if op.startswith("reduce_") and reduced_axis(attrs, types[0].rank) is None:
            raise OpError(f"{op}: a run-time extent needs one reduced axis", attr=name)
        of = attrs.get(f"{name}_of", "")
        if not isinstance(of, str):
            raise OpError(f"{op}: '{name}_of' must name a parameter, got {of!r}", attr=name)
        value = attrs.get(name, 0)
        cut, _ = axes_of(op, name, types, attrs)
        full = next(types[i].shape[ax] for i, ax in enumerate(cut) if ax is not None)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= full:
            raise OpError(
                f"{op}: run-time extent '{name}' must be an integer in 0..{full}, got {value!r}",
                attr=name,
            )


def reduced_axis(attrs: Mapping[str, Any], rank: int) -> int | None:
    """The one axis a reduction's (checked) ``axis`` attribute names — an int or a list of
    one — as a non-negative index; None for several, or all."""
    given = attrs.get("axis")
    reduced = () if given is None else axes("reduce", given, rank)
    return reduced[0] if len(reduced) == 1 else None


def extent(attrs: Mapping[str, Any], name: str, full: int) -> int:
    """The part of an axis of ``full`` elements the kernel computes: ``attrs[name]`` when bound
    (1..full), else all of it."""
    value = attrs.get(name, 0)
    return value if 0 < value < full else full


def cut(x: np.ndarray, axis: int, n: int) -> np.ndarray:
    """The first ``n`` elements of ``x`` along ``axis`` (a view)."""
    if n == x.shape[axis]:
        return x
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, n)
    return x[tuple(index)]


def zero_past(result: np.ndarray, axis: int, full: int) -> np.ndarray:
    """``result`` (``n`` long along ``axis``) followed by zeros up to ``full``."""
    n = result.shape[axis]
    if n == full:
        return result
    widths = [(0, 0)] * result.ndim
    widths[axis] = (0, full - n)
    return np.pad(result, widths)


def moves(attrs: Mapping[str, Any]) -> bool:
    """Whether a run sets one of the op's positions (:data:`POSITIONS`): its task must read
    the whole operand, as a view of it cannot move."""
    return any(f"{name}_of" in attrs for names in POSITIONS.values() for name in names)


def check_positions(op: str, types: Sequence[TensorType], attrs: Mapping[str, Any]) -> None:
    """An :class:`~rtgraph.ops.registry.OpError` for a run-time position that is not a
    parameter's name and an integer shift."""
    for name in POSITIONS.get(op, ()):
        of, shift = attrs.get(f"{name}_of"), attrs.get(f"{name}_shift", 0)
        if of is None and f"{name}_shift" not in attrs:
            continue
        if not isinstance(of, str):
            raise OpError(f"{op}: '{name}_of' must name a parameter, got {of!r}", attr=name)
        if isinstance(shift, bool) or not isinstance(shift, int) or abs(shift) > 2**62:
            raise OpError(f"{op}: '{name}_shift' must be an integer, got {shift!r}", attr=name)


def bind(attrs: Mapping[str, Any], values: Mapping[str, int]) -> dict[str, Any] | None:
    """``attrs`` with every ``<extent>_of`` parameter's value from ``values`` set as the
    extent — a position (:data:`POSITIONS`) that value plus its ``_shift`` — or None when
    nothing in them is marked."""
    marked = _marked(attrs)
    if not marked:
        return None
    return {
        **attrs,
        **{
            name: int(values[attrs[f"{name}_of"]]) + _shift(attrs, name)
            for name in marked
            if attrs[f"{name}_of"] in values
        },
    }


def _shift(attrs: Mapping[str, Any], name: str) -> int:
    """A position's shift from its parameter's value (an extent has none)."""
    shift = attrs.get(f"{name}_shift", 0) if name not in _NAMES else 0
    return shift if isinstance(shift, int) else 0


def describe(op: str, attrs: Mapping[str, Any]) -> str:
    """The run-time extents a task takes, for listings: ``" [cols=S inner=S]"`` (a fused
    task's, its steps'), or ``""``."""
    marks = _marks(attrs)
    if op == "fused":
        for step in attrs.get("body", ()):
            marks += _marks(dict(step[2]))
    return f" [{' '.join(marks)}]" if marks else ""


def _marked(attrs: Mapping[str, Any]) -> list[str]:
    """The names ``attrs`` marks for a run to set (``cols`` for ``cols_of``)."""
    return [k[:-3] for k in attrs if k.endswith("_of") and k[:-3] in _MARKABLE]


def _marks(attrs: Mapping[str, Any]) -> list[str]:
    shifts = {name: attrs.get(f"{name}_shift", 0) for name in _marked(attrs)}
    return [
        f"{name}={attrs[f'{name}_of']}" + (f"{shift:+d}" if shift else "")
        for name, shift in shifts.items()
    ]
