"""The KV cache in paged blocks (vLLM's PagedAttention layout): a sequence of n tokens holds
ceil(n / block_tokens) blocks; blocks are taken when a sequence is admitted or grows past a
block boundary and given back when it finishes or is preempted.

The pool's size is ``--kv-blocks`` or, by default, what the device's memory holds beside the
largest step the model runs (its weights and activations): 90 % of the capacity less that
step's memory peak, as vLLM's ``gpu_memory_utilization`` sizes its pool. Admission takes a
waiting sequence only while its blocks fit; when a running sequence needs a block and none is
free, the most recently admitted sequence is preempted (vLLM's two ways): by recompute (its
blocks freed, its prompt and the tokens it has made prefilled again when it is readmitted) or
by swap (its blocks copied to host memory over the host link and back when it is readmitted,
the copies charged to the device's time; host memory is not bounded).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rtgraph.serving.requests import ServingError

#: The fraction of device memory the weights, activations and KV pool may use together.
MEMORY_UTILIZATION = 0.9
BYTES_F16 = 2


@dataclass
class KVCache:
    total_blocks: int
    block_tokens: int
    bytes_per_block: int
    used: int = 0

    @classmethod
    def for_decoder(
        cls, layers: int, width: int, block_tokens: int, blocks: int | None, free_bytes: int
    ) -> KVCache:
        """A pool for a decoder of ``layers`` layers of model width ``width`` (K and V, f16)."""
        if block_tokens < 1:
            raise ServingError(
                f"--kv-block {block_tokens}: a block holds at least one token",
                hint="vLLM's default is 16",
            )
        per_block = 2 * layers * width * BYTES_F16 * block_tokens
        if blocks is None:
            blocks = max(int(free_bytes * MEMORY_UTILIZATION) // per_block, 0)
        return cls(int(blocks), int(block_tokens), per_block)

    def blocks(self, tokens: np.ndarray | int) -> np.ndarray:
        """Blocks that ``tokens`` tokens occupy (elementwise)."""
        return -(-np.asarray(tokens) // self.block_tokens)

    @property
    def free(self) -> int:
        return self.total_blocks - self.used

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
