"""Common-subexpression elimination: an op applied twice to the same operands with the same
attributes is computed once, and the second result's readers read the first.

Preserves: every element of every value, bit for bit (the op is deterministic, so both results
are equal); a pinned tensor (an output, an ``after=`` target, …) keeps its own op.
"""

from __future__ import annotations

from rtgraph.compiler.optimizer.rewrite import movable, movable_ops, pinned, rebuilt, renamed
from rtgraph.compiler.options import CompileOptions
from rtgraph.ir.graph import Node, OpNode, Program
from rtgraph.ops.fused import body_attrs


def eliminate_common_subexpressions(program: Program, options: CompileOptions) -> Program:
    """``program`` with each repeated op computed once."""
    if not movable_ops(program):
        return program
    keep = pinned(program)
    seen: dict[tuple, str] = {}
    to: dict[str, str] = {}
    nodes: list[Node] = []
    for node in program.nodes:
        node = renamed(node, to)
        if isinstance(node, OpNode) and movable(node):
            key = (node.op, node.inputs, body_attrs(node.attrs))
            first = seen.get(key)
            if first is not None and node.output not in keep:
                to[node.output] = first
                continue
            seen.setdefault(key, node.output)
        nodes.append(node)
    if not to:
        return program
    return rebuilt(program, nodes, to)
