"""A program's collectives when one device runs it: each is the identity.

Every single-device compile starts here (:func:`rtgraph.compiler.compile_program`): a program
written for data parallelism (``g = allreduce(…)``) runs on one device as the whole batch's
program, which is what the reference interpreter computes too.
"""

from __future__ import annotations

from rtgraph.compiler.optimizer.rewrite import rebuilt, renamed
from rtgraph.ir.graph import Node, OpNode, Program
from rtgraph.ops.comm import COLLECTIVES


def group_of_one(program: Program) -> Program:
    """``program`` run by one device: each collective is the identity — its uses read its
    operand instead, and an output made by one is a ``copy`` of the operand (its own name)."""
    if not any(isinstance(x, OpNode) and x.op in COLLECTIVES for x in program.nodes):
        return program
    to: dict[str, str] = {}
    nodes: list[Node] = []
    dropped = []
    for node in program.nodes:
        node = renamed(node, to)
        if isinstance(node, OpNode) and node.op in COLLECTIVES:
            if node.output in program.outputs or node.after:
                node = OpNode(
                    "copy",
                    node.inputs,
                    node.output,
                    {},
                    node.span,
                    node.stream,
                    node.after,
                    node.device,
                )
            else:
                to[node.output] = node.inputs[0]
                dropped.append(node.output)
                continue
        nodes.append(node)
    return rebuilt(program, nodes, dropped)
