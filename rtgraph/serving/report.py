"""``rtgraph serve`` as a library call: the requests, one run per batching policy, the summaries
as JSON and as a table; or the capacity of each policy under an SLO."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from rtgraph.serving.arrivals import Lengths, Requests, generate_requests, read_trace
from rtgraph.serving.capacity import search_capacity
from rtgraph.serving.metrics import summarize
from rtgraph.serving.policies import Policy
from rtgraph.serving.simulate import Outcome, Workload, simulate
from rtgraph.serving.steps import StepTable


@dataclass(frozen=True)
class Scenario:
    """Where the requests come from: a process (kind, rate, cv) for ``duration_s`` seconds
    with ``seed``, or a trace file."""

    kind: str
    rate: float
    cv: float
    trace: str
    duration_s: float
    seed: int
    lengths: Lengths = field(default_factory=Lengths)

    def requests(self, decoder: bool, rate: float | None = None, seed: int | None = None):
        if self.kind == "trace":
            found = read_trace(self.trace, decoder)
            keep = found.arrival < self.duration_s
            return Requests(
                *(a[keep] for a in (found.arrival, found.prompt, found.output, found.key))
            )
        return generate_requests(
            self.kind,
            self.rate if rate is None else rate,
            self.cv,
            self.duration_s,
            self.seed if seed is None else seed,
            self.lengths,
        )


def run_policies(
    scenario: Scenario,
    policies: list[Policy],
    table: StepTable,
    workload: Workload,
    slo: dict[str, float] | None = None,
) -> tuple[dict, dict[str, Outcome]]:
    """One run per policy on the same requests; the JSON document and the outcomes."""
    requests = scenario.requests(table.kind == "decoder")
    outcomes = {p.name: simulate(requests, p, table, workload) for p in policies}
    span = scenario.duration_s if math.isfinite(scenario.duration_s) else None
    doc = {
        "model": table.identity(),
        "arrivals": {
            "kind": scenario.kind,
            "rate_rps": scenario.rate,
            "cv": scenario.cv,
            "duration_s": span,
            "seed": scenario.seed,
        },
        "workload": {
            "denoise_steps": workload.denoise_steps,
            "merge": workload.merge,
            "kv_block": workload.kv_block,
            "host_prep_s": workload.host_prep_s,
            "preempt": workload.preempt,
        },
        "runs": [summarize(out, slo) for out in outcomes.values()],
    }
    return doc, outcomes


def run_capacity(
    scenario: Scenario,
    policies: list[Policy],
    table: StepTable,
    workload: Workload,
    slo: dict[str, float],
    seeds: int,
) -> dict:
    """The largest Poisson rate meeting ``slo``, per policy, side by side."""
    decoder = table.kind == "decoder"
    found = [
        search_capacity(
            lambda rate, seed: scenario.requests(decoder, rate, scenario.seed + seed),
            policy,
            table,
            workload,
            slo,
            seeds,
        ).to_json()
        for policy in policies
    ]
    return {"model": table.identity(), "slo_s": slo, "capacity": found}


def to_json(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def format_runs(doc: dict) -> str:
    """The runs side by side: throughput, latency percentiles, batch, utilization, Little."""
    runs = doc["runs"]
    decoder = runs and runs[0]["workload"] == "decoder"
    head = ["policy", "req/s", "tok/s" if decoder else "util", "batch", "queue p99"]
    head += ["TTFT p50", "TTFT p99", "TBT p99" if decoder else "e2e p50", "e2e p99", "Little L/λW"]
    rows = []
    for r in runs:
        lat = r["latency_ms"]
        rows.append(
            [
                r["policy"],
                f"{r['throughput_rps']:.4g}",
                f"{r['tokens_per_s']:.5g}" if decoder else f"{r['utilization']:.0%}",
                f"{r['mean_batch']:.3g}",
                _ms(lat["queue"]["p99"]),
                _ms(lat["ttft"]["p50"]),
                _ms(lat["ttft"]["p99"]),
                _ms(lat["tbt"]["p99"]) if decoder else _ms(lat["e2e"]["p50"]),
                _ms(lat["e2e"]["p99"]),
                f"{r['little']['L']:.4g} / {r['little']['lambda_W']:.4g}",
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    lines = [
        "  ".join(str(x).rjust(w) for x, w in zip(row, widths, strict=True))
        for row in [head, *rows]
    ]
    a = doc["arrivals"]
    title = (
        f"{doc['model']['model']}: {runs[0]['requests'] if runs else 0} requests, "
        f"{a['kind']}"
        + (f" {a['rate_rps']:g}/s" if a["kind"] != "trace" else "")
        + (f" over {a['duration_s']:g} s" if a["duration_s"] is not None else "")
        + f", seed {a['seed']}"
    )
    notes = []
    for r in runs:
        if "slo" in r:
            met = ", ".join(
                f"{k} {v['measured_ms']:.4g} ms {'≤' if v['met'] else '>'} {v['target_ms']:.4g}"
                for k, v in r["slo"].items()
            )
            notes.append(f"  {r['policy']}: SLO {met}; goodput {r['goodput_rps']:.4g} req/s")
        if "kv" in r:
            kv = r["kv"]
            notes.append(
                f"  {r['policy']}: KV cache {kv['blocks']} blocks, peak {kv['peak_fraction']:.1%}, "
                f"{kv['preemptions']} preemptions" + _allocator_note(kv.get("allocator"))
            )
    return "\n".join([title, *lines, *notes]) + "\n"


def _allocator_note(found: dict | None) -> str:
    if not found:
        return ""
    mib = 1 << 20
    return (
        f"; allocator peak {found['peak_allocated_bytes'] / mib:.4g} MiB allocated of "
        f"{found['peak_reserved_bytes'] / mib:.4g} MiB reserved in {found['segments']} segments, "
        f"{found['allocated_bytes']} B allocated at the end"
    )


def _ms(x: float) -> str:
    return f"{x / 1e3:.3g} s" if x >= 1e3 else f"{x:.3g} ms"


def format_capacity(doc: dict) -> str:
    lines = [f"{doc['model']['model']}: capacity under {doc['slo_s']} (s)"]
    for c in doc["capacity"]:
        lines.append(f"  {c['policy']:<28} {c['rate_rps']:>10.4g} req/s   ({c['confidence']})")
    return "\n".join(lines) + "\n"
