"""A cluster's links and mailbox: how ``send``/``recv``/``recv_reduce`` tasks move bytes.

Each device's hardware hands a task on the ``link`` unit to :class:`LinkLayer` when it issues
it (:class:`LinkTimer` stands in for its HBM timer) and is called back when the task completes.

* A **send** issued at t starts its transfer at ``t + launch``: its payload was read at issue
  (inputs at start, as every task reads them), the first byte arrives α =
  ``cluster.latency_us(src, dst)`` later, then the bytes flow over the route's hops. Each hop's
  direction is a resource; a transfer's rate is the minimum over its hops of the link's
  bandwidth over the transfers flowing on that direction, re-timed (the versioned-event trick of
  :mod:`rtgraph.timing.engine`) whenever a transfer joins or leaves one of its directions. A
  transfer counts on its directions from its first byte to its last. The send completes when
  its last byte has arrived (the message is delivered), whether or not its recv was issued.
* A **recv** issued at t completes at ``max(t + launch, delivery)`` and writes the payload then;
  a **recv_reduce** adds it into its operand (no extra time: the SDMA engines reduce on the fly).

A message is ``(src rank, dst rank, tag)``. A second send or recv of one message, a payload whose
size or dtype differs from the recv's output, are :class:`~rtgraph.errors.DeviceError`\\ s naming
the tasks; what is left unmatched at the end is for :mod:`.cluster` to report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

from rtgraph.cluster.spec import ClusterSpec
from rtgraph.dtypes import DTYPES
from rtgraph.emulator.hardware import Hardware
from rtgraph.emulator.results import union_length
from rtgraph.errors import DeviceError
from rtgraph.stream_program.program import StreamProgram, Task
from rtgraph.timing.engine import STATE, Engine
from rtgraph.timing.task_costs import HbmTimer

#: A link direction: (link index, forward).
Direction = tuple[int, bool]


@dataclass(frozen=True)
class Transfer:
    """One message's transfer: its first byte left at ``start`` (after the send's launch), its
    last arrived at ``end``; ``hops`` are the link directions it crossed, by name."""

    tag: Any
    src: int
    dst: int
    bytes: int
    start: float
    end: float
    hops: tuple[str, ...]
    send_task: int
    recv_task: int | None


@dataclass(frozen=True)
class LinkStats:
    """One link direction over a run: ``busy_us`` while at least one transfer's bytes flowed
    on it, the ``bytes`` it carried, and ``utilization`` = bytes / (bandwidth × makespan)."""

    direction: str
    link: str
    bandwidth: float
    busy_us: float
    bytes: int
    transfers: int
    utilization: float


@dataclass(eq=False)
class Message:
    """A message's two ends and its progress."""

    src: int
    dst: int
    tag: Any
    send: int | None = None  # task ids (on src, on dst)
    recv: int | None = None
    start: float | None = None  # the transfer's first byte left
    delivered: float | None = None
    recv_ready: bool = False  # the recv's launch is over; it waits for the delivery
    payload: Any = None


@dataclass(eq=False)
class _Flow:
    """A transfer's bytes in flight: left, rate now, last brought up to date, version."""

    message: Message
    hops: tuple[Direction, ...]
    remaining: float
    last: float
    rate: float = 0.0
    version: int = 0
    joined: float = 0.0
    hop_names: tuple[str, ...] = field(default=())


class LinkTimer:
    """A device's task timer in a cluster run: link tasks go to the link layer, the rest to the
    device's :class:`~rtgraph.timing.task_costs.HbmTimer` (the hardware calls ``begin`` for a
    task whose costs name a link, which a cluster's link tasks do)."""

    __slots__ = ("hbm", "layer", "rank", "unit")

    def __init__(self, hbm: HbmTimer, layer: LinkLayer, rank: int, unit: str) -> None:
        self.hbm = hbm
        self.layer = layer
        self.rank = rank
        self.unit = unit

    def begin(self, task: int) -> None:
        if self.hbm.costs.link[task] == self.unit:
            self.layer.issue(self.rank, task)
        else:
            self.hbm.begin(task)


