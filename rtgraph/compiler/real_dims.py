"""A padded run's real shapes: every value's extent at the run, so each task is timed at its
real work.

A run padded to the gear above its size (:mod:`rtgraph.compiler.padding`) computes its real
elements on the gear's program; its kernels compute on the padding too, or — told the real
extent (:mod:`rtgraph.ops.extents`) — write zeros past it. Timed at the gear's shapes, the run
would be charged for the padding as well: the bucket's cost, not the size's. A dynamic-shape
runtime's kernels are launched with the real shapes (Ascend's take them in their tiling data),
so their time is that of the real work, and this module gives every task its real shapes.

Along an axis a padded run pads, every value's real part is a leading block whose length is

    min(max(L · scale + shift, 0), cap)

— an :class:`Extent` — where ``L`` is the real length of one axis of one host tensor (an input,
a param, a const: :attr:`~rtgraph.compiler.padding.PadPlan.hosts`). An op whose result axis is
an operand's axis index for index (:func:`~rtgraph.compiler.axis_map.split_of`, or the axis a
run-time extent keeps) carries that operand's extent; a slice shifts it and caps it at its
length (a tile of rows past the run's last real row is empty); a concatenation of consecutive
parts of one extent joins them again; a reshape merging the axes after it scales it. Any other
axis is taken whole — the gear's extent, as before: the rule errs towards the gear's cost.

:func:`value_dims` works the extents out on the optimized program a gear is lowered from
(:attr:`~rtgraph.ir.graph.Program.padded` names the padded host axes), and the compile keeps
them in the stream program's ``meta`` under :data:`META`, by the names the tasks' operands carry
(:func:`encode`); :func:`retime` evaluates them at a run's real host shapes and gives each task
the flops and bytes of its real shapes — from its op's own cost rule — and the block dim the
compiler gives work of that size. A file's entries are checked against the operands they
describe before any is used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from rtgraph.compiler.axis_map import split_of
from rtgraph.device.spec import DeviceSpec
from rtgraph.dtypes import DTYPES, TensorType
from rtgraph.errors import StreamProgramError
from rtgraph.ir.graph import OpNode, Program
from rtgraph.ops import extents, fused, lookup
from rtgraph.ops.registry import Cost, OpError
from rtgraph.stream_program.program import StreamProgram, Task
from rtgraph.timing.costmodel import block_dim_for

#: The key of a stream program's ``meta`` that holds its values' real extents.
META = "real_dims"

#: The largest scale or shift an entry may hold (a file's are checked against it).
LIMIT = 2**40


class Extent(NamedTuple):
    """The real length of a padded axis: ``min(max(L · scale + shift, 0), cap)``, ``L`` the real
    length of axis ``axis`` of host tensor ``tensor``; ``cap`` is the gear's length."""

    tensor: str
    axis: int
    scale: int
    shift: int
    cap: int

    def at(self, hosts: Mapping[str, tuple[int, ...]]) -> int:
        return min(max(hosts[self.tensor][self.axis] * self.scale + self.shift, 0), self.cap)


Dim = int | Extent
Dims = tuple[Dim, ...]

_RULE_ERRORS = (OpError, KeyError, TypeError, ValueError, IndexError, ZeroDivisionError)


def value_dims(program: Program, padded: Mapping[str, tuple[int, ...]]) -> dict[str, Dims]:
    """The real extents of ``program``'s values along the axes a padded run pads, by value
    name: only the values with at least one such axis (see the module)."""
    dims: dict[str, Dims] = {}
    for name, axes in padded.items():
        t = program.tensors.get(name)
        if t is not None:
            shape = t.type.shape
            dims[name] = tuple(
                Extent(name, a, 1, 0, n) if a in axes else n for a, n in enumerate(shape)
            )
    for node in program.nodes:
        if not isinstance(node, OpNode) or node.output not in program.tensors:
            continue
        given = [dims.get(n) for n in node.inputs]
        if not any(given) or any(n not in program.tensors for n in node.inputs):
            continue
        types = [program.tensors[n].type for n in node.inputs]
        found = op_dims(node.op, node.attrs, types, program.tensors[node.output].type, given)
        if found is not None:
            dims[node.output] = found
    return dims


