"""``rtgraph serve --out DIR``: the run's JSON and its three pictures (the CLI imports this
module only when asked for pictures, so other commands never load matplotlib)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rtgraph.files import write_atomic
from rtgraph.reports.serving_plots import (
    plot_batch_and_queue,
    plot_latency_cdf,
    plot_throughput_latency,
)
from rtgraph.serving.metrics import per_request, summarize
from rtgraph.serving.policies import Policy
from rtgraph.serving.report import Scenario, to_json
from rtgraph.serving.simulate import Outcome, Workload, simulate
from rtgraph.serving.steps import StepTable

#: The rates of the throughput–latency curve, as fractions of the run's rate.
CURVE = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)


def write_pictures(
    out_dir: str,
    doc: dict,
    outcomes: dict[str, Outcome],
    scenario: Scenario,
    policies: list[Policy],
    table: StepTable,
    workload: Workload,
) -> list[Path]:
    """summary.json, latency_cdf.png, batch_queue.png and (for a generated process)
    throughput_latency.png in ``out_dir``; the paths written."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    decoder = table.kind == "decoder"
    what = "ttft" if decoder else "e2e"
    written = [write_atomic(folder / "summary.json", to_json(doc))]
    written.append(
        plot_latency_cdf(
            {name: per_request(o)[what] for name, o in outcomes.items()},
            folder / "latency_cdf.png",
            "time-to-first-token" if decoder else "end-to-end",
        )
    )
    runs = {
        name: (o.steps.get("start", []), o.steps.get("slots", []), *_queue(o))
        for name, o in outcomes.items()
    }
    kv = {
        name: ([t for t, _ in o.kv], [u / max(o.kv_total, 1) for _, u in o.kv])
        for name, o in outcomes.items()
        if o.kv
    }
    written.append(plot_batch_and_queue(runs, folder / "batch_queue.png", kv or None))
    if scenario.kind != "trace":
        curves = {}
        for policy in policies:
            points = []
            for share in CURVE:
                requests = scenario.requests(decoder, scenario.rate * share)
                s = summarize(simulate(requests, policy, table, workload))
                points.append((s["throughput_rps"], s["latency_ms"][what]["p99"]))
            curves[policy.name] = points
        written.append(
            plot_throughput_latency(
                curves, folder / "throughput_latency.png", f"P99 {what.upper()}"
            )
        )
    return written


def _queue(o: Outcome) -> tuple[np.ndarray, np.ndarray]:
    if not o.queue:
        return np.zeros(0), np.zeros(0, dtype=int)
    t, q = zip(*o.queue, strict=True)
    return np.asarray(t), np.asarray(q)
