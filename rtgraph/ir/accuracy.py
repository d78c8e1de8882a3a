"""How far a result is from a reference: the figures a precision report gives per output.

* ``max_abs`` — the largest absolute difference;
* ``max_rel`` — that, over the reference's largest magnitude (an element-wise relative error
  blows up where the reference crosses zero; this one does not);
* ``cosine`` — the cosine similarity of the two as vectors (1 for equal directions);
* ``sqnr_db`` — signal-to-quantization-noise ratio, ``10·log10(Σ ref² / Σ (got − ref)²)``
  (infinite when they are equal).

Computed in f64 over every element; NaN where either side holds a non-finite value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Accuracy:
    """One output's error figures against its reference (see the module docstring)."""

    max_abs: float
    max_rel: float
    cosine: float
    sqnr_db: float


def accuracy(got: np.ndarray, ref: np.ndarray) -> Accuracy:
    """``got``'s error figures against ``ref`` (same shape)."""
    a = np.asarray(got, dtype=np.float64).ravel()
    b = np.asarray(ref, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {np.shape(got)} and {np.shape(ref)}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        nan = math.nan
        return Accuracy(nan, nan, nan, nan)
    if a.size == 0:
        return Accuracy(0.0, 0.0, 1.0, math.inf)
    diff = a - b
    max_abs = float(np.abs(diff).max())
    scale = float(np.abs(b).max())
    max_rel = max_abs / scale if scale else (0.0 if max_abs == 0 else math.inf)
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        cosine = 1.0 if na == nb else 0.0
    else:
        cosine = float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))
    noise = float(np.dot(diff, diff))
    signal = float(np.dot(b, b))
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal else -math.inf)
    return Accuracy(max_abs, max_rel, cosine, sqnr)
