"""Auto-pipelining across the program: put its ops in the order a list schedule on the device's
units would start them, so that a stream per unit — which keeps program order on each unit —
overlaps independent work (the next sequence's projections on the Cube while this one's
softmax runs on the Vector).

The schedule is the cost model's: each op takes its roofline time (launch plus
``max(compute, memory)``) on its unit, a layout op that stays a view takes none, host inputs
arrive one after another over the DMA engine in the order the program first reads them, and an
op may start once its operands are there and its unit is free. Among the ops ready first, the one
earliest in the program goes first; the program order is then the order of the starts.

Preserves: every value bit for bit (only the order of independent ops changes; each op still
follows every op it reads). A program with anything but plain ops — synthetic kernels,
``after=``, callbacks, syncs, explicit streams — keeps its order: its author ordered it.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from rtgraph.compiler.optimizer.rewrite import movable, view_outputs
from rtgraph.compiler.optimizer.tile_and_pipeline import op_duration
from rtgraph.compiler.options import CompileOptions
from rtgraph.ir.graph import OpNode, Program
from rtgraph.ops import lookup
from rtgraph.timing.costmodel import estimate_us


def _arrivals(program: Program, options: CompileOptions) -> dict[str, float]:
    """When each host input is on the device: copied one after another on the DMA unit in
    the order the program first reads them (lowering issues each copy before its first use)."""
    spec = options.target
    arrival: dict[str, float] = {}
    clock = 0.0
    for node in program.nodes:
        assert isinstance(node, OpNode)
        for name in node.inputs:
            tensor = program.tensors[name]
            if tensor.kind == "input" and name not in arrival:
                moved = tensor.type.nbytes
                clock += estimate_us("dma", tensor.type.dtype, 0, moved, 1, spec, kind="h2d")
                arrival[name] = clock
    return arrival


def order_for_overlap(program: Program, options: CompileOptions) -> Program:
    """``program`` with its ops in the order a list schedule on the units starts them."""
    nodes = program.nodes
    if not nodes or not all(movable(n) for n in nodes):
        return program
    spec = options.target
    producer = {n.output: k for k, n in enumerate(nodes)}  # type: ignore[union-attr]
    readers: list[list[int]] = [[] for _ in nodes]
    missing = [0] * len(nodes)
    for k, node in enumerate(nodes):
        assert isinstance(node, OpNode)
        for name in dict.fromkeys(node.inputs):
            if name in producer:
                readers[producer[name]].append(k)
                missing[k] += 1
    views = view_outputs(program, nodes)  # type: ignore[arg-type]
    arrival = _arrivals(program, options)
    ready_at = [
        max((arrival.get(i, 0.0) for i in n.inputs), default=0.0)  # type: ignore[union-attr]
        for n in nodes
    ]
    free: dict[str, float] = {}
    heap = [(ready_at[k], k) for k in range(len(nodes)) if missing[k] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, k = heapq.heappop(heap)
        node = nodes[k]
        assert isinstance(node, OpNode)
        if node.output in views:
            end = ready_at[k]
        else:
            types = [program.tensors[i].type for i in node.inputs]
            unit, took = op_duration(node, types, program.tensors[node.output].type, spec)
            start = max(ready_at[k], free.get(unit, 0.0))
            end = free[unit] = start + took
        order.append(k)
        for r in readers[k]:
            ready_at[r] = max(ready_at[r], end)
            missing[r] -= 1
            if missing[r] == 0:
                reader = nodes[r]
                assert isinstance(reader, OpNode)
                heapq.heappush(heap, (_earliest(reader, ready_at[r], free, views), r))
    if order == list(range(len(nodes))):
        return program
    return replace(program, nodes=[nodes[k] for k in order])


def _earliest(node: OpNode, ready: float, free: dict[str, float], views: set[str]) -> float:
    """When ``node`` could start: once ready, and (unless a view) once its unit is free."""
    if node.output in views:
        return ready
    op = lookup(node.op)
    unit = op.unit_for(node.attrs) if op is not None else "vector"
    return max(ready, free.get(unit, 0.0))
