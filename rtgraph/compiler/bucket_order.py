"""A gear's program in the op order its optimizer chooses inside the gear's bucket.

A ranged parameter (``S: dyn 128..4096``) is compiled at its gears, and a run between two gears
is padded to the one above (:mod:`rtgraph.compiler.padding`): every run the 1,024 gear serves
is smaller than 1,024. The gear's tasks are timed at the run's real shapes
(:mod:`rtgraph.compiler.real_dims`), but their order was chosen by
:mod:`~rtgraph.compiler.optimizer.order_for_overlap` at the gear's own shapes, and the order
that suits 1,024 rows need not suit 777: on the naive attention, where the last output's copy
over the host link ends the run, the order of the four sequences' work decides when that copy
starts (the 1,024 gear's order runs 777 rows 6.4 % slower than a static compile at 777).

So a gear that runs padded is compiled a second time with the program's ops in the order the
optimizer chooses at a size inside its bucket — halfway between the gear below and the gear
(768 for the 1,024 gear of a power-of-two ladder) — where that order differs from the gear's
own: the gear's optimized program, every pass but ``order_for_overlap`` run at the gear's
shapes, its ops put in the order of the program optimized at the inside size. It has the
gear's tasks and real extents; only the order differs (and the waits and the stream-ordered
memory plan that follow from it). A padded run times both at its real shapes and runs the faster
(:func:`rtgraph.api.choose_gear`).

The two programs must have the same ops: where the optimizer cut the inside size's program
into other tiles (or copies into other parts), there is no common order, and the gear keeps its
own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from rtgraph.compiler.optimizer.order_for_overlap import order_for_overlap
from rtgraph.compiler.optimizer.pipeline import chosen_passes, folds, optimized_ir
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.pipeline import compile_program
from rtgraph.device.spec import DeviceSpec
from rtgraph.ir.graph import HostCopyNode, Node, OpNode, Program
from rtgraph.stream_program.program import StreamProgram

__all__ = ["ORDERED_AT", "inside", "ordered_at", "reordered"]

#: The stream program's ``meta`` key naming the values its order was chosen at.
ORDERED_AT = "ordered_at"


def inside(
    values: Mapping[str, int],
    gears: Mapping[str, tuple[int, ...]],
    ranges: Mapping[str, tuple[int, int]],
) -> dict[str, int] | None:
    """``values`` (a gear combination) with each ranged parameter halfway into its bucket:
    between the gear below (or the range's low end) and the gear; None when no bucket holds a
    size below its gear."""
    out, moved = dict(values), False
    for name, (lo, _) in ranges.items():
        gear = values[name]
        below = max((g for g in gears[name] if g < gear), default=lo - 1)
        if below + 1 < gear:
            out[name] = (below + 1 + gear) // 2
            moved = True
    return out if moved else None


def reordered(
    marked: Program,
    at_inside: Program,
    at: Mapping[str, int],
    device: DeviceSpec,
    options: CompileOptions,
) -> StreamProgram | None:
    """The gear's program (``marked``: bound at the gear, its padded ops marked) compiled in
    the op order the optimizer chooses for ``at_inside`` (the program bound at ``at``, inside
    the gear's bucket); None where that order is the gear's own, where the two optimized
    programs have other ops, or where no pass orders the ops."""
    bound = options.for_device(device)
    names = chosen_passes(bound)
    if "order_for_overlap" not in names:
        return None
    before = replace(bound, passes=tuple(n for n in names if n != "order_for_overlap"))
    gear_ir = optimized_ir(marked, before)
    wanted = [_key(n) for n in optimized_ir(at_inside, bound).nodes]
    have = [_key(n) for n in gear_ir.nodes]
    if None in wanted or len(set(wanted)) != len(wanted) or sorted(wanted) != sorted(have):
        return None
    place = {key: k for k, key in enumerate(wanted)}
    nodes = sorted(gear_ir.nodes, key=lambda n: place[_key(n)])
    if nodes == order_for_overlap(gear_ir, bound).nodes:
        return None
    # already optimized (and its precision chosen): compiled as it stands
    as_is = replace(bound, passes=(), precision="keep")
    compiled = compile_program(replace(gear_ir, nodes=nodes), device, as_is)
    compiled.meta[ORDERED_AT] = dict(at)
    if folds(marked, bound):  # what a run is checked against, as compile_program says it
        compiled.meta["batchnorms_folded"] = True
    return compiled


def ordered_at(program: StreamProgram) -> dict[str, int] | None:
    """The values a reordered gear program's order was chosen at (None if it does not say, or
    a file's entry is not a mapping of names to sizes)."""
    found: Any = program.meta.get(ORDERED_AT)
    if not isinstance(found, dict) or not found:
        return None
    if not all(isinstance(k, str) and type(v) is int for k, v in found.items()):
        return None
    return dict(found)


def _key(node: Node) -> tuple | None:
    """What names ``node`` in both optimized programs: an op by its result, a copy by what it
    moves (None for anything else: such a program is ordered by its author)."""
    if isinstance(node, OpNode):
        return ("op", node.output)
    if isinstance(node, HostCopyNode):
        return ("copy", node.direction, node.tensor, node.rows)
    return None
