"""The host link as the optimizer's cost model sees it: how long a copy takes, and when an
output is worth sending back in parts.

A copy pays a fixed cost (the DMA launch and the link's latency) plus its bytes over the link's
bandwidth, one copy at a time per direction. Sending an output's row parts as each is computed
hides all but the last part's transfer behind compute and adds a fixed cost per extra part: it
pays when a part's transfer takes longer than that fixed cost (:func:`sends_in_parts`).
:mod:`.tile_and_pipeline` counts the sends when it chooses K for a chain ending in an output,
and :mod:`.stream_host_copies` places them, so both use this one rule.
"""

from __future__ import annotations

from typing import Literal

from rtgraph.device.spec import DeviceSpec
from rtgraph.timing.costmodel import estimate_us


def copy_us(
    nbytes: int,
    dtype: str,
    spec: DeviceSpec,
    kind: Literal["h2d", "d2h"],
    pinned: bool = True,
) -> float:
    """One host copy of ``nbytes``: fixed cost plus transfer."""
    return estimate_us("dma", dtype, 0, nbytes, 1, spec, kind=kind, pinned=pinned)


def sends_in_parts(part_bytes: int, dtype: str, spec: DeviceSpec) -> bool:
    """Whether an output whose smallest part holds ``part_bytes`` goes back part by part."""
    fixed = copy_us(0, dtype, spec, "d2h")
    return copy_us(part_bytes, dtype, spec, "d2h") - fixed > fixed
