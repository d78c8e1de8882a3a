"""Clusters: many devices of one spec joined by links (:mod:`.spec`, read from TOML by
:mod:`.load`), and the collective algorithms that move data between them (:mod:`.collectives`).

The shipped clusters are in ``specs/``; docs/cluster.md documents every key and algorithm.
"""

from rtgraph.cluster.collectives import (
    ALGORITHMS,
    KINDS,
    CollectiveError,
    CollectivePlan,
    Transfer,
    analytic_us,
    default_algorithm,
    plan,
)
from rtgraph.cluster.load import (
    MAX_CLUSTER_BYTES,
    MAX_DEVICES,
    list_clusters,
    load_cluster,
    parse_cluster,
    shipped_cluster_names,
)
from rtgraph.cluster.spec import LINK_UNIT, ClusterSpec, Hop, LinkSpec

__all__ = [
    "ALGORITHMS",
    "KINDS",
    "LINK_UNIT",
    "MAX_CLUSTER_BYTES",
    "MAX_DEVICES",
    "ClusterSpec",
    "CollectiveError",
    "CollectivePlan",
    "Hop",
    "LinkSpec",
    "Transfer",
    "analytic_us",
    "default_algorithm",
    "list_clusters",
    "load_cluster",
    "parse_cluster",
    "plan",
    "shipped_cluster_names",
]
