"""Cluster specs: the shipped ones load, each bad file is a located error, routes are right.

The routes are checked as paths: a route from rank s to rank d must walk link ends from ``d<s>``
to ``d<d>``, one hop after another, the only jump allowed being between two nodes' switches
(the fabric joining them is not modelled).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtgraph.cluster import (
    LINK_UNIT,
    MAX_CLUSTER_BYTES,
    ClusterSpec,
    list_clusters,
    load_cluster,
    parse_cluster,
    shipped_cluster_names,
)
from rtgraph.device import load_device
from rtgraph.errors import ClusterSpecError, DeviceSpecError

BASE = """\
[cluster]
name = "t"
description = "a test cluster"
device = "toy"
devices = 8
devices_per_node = 4

[links.hccs]
topology = "all-to-all"
bandwidth = 1e9
latency_us = 1.0

[links.network]
bandwidth = 2.5e8
latency_us = 2.5
"""


def walk(c: ClusterSpec, src: int, dst: int) -> list[str]:
    """The endpoints a route passes through; fails if its hops do not join up."""
    at = f"d{src}"
    path = [at]
    for hop in c.route(src, dst):
        a, b = c.links[hop.link].ends
        start, end = (a, b) if hop.forward else (b, a)
        if start != at:
            assert at.startswith("switch") and start.startswith("switch"), (at, start)
            path.append(start)
        path.append(end)
        at = end
    assert at == f"d{dst}"
    return path


# --- shipped clusters ------------------------------------------------------------------------


def test_shipped_clusters_load_and_are_listed():
    names = shipped_cluster_names()
    assert {"toy", "toy-2x4", "ascend-910b-x8"} <= set(names)
    assert [c.name for c in list_clusters()] == names
    for c in list_clusters():
        assert c.source.endswith(f"{c.name}.toml")
        assert c.sources, f"{c.name} names no sources"
        assert LINK_UNIT in c.device_spec.units
        assert c.device_spec.units[LINK_UNIT].cores == c.comm_queues
        assert set(c.routes) == {
            (s, d) for s in range(c.devices) for d in range(c.devices) if s != d
        }


def test_toy_is_round_numbers():
    c = load_cluster("toy")
    assert (c.devices, c.devices_per_node, c.nodes, c.comm_launch_us) == (8, 8, 1, 0.0)
    assert c.device.name == "toy"
    kinds = [link.kind for link in c.links]
    assert kinds.count("hccs") == 8 * 7 // 2 and kinds.count("pcie") == 8
    assert "network" not in kinds  # one node: no NIC links
    for s in range(8):
        for d in range(8):
            if s != d:
                assert len(c.route(s, d)) == 1
                assert c.latency_us(s, d) == 1.0 and c.bandwidth(s, d) == 1e9


def test_ascend_node_figures():
    c = load_cluster("ascend-910b-x8")
    assert c.device.name == "ascend-910b" and c.devices == 8 and c.nodes == 1
    assert c.bandwidth(0, 5) == 5.6e10  # 392 GB/s over 7 links
    pcie = [link for link in c.links if link.kind == "pcie"]
    assert len(pcie) == 8 and all(link.bandwidth == c.device.host.link_bandwidth for link in pcie)


def test_routes_between_nodes_cross_two_nics():
    c = load_cluster("toy-2x4")
    assert c.nodes == 2 and [c.node_of(r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert walk(c, 1, 6) == ["d1", "switch0", "switch1", "d6"]
    assert [c.links[h.link].name for h in c.route(1, 6)] == ["nic1", "nic6"]
    assert c.latency_us(1, 6) == 5.0 and c.bandwidth(1, 6) == 2.5e8
    assert walk(c, 5, 7) == ["d5", "d7"] and c.bandwidth(5, 7) == 1e9
    hosts = {c.links[k].ends[1] for k in range(len(c.links)) if c.links[k].kind == "pcie"}
    assert hosts == {"host0", "host1"}


@settings(max_examples=30, deadline=None)
@given(
    nodes=st.integers(1, 3),
    per_node=st.integers(1, 6),
    topology=st.sampled_from(["all-to-all", "ring"]),
)
def test_every_route_is_a_path_of_the_right_length(nodes, per_node, topology):
    text = BASE.replace("devices = 8", f"devices = {nodes * per_node}")
    text = text.replace("devices_per_node = 4", f"devices_per_node = {per_node}")
    c = parse_cluster(text.replace('"all-to-all"', f'"{topology}"'), "t.toml")
    for (s, d), hops in c.routes.items():
        walk(c, s, d)
        if c.node_of(s) != c.node_of(d):
            assert len(hops) == 2
        elif topology == "all-to-all":
            assert len(hops) == 1
        else:
            ahead = (d - s) % per_node
            assert len(hops) == min(ahead, per_node - ahead)


def test_pcie_defaults_to_the_device_host_link():
    c = parse_cluster(BASE, "t.toml")
    toy = load_device("toy")
    pcie = [link for link in c.links if link.kind == "pcie"]
    assert {(link.bandwidth, link.latency_us) for link in pcie} == {
        (toy.host.link_bandwidth, toy.host.link_latency_us)
    }


# --- located errors ---------------------------------------------------------------------------


BAD = {
    "unknown key": (("devices = 8", "devices = 8\ndevise = 3"), 6, "unknown key"),
    "unknown table": (("[links.hccs]", "[linkz]\n[links.hccs]"), 8, "unknown key"),
    "bad type": (("devices = 8", 'devices = "8"'), 5, "expected a positive integer"),
    "zero devices": (("devices = 8", "devices = 0"), 5, "expected a positive integer, got 0"),
    "too many devices": (("devices = 8", "devices = 2048"), 5, "the limit is 1024"),
    "not a multiple": (("devices = 8", "devices = 6"), 6, "do not fill nodes of 4"),
    "more per node": (("devices_per_node = 4", "devices_per_node = 16"), 6, "but the cluster"),
    "negative bandwidth": (("bandwidth = 1e9", "bandwidth = -1e9"), 10, "a positive number"),
    "negative latency": (("latency_us = 2.5", "latency_us = -1"), 15, "non-negative"),
    "unknown topology": (('"all-to-all"', '"torus"'), 9, "'all-to-all' or 'ring'"),
    "unknown device": (('"toy"', '"toyy"'), 4, "unknown device 'toyy'"),
    "device path": (('"toy"', '"/etc/hosts"'), 4, "is a path"),
    "device outside": (('"toy"', '"../x.toml"'), 4, "outside this cluster file's folder"),
    "no route": (("[links.network]", "[other]"), None, None),
    "missing key": (('description = "a test cluster"\n', ""), 1, "missing required key"),
    "invalid toml": (("devices = 8", "devices = = 8"), 5, "invalid TOML"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_mistake_is_located(case):
    (old, new), line, message = BAD[case]
    if case == "no route":  # drop the network table: two nodes and nothing between them
        text = BASE.split("[links.network]")[0]
        line, message = 6, "no route between nodes"
    else:
        assert old in BASE
        text = BASE.replace(old, new, 1)
    with pytest.raises(ClusterSpecError) as info:
        parse_cluster(text, "bad.toml")
    err = info.value
    assert message in err.message
    assert err.span is not None and err.span.file == "bad.toml" and err.span.line == line
    assert "Traceback" not in err.render()


def test_hint_suggests_a_known_key():
    with pytest.raises(ClusterSpecError) as info:
        parse_cluster(BASE.replace("devices = 8", "devices = 8\ndevise = 3"), "bad.toml")
    assert "device" in (info.value.hint or "")


def test_nodes_without_hccs_are_refused():
    hccs = '[links.hccs]\ntopology = "all-to-all"\nbandwidth = 1e9\nlatency_us = 1.0\n'
    assert hccs in BASE
    with pytest.raises(ClusterSpecError, match=r"no \[links\.hccs\] to join them") as info:
        parse_cluster(BASE.replace(hccs, ""), "bad.toml")
    assert info.value.span is not None and info.value.span.line == 6
    # a device a node needs no HCCS: every route is then two NICs
    c = parse_cluster(
        BASE.replace(hccs, "").replace("devices_per_node = 4", "devices_per_node = 1")
    )
    assert c.nodes == 8 and all(len(hops) == 2 for hops in c.routes.values())


def test_a_toml_that_is_not_a_cluster_is_not_quoted(tmp_path):
    secret = tmp_path / "secret.toml"
    secret.write_text('password = "hunter2" = oops\n')
    with pytest.raises(ClusterSpecError) as info:
        load_cluster(secret)
    assert "not a cluster spec" in info.value.message and "hunter2" not in info.value.render()


def test_file_errors(tmp_path):
    with pytest.raises(ClusterSpecError, match="did you mean 'toy'"):
        load_cluster("tyo")
    with pytest.raises(ClusterSpecError, match="no cluster spec file"):
        load_cluster(tmp_path / "missing.toml")
    with pytest.raises(ClusterSpecError, match=r"end in \.toml"):
        load_cluster(tmp_path / "x.json")
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(ClusterSpecError, match="not a regular file"):
        load_cluster(tmp_path / "dir.toml")
    big = tmp_path / "big.toml"
    big.write_text(BASE + "#" * MAX_CLUSTER_BYTES)
    with pytest.raises(ClusterSpecError, match="the limit is"):
        load_cluster(big)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"[cluster]\n\xff\xfe")
    with pytest.raises(ClusterSpecError, match="not UTF-8"):
        load_cluster(binary)


def test_a_device_file_beside_the_cluster(tmp_path):
    toy = resources.files("rtgraph.device.specs").joinpath("toy.toml").read_text()
    (tmp_path / "mine.toml").write_text(toy.replace('name = "toy"', 'name = "mine"'))
    path = Path(tmp_path / "c.toml")
    path.write_text(BASE.replace('"toy"', '"mine.toml"'))
    assert load_cluster(path).device.name == "mine"
    # a mistake inside the device file is that file's, located there
    (tmp_path / "mine.toml").write_text(toy.replace("cores = 1\n", "cores = 0\n", 1))
    with pytest.raises(DeviceSpecError) as info:
        load_cluster(path)
    assert not isinstance(info.value, ClusterSpecError)
    assert info.value.span is not None and info.value.span.file.endswith("mine.toml")
    (tmp_path / "mine.toml").unlink()
    with pytest.raises(ClusterSpecError, match="no device spec file") as missing:
        load_cluster(path)
    assert missing.value.span is not None and missing.value.span.line == 4
