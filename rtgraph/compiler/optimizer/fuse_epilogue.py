"""Cube epilogue fusion: a matmul or conv2d and the bias, scale and activation after it become one
Cube task, as a Cube's output path (the Ascend 910B's FixPipe) applies them on the way out.

A Cube op heads a chain; the chain grows by the one op reading its last result when that result
is read by nothing else and keeps no name (:func:`~.rewrite.pinned`), and the op is an epilogue
(:func:`rtgraph.ops.fused.epilogue_kind`: a dequantize of the int32 result, a bias add, a
scale, an activation, a quantize to int8) that the bound device's ``[units.cube] epilogues``
lists — each at most once, in the output path's order
(:func:`rtgraph.ops.fused.epilogue_may_follow`). A chain of two
or more ops becomes one ``fused`` op with ``unit = "cube"`` (:mod:`rtgraph.ops.fused`): its
intermediates disappear from the program and the Vector tasks that applied the epilogue with
them. It runs before ``fuse_elementwise``, so that the bias and activation go to the Cube rather
than into a Vector kernel; what the device cannot apply is left for that pass.

The fused op stands where the Cube op stood when every input it adds (a bias, a scale) is
defined by then — the Cube's work keeps its place in the program's order, which a hand-pipelined
model chose — and otherwise where the chain's last op stood.

Preserves: every element bit for bit — each step of the body is rounded where the unfused op
rounded it — unless ``options.fast_math``, which keeps the floating intermediates in f32 (as a
Cube's accumulator does). Every pinned name; the program's order of Cube work wherever the
epilogue's inputs are ready at its Cube op.
"""

from __future__ import annotations

from rtgraph.compiler.optimizer.rewrite import (
    fused_body,
    movable,
    movable_ops,
    pinned,
    readers,
    rebuilt,
    uses,
)
from rtgraph.compiler.options import CompileOptions
from rtgraph.ir.graph import Node, OpNode, Program
from rtgraph.ops.fused import CHANNEL_AXIS, epilogue_kind, epilogue_may_follow


def fuse_epilogue(program: Program, options: CompileOptions) -> Program:
    """``program`` with each matmul / conv2d and the epilogue the device applies after it as
    one Cube ``fused`` op (unchanged when the device lists no epilogue)."""
    allowed = set(options.target.unit("cube").epilogues)
    if not allowed or not movable_ops(program) & CHANNEL_AXIS.keys():
        return program
    keep, count, reader = pinned(program), uses(program), readers(program)
    taken: set[int] = set()  # ids of the nodes already in a chain
    chains = []
    for node in program.nodes:
        if movable(node) and isinstance(node, OpNode) and node.op in CHANNEL_AXIS:
            chain = _chain(node, program, allowed, keep, count, reader, taken)
            if len(chain) > 1:
                taken.update(id(n) for n in chain)
                chains.append(chain)
    if not chains:
        return program
    return _rewritten(program, chains, options.fast_math)


def _chain(
    head: OpNode,
    program: Program,
    allowed: set[str],
    keep: set[str],
    count: dict[str, int],
    reader: dict[str, OpNode],
    taken: set[int],
) -> list[OpNode]:
    """``head`` and the epilogue ops after it that the device applies, in order."""
    chain, applied = [head], []
    while True:
        last = chain[-1].output
        if last in keep or count.get(last) != 1:
            return chain
        node = reader.get(last)
        if node is None or not movable(node) or id(node) in taken or "block_dim" in node.attrs:
            return chain
        operands = [program.tensors[n].type for n in node.inputs]
        kind = epilogue_kind(head.op, node.op, operands, node.inputs.index(last), node.attrs)
        if kind not in allowed or not epilogue_may_follow(applied, kind):
            return chain
        chain.append(node)
        applied.append(kind)


def _rewritten(program: Program, chains: list[list[OpNode]], fast_math: bool) -> Program:
    """``program`` with each chain replaced by its fused op."""
    at = {id(node): k for k, node in enumerate(program.nodes)}
    defined = {n.output: k for k, n in enumerate(program.nodes) if isinstance(n, OpNode)}
    put: dict[int, OpNode] = {}  # position in program.nodes -> the fused op standing there
    gone: set[int] = set()
    dropped: list[str] = []
    for chain in chains:
        fused = _fused(chain, fast_math, program)
        head = at[id(chain[0])]
        early = all(defined.get(name, -1) < head for name in fused.inputs)
        put[head if early else at[id(chain[-1])]] = fused
        gone.update(at[id(n)] for n in chain)
        dropped += [n.output for n in chain[:-1]]
    nodes: list[Node] = []
    for k, node in enumerate(program.nodes):
        if k in put:
            nodes.append(put[k])
        elif k not in gone:
            nodes.append(node)
    return rebuilt(program, nodes, dropped)


def _fused(chain: list[OpNode], fast_math: bool, program: Program) -> OpNode:
    """One Cube ``fused`` op computing ``chain`` (the head's ``block_dim``, if its author gave
    one, is the fused task's)."""
    inputs, body = fused_body(chain, program)
    attrs = {"body": body, "fast_math": fast_math, "unit": "cube"}
    if "block_dim" in chain[0].attrs:
        attrs["block_dim"] = chain[0].attrs["block_dim"]
    return OpNode(
        op="fused", inputs=inputs, output=chain[-1].output, attrs=attrs, span=chain[-1].span
    )
