"""The checked program: the IR the front end hands to the back end and the interpreter.

The front end resolves names, inlines functions, unrolls loops and infers every tensor's type,
so the IR is flat and small enough to print: a table of tensors and a list of nodes in program
order. Every tensor has a unique name (inlined and unrolled names are qualified, e.g.
``ffn.1/h``), keeps the name the user wrote for messages, and the span where it was bound.

Node kinds:

* :class:`OpNode` — one op application; produces exactly one tensor (a synthetic ``kernel``
  produces a *token*, a zero-size value usable only in ``after=``).
* :class:`RecordNode`, :class:`WaitNode`, :class:`BarrierNode` — explicit stream control,
  only inside ``on s { }`` blocks.
* :class:`SyncNode` — the host blocks on an event, a stream, or the whole device.
* :class:`CallbackNode` — a host callback after the task producing a tensor completes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from rtgraph.dtypes import TensorType
from rtgraph.errors import Source, Span
from rtgraph.ir.weights import Derive

if TYPE_CHECKING:
    pass

Unit = Literal["cube", "vector", "dma"]
UNITS: tuple[Unit, ...] = ("cube", "vector", "dma")

TensorKind = Literal["input", "param", "const", "value", "buffer", "token"]
AllocHint = Literal["auto", "direct", "cached"]


#: A graph replay of a program (see :attr:`Program.graph_replays`).
Replay = tuple[str, int, frozenset[str], Span | None]


@dataclass(frozen=True)
class Tensor:
    """A named value of the program.

    ``kind`` says where it comes from: a host ``input``, a ``param`` (weights, resident on the
    device), a ``const`` scalar (``value`` holds it), an op's result (``value``), a raw
    ``buffer`` (``address`` fixed when the program gave one; type ``i8[bytes]``), or the
    ``token`` of a synthetic kernel. ``pinned`` is False for an ``input`` declared
    ``@pageable`` (its host copy is then synchronous). A ``param`` with ``derive`` is made at
    load time from the data of the source program's param ``derive.source``
    (:mod:`rtgraph.ir.weights`: the precision pass's converted and quantized weights).
    ``precision`` is the precision the program asks its producing op to compute in
    (``h = x @ w @precision(f32)``: ``f32``, ``f16``, ``bf16`` or ``int8``); the precision
    pass honours it whatever ``--precision`` says. A ``nonnegative`` param is declared
    ``@nonnegative`` or passed as it is to an operand its op needs at or above zero (batchnorm's
    variance; the op registry's ``nonnegative_args``): values generated for it from a seed are
    ``|x|``.
    """

    name: str
    type: TensorType
    kind: TensorKind
    span: Span | None = None
    display: str = ""
    alloc: AllocHint = "auto"
    value: float | None = None
    address: int | None = None
    pinned: bool = True
    derive: Derive | None = None
    precision: str | None = None
    nonnegative: bool = False

    @property
    def label(self) -> str:
        """The name as the user wrote it."""
        return self.display or self.name


@dataclass(frozen=True)
class OpNode:
    """``output = op(*inputs, **attrs)``.

    ``stream`` is the explicit stream of an enclosing ``on`` block (None: the compiler
    chooses). ``after`` names tokens/tensors whose producers must finish first with no data
    flowing (``kernel(..., after=[t1])``). For a synthetic ``kernel`` the attrs hold ``unit``,
    ``us``, ``reads`` and ``writes`` (tensor or buffer names), and optionally ``block_dim``.
    ``device`` is the rank of an enclosing ``device[i]`` block (None: not placed — device 0 of
    a cluster, the one device otherwise).
    """

    op: str
    inputs: tuple[str, ...]
    output: str
    attrs: Mapping[str, Any]
    span: Span | None = None
    stream: str | None = None
    after: tuple[str, ...] = ()
    device: int | None = None


@dataclass(frozen=True)
class RecordNode:
    event: str
    stream: str
    span: Span | None = None


@dataclass(frozen=True)
class WaitNode:
    event: str
    stream: str
    span: Span | None = None


@dataclass(frozen=True)
class BarrierNode:
    stream: str
    span: Span | None = None


@dataclass(frozen=True)
class SyncNode:
    """The host blocks: on an event, on a stream, or (``target`` None) on the device."""

    kind: Literal["event", "stream", "device"]
    target: str | None = None
    span: Span | None = None


@dataclass(frozen=True)
class CallbackNode:
    """Host callback ``name`` that runs once the task producing ``after`` has completed."""

    name: str
    after: str
    span: Span | None = None
    blocking: bool = False


@dataclass(frozen=True)
class HostCopyNode:
    """A host copy the program placed itself, inside ``on stream { }``.

    ``h2d``: ``to_device(x)`` copies host input ``tensor`` to the device here (instead of
    before its first use); ``d2h``: ``to_host(y)`` copies output ``tensor`` back here (instead
    of right after its producer). Lowering makes the copy task at this point, on ``stream``
    (the runtime's ``aclrtMemcpyAsync`` / ``cudaMemcpyAsync`` on a stream). The data is the
    same on both sides, so the reference interpreter skips the node.

    A copy may move part of a tensor, so that work on the first rows starts while the rest is
    still crossing the link: ``rows = (a, b)`` on an ``h2d`` copies rows ``a … b-1`` (the
    leading axis) of host input ``tensor``; an input copied in parts has one node per part. A
    ``d2h`` of a tensor that is not itself an output but a part of one — an operand of the
    output's ``concat`` along axis 0 — copies that part into its rows of the host output as soon
    as the part is computed (lowering works out which rows). ``stream == ""`` lets the compiler
    choose the stream (copies the optimizer placed).
    """

    direction: Literal["h2d", "d2h"]
    tensor: str
    stream: str
    span: Span | None = None
    rows: tuple[int, int] | None = None


Node = OpNode | RecordNode | WaitNode | BarrierNode | SyncNode | CallbackNode | HostCopyNode


@dataclass
class Program:
    """A checked .rtg program with all parameters bound."""

    name: str
    params: dict[str, int]
    device: str | None
    tensors: dict[str, Tensor]
    nodes: list[Node]
    outputs: list[str]
    streams: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    stream_priorities: dict[str, int] = field(default_factory=dict)
    source: Source | None = None
    #: each dynamic parameter's gears (``B: dyn {1, 2, 4}``; docs/dynamic-shapes.md)
    gears: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: the ends of each dynamic parameter declared with a range (``B: dyn 1..64``), whose
    #: gears are :func:`rtgraph.frontend.gears.range_gears`; a run between them is padded
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: on a ranged gear's program: the axes of each host tensor that a run padded to the gear
    #: pads — the compile records every value's real extents as functions of them
    #: (:mod:`rtgraph.compiler.real_dims`)
    padded: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: each ``replay step N`` unrolled into ``nodes``: (graph, replay index, the tensors its
    #: ops made, the statement's span) — :mod:`rtgraph.compiler.replays` marks its launches
    graph_replays: tuple[Replay, ...] = ()

    # --- views ---------------------------------------------------------------------------
    def op_nodes(self) -> list[OpNode]:
        return [n for n in self.nodes if isinstance(n, OpNode)]

    def inputs(self) -> list[Tensor]:
        return [t for t in self.tensors.values() if t.kind == "input"]

    def params_(self) -> list[Tensor]:
        return [t for t in self.tensors.values() if t.kind == "param"]

    @property
    def has_explicit_streams(self) -> bool:
        return bool(self.streams)