def op_dims(
    op: str,
    attrs: Mapping[str, Any],
    types: Sequence[TensorType],
    out: TensorType,
    given: Sequence[Dims | None],
) -> Dims | None:
    """The real extents of an op's result from its operands' (None: an operand's axes all
    whole); None when no result axis has an :class:`Extent`."""
    full = [d if d is not None else t.shape for d, t in zip(given, types, strict=True)]
    if op == "fused":
        found = _body_dims(attrs, types, full)
    else:
        node = OpNode(op, tuple(f"%{j}" for j in range(len(types))), "%", dict(attrs))
        found = tuple(_axis_dim(node, a, types, out, full) for a in range(out.rank))
    return found if any(isinstance(d, Extent) for d in found) else None


def _body_dims(attrs: Mapping[str, Any], types: Sequence[TensorType], full: list[Dims]) -> Dims:
    """A fused body's result extents, step by step as the ops it fuses would give them."""
    values, dims = list(types), list(full)
    for name, args, step_attrs, dtype, shape in attrs["body"]:
        out = TensorType(tuple(shape), dtype)
        arg_types, arg_dims = [values[a] for a in args], [dims[a] for a in args]
        found = op_dims(name, dict(step_attrs), arg_types, out, arg_dims)
        values.append(out)
        dims.append(found if found is not None else out.shape)
    return dims[-1]


def _axis_dim(
    node: OpNode, a: int, types: Sequence[TensorType], out: TensorType, full: list[Dims]
) -> Dim:
    """Result axis ``a``'s extent (see the module); the gear's length where no rule carries
    one."""
    n, attrs = out.shape[a], node.attrs
    try:
        if node.op == "slice" and attrs.get("axis", 0) % out.rank == a:
            return _sliced(full[0][a], attrs, types[0].shape[a], n)
        if node.op == "concat":
            if attrs.get("axis", 0) % out.rank == a:
                return _joined([d[a] for d in full], [t.shape[a] for t in types], n)
            return next((_same(d[a], n) for d in full if isinstance(d[a], Extent)), n)
        if node.op == "reshape":
            return _reshaped(a, types[0], out, full[0])
        if node.op == "broadcast_to":
            k = a - (out.rank - types[0].rank)
            return _same(full[0][k], n) if k >= 0 and types[0].shape[k] == n else n
        split = split_of(node, a, types, out)
        if split is None:  # the axis a run-time extent keeps: a softmax's, a matmul's columns
            split = _kept_extent(node, a, types)
        for j, b in enumerate(split or ()):
            if b is not None and isinstance(full[j][b], Extent):
                return _same(full[j][b], n)
    except _RULE_ERRORS:
        pass
    return n


def _kept_extent(node: OpNode, a: int, types: Sequence[TensorType]) -> tuple[int | None, ...]:
    """The operand axes cut to a run-time extent whose result axis is ``a`` (none if no
    extent of the op sets ``a``)."""
    for name in extents.EXTENTS.get(node.op, ()):
        cut, kept = extents.axes_of(node.op, name, types, node.attrs)
        if kept == a:
            return cut
    return ()


def _same(d: Dim, n: int) -> Dim:
    return d if isinstance(d, Extent) and d.cap == n else n


def _sliced(d: Dim, attrs: Mapping[str, Any], size: int, n: int) -> Dim:
    """A slice of rows ``[start, stop)`` of an extent: the real rows past ``start``, at most
    ``stop - start`` (a slice whose place a run sets keeps its length: whole)."""
    if not isinstance(d, Extent) or extents.moves(attrs):
        return n
    start, stop, step = slice(attrs.get("start", 0), attrs.get("stop")).indices(size)
    if step != 1 or stop - start != n or d.cap != size:
        return n
    return d._replace(shift=d.shift - start, cap=n)


