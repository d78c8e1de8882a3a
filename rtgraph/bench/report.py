"""``BenchReport``: the figures of one ``bench`` run, and the ways to show them.

``markdown()`` is the tables the README quotes (the headline first), ``figure()`` a picture and
``to_json()`` every figure with the headline's verdicts. The report only holds and hands on
rows: judging is :mod:`rtgraph.bench.claims`, printing :mod:`rtgraph.bench.tables`, drawing
:mod:`rtgraph.bench.figure`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rtgraph.bench.claims import HEADLINE_MODELS, headline_caption, headline_rows
from rtgraph.bench.precision import PrecisionRow
from rtgraph.bench.rows import BASELINE, AllocRow, HeadlineRow, MemoryRow, OptRow, PolicyRow
from rtgraph.bench.tables import (
    alloc_table,
    headline_table,
    memory_table,
    opt_table,
    policy_table,
    precision_table,
)


@dataclass
class BenchReport:
    """The figures of one ``bench`` run (see :mod:`rtgraph.bench.run`)."""

    device: str
    models: list[str]
    params: dict[str, dict[str, int]]
    policies: list[PolicyRow] = field(default_factory=list)
    memory: list[MemoryRow] = field(default_factory=list)
    allocation: list[AllocRow] = field(default_factory=list)
    optimizer: list[OptRow] = field(default_factory=list)
    precision: list[PrecisionRow] = field(default_factory=list)

    def policy_row(self, model: str, policy: str, memory: str = "stream-ordered") -> PolicyRow:
        for row in self.policies:
            if (row.model, row.policy, row.memory) == (model, policy, memory):
                return row
        raise KeyError((model, policy, memory))

    def headline_models(self) -> list[str]:
        chosen = [m for m in HEADLINE_MODELS if m in self.models]
        return chosen or list(self.models)

    def headline_memory(self) -> str:
        """The memory plan the headline compares streams under (``stream-ordered`` if it ran)."""
        plans = list(dict.fromkeys(r.memory for r in self.policies))
        return "stream-ordered" if "stream-ordered" in plans or not plans else plans[0]

    def headline_rows(self) -> list[HeadlineRow]:
        """The runtime's claims against the figures of this run, one row per claim."""
        models, memory = self.headline_models(), self.headline_memory()
        ran = {(r.model, r.policy, r.memory): r for r in self.policies}
        single = {m: ran[(m, BASELINE, memory)] for m in models if self.policies}
        by_unit = {m: ran[(m, "by-unit", memory)] for m in models if (m, "by-unit", memory) in ran}
        calls: dict[str, list[float]] = {}
        for row in self.allocation:
            calls.setdefault(row.mode, []).extend(row.alloc_latencies)
        return headline_rows(single, by_unit, calls)

    def headline(self) -> str:
        """The headline table and its caption (models, memory plan, how to read a verdict)."""
        caption = headline_caption(self.headline_models(), self.headline_memory())
        return headline_table(self.headline_rows()) + "\n\n" + caption

    def markdown(self) -> str:
        """The headline and the three tables, in GitHub markdown."""
        return "\n".join(
            [
                f"Device `{self.device}`; all figures from the emulated clock (timing-only runs).",
                "",
                "### Headline: the runtime's claims against the emulator",
                "",
                self.headline(),
                "",
                "### Streams: one stream vs one per unit type vs the list scheduler",
                "",
                policy_table(self.policies),
                "",
                "### Memory: activation pool without reuse vs the plans",
                "",
                memory_table(self.memory),
                "",
                "### Allocation: static plan vs run-time allocators (by-unit streams)",
                "",
                alloc_table(self.allocation),
                "",
                "### The graph optimizer: -O0 (the graph as written) vs -O2",
                "",
                opt_table(self.optimizer),
                *(
                    [
                        "",
                        "### Precision: each form's speed and its error against f32 (by-unit)",
                        "",
                        precision_table(self.precision),
                    ]
                    if self.precision
                    else []
                ),
            ]
        )

    def to_json(self) -> dict[str, Any]:
        """Every figure, JSON-ready (derived columns included), and the headline's verdicts."""
        return {
            "device": self.device,
            "models": list(self.models),
            "params": {k: dict(v) for k, v in self.params.items()},
            "policies": [
                {
                    **asdict(r),
                    "compute_utilization": r.compute_utilization,
                    "host_overlap": r.host_overlap,
                }
                for r in self.policies
            ],
            "memory": [
                {**asdict(r), "saving": r.saving, "over_bound": r.over_bound} for r in self.memory
            ],
            "allocation": [
                {
                    **asdict(r),
                    "step_calls": r.step_calls,
                    "us_per_step_call": r.us_per_step_call,
                    "step_makespan_us": r.step_makespan_us,
                    "median_alloc_us": r.median_alloc_us,
                }
                for r in self.allocation
            ],
            "optimizer": [{**asdict(r), "lift": r.lift} for r in self.optimizer],
            "precision": [asdict(r) for r in self.precision],
            "headline": [asdict(r) for r in self.headline_rows()],
        }
