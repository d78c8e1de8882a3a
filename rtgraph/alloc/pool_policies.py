"""Sizing rules of the caching pools: rounding, which pool, segment size, when to split.

The mechanics of a caching pool (free lists, splitting, merging, stream-ordered reuse) live in
:mod:`rtgraph.alloc.caching_pool`; what differs between rtgraph's default pool and the
PyTorch-compatible one is only these few decisions, so each is a small frozen policy object.

:class:`PyTorchPolicy` follows ``c10/cuda/CUDACachingAllocator.cpp`` (constants named as
there): ``kMinBlockSize`` 512, ``kSmallSize`` 1 MiB, ``kSmallBuffer`` 2 MiB, ``kLargeBuffer``
20 MiB, ``kMinLargeAlloc`` 10 MiB, ``kRoundLarge`` 2 MiB; ``get_allocation_size``,
``should_split`` and the oversize rules of ``get_free_block`` (``max_split_size``,
``max_non_split_rounding_size``). Rounding adds torch_npu's 32-byte pad first (``pad=0``
gives upstream CUDA PyTorch); ``roundup_power2_divisions`` and expandable segments are not
modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from rtgraph.alloc.base import round_up
from rtgraph.alloc.records import MiB, PoolName

K_MIN_BLOCK_SIZE = 512  # all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1 * MiB  # largest "small" allocation
K_SMALL_BUFFER = 2 * MiB  # "small" allocations are packed in 2 MiB segments
K_LARGE_BUFFER = 20 * MiB  # "large" allocations may be packed in 20 MiB segments
K_MIN_LARGE_ALLOC = 10 * MiB  # allocations between 1 and 10 MiB may use kLargeBuffer
K_ROUND_LARGE = 2 * MiB  # round up large allocations to 2 MiB


@dataclass(frozen=True)
class PoolPolicy:
    """rtgraph's caching pool: one pool, fixed-size segments, split whenever a block is left.

    A request is padded by ``pad`` bytes and rounded up to ``min_block`` (torch_npu's rule:
    ``size + 32`` up to 512). Requests up to ``segment_size`` share segments of that size;
    a larger one gets its own segment rounded up to ``page`` bytes.
    """

    segment_size: int = 2 * MiB
    pad: int = 32
    min_block: int = K_MIN_BLOCK_SIZE
    page: int = 2 * MiB
    max_split_size: int | None = None  # no oversize rules in this pool

    def round(self, size: int) -> int:
        return max(self.min_block, round_up(size + self.pad, self.min_block))

    def pool_of(self, rounded: int) -> PoolName:
        return "large_pool"

    def segment_size_for(self, rounded: int) -> int:
        if rounded <= self.segment_size:
            return self.segment_size
        return round_up(rounded, self.page)

    def should_split(self, block_size: int, rounded: int, pool: PoolName) -> bool:
        return block_size - rounded >= self.min_block

    def accepts(self, block_size: int, rounded: int) -> bool:
        return True


@dataclass(frozen=True)
class PyTorchPolicy:
    """PyTorch's caching allocator: small and large pools, 2/20 MiB segments, split limits.

    ``max_split_size`` (``PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb``; None = unlimited):
    blocks of at least this size are never split and are not given to smaller requests; a
    request of at least this size takes a cached block only if it wastes less than
    ``max_non_split_rounding`` bytes.
    """

    pad: int = 32
    max_split_size: int | None = None
    max_non_split_rounding: int = K_LARGE_BUFFER
    min_block: int = K_MIN_BLOCK_SIZE

    def round(self, size: int) -> int:
        return max(self.min_block, round_up(size + self.pad, self.min_block))

    def pool_of(self, rounded: int) -> PoolName:
        return "small_pool" if rounded <= K_SMALL_SIZE else "large_pool"

    def segment_size_for(self, rounded: int) -> int:
        if rounded <= K_SMALL_SIZE:
            return K_SMALL_BUFFER
        if rounded < K_MIN_LARGE_ALLOC:
            return K_LARGE_BUFFER
        return round_up(rounded, K_ROUND_LARGE)

    def should_split(self, block_size: int, rounded: int, pool: PoolName) -> bool:
        remaining = block_size - rounded
        if pool == "small_pool":
            return remaining >= self.min_block
        return self._below_split_limit(rounded) and remaining > K_SMALL_SIZE

    def accepts(self, block_size: int, rounded: int) -> bool:
        if self.max_split_size is None:
            return True
        if rounded < self.max_split_size:
            return block_size < self.max_split_size
        return block_size < rounded + self.max_non_split_rounding

    def _below_split_limit(self, rounded: int) -> bool:
        return self.max_split_size is None or rounded < self.max_split_size
