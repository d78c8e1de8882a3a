"""Readable forms of a stream program: a per-stream listing and a Graphviz DOT of the DAG.

The listing is what golden tests compare and what ``rtgraph compile --emit listing`` prints:
one block per stream, its instructions in order, each task with its op, unit, cores, the
bytes it touches and the source line it came from; then the host's view (syncs, callbacks)
and the compiler's counts.
"""

from __future__ import annotations

from rtgraph.ops import extents
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


def event_labels(program: StreamProgram) -> dict[int, str]:
    """Each record and wait of ``program`` (by ``id()`` of the command) named by its event
    and generation: ``e3.2`` is the second record of event id 3 in submission order, and a
    wait names the generation it waits for (the latest record submitted before it; ``.0``:
    none yet, it passes at once). The program's own events keep their names (``copied.1``).
    Event ids are reused once a record's last wait is submitted, so the id alone does not
    say which record a wait pairs with; the generation does."""
    names = list(program.meta.get("event_names") or ())
    generation: dict[int, int] = {}
    labels: dict[int, str] = {}
    for c in program.commands:
        if type(c) is Record:
            generation[c.event] = generation.get(c.event, 0) + 1
        elif type(c) is not Wait:
            continue
        name = names[c.event] if c.event < len(names) else f"e{c.event}"
        labels[id(c)] = f"{name}.{generation.get(c.event, 0)}"
    return labels


def format_listing(program: StreamProgram) -> str:
    lines = [
        f"; stream program '{program.name}' for device '{program.device}'",
        f"; {len(program.tasks)} tasks, {len(program.streams)} streams, "
        f"{program.num_events} event ids, memory {program.memory.total_bytes:,} bytes "
        f"({program.memory.policy})",
    ]
    per_stream = program.stream_commands()
    label = event_labels(program)
    for s in program.streams:
        prio = f" priority {s.priority}" if s.priority else ""
        lines.append(f"stream {s.id} '{s.name}'{prio}:")
        for c in per_stream[s.id]:
            if isinstance(c, Launch):
                t = program.tasks[c.task]
                lines.append(
                    f"  t{t.id:<4} {t.op:<12} {t.name:<14} {t.unit:<6} x{t.block_dim:<3}"
                    f" r={_bytes(t.reads)} w={_bytes(t.writes)}"
                    f"{extents.describe(t.op, t.attrs)}{_source(t)}"
                )
            elif isinstance(c, Record):
                lines.append(f"  record {label[id(c)]}")
            elif isinstance(c, Wait):
                lines.append(f"  wait   {label[id(c)]}")
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
        own = int(program.meta.get("user_events", 0))
        out.append(
            "inserted by the compiler: hazards {hazards}, implied {implied}, waits {waits}, "
            "records {records}, barriers {barriers}, peak live events {events_peak}".format(**stats)
            + (f"; the program's own events: {own}" if own else "")
        )
    mem = program.meta.get("memory")
    if mem and not program.memory.policy.startswith("runtime:"):
        out.append(
            f"memory ({mem['policy']}): activations {mem['pool_bytes']:,} B{_proof(mem)}, "
            f"lower bound {mem['pool_lower_bound']:,} B, no reuse {mem['pool_none_bytes']:,} B "
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


def _proof(mem: dict) -> str:
    """Whether the plan's pool is proven the smallest (absent in programs older than it)."""
    if "pool_proven" not in mem:
        return ""
    return " (proven optimal)" if mem["pool_proven"] else " (not proven optimal)"


def event_edges(program: StreamProgram) -> list[tuple[int, int, str]]:
    """``(src task, dst task, label)`` per event hand-off: the task launched on the recording
    stream before the record, to the first task launched on the waiting stream after the
    wait (waits that pass at once, with no record before them, draw nothing)."""
    label = event_labels(program)
    last: dict[int, int] = {}  # stream → its latest launched task
    recorded: dict[int, tuple[int, str]] = {}  # event → (source task, label), latest
    pending: dict[int, list[tuple[int, str]]] = {}  # stream → hand-offs for its next launch
    edges: list[tuple[int, int, str]] = []
    for c in program.commands:
        if type(c) is Launch:
            for src, name in pending.pop(c.stream, ()):
                if src != c.task:
                    edges.append((src, c.task, name))
            last[c.stream] = c.task
        elif type(c) is Record and c.stream in last:
            recorded[c.event] = (last[c.stream], label[id(c)])
        elif type(c) is Wait and c.event in recorded:
            src, name = recorded[c.event]
            if name == label[id(c)]:
                pending.setdefault(c.stream, []).append((src, name))
    return edges


def to_dot(program: StreamProgram) -> str:
    """The task DAG as Graphviz DOT: one cluster per stream, nodes coloured by stream, data
    edges dashed within a stream and bold across, event hand-offs red with their event's
    name, and a legend saying so."""
    stream_of = program.task_stream()
    lines = [
        f'digraph "{program.name}" {{',
        "  rankdir=TB;",
        "  node [style=filled, shape=box, fontname=Helvetica];",
        "  edge [fontname=Helvetica, fontsize=9];",
    ]
    for s in program.streams:
        colour = PALETTE[s.id % len(PALETTE)]
        lines.append(f"  subgraph cluster_stream{s.id} {{")
        lines.append(f'    label="stream {s.id} {s.name}"; color="{colour}"; fontcolor="{colour}";')
        for t in program.tasks:
            if stream_of.get(t.id) == s.id:
                label = f"t{t.id} {t.op}\\n{t.name}".replace('"', "'")
                fill = f'fillcolor="{colour}", fontcolor=white'
                lines.append(f'    t{t.id} [label="{label}", {fill}];')
        lines.append("  }")
    for t in program.tasks:
        for d in t.deps:
            style = "bold" if stream_of.get(d) != stream_of.get(t.id) else "dashed"
            lines.append(f"  t{d} -> t{t.id} [style={style}];")
    for src, dst, name in event_edges(program):
        lines.append(f'  t{src} -> t{dst} [color="#C0392B", penwidth=1.6, label="{name}"];')
    lines += [
        "  subgraph cluster_legend {",
        '    label="legend"; color="#999999"; fontcolor="#555555";',
        '    legend [shape=note, style="", label="box: a task (id, op, name), coloured by its'
        " stream\\ldashed: data dependency on one stream (stream order keeps it)\\lbold:"
        " data dependency across streams\\lred: an event hand-off, record -> wait"
        ' (event.generation)\\l"];',
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"
