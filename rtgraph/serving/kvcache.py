"""The KV cache in paged blocks (vLLM's PagedAttention layout), held in the device's memory
through the run-time allocator.

A sequence of n tokens holds ceil(n / block_tokens) blocks; blocks are taken when a sequence is
admitted or grows past a block boundary and given back when it finishes or is preempted. Every
block is one ``malloc`` of the block's bytes from rtgraph's caching pool (``rtgraph.alloc``,
built from the device's memory spec) and one ``free``, so the pool's figures — allocated and
reserved bytes, segments, the tail of each segment no block fits in — are the KV cache's.

The pool's size is ``--kv-blocks`` or, by default, what the device's memory holds beside the
largest step the model runs (its weights and activations): 90 % of the capacity less that
step's memory peak, as vLLM's ``gpu_memory_utilization`` sizes its pool. The allocator may
reserve that share of the device (its ``memory_fraction``); the blocks it can hand out are the
whole segments that share holds times the blocks a segment holds. Admission takes a waiting
sequence only while its blocks fit; when a running sequence needs a block and none is free,
the most recently admitted sequence is preempted (vLLM's two ways): by recompute (its blocks
freed, its prompt and the tokens it has made prefilled again when it is readmitted) or by swap
(its blocks copied to host memory over the host link and back when it is readmitted, the
copies charged to the device's time; host memory is not bounded).
"""

from __future__ import annotations

import numpy as np

from rtgraph.alloc import Allocator, from_memory_spec
from rtgraph.device.spec import MemorySpec
from rtgraph.serving.requests import ServingError

#: The fraction of device memory the weights, activations and KV pool may use together.
MEMORY_UTILIZATION = 0.9
BYTES_F16 = 2


class KVCache:
    """Paged KV blocks of ``block_tokens`` tokens, each a block-sized allocation of ``pool``;
    ``used`` counts the blocks live, ``total_blocks`` the blocks the pool can hold."""

    def __init__(
        self, total_blocks: int, block_tokens: int, bytes_per_block: int, pool: Allocator
    ) -> None:
        self.total_blocks = total_blocks
        self.block_tokens = block_tokens
        self.bytes_per_block = bytes_per_block
        self.pool = pool
        self.used = 0
        self._held: dict[int, list[int]] = {}  # sequence → its blocks' allocation handles
        self._count = np.zeros(0, dtype=np.int64)  # sequence → blocks it holds

    @classmethod
    def for_decoder(
        cls,
        layers: int,
        width: int,
        block_tokens: int,
        blocks: int | None,
        free_bytes: int,
        memory: MemorySpec,
    ) -> KVCache:
        """A pool for a decoder of ``layers`` layers of model width ``width`` (K and V, f16) in
        the device memory ``memory``: ``blocks`` blocks, or what ``free_bytes`` holds."""
        if block_tokens < 1:
            raise ServingError(
                f"--kv-block {block_tokens}: a block holds at least one token",
                hint="vLLM's default is 16",
            )
        per_block = 2 * layers * width * BYTES_F16 * block_tokens
        probe = from_memory_spec("pool", memory, record_history=False)
        rounded = probe.policy.round(per_block)
        segment = probe.policy.segment_size_for(rounded)
        per_segment = segment // rounded
        if blocks is None:
            budget = int(free_bytes * MEMORY_UTILIZATION) // segment * segment
        else:
            budget = -(-max(blocks, 0) // per_segment) * segment
        if budget > memory.capacity:
            raise ServingError(
                f"--kv-blocks {blocks}: {blocks} blocks of {per_block} bytes need {budget} bytes "
                f"of device memory, more than the device's {memory.capacity}",
                hint="lower --kv-blocks, or leave it out to size the pool from the memory",
            )
        total = budget // segment * per_segment if blocks is None else blocks
        pool = from_memory_spec(
            "pool", memory, memory_fraction=max(budget, 1) / memory.capacity, record_history=False
        )
        return cls(int(total), int(block_tokens), per_block, pool)

    def blocks(self, tokens: np.ndarray | int) -> np.ndarray:
        """Blocks that ``tokens`` tokens occupy (elementwise)."""
        return -(-np.asarray(tokens) // self.block_tokens)

    @property
    def free(self) -> int:
        return self.total_blocks - self.used

    def serve(self, sequences: int) -> None:
        """Get ready for sequences numbered 0 … ``sequences`` − 1."""
        self._count = np.zeros(sequences, dtype=np.int64)

    def hold(self, sequences: np.ndarray, tokens: np.ndarray) -> None:
        """Give each sequence the blocks its ``tokens`` tokens need (a malloc per new block).
        The caller has checked they are free."""
        need = self.blocks(tokens) - self._count[sequences]
        grow = np.flatnonzero(need > 0)
        if not len(grow):
            return
        for seq, k in zip(sequences[grow].tolist(), need[grow].tolist(), strict=True):
            self._take(seq, k)
        self._count[sequences[grow]] += need[grow]

    def hold_one(self, seq: int, tokens: int) -> None:
        """:meth:`hold` for one sequence (admission: no arrays to build)."""
        need = -(-tokens // self.block_tokens) - int(self._count[seq])
        if need > 0:
            self._take(seq, need)
            self._count[seq] += need

    def _take(self, seq: int, blocks: int) -> None:
        malloc, size = self.pool.malloc, self.bytes_per_block
        self._held.setdefault(seq, []).extend([malloc(size).handle for _ in range(blocks)])
        self.used += blocks

    def release(self, sequences: np.ndarray) -> int:
        """Free every block the sequences hold; how many there were."""
        freed = 0
        free = self.pool.free
        for seq in sequences.tolist():
            handles = self._held.pop(seq, ())
            for handle in handles:
                free(handle)
            freed += len(handles)
        self._count[sequences] = 0
        self.used -= freed
        return freed

    def memory(self) -> dict[str, int | float]:
        """The pool's figures: bytes allocated and reserved now and at their peak (reserved
        beyond allocated at the peak: the segment tails no block fits in), and the segments."""
        stats = self.pool.stats()
        return {
            "block_bytes": self.bytes_per_block,
            "allocated_bytes": int(stats["allocated_bytes.all.current"]),
            "reserved_bytes": int(stats["reserved_bytes.all.current"]),
            "peak_allocated_bytes": int(stats["allocated_bytes.all.peak"]),
            "peak_reserved_bytes": int(stats["reserved_bytes.all.peak"]),
            "segments": int(stats["segment.all.peak"]),
        }

    def check_fits(self, longest_tokens: int) -> None:
        """A KV cache smaller than one request can never serve it: refuse before simulating."""
        need = int(self.blocks(longest_tokens))
        if need > self.total_blocks:
            raise ServingError(
                f"the KV cache holds {self.total_blocks} blocks of {self.block_tokens} tokens "
                f"({self.total_blocks * self.block_tokens} tokens), smaller than one request "
                f"of {longest_tokens} tokens ({need} blocks)",
                hint="raise --kv-blocks or --kv-block, or shorten --prompt-len/--output-len",
            )
