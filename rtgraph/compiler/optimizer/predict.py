"""What the optimizer predicts a program's run takes: its ops on a stream per unit, replayed.

The passes that reshape the schedule — :mod:`.tile_and_pipeline`, :mod:`.stream_host_copies`,
:mod:`.order_for_overlap` — each decide by a prediction of the whole program. This module makes
it: every op and copy of the program becomes an item of work (a view none; an op its flops,
HBM bytes and cores as lowering will give them; a host copy its bytes), including the whole
copies lowering adds — one per host input, first, in the order they are declared, and one per
output right after its producer — and :func:`~rtgraph.timing.unit_replay.replay` runs them on
a lane per unit with HBM and the host link shared as the emulator shares them. Parts of an
input copied by :mod:`.stream_host_copies` release the ops over their rows (a reader of a row
slice waits for the parts under it, any other reader for all of them); a ``concat`` written
in place takes no time.

:func:`best_order` compares the program's own order with the order a list schedule starts
its ops in (a free unit takes its ready op earliest in the program), each replayed on
in-order streams (a stream per unit keeps program order on each unit), and gives the faster
— the program's own when the list schedule does not beat it. :func:`predicted_us` is that
order's makespan. A program with anything but plain ops and the optimizer's copies keeps its
order: its author ordered it.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rtgraph.compiler.optimizer.rewrite import (
    concats_in_place,
    movable,
    output_parts,
    slice_rows,
    view_outputs,
)
from rtgraph.compiler.options import CompileOptions
from rtgraph.device.spec import DeviceSpec
from rtgraph.dtypes import TensorType
from rtgraph.ir.graph import HostCopyNode, Node, OpNode, Program
from rtgraph.ops import lookup
from rtgraph.timing.unit_replay import VIEW, Work, copy_work, op_work, replay

__all__ = [
    "Ordering",
    "Schedule",
    "best_order",
    "compared",
    "op_work_of",
    "predicted_us",
    "schedule_of",
    "slower",
]


def op_work_of(node: OpNode, types: list[TensorType], out: TensorType, spec: DeviceSpec) -> Work:
    """``node``'s work as :func:`~rtgraph.timing.unit_replay.replay` times it."""
    op = lookup(node.op)
    assert op is not None
    cost = op.cost(types, out, node.attrs)
    moved = cost.bytes_read + cost.bytes_written
    unit = op.unit_for(node.attrs)
    return op_work(unit, cost.flops, moved, [t.dtype for t in types], out.dtype, spec)


def _copied_by(
    node: OpNode, name: str, program: Program, parts: list[tuple[int, int, int]]
) -> list[int]:
    """The parts (``(first row, end row, item)``) of an input copied in parts that ``node``
    reads: those under its rows for a ``slice`` along axis 0, else all of them."""
    window = slice_rows(node, program)
    if window is not None:
        return [k for a, b, k in parts if a < window[1] and window[0] < b]
    return [k for _, _, k in parts]


@dataclass(frozen=True)
class Schedule:
    """A program's items of work: its nodes (``0 … nodes - 1``), then the whole copy of each
    host input in ``declared`` and of each output in ``returned``; item ``i`` waits for
    ``inputs[i]``; ``producer`` gives the node that writes each value."""

    works: list[Work]
    inputs: list[list[int]]
    nodes: int
    declared: list[str]
    returned: list[str]
    first_read: dict[str, int]
    producer: dict[str, int]

    def ranks(self, order: list[int]) -> list[float]:
        """Each item's place on its stream when the nodes are submitted in ``order``: a host
        input's copy first (in declaration order), an output's right after its producer."""
        at = [0.0] * len(self.works)
        for position, k in enumerate(order):
            at[k] = float(position)
        for j in range(len(self.declared)):
            at[self.nodes + j] = j - len(self.declared) - 1.0
        for j, o in enumerate(self.returned):
            at[self.nodes + len(self.declared) + j] = at[self.producer[o]] + 0.5
        return at

    def in_order_us(self, order: list[int], spec: DeviceSpec) -> float:
        """The makespan of the nodes submitted in ``order`` to in-order streams, one per
        unit (infinite if they deadlock there)."""
        timed = replay(self.works, self.inputs, self.ranks(order), spec, in_order=True)
        return timed.makespan if len(timed.order) == len(self.works) else math.inf

    def listed(self, spec: DeviceSpec) -> tuple[list[int], float]:
        """The nodes in the order a list schedule starts them (ties: earliest in the
        program; an input's copy ranks just before its first reader), and its makespan."""
        rank = [float(k) for k in range(self.nodes)]
        rank += [self.first_read[x] - 0.5 for x in self.declared]
        rank += [float(self.producer[o]) + 0.5 for o in self.returned]
        timed = replay(self.works, self.inputs, rank, spec)
        return [k for k in timed.order if k < self.nodes], timed.makespan


