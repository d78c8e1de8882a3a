"""Capacity search (Vidur-Search): the largest Poisson arrival rate whose runs meet an SLO.

At each rate the simulation runs with ``seeds`` seeds; the rate meets the SLO when, for every
term, the one-sided 95 % upper confidence bound of its mean over the seeds (Student's t) is at
or below the target. The rate is bracketed by doubling from the single-request service rate,
then bisected until the bracket is within ``tolerance`` of its upper end. The result states
the confidence, the bracket and the per-seed values at the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rtgraph.serving.arrivals import Requests
from rtgraph.serving.metrics import slo_values
from rtgraph.serving.policies import Policy
from rtgraph.serving.requests import ServingError
from rtgraph.serving.simulate import Outcome, Workload, simulate
from rtgraph.serving.steps import StepTable

#: One-sided 95 % Student-t quantiles by degrees of freedom (1 … 30; above: the normal's).
T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782,
       1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711,
       1.708, 1.706, 1.703, 1.701, 1.699, 1.697)  # fmt: skip


def t95(dof: int) -> float:
    return T95[dof - 1] if 1 <= dof <= len(T95) else 1.645


def upper_bound(values: np.ndarray) -> float:
    """The one-sided 95 % upper confidence bound of the mean of ``values``."""
    if len(values) < 2:
        return float(values.mean())
    return float(values.mean() + t95(len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


@dataclass(frozen=True)
class CapacityResult:
    policy: str
    rate_rps: float
    bracket: tuple[float, float]
    seeds: int
    values_ms: dict[str, list[float]]
    confidence: str

    def to_json(self) -> dict:
        return {
            "policy": self.policy,
            "rate_rps": round(self.rate_rps, 4),
            "bracket_rps": [round(x, 4) for x in self.bracket],
            "seeds": self.seeds,
            "values_ms_at_rate": {k: [round(v, 4) for v in vs] for k, vs in self.values_ms.items()},
            "confidence": self.confidence,
        }


def search_capacity(
    make: Callable[[float, int], Requests],
    policy: Policy,
    table: StepTable,
    workload: Workload,
    slo: dict[str, float],
    seeds: int = 5,
    tolerance: float = 0.05,
    iterations: int = 12,
) -> CapacityResult:
    """The largest rate meeting ``slo``; ``make(rate, seed)`` gives that run's requests."""

    def trial(rate: float) -> tuple[bool, dict[str, list[float]]]:
        per_seed: dict[str, list[float]] = {name: [] for name in slo}
        for seed in range(seeds):
            out: Outcome = simulate(make(rate, seed), policy, table, workload)
            for name, value in slo_values(out, slo).items():
                per_seed[name].append(value)
        ok = all(upper_bound(np.array(v)) <= slo[name] for name, v in per_seed.items())
        return ok, per_seed

    alone = _alone_rate(table, workload)
    first = make(alone * 0.05, 0)
    one = Requests(*(a[:1] for a in (first.arrival, first.prompt, first.output, first.key)))
    by_itself = slo_values(simulate(one, Policy("none"), table, workload), slo)
    if len(one) and any(by_itself[name] > target for name, target in slo.items()):
        measured = {k: round(v * 1e3, 4) for k, v in by_itself.items()}
        targets = {k: round(v * 1e3, 4) for k, v in slo.items()}
        raise ServingError(
            f"the SLO cannot be met: one request alone on an idle device measures {measured} ms "
            f"against {targets} ms",
            hint="loosen the SLO, or shorten the requests (a faster device, a smaller model)",
        )
    low, high = alone * 0.05, alone
    ok, best = trial(low)
    if not ok:  # e.g. static batching, whose requests wait for a full batch when arrivals are few
        return CapacityResult(
            policy.name,
            0.0,
            (0.0, low),
            seeds,
            {k: [x * 1e3 for x in v] for k, v in best.items()},
            f"the SLO fails already at {low:.4g} requests/s (5 % of one-at-a-time's rate)",
        )
    for _ in range(iterations):  # bracket: double until a rate fails
        ok, values = trial(high)
        if not ok:
            break
        low, best, high = high, values, high * 2
    for _ in range(iterations):
        if high - low <= tolerance * high:
            break
        mid = (low + high) / 2
        ok, values = trial(mid)
        if ok:
            low, best = mid, values
        else:
            high = mid
    return CapacityResult(
        policy.name,
        low,
        (low, high),
        seeds,
        {k: [x * 1e3 for x in v] for k, v in best.items()},
        f"at {low:.4g} requests/s every term's one-sided 95 % upper bound of its mean over "
        f"{seeds} seeds meets the target; at {high:.4g} one does not",
    )


def _alone_rate(table: StepTable, workload: Workload) -> float:
    """Requests per second one at a time (the bracket's first upper end)."""
    if table.kind == "image":
        return 1.0 / (workload.denoise_steps * table.latency_s("denoise", 1))
    return 1.0 / (table.latency_s("prefill", 1, 128) + 128 * table.latency_s("decode", 1, 0, 256))
