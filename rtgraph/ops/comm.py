"""Communication ops: collectives a program writes, and the point-to-point transfers the
compiler makes of them and of values that cross devices.

**Collectives** (``allreduce``, ``allgather``, ``reduce_scatter``, ``broadcast``, ``alltoall``)
are written SPMD-style, as HCCL and NCCL calls are: once, in the program every replica of a
parallel group runs, on that replica's tensor. Their meaning is over the group the compiler
makes (``--data-parallel N``: N replicas, each on ``1/N`` of the batch):

========================  =====================================================================
``allreduce(x)``          every replica gets the sum of every replica's ``x``
``allgather(x, axis)``    every replica gets the replicas' ``x`` concatenated along ``axis``
``reduce_scatter(x, axis)``  replica r gets part r (of N along ``axis``) of the sum
``broadcast(x, root)``    every replica gets replica ``root``'s ``x``
``alltoall(x, axis)``     replica r's part j (along ``axis``) goes to replica j's part r
========================  =====================================================================

Run by one device (a group of one) each is the identity, which is what the reference
interpreter computes and why a data-parallel program's single-device reference is the same
program on the whole batch: a value that sums over the batch rows (a hand-written gradient
``transpose(x) @ dy``) is the sum of its per-replica values. The shapes the checker sees are a
group of one's (``allgather``'s result is ``x``'s shape): the compiler rescales them per group.

**Transfers** (``send``, ``recv``, ``recv_reduce``; compiler-made, never written) run on the
``link`` unit a cluster gives each device (:data:`rtgraph.cluster.LINK_UNIT`): ``send`` reads
its operand and yields a token (no data), ``recv`` writes what the peer's matching send sent,
``recv_reduce`` adds it into its operand. ``peer`` is the other rank, ``tag`` pairs a send with
its receive. The emulator times them on the cluster's links (docs/emulator.md, "Many devices").
"""

from __future__ import annotations

import numpy as np

from rtgraph.dtypes import TensorType
from rtgraph.ops.registry import REQUIRED, AttrSpec, Cost, OpDef, OpError
from rtgraph.ops.rules import Attrs, Types, axis

#: The collectives a program may write, and the algorithms each may run as.
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
ALGORITHMS = ("auto", "ring", "halving_doubling", "tree")
#: The transfers the compiler makes.
TRANSFERS = ("send", "recv", "recv_reduce")
#: Every op that runs on the link unit.
COMM_OPS = frozenset(COLLECTIVES + TRANSFERS)


def _same(types: Types, attrs: Attrs) -> TensorType:
    return types[0]


def _along(op: str):
    def infer(types: Types, attrs: Attrs) -> TensorType:
        axis(op, attrs["axis"], types[0].rank)
        return types[0]

    return infer


def _moved(types: Types, out: TensorType, attrs: Attrs) -> Cost:
    """No arithmetic; reads its operand and writes its result once (a group of one's cost: the
    compiler times a collective by its transfers, not by this)."""
    return Cost(0, types[0].nbytes if types else 0, out.nbytes)


def _identity(arrays, attrs) -> np.ndarray:
    return np.array(arrays[0], copy=True)


def _collective(name: str, doc: str, *, along: bool = False, root: bool = False) -> OpDef:
    attrs = {
        "algorithm": AttrSpec(
            "enum",
            "auto",
            ALGORITHMS,
            doc="ring, halving_doubling or tree; auto: the cluster's choice for the group size",
        )
    }
    if along:
        attrs["axis"] = AttrSpec("int", 0, doc="the axis cut into one part per replica")
    if root:
        attrs["root"] = AttrSpec("int", 0, doc="the replica whose tensor is sent")
    return OpDef(
        name=name,
        unit="link",
        min_args=1,
        max_args=1,
        infer=_along(name) if along else _same,
        cost=_moved,
        kernel=_identity,
        attrs=attrs,
        doc=doc + "; the identity on one device",
    )


def _recv_infer(types: Types, attrs: Attrs) -> TensorType:
    shape = tuple(attrs["shape"])
    if any(d < 0 for d in shape):
        raise OpError(f"recv: negative dimension in shape {list(shape)}", attr="shape")
    return TensorType(shape, attrs["dtype"])


def _token(types: Types, attrs: Attrs) -> TensorType:
    return TensorType((), "i32")


_PEER = {
    "peer": AttrSpec("int", REQUIRED, doc="the rank at the other end"),
    "tag": AttrSpec("int", REQUIRED, doc="pairs a send with its receive"),
}

SEND = OpDef(
    name="send",
    unit="link",
    min_args=1,
    max_args=1,
    infer=_token,
    cost=lambda types, out, attrs: Cost(0, types[0].nbytes, 0),
    kernel=None,
    attrs=_PEER,
    internal=True,
    doc="sends its operand to rank peer; its result is a token",
)
RECV = OpDef(
    name="recv",
    unit="link",
    min_args=0,
    max_args=0,
    infer=_recv_infer,
    cost=lambda types, out, attrs: Cost(0, 0, out.nbytes),
    kernel=None,
    attrs={
        **_PEER,
        "shape": AttrSpec("ints", REQUIRED, doc="the shape received"),
        "dtype": AttrSpec("dtype", REQUIRED, doc="the dtype received"),
    },
    internal=True,
    doc="receives what rank peer's matching send sent",
)
RECV_REDUCE = OpDef(
    name="recv_reduce",
    unit="link",
    min_args=1,
    max_args=1,
    infer=_same,
    cost=lambda types, out, attrs: Cost(0, types[0].nbytes, out.nbytes),
    kernel=None,
    attrs={**_PEER, "reduce": AttrSpec("enum", "sum", ("sum",), doc="how it combines")},
    internal=True,
    doc="adds what rank peer's matching send sent into its operand",
)

#: This family's ops, in the order the language spec lists them.
OPS: tuple[OpDef, ...] = (
    _collective("allreduce", "the sum of every replica's tensor, on every replica"),
    _collective(
        "allgather", "the replicas' tensors concatenated along axis, on every replica", along=True
    ),
    _collective(
        "reduce_scatter", "part r (along axis) of the sum of the replicas' tensors", along=True
    ),
    _collective("broadcast", "replica root's tensor, on every replica", root=True),
    _collective(
        "alltoall", "replica r's part j (along axis) goes to replica j's part r", along=True
    ),
    SEND,
    RECV,
    RECV_REDUCE,
)
