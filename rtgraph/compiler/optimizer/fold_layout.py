"""Layout folding: a transpose of a transpose is one transpose (or none), a reshape of a reshape
is one reshape, and a layout op that changes nothing is dropped.

Preserves: every element bit for bit (layout ops move elements, never compute them). Only an
intermediate read by nothing else is folded away; pinned tensors keep their op.
"""

from __future__ import annotations

from dataclasses import replace

from rtgraph.compiler.optimizer.rewrite import movable, movable_ops, pinned, rebuilt, renamed, uses
from rtgraph.compiler.options import CompileOptions
from rtgraph.ir.graph import Node, OpNode, Program


def _perm(node: OpNode, rank: int) -> tuple[int, ...]:
    perm = node.attrs.get("perm")
    return tuple(range(rank))[::-1] if perm is None else tuple(p % rank for p in perm)


def fold_layout(program: Program, options: CompileOptions) -> Program:
    """``program`` with chained and identity layout ops folded."""
    if not movable_ops(program) & {"transpose", "reshape"}:
        return program
    keep = pinned(program)
    count = uses(program)
    made: dict[str, OpNode] = {}
    to: dict[str, str] = {}
    nodes: list[Node] = []
    dropped: list[str] = []
    tensors = program.tensors
    for node in program.nodes:
        node = renamed(node, to)
        if isinstance(node, OpNode) and movable(node) and node.op in ("transpose", "reshape"):
            inner = made.get(node.inputs[0])
            if inner is not None and inner.op == node.op and count.get(inner.output) == 1:
                node = _compose(inner, node, tensors[inner.inputs[0]].type.rank)
                dropped.append(inner.output)
            source = tensors[node.inputs[0]].type
            rank = source.rank
            same = (node.op == "transpose" and _perm(node, rank) == tuple(range(rank))) or (
                node.op == "reshape" and tensors[node.output].type.shape == source.shape
            )
            if same and node.output not in keep:
                to[node.output] = node.inputs[0]
                dropped.append(node.output)
                continue
            made[node.output] = node
        nodes.append(node)
    if not dropped:
        return program
    gone = set(dropped)
    nodes = [n for n in nodes if not (isinstance(n, OpNode) and n.output in gone)]
    return rebuilt(program, nodes, dropped)


def _compose(inner: OpNode, outer: OpNode, rank: int) -> OpNode:
    """``outer`` applied straight to ``inner``'s operand."""
    if outer.op == "reshape":
        return replace(outer, inputs=inner.inputs)
    p, q = _perm(inner, rank), _perm(outer, rank)
    return replace(
        outer, inputs=inner.inputs, attrs={**outer.attrs, "perm": tuple(p[i] for i in q)}
    )
