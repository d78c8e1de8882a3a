"""``rtgraph explain``: what each optimizer pass did to a program, in words and bytes.

For every pass the options choose it prints the tasks and the HBM bytes the program would move
before and after (the lowered task graph's ``bytes_read + bytes_written``: the traffic the cost
model charges), then what changed: each fused kernel with the ops it runs and the intermediate
bytes it keeps on chip, and the values other passes folded, merged or dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from rtgraph.compiler.optimizer.pipeline import chosen_passes, optimize_steps
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.passes.lower import lower
from rtgraph.ir.graph import OpNode, Program
from rtgraph.ops.fused import describe_body

#: How many dropped or merged values a pass's paragraph names before "and N more".
SHOWN_NAMES = 8


@dataclass(frozen=True)
class Traffic:
    """What the lowered program costs in memory traffic."""

    tasks: int
    bytes_moved: int


def traffic(program: Program, options: CompileOptions) -> Traffic:
    """Tasks and HBM bytes of ``program`` lowered for the options' device."""
    graph = lower(program, options)
    moved = sum(t.bytes_read + t.bytes_written for t in graph.tasks)
    return Traffic(len(graph.tasks), moved)


def _change(before: Traffic, after: Traffic) -> str:
    saved = before.bytes_moved - after.bytes_moved
    share = saved / before.bytes_moved if before.bytes_moved else 0.0
    change = f"{-share:+.1%}" if saved else "unchanged"
    return (
        f"tasks {before.tasks} → {after.tasks}, HBM bytes moved {before.bytes_moved:,} → "
        f"{after.bytes_moved:,} ({change})"
    )


def explain(program: Program, options: CompileOptions) -> str:
    """The optimizer's report on ``program`` under ``options`` (bound to a device)."""
    names = chosen_passes(options)
    lines = [f"program {program.name}: passes {', '.join(names) or '(none)'}"]
    if program.has_explicit_streams:
        lines.append("explicit streams: the program is its own schedule; nothing is optimized")
        return "\n".join(lines)
    first = before = traffic(program, options)
    previous = program
    for name, after_program in optimize_steps(program, options):
        after = traffic(after_program, options)
        lines.append(f"\n{name}: {_change(before, after)}")
        lines += _details(previous, after_program)
        previous, before = after_program, after
    lines.append(f"\nin all: {_change(first, before)}")
    return "\n".join(lines)


def _details(before: Program, after: Program) -> list[str]:
    """What one pass changed: fused kernels it made, values it removed."""
    old = {n.output: n for n in before.nodes if isinstance(n, OpNode)}
    lines = []
    fused_away: set[str] = set()
    for node in after.nodes:
        if isinstance(node, OpNode) and node.op == "fused" and old.get(node.output) != node:
            body = node.attrs["body"]
            inner = _inner(before, node)
            fused_away.update(inner)
            kept = sum(_nbytes(before, n) for n in inner)
            where = f" (line {node.span.line})" if node.span else ""
            lines.append(
                f"  fused {len(body)} ops into '{after.tensors[node.output].label}'{where}: "
                f"{describe_body(body, node.inputs)}; {kept:,} intermediate bytes stay on chip"
            )
    gone = [name for name in old if name not in after.tensors and name not in fused_away]
    if gone:
        shown = ", ".join(before.tensors[n].label for n in gone[:SHOWN_NAMES])
        more = f" and {len(gone) - SHOWN_NAMES} more" if len(gone) > SHOWN_NAMES else ""
        lines.append(f"  removed {len(gone)}: {shown}{more}")
    if not lines:
        lines.append("  no change")
    return lines


def _inner(before: Program, node: OpNode) -> list[str]:
    """The values of ``before`` that the fused ``node`` keeps on chip (its non-root steps)."""
    inputs = set(node.inputs)
    produced = {n.output: n for n in before.nodes if isinstance(n, OpNode)}
    inner, stack = [], [node.output]
    while stack:
        producer = produced.get(stack.pop())
        if producer is None:
            continue
        for name in producer.inputs:
            if name not in inputs and name in produced and name not in inner:
                inner.append(name)
                stack.append(name)
    return inner


def _nbytes(program: Program, name: str) -> int:
    return program.tensors[name].type.nbytes
