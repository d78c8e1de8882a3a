"""The cluster-spec loader: find a cluster by name or path, check it, compute its routes.

A cluster is a small TOML file (shipped ones in ``rtgraph/cluster/specs/``; every key is in
docs/cluster.md)::

    [cluster]
    name = "toy"
    device = "toy"            # a device spec: a name, or a .toml file beside this one
    devices = 8
    devices_per_node = 8

    [links.hccs]              # within a node
    topology = "all-to-all"
    bandwidth = 1e9           # B/s, each direction
    latency_us = 1.0

It is read the way device specs are (:mod:`rtgraph.device.document`: the same TOML reading
and located errors), checked strictly — unknown, missing or mistyped keys and impossible values
are :class:`~rtgraph.errors.ClusterSpecError` pointing at the key — and within limits checked
before any work (:data:`MAX_CLUSTER_BYTES`, :data:`MAX_DEVICES`). The links and the route table
are computed here, once:

* **HCCS**, within a node: ``all-to-all`` is one link per pair of the node's devices, a route
  its one hop; ``ring`` links each device to the next, a route going the shorter way round.
* **PCIe**, device ↔ its node's host (``host<node>``), one link per device; from the device
  spec's host link unless ``[links.pcie]`` says otherwise. No route uses it yet.
* **network**, between nodes: one NIC link per device to its node's switch (``switch<node>``);
  the switches are joined by a fabric that is not modelled (no link, no contention). A route
  from a device to one on another node is two hops: its NIC up, the other device's NIC down, so
  its α is twice the NIC's ``latency_us``. Needed when there is more than one node.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from rtgraph.cluster.spec import ClusterSpec, Hop, LinkSpec
from rtgraph.device import (
    SEARCH_PATH_VARIABLE,
    device_name_problem,
    load_device,
    load_named_device,
)
from rtgraph.device.document import Doc, parse_toml, read_capped_toml
from rtgraph.device.schema import (
    DEVICE_KEYS,
    NAME,
    NONNEG,
    POSITIVE,
    POSITIVE_INT,
    TEXT,
    Checker,
    choice,
    optional,
)
from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import ClusterSpecError, DeviceSpecError, did_you_mean

#: The package whose ``*.toml`` files are the shipped clusters.
PACKAGE = "rtgraph.cluster.specs"
#: The largest cluster file rtgraph reads, in bytes (checked before reading).
MAX_CLUSTER_BYTES = 64 * 1024
#: The most devices a cluster may have (checked before any link or route is made).
MAX_DEVICES = 1024
#: How the devices of one node are joined by HCCS.
TOPOLOGIES = ("all-to-all", "ring")

CLUSTER_KEYS = {
    "name": NAME,
    "description": TEXT,
    "sources": DEVICE_KEYS["sources"],
    "device": NAME,
    "devices": POSITIVE_INT,
    "devices_per_node": optional(POSITIVE_INT),
    "comm_queues": optional(POSITIVE_INT),
    "comm_launch_us": optional(NONNEG),
}
LINK_KEYS = {"bandwidth": POSITIVE, "latency_us": NONNEG}
HCCS_KEYS = {"topology": choice(*TOPOLOGIES), **LINK_KEYS}
LINKS_KEYS = {"hccs": HCCS_KEYS, "pcie": LINK_KEYS, "network": LINK_KEYS}
#: The tables of a cluster file and the keys each may hold.
SCHEMA: dict[str, Mapping[str, Any]] = {"cluster": CLUSTER_KEYS, "links": LINKS_KEYS}


# --- finding a cluster ----------------------------------------------------------------------


def load_cluster(name_or_path: str | os.PathLike[str]) -> ClusterSpec:
    """The cluster a shipped name or the path of a ``.toml`` file names, checked, with routes."""
    ref = os.fspath(name_or_path)
    if ref in _shipped():
        text = resources.files(PACKAGE).joinpath(f"{ref}.toml").read_text(encoding="utf-8")
        return _build(Doc(f"rtgraph/cluster/specs/{ref}.toml", text, f"shipped:{ref}", None))
    if ref.endswith(".toml") or "/" in ref or os.sep in ref:
        return _build(_file_doc(Path(ref)))
    names = shipped_cluster_names()
    shown = ref if len(ref) <= 64 else f"{ref[:61]}..."
    raise ClusterSpecError(
        f"unknown cluster '{shown}' (shipped: {', '.join(names)})",
        hint=(did_you_mean(ref, names) if len(ref) <= 64 else None)
        or "for your own cluster, pass the path of its .toml file",
    )


def parse_cluster(text: str, label: str = "<string>") -> ClusterSpec:
    """A cluster from TOML text (a device ``.toml`` path is relative to the working directory)."""
    return _build(Doc(label, text, f"text:{label}", Path.cwd()))


def list_clusters() -> list[ClusterSpec]:
    """Every shipped cluster, loaded and checked, in name order."""
    return [load_cluster(name) for name in shipped_cluster_names()]


def shipped_cluster_names() -> list[str]:
    """The names of the clusters shipped with rtgraph, sorted."""
    return list(_shipped())


@cache
def _shipped() -> tuple[str, ...]:
    entries = resources.files(PACKAGE).iterdir()
    return tuple(sorted(e.name[: -len(".toml")] for e in entries if e.name.endswith(".toml")))


def _file_doc(path: Path) -> Doc:
    """A cluster file's document, read only if it is a regular ``.toml`` file within the cap."""
    if path.suffix != ".toml":
        raise ClusterSpecError(
            f"'{path}' is not a cluster spec: cluster files end in .toml",
            hint=f"shipped clusters: {', '.join(shipped_cluster_names())}",
        )
    hint = f"shipped clusters: {', '.join(shipped_cluster_names())}"
    return read_capped_toml(path, "cluster spec", MAX_CLUSTER_BYTES, _refuse, hint)


