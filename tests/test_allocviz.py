"""Pictures of run-time allocation: the curves follow the allocator's own totals."""

from __future__ import annotations

from conftest import MODELS

import rtgraph
from rtgraph.reports.allocviz import (
    allocation_events,
    blocks_from_allocations,
    plot_allocation_map,
    plot_allocator_memory,
)
from rtgraph.reports.style import save_figure
from rtgraph.stream_program import Alloc


def _run(alloc="pool"):
    program = rtgraph.load(MODELS / "mlp.rtg", device="toy")
    compiled = rtgraph.compile(program, device="toy", alloc=alloc)
    return compiled, rtgraph.run(compiled, device="toy", numerics=False)


def test_every_allocation_becomes_one_block_at_its_address():
    compiled, result = _run()
    allocs = [c for c in compiled.commands if isinstance(c, Alloc)]
    blocks = blocks_from_allocations(compiled, result)
    assert len(blocks) == len(allocs)
    assert {(b.address, b.size) for b in blocks} == {(a.address, a.size) for a in allocs}
    assert all(b.t_alloc <= b.t_free <= result.makespan_us for b in blocks)


def test_curves_are_the_allocators_totals(tmp_path):
    compiled, result = _run("pytorch")
    events = allocation_events(compiled, result)
    fig = plot_allocator_memory(compiled, result)
    (ax,) = fig.axes
    reserved = next(l for l in ax.lines if l.get_gid() == "allocator:reserved")
    ys = list(reserved.get_ydata())
    assert max(ys) == max(c.reserved for _, c in events)
    assert all(c.allocated <= c.reserved for _, c in events)
    out = save_figure(plot_allocation_map(compiled, result), tmp_path / "map.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
