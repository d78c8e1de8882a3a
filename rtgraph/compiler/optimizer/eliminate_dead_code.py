"""Dead-code elimination: drop the ops whose results nothing uses.

Preserves: every output, every tensor an ``after=``, a callback or a synthetic kernel names,
and every node that is not a plain op (stream control, syncs, callbacks, synthetic kernels,
ops on an explicit stream). Numerics are unchanged: only unused values disappear.
"""

from __future__ import annotations

from rtgraph.compiler.optimizer.rewrite import movable, movable_ops, pinned, rebuilt
from rtgraph.compiler.options import CompileOptions
from rtgraph.ir.graph import Node, OpNode, Program


def eliminate_dead_code(program: Program, options: CompileOptions) -> Program:
    """``program`` without the ops no output, callback or kernel depends on."""
    if not movable_ops(program):
        return program
    live = set(pinned(program))
    kept: list[Node] = []
    dropped: list[str] = []
    for node in reversed(program.nodes):
        if isinstance(node, OpNode) and movable(node) and node.output not in live:
            dropped.append(node.output)
            continue
        if isinstance(node, OpNode):
            live.update(node.inputs)
        kept.append(node)
    if not dropped:
        return program
    kept.reverse()
    return rebuilt(program, kept, dropped)