def _joined(parts: Sequence[Dim], sizes: Sequence[int], n: int) -> Dim:
    """Consecutive slices of one extent, concatenated in order: that extent again."""
    first, at = parts[0], 0
    if not isinstance(first, Extent):
        return n
    for d, size in zip(parts, sizes, strict=True):
        if not (isinstance(d, Extent) and d[:3] == first[:3] and d.shift == first.shift - at):
            return n
        if d.cap != size:
            return n
        at += size
    return first._replace(cap=n) if at == n else n


def _reshaped(a: int, x: TensorType, out: TensorType, dims: Dims) -> Dim:
    """A reshape's axis ``a`` where it starts at a padded operand axis ``b`` (the axes before
    each hold as many elements) and no axis after ``b`` is padded: in row-major order the real
    part is then the leading ``L_b · (elements per index of b)`` elements, so axis ``a`` holds
    that over its own elements per index — when that divides (a merge scales the extent, a
    split divides it)."""
    n, before = out.shape[a], math.prod(out.shape[:a])
    starts = [b for b in range(x.rank) if math.prod(x.shape[:b]) == before]  # several past 1s
    b = next((b for b in starts if isinstance(dims[b], Extent)), None)
    if b is None or any(isinstance(d, Extent) for d in dims[b + 1 :]):
        return n
    d, inner, per = dims[b], math.prod(x.shape[b + 1 :]), math.prod(out.shape[a + 1 :])
    scale, shift, cap = d.scale * inner, d.shift * inner, d.cap * inner
    if per == 0 or scale % per or shift % per or cap != n * per:
        return n
    return Extent(d.tensor, d.axis, scale // per, shift // per, n)


# --- in the stream program ------------------------------------------------------------------


def encode(dims: Mapping[str, Dims]) -> dict[str, list]:
    """``dims`` as the JSON ``meta[META]`` holds them: each axis an int (the gear's length) or
    ``[tensor, axis, scale, shift, cap]``."""
    return {
        name: [list(d) if isinstance(d, Extent) else d for d in found]
        for name, found in dims.items()
    }


def retime(
    program: StreamProgram, hosts: Mapping[str, tuple[int, ...]], spec: DeviceSpec
) -> StreamProgram:
    """``program`` with every task whose shapes a padded run shrinks given the flops, bytes and
    block dim of its real shapes at ``hosts`` (the real shapes of the padded host tensors);
    ``program`` itself when it holds no extents (compiled without a range)."""
    table = program.meta.get(META)
    if not table:
        return program
    if not isinstance(table, dict):
        raise _bad(f"meta '{META}' must map value names to their axes")
    whole = {h.name: h.shape for h in program.host_tensors}
    shape_of = _shapes(table, {**whole, **hosts})  # a tensor this run leaves whole: the gear's
    tasks, changed = list(program.tasks), False
    for k, task in enumerate(tasks):
        timed = _timed(task, shape_of, whole, spec)
        if timed is not None:
            tasks[k], changed = timed, True
    return replace(program, tasks=tuple(tasks)) if changed else program


def _bad(problem: str) -> StreamProgramError:
    return StreamProgramError(
        f"not run: {problem}", hint="recompile the program from its source; the file was altered"
    )


def _shapes(
    table: Mapping[str, Any], hosts: Mapping[str, tuple[int, ...]]
) -> Callable[[str, tuple[int, ...]], tuple[int, ...]]:
    """A function giving the real shape of the value ``name`` whose gear shape is ``shape``,
    each table entry checked against that shape first (once per name and shape)."""
    known: dict[tuple[str, tuple[int, ...]], tuple[int, ...]] = {}

    def shape_of(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        entry = table.get(name)
        if entry is None:
            return shape
        got = known.get((name, shape))
        if got is None:
            got = known[name, shape] = _evaluate(name, entry, shape, hosts)
        return got

    return shape_of


def _evaluate(
    name: str, entry: Any, shape: tuple[int, ...], hosts: Mapping[str, tuple[int, ...]]
) -> tuple[int, ...]:
    where = f"meta '{META}' entry '{name}'"
    if not isinstance(entry, list) or len(entry) != len(shape):
        raise _bad(f"{where} must list the {len(shape)} axes of its value")
    out = []
    for d, n in zip(entry, shape, strict=True):
        if isinstance(d, bool) or not isinstance(d, int | list):
            raise _bad(f"{where}: an axis is an int or [tensor, axis, scale, shift, cap]")
        if isinstance(d, int):
            if d != n:
                raise _bad(f"{where}: a whole axis of {d}, the value's is {n}")
            out.append(n)
            continue
        ok = len(d) == 5 and isinstance(d[0], str) and d[0] in hosts
        ok = ok and all(isinstance(v, int) and not isinstance(v, bool) for v in d[1:])
        ok = ok and 0 <= d[1] < len(hosts[d[0]]) and d[4] == n
        if not ok or abs(d[2]) > LIMIT or abs(d[3]) > LIMIT:
            raise _bad(f"{where}: {d!r} is not [padded tensor, its axis, scale, shift, {n}]")
        out.append(Extent(*d).at(hosts))
    return tuple(out)


def _timed(
    task: Task,
    shape_of: Callable[[str, tuple[int, ...]], tuple[int, ...]],
    whole: Mapping[str, tuple[int, ...]],
    spec: DeviceSpec,
) -> Task | None:
    """``task`` with the flops, bytes and block dim of its real shapes, or None when they are
    its gear shapes (or its op's cost rule cannot take them: timed as compiled)."""
    if task.op == "kernel":
        return None
    ins = [shape_of(o.tensor, o.shape) for o in task.inputs]
    out = _output_shape(task, shape_of, whole)
    if ins == [o.shape for o in task.inputs] and (task.output is None or out == task.output.shape):
        return None
    if task.op in ("h2d", "d2h"):
        moved = out if task.op == "h2d" else ins[0]
        operand = task.output if task.op == "h2d" else task.inputs[0]
        assert operand is not None
        nbytes = math.prod(moved) * DTYPES[operand.dtype].itemsize
        return replace(task, bytes_read=nbytes, bytes_written=nbytes)
    cost = _cost(task, ins, out)
    if cost is None:
        return None
    moved = cost.bytes_read + cost.bytes_written
    block_dim = task.block_dim
    compiled = block_dim_for(
        task.unit, task.flops, task.bytes_read + task.bytes_written, spec, None
    )
    if block_dim == compiled:  # the compiler's choice for its size, not a program's request
        block_dim = block_dim_for(task.unit, cost.flops, moved, spec, None)
    return replace(
        task,
        flops=cost.flops,
        bytes_read=cost.bytes_read,
        bytes_written=cost.bytes_written,
        block_dim=block_dim,
    )


def _output_shape(
    task: Task,
    shape_of: Callable[[str, tuple[int, ...]], tuple[int, ...]],
    whole: Mapping[str, tuple[int, ...]],
) -> tuple[int, ...]:
    """The real shape of what ``task`` writes: a host input's copy in parts (``rows``) is
    that part of the input's real rows."""
    if task.output is None:
        return ()
    rows = task.attrs.get("rows")
    if task.op == "h2d" and task.host in whole and rows is not None:
        real = shape_of(task.host, whole[task.host])
        first = min(max(real[0] - rows[0], 0), task.output.shape[0])
        return (first, *task.output.shape[1:])
    return shape_of(task.output.tensor, task.output.shape)


def _cost(task: Task, ins: list[tuple[int, ...]], out: tuple[int, ...]) -> Cost | None:
    """The task's op's own cost at the real shapes (nothing for an empty result)."""
    assert task.output is not None
    result = TensorType(out, task.output.dtype)
    if 0 in out:
        return Cost(0, 0, 0)
    types = [TensorType(s, o.dtype) for s, o in zip(ins, task.inputs, strict=True)]
    if any(0 in s for s in ins):
        return Cost(0, 0, result.nbytes)
    try:
        if task.op == "fused":
            return fused.body_cost(types, result, task.attrs, as_stored=False)
        op = lookup(task.op)
        return None if op is None else op.cost(types, result, task.attrs)
    except _RULE_ERRORS:
        return None


__all__ = ["META", "Extent", "encode", "op_dims", "retime", "value_dims"]