def schedule_of(program: Program, spec: DeviceSpec) -> Schedule:
    """``program``'s items of work (see the module docstring)."""
    nodes = program.nodes
    n = len(nodes)
    # the copies the program places (lowering's rule: a part of an output stands for it)
    whole = {part: out for part, (out, _, _) in output_parts(program).items()}
    copies = [c for c in nodes if isinstance(c, HostCopyNode)]
    copied = {c.tensor for c in copies if c.direction == "h2d"}
    sent = {whole.get(c.tensor, c.tensor) for c in copies if c.direction == "d2h"}
    first_read: dict[str, int] = {}
    for k, node in enumerate(nodes):
        if isinstance(node, OpNode):
            for name in node.inputs:
                t = program.tensors[name]
                if t.kind == "input" and name not in copied:
                    first_read.setdefault(name, k)
    declared = [name for name in program.tensors if name in first_read]
    auto = {name: n + j for j, name in enumerate(declared)}
    # inputs copied in row parts: (first row, end row, item) per part
    parts: dict[str, list[tuple[int, int, int]]] = {}
    producer: dict[str, int] = {}
    for k, node in enumerate(nodes):
        if isinstance(node, HostCopyNode) and node.direction == "h2d":
            rows = node.rows or (0, program.tensors[node.tensor].type.shape[0])
            parts.setdefault(node.tensor, []).append((rows[0], rows[1], k))
        elif isinstance(node, OpNode):
            producer[node.output] = k
    returned = [o for o in program.outputs if o not in sent and o in producer]
    inputs: list[list[int]] = []
    for node in nodes:
        sources: list[int] = []
        if isinstance(node, HostCopyNode):
            if node.direction == "d2h" and node.tensor in producer:
                sources = [producer[node.tensor]]
        elif isinstance(node, OpNode):
            for name in dict.fromkeys(node.inputs):
                if name in producer:
                    sources.append(producer[name])
                elif name in auto:
                    sources.append(auto[name])
                elif name in parts:
                    sources += _copied_by(node, name, program, parts[name])
        inputs.append(list(dict.fromkeys(sources)))
    inputs += [[] for _ in declared] + [[producer[o]] for o in returned]
    joined = {whole for whole, _ in concats_in_place(program).values()}  # no task: no time
    views = view_outputs(program, [n for n in nodes if isinstance(n, OpNode)])
    works = [VIEW if _joined(n, joined) else _work(n, program, views, spec) for n in nodes]
    for x in declared:
        works.append(copy_work("h2d", program.tensors[x].type.nbytes, program.tensors[x].pinned))
    works += [copy_work("d2h", program.tensors[o].type.nbytes) for o in returned]
    return Schedule(works, inputs, n, declared, returned, first_read, producer)


#: The last few predictions (and the schedules they came from), by program: a pass's result
#: is the next pass's input, and each predicts both (passes never change a program in place,
#: they build a new one). Compiles may run on several threads (a sweep's), hence the lock.
_KEPT: dict[tuple[int, str], tuple[weakref.ref, DeviceSpec, Any]] = {}
_KEEP = 12
_KEPT_LOCK = threading.Lock()


def _kept(program: Program, spec: DeviceSpec, kind: str, make: Callable[[], Any]) -> Any:
    key = (id(program), kind)
    with _KEPT_LOCK:
        hit = _KEPT.get(key)
    if hit is not None and hit[0]() is program and hit[1] is spec:
        return hit[2]
    value = make()
    with _KEPT_LOCK:
        while len(_KEPT) >= _KEEP:
            del _KEPT[next(iter(_KEPT))]
        _KEPT[key] = (weakref.ref(program), spec, value)
    return value


