"""Cluster specs: devices joined by links, as data.

A cluster is a TOML file (shipped ones in ``rtgraph/cluster/specs/``) naming a device spec, how
many of it there are, how they are grouped into nodes and the links between them — HCCS within a
node, PCIe to the host, an optional network between nodes. This module holds the typed form the
compiler (ranks, routes, the ``link`` unit its communication tasks run on) and the emulator
(link bandwidths and latencies, one resource per link direction) read; :mod:`.load` reads the
TOML and docs/cluster.md documents the keys.

All times are microseconds, sizes bytes, rates bytes per second.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Literal

from rtgraph.device.spec import DeviceSpec, UnitSpec

#: The unit every communication task (send, recv, a collective's step) runs on. A cluster adds
#: it to its device spec: ``comm_queues`` cores (transfers a device keeps in flight at once).
LINK_UNIT = "link"

LinkKind = Literal["hccs", "pcie", "network"]


@dataclass(frozen=True)
class LinkSpec:
    """One physical link between two endpoints, full duplex: each direction is its own resource
    of ``bandwidth`` bytes/s, and a transfer's first byte arrives ``latency_us`` after it starts.

    Endpoints are ``d<rank>`` (a device), ``host<node>`` (a node's host) or ``switch<node>`` (a
    node's network switch).
    """

    name: str
    kind: LinkKind
    ends: tuple[str, str]
    bandwidth: float
    latency_us: float


@dataclass(frozen=True)
class Hop:
    """One link crossed in one direction: ``forward`` is ``ends[0] → ends[1]``."""

    link: int
    forward: bool


@dataclass(frozen=True)
class ClusterSpec:
    """``devices`` devices of one ``device`` spec, ``devices_per_node`` to a node, and the links.

    ``routes[(src, dst)]`` is the path a transfer from rank ``src`` to rank ``dst`` takes (the
    hops in order: one HCCS link within an all-to-all node, two NIC links between nodes; built
    by :mod:`.load`). ``comm_queues`` and ``comm_launch_us`` describe the ``link`` unit each
    device gains (:meth:`device_spec`).
    """

    name: str
    description: str
    device: DeviceSpec
    devices: int
    devices_per_node: int
    links: tuple[LinkSpec, ...]
    routes: Mapping[tuple[int, int], tuple[Hop, ...]]
    comm_queues: int = 8
    comm_launch_us: float = 1.0
    sources: tuple[str, ...] = ()
    source: str = ""

    @property
    def nodes(self) -> int:
        return -(-self.devices // self.devices_per_node)

    def node_of(self, rank: int) -> int:
        """The node rank ``rank`` is in (ranks fill nodes in order)."""
        return rank // self.devices_per_node

    def route(self, src: int, dst: int) -> tuple[Hop, ...]:
        """The hops from rank ``src`` to rank ``dst`` (``src != dst``)."""
        return self.routes[(src, dst)]

    def latency_us(self, src: int, dst: int) -> float:
        """α of a transfer ``src → dst``: the sum of its hops' latencies."""
        return sum(self.links[h.link].latency_us for h in self.route(src, dst))

    def bandwidth(self, src: int, dst: int) -> float:
        """B of a transfer ``src → dst`` alone on its path: its slowest hop's bandwidth."""
        return min(self.links[h.link].bandwidth for h in self.route(src, dst))

    @cached_property
    def device_spec(self) -> DeviceSpec:
        """The device spec each rank compiles and runs against: the named device's, plus the
        ``link`` unit (``comm_queues`` cores, ``comm_launch_us`` launch, no flops)."""
        units = dict(self.device.units)
        units[LINK_UNIT] = UnitSpec(
            kind=LINK_UNIT,
            cores=self.comm_queues,
            launch_us=self.comm_launch_us,
            # for the compiler's estimates only: the fastest link a transfer may have alone
            bandwidth=max((link.bandwidth for link in self.links), default=0.0),
        )
        return replace(self.device, units=units)