class LinkLayer:
    """Every rank's transfers on the cluster's link directions, and the mailbox."""

    def __init__(
        self,
        engine: Engine,
        cluster: ClusterSpec,
        programs: Sequence[StreamProgram],
        hardware: Sequence[Hardware],
    ) -> None:
        self.engine = engine
        self.cluster = cluster
        self.programs = programs
        self.hardware = hardware
        self.messages: dict[tuple[int, int, Any], Message] = {}  # in first-seen order
        self.active: dict[Direction, list[_Flow]] = {}
        self.carried: dict[Direction, list[tuple[float, float, int]]] = {}  # (from, to, bytes)
        self.transfers: list[Transfer] = []

    # --- the hardware's side ---------------------------------------------------------------
    def issue(self, rank: int, task: int) -> None:
        """The hardware of ``rank`` issued link task ``task`` now."""
        t = self.programs[rank].tasks[task]
        hw = self.hardware[rank]
        ready = self.engine.now + hw.costs.launch[task]
        peer = t.attrs["peer"]
        if t.op == "send":
            msg = self._message(rank, peer, t, "send", task)
            if hw.numerics is not None:
                msg.payload = hw.numerics.payload(task)
            self.engine.at(ready, STATE, self._start, msg)
        else:
            msg = self._message(peer, rank, t, "recv", task)
            self.engine.at(ready, STATE, self._recv_ready, msg)

    def _message(self, src: int, dst: int, t: Task, end: str, task: int) -> Message:
        key = (src, dst, t.attrs["tag"])
        msg = self.messages.get(key)
        if msg is None:
            msg = self.messages[key] = Message(src, dst, t.attrs["tag"])
        rank = src if end == "send" else dst
        if getattr(msg, end) is not None:
            first = self.programs[rank].tasks[getattr(msg, end)]
            verb = "sent" if end == "send" else "received"
            raise DeviceError(
                f"message {_label(msg)} {verb} twice: by task {first.id} '{first.name}' and by "
                f"task {t.id} '{t.name}' on rank {rank}",
                span=t.span,
                hint="each (source, destination, tag) names one message: give every transfer "
                "its own tag",
            )
        setattr(msg, end, task)
        if msg.send is not None and msg.recv is not None:
            self._check_sizes(msg)
        return msg

    def _check_sizes(self, msg: Message) -> None:
        send = self.programs[msg.src].tasks[msg.send]  # type: ignore[index]
        recv = self.programs[msg.dst].tasks[msg.recv]  # type: ignore[index]
        sent, out = send.inputs[0], recv.output
        if out is None or prod(sent.shape) != prod(out.shape) or sent.dtype != out.dtype:
            got = "nothing" if out is None else f"{out.dtype}{list(out.shape)}"
            raise DeviceError(
                f"message {_label(msg)}: rank {msg.src}'s task {send.id} '{send.name}' sends "
                f"{sent.dtype}{list(sent.shape)} but rank {msg.dst}'s task {recv.id} "
                f"'{recv.name}' receives {got}",
                span=recv.span or send.span,
                hint="a send and its recv must agree on element count and dtype",
            )

    # --- a transfer ------------------------------------------------------------------------
    def _start(self, msg: Message) -> None:
        """The send's launch is over: the transfer starts; its first byte lands after α."""
        now = self.engine.now
        msg.start = now
        cluster = self.cluster
        send = self.programs[msg.src].tasks[msg.send]  # type: ignore[index]
        nbytes = send.bytes_read or _nbytes(send)
        route = cluster.route(msg.src, msg.dst)
        hops = tuple((h.link, h.forward) for h in route)
        names = tuple(_direction_name(cluster, d) for d in hops)
        flow = _Flow(msg, hops, float(nbytes), now, hop_names=names)
        self.engine.at(now + cluster.latency_us(msg.src, msg.dst), STATE, self._join, flow)

    def _join(self, flow: _Flow) -> None:
        now = self.engine.now
        flow.last = flow.joined = now
        for d in flow.hops:
            self.active.setdefault(d, []).append(flow)
        self._retime(flow.hops, now)

    def _retime(self, directions: tuple[Direction, ...], now: float) -> None:
        """Bring every flow on ``directions`` up to date and re-time its last byte."""
        seen: dict[int, _Flow] = {}
        for d in directions:
            for f in self.active.get(d, ()):
                seen.setdefault(id(f), f)
        links = self.cluster.links
        for f in seen.values():
            if f.rate:
                f.remaining = max(0.0, f.remaining - f.rate * (now - f.last) / 1e6)
            f.last = now
            f.rate = min(links[k].bandwidth / len(self.active[(k, fw)]) for k, fw in f.hops)
            f.version += 1
            done = now + f.remaining * 1e6 / f.rate if f.rate > 0 else now
            self.engine.at(done, STATE, self._bytes_done, (f, f.version))

    def _bytes_done(self, key: tuple[_Flow, int]) -> None:
        flow, version = key
        if flow.version != version:
            return  # re-timed since this event was scheduled
        now = self.engine.now
        flow.version += 1
        for d in flow.hops:
            self.active[d].remove(flow)
        self._retime(flow.hops, now)
        self._delivered(flow, now)

    def _delivered(self, flow: _Flow, now: float) -> None:
        msg = flow.message
        msg.delivered = now
        send = self.programs[msg.src].tasks[msg.send]  # type: ignore[index]
        nbytes = send.bytes_read or _nbytes(send)
        for d in flow.hops:
            self.carried.setdefault(d, []).append((flow.joined, now, nbytes))
        self.transfers.append(
            Transfer(
                msg.tag,
                msg.src,
                msg.dst,
                nbytes,
                msg.start,  # type: ignore[arg-type]
                now,
                flow.hop_names,
                msg.send,  # type: ignore[arg-type]
                msg.recv,
            )
        )
        self.hardware[msg.src]._finish(msg.send)  # type: ignore[arg-type]
        if msg.recv_ready:
            self._complete_recv(msg)

    # --- the receiving end -----------------------------------------------------------------
    def _recv_ready(self, msg: Message) -> None:
        """The recv's launch is over: it completes now if the message is in, else on arrival."""
        if msg.delivered is not None:
            self._complete_recv(msg)
        else:
            msg.recv_ready = True

    def _complete_recv(self, msg: Message) -> None:
        msg.recv_ready = False
        hw = self.hardware[msg.dst]
        if hw.numerics is not None:
            hw.numerics.deliver(msg.recv, msg.payload)  # type: ignore[arg-type]
        msg.payload = None
        hw._finish(msg.recv)  # type: ignore[arg-type]

    # --- after the run ---------------------------------------------------------------------
    def waiting(self) -> list[Message]:
        """Messages whose recv was issued and still waits for them, in first-seen order."""
        return [m for m in self.messages.values() if m.recv is not None and m.delivered is None]

    def unreceived(self) -> list[Message]:
        """Messages sent that no recv took."""
        return [m for m in self.messages.values() if m.send is not None and m.recv is None]

    def stats(self, makespan: float) -> list[LinkStats]:
        """Per link direction (links in spec order, forward first) that carried anything."""
        rows = []
        for k, link in enumerate(self.cluster.links):
            for forward in (True, False):
                carried = self.carried.get((k, forward))
                if not carried:
                    continue
                busy = union_length([a for a, _, _ in carried], [b for _, b, _ in carried])
                nbytes = sum(n for _, _, n in carried)
                cap = link.bandwidth * makespan / 1e6
                rows.append(
                    LinkStats(
                        _direction_name(self.cluster, (k, forward)),
                        link.name,
                        link.bandwidth,
                        busy,
                        nbytes,
                        len(carried),
                        nbytes / cap if cap > 0 else 0.0,
                    )
                )
        return rows


def _label(msg: Message) -> str:
    return f"rank {msg.src} → rank {msg.dst} tag {msg.tag!r}"


def _direction_name(cluster: ClusterSpec, d: Direction) -> str:
    link = cluster.links[d[0]]
    a, b = link.ends if d[1] else reversed(link.ends)
    return f"{link.name} {a}→{b}"


def _nbytes(task: Task) -> int:
    o = task.inputs[0]
    return prod(o.shape) * DTYPES[o.dtype].itemsize
