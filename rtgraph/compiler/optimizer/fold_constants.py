"""Constant folding: an op whose operands are all compile-time scalars becomes a constant, and
``scale(x, 1.0)`` and ``x * 1`` are ``x``.

Preserves: every value bit for bit — a folded op is computed by the same registry kernel the
device would run, rounded to its dtype as the device rounds it, and multiplying by 1 is exact in
IEEE arithmetic (for integers too). Pinned tensors keep their op.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from rtgraph.compiler.optimizer.rewrite import movable, movable_ops, pinned, rebuilt, renamed
from rtgraph.compiler.options import CompileOptions
from rtgraph.dtypes import to_value
from rtgraph.ir.graph import Node, OpNode, Program, Tensor
from rtgraph.ops import lookup, run_kernel


def fold_constants(program: Program, options: CompileOptions) -> Program:
    """``program`` with constant-only ops folded and multiplications by one removed."""
    if not movable_ops(program):
        return program
    keep = pinned(program)
    tensors = dict(program.tensors)
    to: dict[str, str] = {}
    nodes: list[Node] = []
    dropped: list[str] = []
    for node in program.nodes:
        node = renamed(node, to)
        if isinstance(node, OpNode) and movable(node) and node.output not in keep:
            if _times_one(node, tensors):
                to[node.output] = node.inputs[0]
                dropped.append(node.output)
                continue
            folded = _fold(node, tensors)
            if folded is not None:
                tensors[node.output] = folded
                continue
        nodes.append(node)
    if not to and len(nodes) == len(program.nodes):
        return program
    return rebuilt(replace(program, tensors=tensors), nodes, dropped)


def _times_one(node: OpNode, tensors: dict[str, Tensor]) -> bool:
    """Whether ``node`` multiplies its first operand by one, leaving its type as it was."""
    if node.op == "scale":
        return float(node.attrs["s"]) == 1.0
    if node.op != "mul":
        return False
    x, one = (tensors[n] for n in node.inputs)
    return one.kind == "const" and one.value == 1.0 and x.type == tensors[node.output].type


def _fold(node: OpNode, tensors: dict[str, Tensor]) -> Tensor | None:
    """The constant ``node`` computes when all its operands are scalar constants, else None."""
    operands = [tensors[n] for n in node.inputs]
    out = tensors[node.output]
    if not operands or out.type.shape != () or any(t.kind != "const" for t in operands):
        return None
    op = lookup(node.op)
    if op is None or op.kernel is None or op.internal:
        return None
    arrays = [to_value(np.asarray(t.value), t.type.dtype) for t in operands]
    value = run_kernel(op, arrays, node.attrs, out.type)
    return replace(out, kind="const", value=float(np.asarray(value)))
