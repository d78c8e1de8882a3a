"""The synthetic ``kernel`` op: a task with a given duration and address footprint and no
numerics, for modelling work the language has no op for (its unit is an attribute)."""

from __future__ import annotations

import math

from rtgraph.dtypes import TensorType
from rtgraph.ops.registry import REQUIRED, AttrSpec, Cost, OpDef, OpError
from rtgraph.ops.rules import Attrs, Types, at_least


def _synthetic_infer(types: Types, attrs: Attrs) -> TensorType:
    us = attrs["us"]
    if not (math.isfinite(us) and us >= 0):
        raise OpError(
            f"kernel: us must be a non-negative duration in microseconds, got {us}",
            attr="us",
            kind="attr",
        )
    at_least("kernel", "block_dim", attrs["block_dim"], 1)
    return TensorType((), "i32")


def _synthetic_cost(types: Types, out: TensorType, attrs: Attrs) -> Cost:
    """None: the task's duration is its ``us`` attribute."""
    return Cost(0, 0, 0)


KERNEL = OpDef(
    name="kernel",
    unit="synthetic",
    min_args=0,
    max_args=0,
    infer=_synthetic_infer,
    cost=_synthetic_cost,
    kernel=None,
    attrs={
        "unit": AttrSpec("unit", REQUIRED, doc="cube, vector or dma"),
        "us": AttrSpec("float", REQUIRED, doc="duration in microseconds, at least 0"),
        "reads": AttrSpec("names", (), doc="tensors or buffers the task reads"),
        "writes": AttrSpec("names", (), doc="tensors or buffers the task writes"),
        "block_dim": AttrSpec("int", 1, doc="cores of its unit the task occupies"),
    },
    doc="a task with a given duration and address footprint and no numerics; its result "
    "is a token usable in after=",
)

#: This family's ops, in the order the language spec lists them.
OPS: tuple[OpDef, ...] = (KERNEL,)
