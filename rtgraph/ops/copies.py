"""DMA ops: ``copy``, a device-to-device copy on the copy engines."""

from __future__ import annotations

import numpy as np

from rtgraph.ops.registry import OpDef
from rtgraph.ops.rules import moves_only

COPY = OpDef(
    name="copy",
    unit="dma",
    min_args=1,
    max_args=1,
    infer=lambda types, attrs: types[0],
    cost=moves_only,
    kernel=lambda a, attrs: np.array(a[0], copy=True),
    doc="device-to-device copy",
)

#: This family's ops, in the order the language spec lists them.
OPS: tuple[OpDef, ...] = (COPY,)
