"""Building blocks of the per-device programs: the ``send``/``recv`` nodes the partitioners
add, and the program a device keeps of a whole one.

A transfer is a pair of nodes with one ``tag``: ``send(t)`` on the rank that has ``t`` (its
result a token no one reads, kept by the optimizer as every transfer is) and ``t = recv()`` —
or ``t' = recv_reduce(t)`` — on the rank that receives it. Tags are numbered per cluster
program, so each (source, destination, tag) names one message.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import count

from rtgraph.dtypes import TensorType
from rtgraph.ir.graph import Node, OpNode, Program, Tensor


@dataclass
class Tags:
    """The tags of one cluster program's messages, in the order they were made."""

    counter: count = field(default_factory=count)

    def next(self) -> int:
        return next(self.counter)


def send_node(value: str, peer: int, tag: int, rank: int, span=None) -> tuple[OpNode, Tensor]:
    """``send(value)`` to ``peer`` on ``rank``, and its token."""
    token = Tensor(f"%send{tag}", TensorType((), "i32"), "token", span)
    node = OpNode("send", (value,), token.name, {"peer": peer, "tag": tag}, span, device=rank)
    return node, token


def recv_node(
    value: Tensor, peer: int, tag: int, rank: int, reduce_into: str | None = None, name=None
) -> tuple[OpNode, Tensor]:
    """``name = recv()`` from ``peer`` on ``rank`` (of ``value``'s type), or
    ``name = recv_reduce(reduce_into)``; ``name`` defaults to ``value``'s own."""
    out = Tensor(name or value.name, value.type, "value", value.span, value.display)
    if reduce_into is not None:
        attrs = {"peer": peer, "tag": tag, "reduce": "sum"}
        return OpNode("recv_reduce", (reduce_into,), out.name, attrs, value.span, device=rank), out
    attrs = {
        "peer": peer,
        "tag": tag,
        "shape": list(value.type.shape),
        "dtype": value.type.dtype,
    }
    return OpNode("recv", (), out.name, attrs, value.span, device=rank), out


def device_program(
    whole: Program, rank: int, nodes: list[Node], made: dict[str, Tensor], outputs: list[str]
) -> Program:
    """The program rank ``rank`` runs: ``nodes``, the tensors they and ``outputs`` name (from
    ``made`` first — tensors the partitioner created — then ``whole``'s)."""
    names: dict[str, None] = {}
    for node in nodes:
        if isinstance(node, OpNode):
            names.update(dict.fromkeys(node.inputs))
            names[node.output] = None
            names.update(dict.fromkeys(node.after))
    names.update(dict.fromkeys(outputs))
    tensors = {n: made.get(n) or whole.tensors[n] for n in names}
    # keep the declaration order of the whole program's tensors (inputs, params first)
    ordered = {n: tensors[n] for n in whole.tensors if n in tensors}
    ordered.update((n, t) for n, t in tensors.items() if n not in ordered)
    return replace(
        whole,
        name=f"{whole.name}.d{rank}",
        tensors=ordered,
        nodes=nodes,
        outputs=outputs,
    )