@dataclass(frozen=True)
class Ordering:
    """The order :func:`best_order` gives (node indices) and the two it chose from, each
    replayed on in-order streams: the program's own and the list schedule's (None: the same
    as the program's, or a program its author ordered)."""

    order: list[int]
    written_us: float | None
    listed_us: float | None

    @property
    def predicted_us(self) -> float | None:
        """The chosen order's replayed makespan (None for a program its author ordered)."""
        spans = [us for us in (self.written_us, self.listed_us) if us is not None]
        return min(spans) if spans else None


def best_order(program: Program, spec: DeviceSpec) -> Ordering:
    """The order of ``program``'s nodes that :mod:`.order_for_overlap` gives (see the module
    docstring); for a program its author ordered (anything but plain ops and the optimizer's
    copies), its own order and no prediction."""
    return _kept(program, spec, "in order", lambda: _best_order(program, spec))


def _best_order(program: Program, spec: DeviceSpec) -> Ordering:
    written = list(range(len(program.nodes)))
    if _authored(program):
        return Ordering(written, None, None)
    schedule = _schedule(program, spec)
    span = schedule.in_order_us(written, spec)
    listed, _ = _listed(program, spec)
    if listed == written:
        return Ordering(written, span, None)
    took = schedule.in_order_us(listed, spec)
    return Ordering(written if span < took else listed, span, took)


def _schedule(program: Program, spec: DeviceSpec) -> Schedule:
    return _kept(program, spec, "schedule", lambda: schedule_of(program, spec))


def _listed(program: Program, spec: DeviceSpec) -> tuple[list[int], float]:
    """:meth:`Schedule.listed` of ``program``, kept: ``order_for_overlap`` and the ``list``
    policy's whole-program checks ask for the same one."""
    return _kept(program, spec, "listed", lambda: _schedule(program, spec).listed(spec))


def _authored(program: Program) -> bool:
    """Whether ``program`` holds anything but plain ops and the optimizer's copies: its
    author ordered it, and no prediction reorders it."""
    return not all(movable(n) or _compiler_copy(n) for n in program.nodes)


def predicted_us(program: Program, spec: DeviceSpec) -> float | None:
    """The replayed makespan of ``program`` in the order :func:`best_order` gives (None for a
    program its author ordered)."""
    return best_order(program, spec).predicted_us


def compared(
    after: Program, before: Program, options: CompileOptions
) -> tuple[float, float] | None:
    """The predicted makespans of a pass's rewrite ``after`` and of ``before``: on in-order
    streams in :func:`best_order`'s order, or — under the ``list`` policy, which picks the
    streams and the order itself — as a list schedule runs them (None when either has no
    prediction)."""
    spec = options.target
    if options.streams == "list":
        new, old = _listed_us(after, spec), _listed_us(before, spec)
    else:
        new, old = predicted_us(after, spec), predicted_us(before, spec)
    return None if new is None or old is None else (new, old)


def slower(after: Program, before: Program, options: CompileOptions) -> bool:
    """Whether a pass's rewrite ``after`` of ``before`` is predicted to run no faster (then
    the pass keeps ``before``; see :func:`compared`)."""
    if after is before:
        return False
    spans = compared(after, before, options)
    return spans is not None and spans[0] >= spans[1]


def _listed_us(program: Program, spec: DeviceSpec) -> float | None:
    """The makespan of ``program``'s list schedule (None for a program its author ordered)."""
    return None if _authored(program) else _listed(program, spec)[1]


def _joined(node: Node, joined: set[str]) -> bool:
    return isinstance(node, OpNode) and node.output in joined


def _compiler_copy(node: Node) -> bool:
    """A host copy the optimizer placed (its stream is the compiler's to choose)."""
    return isinstance(node, HostCopyNode) and node.stream == ""


def _work(node: Node, program: Program, views: set[str], spec: DeviceSpec) -> Work:
    """A node's work (a view's: none); copies use their link."""
    if isinstance(node, HostCopyNode):
        t = program.tensors[node.tensor]
        moved = t.type.nbytes
        if node.rows is not None:
            moved = moved // t.type.shape[0] * (node.rows[1] - node.rows[0])
        return copy_work(node.direction, moved, t.pinned)
    assert isinstance(node, OpNode)
    if node.output in views:
        return VIEW
    return op_work_of(
        node,
        [program.tensors[i].type for i in node.inputs],
        program.tensors[node.output].type,
        spec,
    )
