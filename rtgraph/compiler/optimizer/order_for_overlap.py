"""Auto-pipelining across the program: put its ops in the order a list schedule on the device's
units would start them, so that a stream per unit — which keeps program order on each unit —
overlaps independent work (the next sequence's projections on the Cube while this one's
softmax runs on the Vector).

The schedule is the emulator's timing model (:mod:`.predict`): each op takes its launch and
its compute on its unit while its bytes share HBM with whatever runs beside it, a layout op
that stays a view takes none, host copies share the link's two directions, and an op may
start once its operands are there and its unit is free; among the ops ready, the one earliest
in the program goes first. The order the schedule starts the ops in replaces the program's
unless the program's own order is predicted to end sooner on in-order streams: a list
schedule that overlaps a matmul with a softmax for the bandwidth both need gains nothing, and
a hand-pipelined order may be as good as any (models/attention.rtg: 636.8 µs as written and
as reordered now, emulated by-unit; 677.1 µs in the order a schedule that timed each op
alone chose).

Preserves: every value bit for bit (only the order of independent ops changes; each op still
follows every op it reads, each copy its data). A program with anything but plain ops and the
optimizer's copies — synthetic kernels, ``after=``, callbacks, syncs, explicit streams — keeps
its order: its author ordered it.
"""

from __future__ import annotations

from dataclasses import replace

from rtgraph.compiler.optimizer.predict import best_order
from rtgraph.compiler.options import CompileOptions
from rtgraph.ir.graph import Program


def order_for_overlap(program: Program, options: CompileOptions) -> Program:
    """``program`` with its ops in the order that is predicted to end first (see the module
    docstring)."""
    if not program.nodes:
        return program
    order = best_order(program, options.target).order
    if order == list(range(len(program.nodes))):
        return program
    return replace(program, nodes=[program.nodes[k] for k in order])
