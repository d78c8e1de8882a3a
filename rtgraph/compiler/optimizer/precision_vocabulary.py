"""The precision pass's vocabulary: the precisions, the scale methods, the error budget's form.

Declared apart from the pass, as :mod:`.levels` is, so that :mod:`rtgraph.compiler.options` can
check ``--precision``, ``--calibration-method`` and ``--error-budget`` without importing the pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

#: ``--precision``: what each value makes of the program (ATC's ``--precision_mode`` names in
#: brackets where one matches).
PRECISIONS: dict[str, str] = {
    "keep": "every op computes in the dtypes the program declares (must_keep_origin_dtype)",
    "f32": "every floating-point op computes in f32 (the reference the others are measured by)",
    "f16": "every floating-point op computes in f16; weights are stored in f16 (force_fp16)",
    "bf16": "every floating-point op computes in bf16; weights are stored in bf16 (force_bf16)",
    "int8": "matmul and conv2d multiply int8 (activations by calibrated scales, weights per "
    "output channel) into int32 and dequantize; the other ops keep their dtypes",
    "auto": "per op the cheapest of int8, f16 and f32 that keeps the outputs within "
    "--error-budget of the f32 program (allow_mix_precision, with calibration)",
}

#: ``--calibration-method``: how an activation's int8 range is chosen from calibration values.
SCALE_METHODS: dict[str, str] = {
    "max": "the largest magnitude seen (no value clips)",
    "percentile": "the 99.99th percentile of the magnitudes (rare outliers clip)",
    "entropy": "the threshold whose int8 histogram is closest to the values' in KL divergence "
    "(TensorRT's entropy calibration)",
}

#: The most seeded calibration batches (each is a full run of the reference interpreter).
MAX_CALIBRATION_BATCHES = 64

#: The error metrics a budget may bound.
METRICS = ("cosine", "max_rel")

BUDGET_HELP = (
    "cosine=C (every output's cosine similarity with the f32 outputs ≥ C) or max_rel=R (every "
    "output's largest error ≤ R times its largest magnitude)"
)


@dataclass(frozen=True)
class Budget:
    """An error budget: every output's ``metric`` within ``bound`` of the f32 program's."""

    metric: str
    bound: float

    def holds(self, errors: Mapping[str, float]) -> bool:
        """Whether per-output figures of :attr:`metric` (cosine, or max_rel) meet the bound."""
        if self.metric == "cosine":
            return all(v >= self.bound for v in errors.values())
        return all(v <= self.bound for v in errors.values())

    def __str__(self) -> str:
        return f"{self.metric}={self.bound:g}"


def parse_budget(text: str) -> Budget:
    """The budget ``text`` names (checked by :func:`budget_problem` first)."""
    metric, _, value = text.partition("=")
    return Budget(metric.strip(), float(value))


def budget_problem(text: object) -> tuple[str, str] | None:
    """Why ``text`` is not an error budget, or None."""
    if not isinstance(text, str) or "=" not in text:
        return "not METRIC=VALUE", BUDGET_HELP
    metric, _, value = text.partition("=")
    if metric.strip() not in METRICS:
        return f"unknown metric {metric.strip()!r}", BUDGET_HELP
    try:
        bound = float(value)
    except ValueError:
        return f"{value.strip()!r} is not a number", BUDGET_HELP
    if metric.strip() == "cosine" and not 0.0 < bound <= 1.0:
        return "a cosine bound is in (0, 1]", "e.g. cosine=0.999"
    if metric.strip() == "max_rel" and not (math.isfinite(bound) and bound > 0):
        return "a max_rel bound is a positive number", "e.g. max_rel=0.01"
    return None


def name_problem(value: object, names: Mapping[str, str]) -> tuple[str, str] | None:
    """Why ``value`` is not one of ``names``, or None."""
    if value in names:
        return None
    return "not one of the choices", f"choose one of {', '.join(names)}"
