"""``rtgraph explain``: what each optimizer pass did to a program, in words and bytes.

For every pass the options choose it prints the tasks and the HBM bytes the program would move
before and after (the lowered task graph's ``bytes_read + bytes_written``: the traffic the cost
model charges), then what changed: each fused kernel with the ops it runs (a Cube one named as
such: its epilogue runs on the Cube's output path) and the intermediate bytes it keeps on chip,
and the values other passes folded, merged or dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from rtgraph.compiler.optimizer.fold_batchnorm import FoldSite, fold_numerics, fold_sites
from rtgraph.compiler.optimizer.pipeline import chosen_passes, optimize_steps
from rtgraph.compiler.optimizer.predict import best_order, compared
from rtgraph.compiler.optimizer.rewrite import output_parts
from rtgraph.compiler.optimizer.stream_host_copies import (
    InputPlan,
    plan_inputs,
    proposed,
    streamable,
)
from rtgraph.compiler.optimizer.tile_and_pipeline import (
    RegionPlan,
    as_judged,
    plan_tiling,
    tiled,
)
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.parallel.group_of_one import group_of_one
from rtgraph.compiler.passes.lower import lower
from rtgraph.ir.graph import HostCopyNode, OpNode, Program
from rtgraph.ops.fused import describe_body
from rtgraph.reports.precision import decision_lines

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


#: What a pass that changed nothing reports.
NO_CHANGE = ["  no change"]


def explain(program: Program, options: CompileOptions, changed: set[str] | None = None) -> str:
    """The optimizer's report on ``program`` under ``options`` (bound to a device); the names
    of the passes that changed it are added to ``changed`` when given. Its collectives are the
    identity first, as a compile for one device makes them."""
    program = group_of_one(program)
    names = chosen_passes(options)
    lines = [f"program {program.name}: passes {', '.join(names) or '(none)'}"]
    if program.has_explicit_streams:
        lines.append("explicit streams: the program is its own schedule; nothing is optimized")
        return "\n".join(lines)
    first = before = traffic(program, options)
    previous = program
    for name, after_program in optimize_steps(program, options):
        if changed is not None and after_program is not previous:
            changed.add(name)
        after = traffic(after_program, options)
        lines.append(f"\n{name}: {_change(before, after)}")
        folds = _batchnorm_folds(previous, after_program) if name == "fold_batchnorm" else []
        found = folds or _details(previous, after_program)
        plans = []
        if name == "tile_and_pipeline":
            regions = plan_tiling(previous, options)
            plans = _tiling(previous, regions)
            planned = as_judged(tiled(previous, options, regions), options)
            plans += _weighed(previous, planned, after_program, options)
        elif name == "stream_host_copies" and not streamable(previous):
            hosted = previous.outputs or any(t.kind == "input" for t in previous.tensors.values())
            kept = "the program's own copies kept: it places its work itself"
            plans = [f"  {kept if hosted else 'no host input or output to stream'}"]
        elif name == "stream_host_copies":
            inputs = plan_inputs(previous, options)
            plans = _streaming(previous, after_program, inputs)
            planned = proposed(previous, options, inputs)
            plans += _weighed(previous, planned, after_program, options)
        elif name == "order_for_overlap":
            plans = _ordering(previous, options)
        elif name == "choose_precision" and options.precision != "keep":
            plans = decision_lines(program, options)
        lines += [*(found if not plans or found != NO_CHANGE else []), *plans]
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
            if not inner:
                continue  # a tile of a fused op (or one rebuilt): nothing newly kept on chip
            fused_away.update(inner)
            kept = sum(_nbytes(before, n) for n in inner)
            where = f" (line {node.span.line})" if node.span else ""
            task = "the Cube task " if node.attrs.get("unit") == "cube" else ""
            lines.append(
                f"  fused {len(body)} ops into {task}'{after.tensors[node.output].label}'{where}: "
                f"{describe_body(body, node.inputs)}; {kept:,} intermediate bytes stay on chip"
            )
    gone = [name for name in old if name not in after.tensors and name not in fused_away]
    if gone:
        shown = ", ".join(before.tensors[n].label for n in gone[:SHOWN_NAMES])
        more = f" and {len(gone) - SHOWN_NAMES} more" if len(gone) > SHOWN_NAMES else ""
        lines.append(f"  removed {len(gone)}: {shown}{more}")
    return lines or list(NO_CHANGE)


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


def _batchnorm_folds(before: Program, after: Program) -> list[str]:
    """What ``fold_batchnorm`` did: each fold, then its numeric effect — the outputs of the
    folded and the unfolded program on seeded data (reference interpreter), and each fold's own
    error against the bound the pass derives (:func:`fold_numerics`)."""
    sites = {s.bn.output: s for s in fold_sites(before)}
    if not sites or after is before:
        return []
    lines = []
    for site in sites.values():
        span = before.tensors[site.bn.output].span
        where = f" (line {span.line})" if span else ""
        lines.append(
            f"  folded the batchnorm after {_product(before, site)}{where} into its weights"
        )
    added = len(after.nodes) - len(before.nodes)
    lines.append(f"  {added} Vector ops prepare the scaled weights and biases from the params")
    m = fold_numerics(before, after)
    if m is None:
        return [*lines, "  numerics not measured: the program does not fit in host memory"]
    verdict = "within" if m.worst_share <= 1 else "NOT within"
    return [
        *lines,
        f"  numerics (seed 0): outputs differ from the unfolded program's by max "
        f"abs {m.max_abs:.3g}, max rel {m.max_rel:.3g} (of the output's largest magnitude)",
        f"  each fold's own result: max abs {m.local_abs:.3g}, {verdict} the derived bound (up "
        f"to {m.local_bound:.3g}); worst element {m.worst_share:.0%} of its bound, after "
        f"{_product(before, sites[m.worst_fold])}",
    ]


def _product(program: Program, site: FoldSite) -> str:
    x, w = (program.tensors[n].label for n in site.product.inputs)
    return f"{site.product.op}({x}, {w})"


def _tiling(program: Program, regions: list[RegionPlan]) -> list[str]:
    """Each chain the tiler looked at: its ops, the K it chose and why — the cost model's
    predicted makespan for every K along the chosen prefix and axis (a stream per unit)."""
    lines = []
    for plan in regions:
        chain = " → ".join(n.op for n in plan.chain)
        first = plan.chain[0]
        where = f" (line {first.span.line})" if first.span else ""
        c, untiled = plan.chosen, plan.candidates[0]
        if c.tiles == 1:
            lines.append(
                f"  chain{where} {chain}: left whole ({untiled.predicted_us:.1f} µs predicted)"
            )
            continue
        same = sorted(
            (
                k
                for k in plan.candidates
                if (k.length, k.axis, k.tiles > 1) == (c.length, c.axis, True)
            ),
            key=lambda k: k.tiles,
        )
        options_text = ", ".join(f"K={k.tiles}: {k.predicted_us:.1f}" for k in same)
        lines.append(
            f"  chain{where} {chain}: first {c.length} ops cut along axis {c.axis} of "
            f"'{program.tensors[plan.chain[c.length - 1].output].label}' into K={c.tiles} "
            f"({c.working_bytes:,} bytes of tiles in flight); predicted µs: untiled "
            f"{untiled.predicted_us:.1f}, {options_text}"
        )
    return lines or ["  no chain starts on the Cube"]


def _weighed(
    before: Program, planned: Program, after: Program, options: CompileOptions
) -> list[str]:
    """The whole-program check of a pass whose plans changed something: the program with the
    plans and without, as predicted, and which the pass kept."""
    spans = None if planned is before else compared(planned, before, options)
    if spans is None:
        return []
    kept = "left as it was: no faster" if after is before else "kept"
    how = "as a list schedule" if options.streams == "list" else "on a stream per unit"
    return [
        f"  the whole program, predicted {how}: {spans[0]:.1f} µs with the plans above, "
        f"{spans[1]:.1f} µs without — {kept}"
    ]


def _ordering(program: Program, options: CompileOptions) -> list[str]:
    """The two orders ``order_for_overlap`` weighs, as predicted, and the one it keeps."""
    chosen = best_order(program, options.target)
    if chosen.written_us is None:
        return ["  the program's own order kept: it places its work itself"]
    if chosen.listed_us is None:
        return [
            f"  the program's order is the list schedule's ({chosen.written_us:.1f} µs predicted)"
        ]
    kept = "the list schedule's" if chosen.order != list(range(len(program.nodes))) else "its own"
    return [
        f"  predicted on a stream per unit: {chosen.written_us:.1f} µs in the program's order, "
        f"{chosen.listed_us:.1f} µs in the order a list schedule starts the ops — {kept} kept"
    ]


def _streaming(before: Program, after: Program, inputs: list[InputPlan]) -> list[str]:
    """Each host input: the part count chosen and the cost model's predicted finish of the work
    that follows it per count; then the outputs sent back in parts."""
    lines = []
    for plan in inputs:
        label = before.tensors[plan.name].label
        predicted = ", ".join(
            f"{'whole' if k == 1 else f'K={k}'}: {us:.1f}" for k, us in plan.predicted_us.items()
        )
        chosen = "whole" if plan.parts == 1 else f"in {plan.parts} row parts"
        lines.append(
            f"  input '{label}' copied {chosen}; predicted µs until its work is done: {predicted}"
        )
    sent: dict[str, int] = {}
    parts = output_parts(after)
    for node in after.nodes:
        if isinstance(node, HostCopyNode) and node.direction == "d2h" and node.tensor in parts:
            whole = parts[node.tensor][0]
            sent[whole] = sent.get(whole, 0) + 1
    for name, count in sent.items():
        label = after.tensors[name].label
        lines.append(f"  output '{label}' sent back in {count} parts, each as it is computed")
    return lines or ["  no host input or output to stream"]
