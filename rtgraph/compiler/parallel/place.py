"""Placement: a program whose ops name their devices (``device[i] { … }``) becomes one program
per device, with a transfer wherever a value crosses from one device to another.

Each op runs on the rank its ``device`` says (ops outside any block on rank 0). A value made on
rank a and read on rank b ≠ a is sent once per reading rank: the ``send`` goes into a's program
and the ``recv`` into b's at the place of b's first read, so each device's program keeps the
order the whole program gives its ops — and since a send does not wait for its receiver
(docs/emulator.md, "Many devices"), no placement of a program deadlocks. Host inputs, params
and consts are copied to (resident on) every rank that reads them; an output stays with the rank
that makes it (an input given back as an output, with rank 0).

Ordering across devices comes only from these transfers: a rank's streams, events and barriers
are its own, as on real devices. Explicit streams and host-side control (record, wait, sync,
callbacks, placed host copies) are a single device's: a program that uses them and places ops
on a second device is refused, with the place it does so.
"""

from __future__ import annotations

from rtgraph.compiler.parallel.transfers import Tags, device_program, recv_node, send_node
from rtgraph.errors import CheckError
from rtgraph.ir.graph import Node, OpNode, Program, Tensor


def placed_ranks(program: Program) -> int:
    """How many devices ``program``'s placement uses: one more than its highest rank (1 when
    it places nothing)."""
    return 1 + max((n.device or 0 for n in program.nodes if isinstance(n, OpNode)), default=0)


def place(
    program: Program, devices: int, cluster: str = "", tags: Tags | None = None
) -> list[Program]:
    """One program per rank ``0..devices-1`` (see the module docstring)."""
    _check(program, devices, cluster)
    tags = tags or Tags()
    nodes: list[list[Node]] = [[] for _ in range(devices)]
    made: list[dict[str, Tensor]] = [{} for _ in range(devices)]
    home: dict[str, int] = {}  # value → the rank that makes it
    present: list[set[str]] = [set() for _ in range(devices)]
    for node in program.nodes:
        if not isinstance(node, OpNode):
            nodes[0].append(node)
            continue
        rank = node.device or 0
        for name in dict.fromkeys((*node.inputs, *node.after)):
            src = home.get(name)
            if src is None or src == rank or name in present[rank]:
                continue
            tag = tags.next()
            send, token = send_node(name, rank, tag, src, node.span)
            nodes[src].append(send)
            made[src][token.name] = token
            recv, value = recv_node(program.tensors[name], src, tag, rank)
            nodes[rank].append(recv)
            made[rank][value.name] = value
            present[rank].add(name)
        nodes[rank].append(node)
        home[node.output] = rank
        present[rank].add(node.output)
    outputs: list[list[str]] = [[] for _ in range(devices)]
    for name in program.outputs:
        outputs[home.get(name, 0)].append(name)
    return [device_program(program, r, nodes[r], made[r], outputs[r]) for r in range(devices)]


def _check(program: Program, devices: int, cluster: str) -> None:
    where = f"cluster '{cluster}'" if cluster else "the cluster"
    for node in program.nodes:
        if isinstance(node, OpNode) and node.device is not None and node.device >= devices:
            raise CheckError(
                f"device[{node.device}]: {where} has {devices} device"
                f"{'s' if devices != 1 else ''} (ranks 0 to {devices - 1})",
                node.span,
                hint="use a rank below the cluster's device count, or a larger cluster",
            )
    if placed_ranks(program) < 2:
        return
    single = next(
        (n for n in program.nodes if not isinstance(n, OpNode) or n.stream is not None), None
    )
    if single is not None:
        raise CheckError(
            "explicit streams, events, syncs, callbacks and placed host copies belong to one "
            "device; this program also places ops on other devices",
            getattr(single, "span", None),
            hint="let the compiler choose the streams of a program split over devices",
        )
