"""Elementwise fusion: maximal chains and trees of Vector ops become one ``fused`` task.

A Vector op whose :attr:`~rtgraph.ops.registry.OpDef.fusion` is ``elementwise`` — or ``row``
along the last axis (softmax, layernorm, rmsnorm: a fused kernel holds whole rows on chip) —
joins the group of an operand's producer when that operand is read by nothing else: scale →
mask → softmax, bias → GELU, residual add → layernorm each become one task that reads its
inputs once and writes one result (:mod:`rtgraph.ops.fused`). The intermediates disappear from
the program, and with them their bytes of device memory and of HBM traffic.

Preserves: every element bit for bit — each step of the fused body is rounded where the unfused
op rounded it — unless ``options.fast_math``, which keeps a body's floating intermediates in f32
(the run then reports its error against the reference). A group is emitted where its last op
stood: its inputs are all defined by then, and no other op read its intermediates. One pass over
the nodes; each node joins at most one group.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rtgraph.compiler.optimizer.rewrite import (
    fused_body,
    movable,
    movable_ops,
    pinned,
    rebuilt,
    uses,
)
from rtgraph.compiler.options import CompileOptions
from rtgraph.ir.graph import Node, OpNode, Program
from rtgraph.ops import fusion_of, lookup
from rtgraph.ops.fused import MAX_STEPS


@dataclass
class _Group:
    """Ops fused so far, in program order; ``root`` is the last (its output is the result)."""

    nodes: list[OpNode] = field(default_factory=list)

    @property
    def root(self) -> OpNode:
        return self.nodes[-1]


def _fusible(node: Node, program: Program) -> bool:
    if not movable(node):
        return False
    assert isinstance(node, OpNode)
    op = lookup(node.op)
    if op is None or not node.inputs:
        return False
    fusion = fusion_of(op, [program.tensors[n].type for n in node.inputs], node.attrs)
    if fusion is None:
        return False
    if fusion == "row":
        rank = program.tensors[node.inputs[0]].type.rank
        return rank > 0 and node.attrs.get("axis", -1) % rank == rank - 1
    return True


def fuse_elementwise(program: Program, options: CompileOptions) -> Program:
    """``program`` with every maximal group of fusible Vector ops replaced by one fused op."""
    if not movable_ops(program):
        return program
    keep = pinned(program)
    count = uses(program)
    group_of: dict[str, _Group] = {}  # an op's output -> the group it belongs to
    slot_of: dict[int, int] = {}  # id of a group -> its place in ``slots``
    slots: list[Node | _Group | None] = []
    for node in program.nodes:
        if not _fusible(node, program):
            slots.append(node)
            continue
        assert isinstance(node, OpNode)
        joined = _Group()
        for name in dict.fromkeys(node.inputs):
            group = group_of.get(name)
            if group is None or name in keep or count.get(name) != node.inputs.count(name):
                continue
            if group.root.output != name or len(joined.nodes) + len(group.nodes) >= MAX_STEPS:
                continue
            joined.nodes += group.nodes
            slots[slot_of.pop(id(group))] = None
        joined.nodes.append(node)
        for member in joined.nodes:
            group_of[member.output] = joined
        slot_of[id(joined)] = len(slots)
        slots.append(joined)
    out: list[Node] = []
    dropped: list[str] = []
    for slot in slots:
        if slot is None:
            continue
        if isinstance(slot, _Group):
            if len(slot.nodes) == 1:
                out.append(slot.root)
                continue
            out.append(_fused(slot, options.fast_math, program))
            dropped += [n.output for n in slot.nodes[:-1]]
        else:
            out.append(slot)
    if not dropped:
        return program
    return rebuilt(program, out, dropped)


def _fused(group: _Group, fast_math: bool, program: Program) -> OpNode:
    """One ``fused`` op computing ``group``."""
    inputs, body = fused_body(group.nodes, program)
    root = group.root
    return OpNode(
        op="fused",
        inputs=inputs,
        output=root.output,
        attrs={"body": body, "fast_math": fast_math},
        span=root.span,
    )
