"""Ops: the registry (what an op is) and the catalog (every op of the language)."""

from rtgraph.ops.registry import (
    REQUIRED,
    AttrSpec,
    Cost,
    OpDef,
    OpError,
    all_ops,
    lookup,
    run_kernel,
)

__all__ = ["REQUIRED", "AttrSpec", "Cost", "OpDef", "OpError", "all_ops", "lookup", "run_kernel"]
