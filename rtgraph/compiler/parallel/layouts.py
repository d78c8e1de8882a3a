"""How the host's tensors spread over a cluster's ranks, and back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rtgraph.errors import CheckError
from rtgraph.ir.graph import Tensor

Layout = Literal["rows", "whole"]


@dataclass(frozen=True)
class HostLayout:
    """How a host tensor is spread over the ranks: cut into ``blocks`` blocks (``rows``:
    block k is ``[k·n/blocks, (k+1)·n/blocks)`` of ``axis``, 0 but for a param tensor
    parallelism cut by columns) or ``whole`` (one block, all of it). Each part ``(rank, name,
    block)`` says which rank holds which block under which name in its program; an input's
    block may go to several ranks, an output is gathered from its parts (each block's first
    part, blocks joined in order)."""

    layout: Layout
    blocks: int
    parts: tuple[tuple[int, str, int], ...]
    axis: int = 0

    @staticmethod
    def of(name: str, layout: Layout, ranks: range | tuple[int, ...]) -> HostLayout:
        """``name`` under its own name on each of ``ranks``: rank r holding block r of
        ``len(ranks)`` (``rows``), or all of it (``whole``)."""
        if layout == "rows":
            return HostLayout("rows", len(ranks), tuple((r, name, k) for k, r in enumerate(ranks)))
        return HostLayout("whole", 1, tuple((r, name, 0) for r in ranks))


def layout_of(full: Tensor, part: Tensor, n: int) -> Layout:
    a, b = full.type.shape, part.type.shape
    if a == b:
        return "whole"
    if len(a) == len(b) and a[1:] == b[1:] and a and a[0] == n * b[0]:
        return "rows"
    raise CheckError(
        f"'{full.label}' is {full.type} for the whole batch but {part.type} in a replica: "
        f"data parallelism cuts only the first dimension, into {n} equal blocks",
        full.span,
        hint=f"make the batch the first dimension, and a multiple of {n}",
    )
