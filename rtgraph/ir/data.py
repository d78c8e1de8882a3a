"""Deterministic data for inputs and params the user did not supply.

Every tensor's values depend only on the seed and the tensor's name, so the reference
interpreter, the emulator and a re-run all see the same numbers whatever order they ask in.
Params are scaled by 1/sqrt(fan-in) so that deep chains of matmuls stay in f16 range.
"""

from __future__ import annotations

import zlib

import numpy as np

from rtgraph.dtypes import DTYPES, to_value


def generate(
    name: str, shape: tuple[int, ...], dtype: str, seed: int, *, param: bool
) -> np.ndarray:
    """Values for tensor ``name`` (value form of ``dtype``), reproducible from ``seed``."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if not DTYPES[dtype].is_float:
        return to_value(rng.integers(-4, 5, size=shape), dtype)
    values = rng.standard_normal(size=shape, dtype=np.float32)
    if param and len(shape) >= 2:
        values *= np.float32(1.0 / np.sqrt(max(shape[-2], 1)))
    return to_value(values, dtype)