def _refuse(message: str, hint: str | None = None) -> ClusterSpecError:
    return ClusterSpecError(message, hint=hint)


# --- checking -------------------------------------------------------------------------------

#: The line every cluster file has; a file without it is refused before it is parsed (so a
#: ``.toml`` named by mistake is never quoted in an error).
_CLUSTER_LINE = re.compile(r"^[ \t]*\[[ \t]*cluster[ \t]*\]", re.MULTILINE)


def _build(doc: Doc) -> ClusterSpec:
    if len(doc.text.encode("utf-8")) > MAX_CLUSTER_BYTES:
        raise ClusterSpecError(f"{doc.label}: over {MAX_CLUSTER_BYTES:,} bytes")
    if not _CLUSTER_LINE.search(doc.text):
        raise ClusterSpecError(
            f"{doc.label}: not a cluster spec: it has no [cluster] table",
            hint="a cluster file starts with [cluster] (docs/cluster.md)",
        )
    try:
        return _check(doc, parse_toml(doc))
    except DeviceSpecError as err:
        if err.span is not None and err.span.source.text != doc.text:
            raise  # an error inside the device spec the cluster names: that file's own
        raise ClusterSpecError(err.message, err.span, err.hint) from None


def _check(doc: Doc, data: Mapping[str, Any]) -> ClusterSpec:
    check = Checker(doc, {})
    check.no_unknown(data, "", SCHEMA)
    head = check.keys(check.table(data, "cluster"), "cluster", CLUSTER_KEYS)
    n = head["devices"]
    if n > MAX_DEVICES:
        raise check.fail("cluster.devices", f"{n} devices; the limit is {MAX_DEVICES}")
    per_node = head.get("devices_per_node", n)
    if per_node > n:
        raise check.fail(
            "cluster.devices_per_node",
            f"{per_node} devices per node, but the cluster has {n}",
            hint="devices_per_node is at most devices",
        )
    if n % per_node:
        raise check.fail(
            "cluster.devices_per_node",
            f"{n} devices do not fill nodes of {per_node}",
            hint=f"devices must be a multiple of devices_per_node ({per_node})",
        )
    links_data = data.get("links", {})
    if not isinstance(links_data, dict):
        raise check.fail("links", "expected a table of links")
    check.no_unknown(links_data, "links", LINKS_KEYS)
    links = {
        kind: check.keys(check.table(links_data, f"links.{kind}"), f"links.{kind}", keys)
        for kind, keys in LINKS_KEYS.items()
        if kind in links_data
    }
    if per_node > 1 and "hccs" not in links:
        raise check.fail(
            "cluster.devices_per_node",
            f"nodes of {per_node} devices and no [links.hccs] to join them",
            hint="add [links.hccs] (topology, bandwidth, latency_us)",
        )
    if n > per_node and "network" not in links:
        raise check.fail(
            "cluster.devices_per_node",
            f"no route between nodes: {n // per_node} nodes of {per_node} and no [links.network]",
            hint="add [links.network] (bandwidth, latency_us), or put every device in one node",
        )
    device = _device(doc, check, head["device"])
    pcie = links.get(
        "pcie",
        {"bandwidth": device.host.link_bandwidth, "latency_us": device.host.link_latency_us},
    )
    made, routes = _links_and_routes(n, per_node, links.get("hccs"), pcie, links.get("network"))
    return ClusterSpec(
        name=head["name"],
        description=head["description"],
        device=device,
        devices=n,
        devices_per_node=per_node,
        links=made,
        routes=routes,
        comm_queues=head.get("comm_queues", 8),
        comm_launch_us=head.get("comm_launch_us", 1.0),
        sources=head.get("sources", ()),
        source=doc.label,
    )


