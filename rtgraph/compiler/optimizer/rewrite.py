"""What the optimizer's passes share: who uses a tensor, which tensors must keep their names,
and a program rebuilt with new nodes.

A pass never edits the program it is given: it returns a new :class:`~rtgraph.ir.graph.Program`
(nodes and tensor table rebuilt, everything else shared), so the program before a pass can be
printed next to the program after it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from rtgraph.ir.graph import CallbackNode, Node, OpNode, Program


def uses(program: Program) -> dict[str, int]:
    """How many times each tensor is read: as an op's operand, in ``after=``, by a callback,
    by a synthetic kernel, or as an output (each counts once per mention)."""
    count: dict[str, int] = {}
    for name in mentioned(program):
        count[name] = count.get(name, 0) + 1
    return count


def mentioned(program: Program) -> Iterable[str]:
    """Every mention of a tensor by a node or the outputs, with repeats."""
    for node in program.nodes:
        if isinstance(node, OpNode):
            yield from node.inputs
            yield from node.after
            if node.op == "kernel":
                yield from node.attrs.get("reads", ())
                yield from node.attrs.get("writes", ())
        elif isinstance(node, CallbackNode):
            yield node.after
    yield from program.outputs


def pinned(program: Program) -> set[str]:
    """Tensors whose name the program's meaning depends on: outputs, ``after=`` targets,
    callback triggers and whatever a synthetic kernel touches. A pass may not rename or drop
    them (it may still compute them differently)."""
    keep = set(program.outputs)
    for node in program.nodes:
        if isinstance(node, OpNode):
            keep.update(node.after)
            if node.op == "kernel":
                keep.update(node.attrs.get("reads", ()))
                keep.update(node.attrs.get("writes", ()))
                keep.add(node.output)
        elif isinstance(node, CallbackNode):
            keep.add(node.after)
    return keep


def movable(node: Node) -> bool:
    """Whether a pass may move, merge or drop ``node``: an op the compiler schedules (no
    explicit stream, no ``after=``), other than a synthetic kernel."""
    return (
        isinstance(node, OpNode) and node.op != "kernel" and node.stream is None and not node.after
    )


def renamed(node: Node, to: Mapping[str, str]) -> Node:
    """``node`` reading ``to[name]`` wherever it read ``name``."""
    if not to or not isinstance(node, OpNode):
        return node
    inputs = tuple(to.get(n, n) for n in node.inputs)
    return node if inputs == node.inputs else replace(node, inputs=inputs)


def rebuilt(program: Program, nodes: list[Node], dropped: Iterable[str] = ()) -> Program:
    """``program`` with ``nodes`` and without the tensors ``dropped``."""
    gone = set(dropped)
    tensors = {k: t for k, t in program.tensors.items() if k not in gone}
    return replace(program, nodes=nodes, tensors=tensors)
