"""Collectives become transfers: each replica's ``allreduce`` (``broadcast``, …) is replaced by
the steps of the algorithm's plan (:func:`rtgraph.cluster.collectives.plan`), as HCCL runs a
collective as a sequence of point-to-point steps on its stream.

The replicas' programs are the same program, so their k-th collectives match: the expansion
walks them in lockstep and, for each collective, writes every rank's part at once. A rank's
working buffer is its operand flattened and cut into the plan's chunks (``slice`` views of a
``reshape``, no copies); each step's transfers become a ``send`` of the chunk's current value on
the source rank and a ``recv`` (``recv_reduce``: the incoming chunk added to the rank's) on the
destination — in SSA form, so a send of step k reads exactly what steps before k left in the
chunk. The result is the chunks joined again (``concat``, then ``reshape`` to the operand's
shape). Sends of a step come before its receives in every rank's program, and a send does not
wait for its receiver, so a plan whose steps each rank can follow in order never deadlocks.

The summation order is the plan's (a ring's chunk c is summed starting at rank c + 1), not
the reference's: the run report says which check applied (bit-exact or within the bound).
"""

from __future__ import annotations

import math
from dataclasses import replace

from rtgraph.cluster.collectives import Transfer, default_algorithm, plan
from rtgraph.compiler.parallel.group_of_one import group_of_one
from rtgraph.compiler.parallel.transfers import Tags, recv_node, send_node
from rtgraph.dtypes import TensorType
from rtgraph.errors import CheckError, RtgError
from rtgraph.ir.graph import Node, OpNode, Program, Tensor
from rtgraph.ops.comm import COLLECTIVES

#: Collectives whose result has its operand's shape in a group of any size: the ones a
#: data-parallel replica (checked at 1/N of the batch) can express.
SHAPE_KEEPING = ("allreduce", "broadcast")


def expand_collectives(replicas: list[Program], tags: Tags) -> list[Program]:
    """``replicas`` (rank r's program at r) with every collective replaced by its transfers."""
    n = len(replicas)
    first = replicas[0]
    if not any(isinstance(x, OpNode) and x.op in COLLECTIVES for x in first.nodes):
        return replicas
    if n == 1:
        return [group_of_one(first)]
    out_nodes: list[list[Node]] = [[] for _ in range(n)]
    made: list[dict[str, Tensor]] = [dict(p.tensors) for p in replicas]
    for k, node in enumerate(first.nodes):
        if not (isinstance(node, OpNode) and node.op in COLLECTIVES):
            for r in range(n):
                out_nodes[r].append(replicas[r].nodes[k])
            continue
        if node.op not in SHAPE_KEEPING:
            raise CheckError(
                f"{node.op} changes its result's shape with the group's size, and a "
                "data-parallel replica is the program checked at 1/N of the batch",
                node.span,
                hint="data-parallel programs combine replicas with allreduce or broadcast",
            )
        _expand(node, [p.tensors[node.inputs[0]] for p in replicas], out_nodes, made, tags)
    result = []
    for r, p in enumerate(replicas):
        names = _named(out_nodes[r], p.outputs)
        tensors = {name: made[r][name] for name in made[r] if name in names}
        result.append(_with(p, out_nodes[r], tensors))
    return result


def _expand(
    node: OpNode,
    operands: list[Tensor],
    out: list[list[Node]],
    made: list[dict[str, Tensor]],
    tags: Tags,
) -> None:
    n = len(out)
    algorithm = str(node.attrs.get("algorithm", "auto"))
    if algorithm == "auto":
        algorithm = default_algorithm(node.op, n)
    root = int(node.attrs.get("root", 0))
    if not 0 <= root < n:
        raise CheckError(
            f"{node.op}: root {root} is not a rank of the group of {n}",
            node.span,
            hint=f"ranks are 0 to {n - 1}",
        )
    steps = _plan(node, algorithm, n, root)
    t = operands[0]
    numel = math.prod(t.type.shape)
    chunks = steps.chunks
    bounds = [(j * numel // chunks, (j + 1) * numel // chunks) for j in range(chunks)]
    base = node.output
    cur: list[dict[int, str]] = []
    for r in range(n):
        flat = Tensor(f"{base}%flat", TensorType((numel,), t.type.dtype), "value", node.span)
        made[r][flat.name] = flat
        out[r].append(_op("reshape", (node.inputs[0],), flat.name, {"shape": [numel]}, node, r))
        parts: dict[int, str] = {}
        for j, (lo, hi) in enumerate(bounds):
            part = Tensor(f"{base}%c{j}", TensorType((hi - lo,), t.type.dtype), "value", node.span)
            made[r][part.name] = part
            out[r].append(
                _op("slice", (flat.name,), part.name, {"axis": 0, "start": lo, "stop": hi}, node, r)
            )
            parts[j] = part.name
        cur.append(parts)
    for s, step in enumerate(steps.steps):
        sends: list[tuple[Transfer, int]] = [(x, tags.next()) for x in step]
        for x, tag in sends:
            send, token = send_node(cur[x.src][x.chunk], x.dst, tag, x.src, node.span)
            out[x.src].append(send)
            made[x.src][token.name] = token
        for x, tag in sends:
            into = cur[x.dst][x.to_chunk]
            lo, hi = bounds[x.to_chunk]
            chunk = Tensor(
                f"{base}%s{s}c{x.to_chunk}",
                TensorType((hi - lo,), t.type.dtype),
                "value",
                node.span,
            )
            recv, value = recv_node(
                chunk, x.src, tag, x.dst, reduce_into=into if x.reduce else None, name=chunk.name
            )
            out[x.dst].append(recv)
            made[x.dst][value.name] = value
            cur[x.dst][x.to_chunk] = value.name
    for r in range(n):
        joined = Tensor(f"{base}%joined", TensorType((numel,), t.type.dtype), "value", node.span)
        made[r][joined.name] = joined
        parts = tuple(cur[r][j] for j in range(chunks))
        out[r].append(_op("concat", parts, joined.name, {"axis": 0}, node, r))
        out[r].append(
            _op("reshape", (joined.name,), node.output, {"shape": list(t.type.shape)}, node, r)
        )


def _plan(node: OpNode, algorithm: str, n: int, root: int):
    try:
        return plan(node.op, algorithm, n, root=root)
    except RtgError as err:  # the plan's own error, located at the call
        raise CheckError(err.message, node.span, hint=err.hint) from None


def _op(op: str, inputs: tuple[str, ...], output: str, attrs: dict, node: OpNode, rank: int):
    return OpNode(op, inputs, output, attrs, node.span, device=rank)


def _named(nodes: list[Node], outputs: list[str]) -> set[str]:
    names = set(outputs)
    for x in nodes:
        if isinstance(x, OpNode):
            names.update(x.inputs)
            names.add(x.output)
            names.update(x.after)
    return names


def _with(p: Program, nodes: list[Node], tensors: dict[str, Tensor]) -> Program:
    return replace(p, nodes=nodes, tensors=tensors)