_DEVICE_HINT = (
    f"name a device (shipped, or NAME.toml on {SEARCH_PATH_VARIABLE}) or a .toml file beside "
    "this cluster file"
)


def _device(doc: Doc, check: Checker, ref: str) -> DeviceSpec:
    """The device spec ``cluster.device`` names: a shipped or search-path name, or a ``.toml``
    file beside the cluster file (or below it; never absolute, never through ``..``)."""
    try:
        if not ref.endswith(".toml"):
            problem = device_name_problem(ref)
            if problem is not None:
                raise check.fail("cluster.device", problem[0], _DEVICE_HINT)
            return load_named_device(ref)
        path = Path(ref)
        if doc.folder is None or path.is_absolute() or ".." in path.parts:
            raise check.fail(
                "cluster.device",
                f"'{ref}' is outside this cluster file's folder",
                hint=_DEVICE_HINT,
            )
        return load_device(doc.folder / path)
    except DeviceSpecError as err:
        if err.span is not None:
            raise
        raise check.fail("cluster.device", err.message, err.hint) from None


# --- links and routes -----------------------------------------------------------------------

Link = Mapping[str, Any]


def _links_and_routes(
    n: int, per_node: int, hccs: Link | None, pcie: Link, network: Link | None
) -> tuple[tuple[LinkSpec, ...], dict[tuple[int, int], tuple[Hop, ...]]]:
    links: list[LinkSpec] = []
    routes: dict[tuple[int, int], tuple[Hop, ...]] = {}

    def add(name: str, kind: str, a: str, b: str, rates: Link) -> int:
        links.append(LinkSpec(name, kind, (a, b), rates["bandwidth"], rates["latency_us"]))  # type: ignore[arg-type]
        return len(links) - 1

    for node in range(n // per_node):
        members = range(node * per_node, (node + 1) * per_node)
        if hccs is None or per_node == 1:
            continue
        if hccs["topology"] == "all-to-all" or per_node == 2:  # a ring of two is one pair
            for i in members:
                for j in members:
                    if i < j:
                        k = add(f"hccs{i}-{j}", "hccs", f"d{i}", f"d{j}", hccs)
                        routes[(i, j)] = (Hop(k, True),)
                        routes[(j, i)] = (Hop(k, False),)
        else:
            routes.update(_ring_routes(list(members), hccs, add))
    for r in range(n):
        add(f"pcie{r}", "pcie", f"d{r}", f"host{r // per_node}", pcie)
    if network is not None and n > per_node:
        nic = [
            add(f"nic{r}", "network", f"d{r}", f"switch{r // per_node}", network) for r in range(n)
        ]
        up = [Hop(k, True) for k in nic]
        down = [Hop(k, False) for k in nic]
        for i in range(n):
            for j in range(n):
                if i // per_node != j // per_node:
                    routes[(i, j)] = (up[i], down[j])
    return tuple(links), routes


def _ring_routes(members: list[int], hccs: Link, add) -> dict[tuple[int, int], tuple[Hop, ...]]:
    """A ring of the node's m > 2 devices: link k joins members k and k + 1 (mod m); a route
    goes the shorter way round (forward on a tie)."""
    m = len(members)
    ring = [
        add(f"hccs{members[k]}-{members[(k + 1) % m]}", "hccs", f"d{members[k]}",
            f"d{members[(k + 1) % m]}", hccs)
        for k in range(m)
    ]  # fmt: skip
    routes = {}
    for a in range(m):
        for b in range(m):
            if a == b:
                continue
            ahead = (b - a) % m
            if ahead <= m - ahead:
                hops = tuple(Hop(ring[(a + s) % m], True) for s in range(ahead))
            else:
                hops = tuple(Hop(ring[(a - s - 1) % m], False) for s in range(m - ahead))
            routes[(members[a], members[b])] = hops
    return routes
