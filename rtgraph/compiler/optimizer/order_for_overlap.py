"""Auto-pipelining across the program: put its ops in the order a list schedule on the device's
units would start them, so that a stream per unit — which keeps program order on each unit —
overlaps independent work (the next sequence's projections on the Cube while this one's
softmax runs on the Vector).

The schedule is the cost model's: each op takes its roofline time (launch plus
``max(compute, memory)``) on its unit, a layout op that stays a view takes none, host inputs
arrive one after another over the host link in the order the program first reads them (or
part by part where :mod:`.stream_host_copies` placed the copies: a reader of a row slice waits
for the parts under it; outputs sent in parts take the other direction of the link), and an op
may start once its operands are there and its unit is free. Among the ops ready first, the one
earliest in the program goes first; the program order is then the order of the starts.

Preserves: every value bit for bit (only the order of independent ops changes; each op still
follows every op it reads, each copy its data). A program with anything but plain ops and the
optimizer's copies — synthetic kernels, ``after=``, callbacks, syncs, explicit streams — keeps
its order: its author ordered it.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from rtgraph.compiler.optimizer.host_link import copy_us
from rtgraph.compiler.optimizer.rewrite import concats_in_place, movable, slice_rows, view_outputs
from rtgraph.compiler.optimizer.tile_and_pipeline import op_duration
from rtgraph.compiler.options import CompileOptions
from rtgraph.device.spec import DeviceSpec
from rtgraph.ir.graph import HostCopyNode, Node, OpNode, Program, Tensor


def _copy_us(program: Program, node: HostCopyNode, spec: DeviceSpec) -> float:
    """How long the link takes for a copy (of its rows, for a part of an input)."""
    t = program.tensors[node.tensor]
    moved = t.type.nbytes
    if node.rows is not None:
        moved = moved // t.type.shape[0] * (node.rows[1] - node.rows[0])
    return copy_us(moved, t.type.dtype, spec, node.direction, t.pinned)


def _copied_by(
    node: OpNode, name: str, program: Program, parts: list[tuple[int, int, int]]
) -> list[int]:
    """The parts (``(first row, end row, item)``) of an input copied in parts that ``node``
    reads: those under its rows for a ``slice`` along axis 0, else all of them."""
    window = slice_rows(node, program)
    if window is not None:
        return [k for a, b, k in parts if a < window[1] and window[0] < b]
    return [k for _, _, k in parts]


def order_for_overlap(program: Program, options: CompileOptions) -> Program:
    """``program`` with its ops in the order a list schedule on the units starts them."""
    nodes = program.nodes
    if not nodes or not all(movable(n) or _compiler_copy(n) for n in nodes):
        return program
    spec = options.target
    # the schedule's items: the nodes, then a whole copy per host input lowering will add
    copied = {n.tensor for n in nodes if isinstance(n, HostCopyNode) and n.direction == "h2d"}
    first_read: dict[str, int] = {}
    for k, node in enumerate(nodes):
        if isinstance(node, OpNode):
            for name in node.inputs:
                t = program.tensors[name]
                if t.kind == "input" and name not in copied:
                    first_read.setdefault(name, k)
    n_items = len(nodes) + len(first_read)
    rank = [float(k) for k in range(len(nodes))]  # program position: the tie-break
    auto = {name: len(nodes) + j for j, name in enumerate(first_read)}
    rank += [first_read[name] - 0.5 for name in first_read]
    # inputs copied in row parts: (first row, end row, item) per part
    parts: dict[str, list[tuple[int, int, int]]] = {}
    producer: dict[str, int] = {}
    for k, node in enumerate(nodes):
        if isinstance(node, HostCopyNode) and node.direction == "h2d":
            rows = node.rows or (0, program.tensors[node.tensor].type.shape[0])
            parts.setdefault(node.tensor, []).append((rows[0], rows[1], k))
        elif isinstance(node, OpNode):
            producer[node.output] = k
    joined = {whole for whole, _ in concats_in_place(program).values()}  # no task: no time
    readers: list[list[int]] = [[] for _ in range(n_items)]
    missing = [0] * n_items
    for k, node in enumerate(nodes):
        if isinstance(node, HostCopyNode):
            sources = [producer[node.tensor]] if node.direction == "d2h" else []
        else:
            assert isinstance(node, OpNode)
            sources = []
            for name in dict.fromkeys(node.inputs):
                if name in producer:
                    sources.append(producer[name])
                elif name in auto:
                    sources.append(auto[name])
                elif name in parts:
                    sources += _copied_by(node, name, program, parts[name])
        for src in dict.fromkeys(sources):
            readers[src].append(k)
            missing[k] += 1
    ops = [n for n in nodes if isinstance(n, OpNode)]
    views = view_outputs(program, ops)
    costs = [
        (None, 0.0)
        if isinstance(n, OpNode) and n.output in joined
        else _item(n, program, views, spec)
        for n in nodes
    ]
    costs += [_whole_copy(program.tensors[name], spec) for name in first_read]
    ready_at = [0.0] * n_items
    free: dict[str, float] = {}
    heap = [(0.0, rank[k], k) for k in range(n_items) if missing[k] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, _, k = heapq.heappop(heap)
        unit, took = costs[k]
        if unit is None:
            end = ready_at[k]
        else:
            start = max(ready_at[k], free.get(unit, 0.0))
            end = free[unit] = start + took
        if k < len(nodes):
            order.append(k)
        for r in readers[k]:
            ready_at[r] = max(ready_at[r], end)
            missing[r] -= 1
            if missing[r] == 0:
                unit_r = costs[r][0]
                at = ready_at[r] if unit_r is None else max(ready_at[r], free.get(unit_r, 0.0))
                heapq.heappush(heap, (at, rank[r], r))
    if order == list(range(len(nodes))):
        return program
    return replace(program, nodes=[nodes[k] for k in order])


def _compiler_copy(node: Node) -> bool:
    """A host copy the optimizer placed (its stream is the compiler's to choose)."""
    return isinstance(node, HostCopyNode) and node.stream == ""


def _whole_copy(t: Tensor, spec: DeviceSpec) -> tuple[str, float]:
    """The whole copy of host input ``t`` that lowering adds: on the h2d link."""
    return "h2d", copy_us(t.type.nbytes, t.type.dtype, spec, "h2d", t.pinned)


def _item(
    node: Node, program: Program, views: set[str], spec: DeviceSpec
) -> tuple[str | None, float]:
    """A node's unit and duration (unit None: a view, no task); copies use their link."""
    if isinstance(node, HostCopyNode):
        return node.direction, _copy_us(program, node, spec)
    assert isinstance(node, OpNode)
    if node.output in views:
        return None, 0.0
    types = [program.tensors[i].type for i in node.inputs]
    return op_duration(node, types, program.tensors[node.output].type, spec)
