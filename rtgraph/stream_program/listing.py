"""Readable forms of a stream program: a per-stream listing and a Graphviz DOT of the DAG.

The listing is what golden tests compare and what ``rtgraph compile --emit listing`` prints:
one block per stream, its instructions in order, each task with its op, unit, cores, the
bytes it touches and the source line it came from; then the host's view (syncs, callbacks)
and the compiler's counts.
"""

from __future__ import annotations

from rtgraph.stream_program.program import (
    Barrier,
    Callback,
    Launch,
    Record,
    StreamProgram,
    Sync,
    Task,
    Wait,
)

PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")


def _source(task: Task) -> str:
    if task.span is None:
        return ""
    return f"  # {task.span.line}: {task.span.text_line().strip()}"


def _bytes(ranges: tuple[tuple[int, int], ...]) -> str:
    return ",".join(f"{a:#x}+{b - a}" for a, b in ranges) or "-"


def format_listing(program: StreamProgram) -> str:
    lines = [
        f"; stream program '{program.name}' for device '{program.device}'",
        f"; {len(program.tasks)} tasks, {len(program.streams)} streams, "
        f"{program.num_events} event ids, memory {program.memory.total_bytes:,} bytes "
        f"({program.memory.policy})",
    ]
    per_stream = program.stream_commands()
    for s in program.streams:
        prio = f" priority {s.priority}" if s.priority else ""
        lines.append(f"stream {s.id} '{s.name}'{prio}:")
        for c in per_stream[s.id]:
            if isinstance(c, Launch):
                t = program.tasks[c.task]
                lines.append(
                    f"  t{t.id:<4} {t.op:<12} {t.name:<14} {t.unit:<6} x{t.block_dim:<3}"
                    f" r={_bytes(t.reads)} w={_bytes(t.writes)}{_source(t)}"
                )
            elif isinstance(c, Record):
                lines.append(f"  record e{c.event}")
            elif isinstance(c, Wait):
                lines.append(f"  wait   e{c.event}")
            elif isinstance(c, Barrier):
                lines.append("  barrier")
            elif isinstance(c, Callback):
                mode = " (blocking)" if c.blocking else ""
                lines.append(f"  callback {c.name!r}{mode}")
    syncs = [c for c in program.commands if isinstance(c, Sync)]
    if syncs:
        lines.append("host:")
        for c in syncs:
            target = "" if c.target is None else f" {c.target}"
            lines.append(f"  sync {c.kind}{target}")
    lines += [f"; {line}" for line in compile_report(program)]
    return "\n".join(lines) + "\n"


def compile_report(program: StreamProgram) -> list[str]:
    """The compiler's figures: hazards and events, and the memory plan against its bounds."""
    out = []
    stats = program.meta.get("barriers")
    if stats:
        out.append(
            "hazards {hazards}, implied {implied}, waits {waits}, records {records}, "
            "barriers {barriers}, peak live events {events_peak}".format(**stats)
        )
    mem = program.meta.get("memory")
    if mem and not program.memory.policy.startswith("runtime:"):
        out.append(
            f"memory ({mem['policy']}): activations {mem['pool_bytes']:,} B, max-live lower "
            f"bound {mem['pool_lower_bound']:,} B, no reuse {mem['pool_none_bytes']:,} B "
            f"(saving {mem['saving']:.1%}); resident {mem['resident_bytes']:,} B"
        )
    alloc = program.meta.get("alloc")
    if alloc and program.memory.policy.startswith("runtime:"):
        out.append(
            f"run-time allocation ({alloc['kind']}): {alloc['allocs']} allocations costing "
            f"{alloc['alloc_latency_us']:.1f} µs of host time; peak allocated "
            f"{alloc['peak_allocated_bytes']:,} B, peak reserved {alloc['peak_reserved_bytes']:,} B"
        )
    return out


def to_dot(program: StreamProgram) -> str:
    """The task DAG as Graphviz DOT, nodes coloured by stream, event edges bold."""
    stream_of = program.task_stream()
    lines = [f'digraph "{program.name}" {{', "  rankdir=TB;", "  node [style=filled, shape=box];"]
    for t in program.tasks:
        colour = PALETTE[stream_of[t.id] % len(PALETTE)]
        label = f"t{t.id} {t.op}\\n{t.name}"
        lines.append(f'  t{t.id} [label="{label}", fillcolor="{colour}", fontcolor=white];')
    for t in program.tasks:
        for d in t.deps:
            cross = stream_of[d] != stream_of[t.id]
            style = "bold" if cross else "dashed"
            lines.append(f"  t{d} -> t{t.id} [style={style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
