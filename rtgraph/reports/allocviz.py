"""Pictures of run-time allocation (``--alloc``): allocated vs reserved over time, and blocks.

A stream program compiled with run-time allocation carries the host's ``Alloc``/``Free`` calls,
each with the allocator's allocated and reserved totals right after it; the run's host lane has
the emulated time of each call. Together they give the two curves a caching allocator's users
watch — bytes handed out vs bytes held from the driver (the gap is the cache, and where it
grows, fragmentation) — and the address × time block map.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from rtgraph.emulator.results import RunResult
from rtgraph.reports.memoryviz import Block, _bytes_axis, plot_blocks
from rtgraph.reports.style import bytes_label, new_figure
from rtgraph.stream_program.program import Alloc, Free, StreamProgram


def allocation_events(
    program: StreamProgram, result: RunResult
) -> list[tuple[float, Alloc | Free]]:
    """Every Alloc/Free call of the program with the emulated time the host made it."""
    calls = [c for c in program.commands if isinstance(c, Alloc | Free)]
    times = [a.start for a in result.host_activities if a.kind in ("alloc", "free")]
    if len(times) != len(calls):
        raise ValueError("the run does not match the program's allocation calls")
    return list(zip(times, calls, strict=True))


def blocks_from_allocations(program: StreamProgram, result: RunResult) -> list[Block]:
    """One block per allocation, from its Alloc call to its Free call (or the end of the run)."""
    kinds = {r.tensor: r.kind for r in program.memory.regions.values()}
    open_: dict[str, tuple[float, Alloc]] = {}
    blocks: list[Block] = []
    for t, call in allocation_events(program, result):
        if isinstance(call, Alloc):
            open_[call.tensor] = (t, call)
        elif call.tensor in open_:
            t0, a = open_.pop(call.tensor)
            blocks.append(Block(a.address, a.size, t0, t, a.tensor, kinds.get(a.tensor, "")))
    end = result.makespan_us
    blocks += [
        Block(a.address, a.size, t0, end, a.tensor, kinds.get(a.tensor, ""))
        for t0, a in open_.values()
    ]
    return blocks


def plot_allocator_memory(program: StreamProgram, result: RunResult) -> Figure:
    """Allocated and reserved bytes over the run, as the allocator saw them."""
    events = allocation_events(program, result)
    times = [0.0] + [t for t, _ in events] + [result.makespan_us]
    allocated = [0] + [c.allocated for _, c in events]
    reserved = [0] + [c.reserved for _, c in events]
    allocated.append(allocated[-1])
    reserved.append(reserved[-1])
    fig = new_figure(10, 3.6)
    ax = fig.add_subplot()
    ax.set_gid("allocator")
    line = ax.step(times, reserved, where="post", color="black", linewidth=1.2, label="reserved")
    line[0].set_gid("allocator:reserved")
    fill = ax.fill_between(
        times, 0, allocated, step="post", color="#4C72B0", alpha=0.7, linewidth=0, label="allocated"
    )
    fill.set_gid("allocator:allocated")
    top = max(max(reserved), max(allocated), 1)
    ax.set_ylim(0, top * 1.08)
    _bytes_axis(ax, top)
    ax.set_xlim(0, max(result.makespan_us, 1e-9))
    ax.set_xlabel("time (µs)")
    ax.set_ylabel("bytes")
    policy = program.memory.policy
    ax.set_title(
        f"{program.name} ({policy}): peak allocated {bytes_label(max(allocated))}, "
        f"peak reserved {bytes_label(max(reserved))}"
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


def plot_allocation_map(program: StreamProgram, result: RunResult) -> Figure:
    """The address × time map of run-time allocations (holes between blocks = fragmentation)."""
    return plot_blocks(
        blocks_from_allocations(program, result),
        total=program.memory.total_bytes,
        title=f"{program.name} memory map ({program.memory.policy})",
    )
