"""What the optimizer's passes share: who uses a tensor, which tensors must keep their names,
and a program rebuilt with new nodes.

A pass never edits the program it is given: it returns a new :class:`~rtgraph.ir.graph.Program`
(nodes and tensor table rebuilt, everything else shared), so the program before a pass can be
printed next to the program after it.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from rtgraph.dtypes import DTYPES, contiguous_strides
from rtgraph.ir.graph import CallbackNode, HostCopyNode, Node, OpNode, Program
from rtgraph.ops.comm import TRANSFERS
from rtgraph.ops.fused import body_attrs
from rtgraph.ops.layout import VIEW_OPS, view_layout

_T = TypeVar("_T")

#: Analyses of a program object, by ``id``: (a weak reference to it, its node list when they
#: were made, the analyses by name). A pass that changes nothing returns the program it was
#: given, so the passes after it reuse what was found instead of walking the nodes again.
_MEMO: dict[int, tuple[weakref.ref[Program], list[Node], int, dict[str, Any]]] = {}


def memoized(program: Program, name: str, compute: Callable[[Program], _T]) -> _T:
    """``compute(program)``, computed once per program object while its node list is the same
    list of the same length (passes never edit a program in place; this guards against a
    caller that does). The result is shared: callers must not modify it."""
    key = id(program)
    entry = _MEMO.get(key)
    if (
        entry is None
        or entry[0]() is not program
        or entry[1] is not program.nodes
        or entry[2] != len(program.nodes)
    ):

        def forget(ref: weakref.ref[Program], key: int = key) -> None:
            if (held := _MEMO.get(key)) is not None and held[0] is ref:
                del _MEMO[key]

        entry = (weakref.ref(program, forget), program.nodes, len(program.nodes), {})
        _MEMO[key] = entry
    found = entry[3]
    if name not in found:
        found[name] = compute(program)
    return found[name]


def uses(program: Program) -> Mapping[str, int]:
    """How many times each tensor is read: as an op's operand, in ``after=``, by a callback,
    by a synthetic kernel, or as an output (each counts once per mention). Shared between
    the passes that see the same program: read only."""
    return memoized(program, "uses", _uses)


def _uses(program: Program) -> dict[str, int]:
    count: dict[str, int] = {}
    for name in mentioned(program):
        count[name] = count.get(name, 0) + 1
    return count


def movable_ops(program: Program) -> frozenset[str]:
    """The kinds of op among ``program``'s :func:`movable` nodes — the only nodes the
    passes rewrite, so a pass whose ops are absent returns the program at once (a program
    of synthetic kernels or explicit streams has none)."""
    return memoized(
        program,
        "movable_ops",
        lambda p: frozenset(n.op for n in p.nodes if movable(n)),  # type: ignore[union-attr]
    )


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


def pinned(program: Program) -> frozenset[str]:
    """Tensors whose name the program's meaning depends on: outputs, ``after=`` targets,
    callback triggers and whatever a synthetic kernel touches. A pass may not rename or drop
    them (it may still compute them differently)."""
    return memoized(program, "pinned", _pinned)


def _pinned(program: Program) -> frozenset[str]:
    keep = set(program.outputs)
    for node in program.nodes:
        if isinstance(node, OpNode):
            keep.update(node.after)
            if node.op == "kernel":
                keep.update(node.attrs.get("reads", ()))
                keep.update(node.attrs.get("writes", ()))
                keep.add(node.output)
            elif node.op in TRANSFERS:  # a transfer has a peer: the program alone cannot drop it
                keep.add(node.output)
        elif isinstance(node, CallbackNode):
            keep.add(node.after)
        elif isinstance(node, HostCopyNode):
            keep.add(node.tensor)
    return frozenset(keep)


def movable(node: Node) -> bool:
    """Whether a pass may move, merge or drop ``node``: an op the compiler schedules (no
    explicit stream, no ``after=``), other than a synthetic kernel or a transfer (whose order
    is its peer's too)."""
    return (
        isinstance(node, OpNode)
        and node.op != "kernel"
        and node.op not in TRANSFERS
        and node.stream is None
        and not node.after
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


def readers(program: Program) -> Mapping[str, OpNode]:
    """An op reading each tensor (the last in program order) — the reader, where
    :func:`uses` says it has only one. Shared like :func:`uses`: read only."""
    return memoized(program, "readers", _readers)


def _readers(program: Program) -> dict[str, OpNode]:
    found: dict[str, OpNode] = {}
    for node in program.nodes:
        if isinstance(node, OpNode):
            for name in node.inputs:
                found[name] = node
    return found


def fused_body(nodes: Iterable[OpNode], program: Program) -> tuple[tuple[str, ...], tuple]:
    """The inputs and the ``body`` of one ``fused`` op computing ``nodes`` (in order): the
    tensors they read from outside, then a step per op (see :mod:`rtgraph.ops.fused`); a
    ``block_dim`` request is the task's, not a step's."""
    nodes = list(nodes)
    inside = {n.output for n in nodes}
    inputs = tuple(dict.fromkeys(i for n in nodes for i in n.inputs if i not in inside))
    index = {name: k for k, name in enumerate(inputs)}
    body: list[Any] = []
    for k, node in enumerate(nodes):
        out = program.tensors[node.output].type
        attrs = {a: v for a, v in node.attrs.items() if a != "block_dim"}
        args = tuple(index[i] for i in node.inputs)
        body.append((node.op, args, body_attrs(attrs), out.dtype, tuple(out.shape)))
        index[node.output] = len(inputs) + k
    return inputs, tuple(body)


def view_outputs(program: Program, nodes: Iterable[OpNode]) -> set[str]:
    """The outputs of those ``nodes`` that lowering will make views of their operand (no
    task): layout ops whose strides NumPy can express, followed through chains of them."""
    layout: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    views = set()
    for node in nodes:
        if node.op not in VIEW_OPS:
            continue
        source = program.tensors[node.inputs[0]].type
        out = program.tensors[node.output].type
        dense = contiguous_strides(source.shape, DTYPES[source.dtype].itemsize)
        shape, strides = layout.get(node.inputs[0], (source.shape, dense))
        size = DTYPES[out.dtype].itemsize
        made = view_layout(shape, strides, size, node.op, node.attrs, out.shape)
        if made is not None:
            layout[node.output] = (made[0], made[1])
            views.add(node.output)
    return views


def concats_in_place(program: Program) -> dict[str, tuple[str, int]]:
    """The parts of concatenations that can be computed straight into their slice of the
    result — part name → (the concatenation's name, the part's byte offset in it).

    A ``concat`` qualifies when every axis before the joined one has size 1 (so each part's
    slice of the result is contiguous) and each part is a distinct value computed by an op
    that makes a task (not a view, not a synthetic kernel, not a declared tensor, not another
    concat — which may itself be made in place, leaving no task to write into this one), joined
    by no other concat and not itself an output. Other ops may read a part: they read its bytes
    in the result, which nothing else writes. The optimizer's tiles meet this: they then cost
    no copy.
    """
    joins: dict[str, int] = {}
    for node in program.nodes:
        if isinstance(node, OpNode) and node.op == "concat":
            for name in node.inputs:
                joins[name] = joins.get(name, 0) + 1
    outputs = set(program.outputs)
    made_by = {n.output: n for n in program.nodes if isinstance(n, OpNode)}
    found: dict[str, tuple[str, int]] = {}
    for node in program.nodes:
        if not isinstance(node, OpNode) or node.op != "concat" or node.stream is not None:
            continue
        out = program.tensors[node.output].type
        axis = node.attrs.get("axis", 0) % out.rank
        if math.prod(out.shape[:axis]) != 1 or len(set(node.inputs)) != len(node.inputs):
            continue
        parts = [made_by.get(name) for name in node.inputs]
        if any(
            p is None
            or p.op in VIEW_OPS
            or p.op == "kernel"
            or p.op == "concat"  # a part made in place itself: it has no task to redirect
            or joins[p.output] != 1
            or p.output in outputs
            for p in parts
        ):
            continue
        offset = 0
        for name in node.inputs:
            found[name] = (node.output, offset)
            offset += program.tensors[name].type.nbytes
    return found


def output_parts(program: Program) -> dict[str, tuple[str, int, int]]:
    """The parts of outputs that a ``d2h`` copy may send on their own — part name → (the
    output, its first row, the row after its last): the operands of an output that is a
    ``concat`` along axis 0, when the program copies that part by itself."""
    copied = {n.tensor for n in program.nodes if isinstance(n, HostCopyNode)}
    outputs = set(program.outputs)
    found: dict[str, tuple[str, int, int]] = {}
    for node in program.nodes:
        if not isinstance(node, OpNode) or node.op != "concat" or node.output not in outputs:
            continue
        rank = program.tensors[node.output].type.rank
        if node.attrs.get("axis", 0) % rank != 0 or not copied & set(node.inputs):
            continue
        row = 0
        for name in node.inputs:
            rows = program.tensors[name].type.shape[0]
            if name in copied and name not in outputs:
                found[name] = (node.output, row, row + rows)
            row += rows
    return found


def attrs_key(attrs: Mapping[str, Any]) -> tuple:
    """An op's attributes as a dictionary key: their items where those hash (most ops'), else
    with lists frozen to tuples (:func:`~rtgraph.ops.fused.body_attrs`). Equal keys mean equal
    attributes, so a plan made for one op holds for another of the same key."""
    items = tuple(attrs.items())
    try:
        hash(items)
    except TypeError:
        return body_attrs(attrs)
    return items


def slice_rows(node: OpNode, program: Program) -> tuple[int, int] | None:
    """The rows ``[start, stop)`` a ``slice`` along axis 0 keeps, or None for any other op —
    its bounds as written resolved as Python's are (negative from the end, clamped, a missing
    stop the end)."""
    if node.op != "slice":
        return None
    shape = program.tensors[node.inputs[0]].type.shape
    if node.attrs.get("axis", 0) % len(shape) != 0:
        return None
    start, stop, _ = slice(node.attrs.get("start"), node.attrs.get("stop")).indices(shape[0])
    return start, stop


def sent_in_parts(program: Program, send: Callable[[int, str], bool]) -> list[Node]:
    """The program's nodes with a ``to_host`` of each part of an output joined along axis 0,
    right after the part is computed, where ``send`` says it pays for the smallest part."""
    made = {n.output: n for n in program.nodes if isinstance(n, OpNode)}
    count = uses(program)
    parts: set[str] = set()
    for name in program.outputs:
        join = made.get(name)
        if join is None or join.op != "concat" or len(set(join.inputs)) != len(join.inputs):
            continue
        t = program.tensors[name]
        if t.type.rank == 0 or join.attrs.get("axis", 0) % t.type.rank != 0:
            continue
        if any(
            p not in made or made[p].op in VIEW_OPS or count.get(p) != 1 or p in program.outputs
            for p in join.inputs
        ):
            continue
        smallest = min(program.tensors[p].type.nbytes for p in join.inputs)
        if send(smallest, t.type.dtype):
            parts.update(join.inputs)
    if not parts:
        return list(program.nodes)
    out: list[Node] = []
    for node in program.nodes:
        out.append(node)
        if isinstance(node, OpNode) and node.output in parts:
            out.append(HostCopyNode("d2h", node.output, "", node.span))
    return out
