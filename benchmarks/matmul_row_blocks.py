"""The price of row-stable matmuls: the Cube kernel's BLAS calls of exactly ``row_block(rows)``
rows (the last block zero-padded) against calls cut at the product's own rows.

Computing every product in calls of a fixed row count makes a row's bits independent of how
many rows share the matmul (row tiling and padded runs stay bit-exact: rtgraph.ops.cube), at
the cost of the padded rows' work. Each row of the table is a [M, 768] @ [768, 768] f32
product, both ways in turn, best of three, process CPU time with one BLAS thread.

Usage: OPENBLAS_NUM_THREADS=1 python benchmarks/matmul_row_blocks.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rtgraph.ops.cube import ROW_BLOCK, matmul_block, row_block, row_blocks

ROWS = (1, 3, 33, 64, 65, 100, 1000, 1024)
REPEAT = 20


def unpadded(a: np.ndarray, b: np.ndarray, first: int | None) -> np.ndarray:
    """A block cut at the product's own rows: the last call as short as the rows left."""
    part = a if first is None else a[first : first + ROW_BLOCK]
    return np.matmul(np.ascontiguousarray(part), b)


def product(a: np.ndarray, b: np.ndarray, block) -> np.ndarray:
    blocks = row_blocks(a)
    if blocks is None:
        return block(a, b, None)
    return np.concatenate([block(a, b, i) for i in blocks], axis=0)


def cpu_ms(fn) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(REPEAT):
            fn()
        best = min(best, (time.process_time() - start) / REPEAT)
    return best * 1e3


def main() -> None:
    rng = np.random.default_rng(0)
    b = rng.standard_normal((768, 768)).astype(np.float32)
    print("| M | rows per call | cut at M, ms | row-stable, ms | ratio |")
    print("|---:|---:|---:|---:|---:|")
    for m in ROWS:
        a = rng.standard_normal((m, 768)).astype(np.float32)
        cut = cpu_ms(lambda a=a: product(a, b, unpadded))
        stable = cpu_ms(lambda a=a: product(a, b, matmul_block))
        print(f"| {m:,} | {row_block(m)} | {cut:.3f} | {stable:.3f} | {stable / cut:.2f} |")


if __name__ == "__main__":
    main()
