"""``rtgraph bench --scaling``: how one step of a model scales over 1, 2, 4 and 8 devices of a
cluster under each parallelism, against linear.

For each model and each parallelism — ``data`` (``data_parallel=N``: N replicas, each on 1/N
of the batch), ``pipeline`` (``pipeline=N`` stages over a fixed M ≥ N micro-batches, 1F1B by
default) and ``tensor`` (``tensor_parallel=N``, when :func:`rtgraph.cluster_api.compile_cluster`
accepts it) — the model is compiled for the cluster and run timing-only (``numerics=False``:
the figures are the emulator's clock, not this machine's). Every point is measured:

* **makespan** of one step of the whole batch;
* **speedup** = the one-device makespan / this one — the one-device run is the program as
  written on one device of the cluster (no micro-batches, no transfers), the same for every
  parallelism, so a 1-device row is 1.0 exactly;
* **efficiency** = speedup / N (1.0 is linear);
* **bubble** — the devices' idle share of the compute span
  (:func:`rtgraph.reports.cluster_summary.bubble_fraction`): a pipeline's bubble, and for the
  other modes the compute idle while transfers run;
* **link bytes** carried over every link direction, and the **busiest link**'s utilization
  (its bytes over bandwidth × makespan);
* **memory peak** per device: the largest rank's.

A point a parallelism cannot make of a model (a collective a pipeline cannot cut, more devices
than the cluster has) is shown as "—" with the reason beneath the table.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rtgraph import api, cluster_api
from rtgraph.cluster.spec import ClusterSpec
from rtgraph.errors import RtgError, UsageError
from rtgraph.ir.graph import Program
from rtgraph.reports.cluster_summary import bubble_fraction, device_figures

PARALLELISMS = ("data", "pipeline", "tensor")
DEVICE_COUNTS = (1, 2, 4, 8)
DEFAULT_CLUSTER = "ascend-910b-x8"
#: The micro-batches of every pipeline point: fixed, and at least the largest stage count.
MICRO_BATCHES = 8
#: The models ``rtgraph bench --scaling`` runs when given none, with the sizes it runs them at
#: (about two seconds a point on one core of a laptop).
DEFAULT_MODELS = (
    "models/transformer_stack.rtg",
    "models/layer_stack.rtg",
    "models/mlp_train.rtg",
)
DEFAULT_PARAMS: dict[str, dict[str, int]] = {
    # 8 GPT-2 blocks (GPT-2 medium's width, 16 heads) over 32 sequences of 256 tokens
    "transformer_stack": {"B": 32, "S": 256, "D": 1024, "H": 16, "F": 4096, "L": 8},
    "layer_stack": {"B": 4096, "D": 2048, "F": 8192},
    "mlp_train": {"B": 4096, "D": 2048, "H": 8192},
}


@dataclass(frozen=True)
class ScalingPoint:
    """One model under one parallelism on ``devices`` devices; the figures are None (and
    ``note`` says why) when the point could not be made."""

    model: str
    parallelism: str
    devices: int
    makespan_us: float | None = None
    speedup: float | None = None
    efficiency: float | None = None
    bubble: float | None = None
    link_bytes: int | None = None
    link_utilization: float | None = None
    memory_peak_bytes: int | None = None
    note: str = ""


@dataclass(frozen=True)
class ScalingTable:
    cluster: str
    micro_batches: int
    schedule: str
    params: dict[str, dict[str, int]]
    points: tuple[ScalingPoint, ...]

    def to_json(self) -> dict:
        return {
            "cluster": self.cluster,
            "micro_batches": self.micro_batches,
            "schedule": self.schedule,
            "params": self.params,
            "points": [asdict(p) for p in self.points],
        }

    def markdown(self) -> str:
        """The table as Markdown, numbered notes (a "—" cell's reason) beneath it."""
        sizes = "; ".join(
            f"{model} " + ", ".join(f"{k}={v}" for k, v in values.items())
            for model, values in self.params.items()
        )
        lines = [
            f"Cluster `{self.cluster}`; one step of the whole batch ({sizes}); pipeline "
            f"{self.micro_batches} micro-batches, {self.schedule}; timing-only runs.",
            "",
            "| model | parallelism | devices | makespan µs | speedup | efficiency | bubble "
            "| link bytes | busiest link | memory peak / device |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        notes: dict[str, int] = {}
        for p in self.points:
            mark = f" ({notes.setdefault(p.note, len(notes) + 1)})" if p.note else ""
            if p.makespan_us is None:
                cells = [f"—{mark}"] + ["—"] * 6
                mark = ""
            else:
                cells = [
                    f"{p.makespan_us:,.1f}",
                    f"{p.speedup:.2f}",
                    f"{p.efficiency:.0%}",
                    f"{p.bubble:.1%}",
                    f"{p.link_bytes:,}",
                    f"{p.link_utilization:.1%}",
                    f"{p.memory_peak_bytes / 2**20:,.1f} MiB",
                ]
            head = f"| {p.model} | {p.parallelism}{mark} | {p.devices} | "
            lines.append(head + " | ".join(cells) + " |")
        if notes:
            lines.append("")
            lines += [f"({k}) {note}" for note, k in notes.items()]
        return "\n".join(lines)


def tensor_parallel_available() -> bool:
    """Whether :func:`rtgraph.cluster_api.compile_cluster` takes ``tensor_parallel``."""
    return "tensor_parallel" in inspect.signature(cluster_api.compile_cluster).parameters


def scaling(
    models: Sequence[str | os.PathLike[str]] = DEFAULT_MODELS,
    *,
    cluster: str | ClusterSpec = DEFAULT_CLUSTER,
    devices: Sequence[int] = DEVICE_COUNTS,
    parallelisms: Sequence[str] = PARALLELISMS,
    micro_batches: int = MICRO_BATCHES,
    schedule: str = "1f1b",
    params: Mapping[str, Mapping[str, int]] | None = None,
    batch: str = "B",
) -> ScalingTable:
    """Measure every (model, parallelism, device count) point; ``params`` overrides program
    parameters per model name (``"*"``: every model declaring the name), over
    :data:`DEFAULT_PARAMS`."""
    for name in parallelisms:
        if name not in PARALLELISMS:
            raise UsageError(f"unknown parallelism {name!r}", hint=f"use {', '.join(PARALLELISMS)}")
    if micro_batches < max(devices, default=1):
        raise UsageError(
            f"{micro_batches} micro-batches for up to {max(devices)} pipeline stages",
            hint="a pipeline needs at least as many micro-batches as stages",
        )
    spec = cluster_api.cluster(cluster)
    params = params or {}
    points: list[ScalingPoint] = []
    chosen: dict[str, dict[str, int]] = {}
    for path in models:
        name = Path(path).stem
        wanted = {**DEFAULT_PARAMS.get(name, {}), **params.get("*", {}), **params.get(name, {})}
        declared = api.load(path).params
        program = api.load(path, {k: v for k, v in wanted.items() if k in declared})
        chosen[name] = dict(program.params)
        base = _one_device(program, spec)
        for parallelism in parallelisms:
            for n in devices:
                how = _how(parallelism, n, micro_batches, schedule)
                points.append(_point(program, name, parallelism, n, how, base, spec, batch))
    return ScalingTable(spec.name, micro_batches, schedule, chosen, tuple(points))


def _one_device(program: Program, spec: ClusterSpec) -> ScalingPoint:
    compiled = cluster_api.compile_cluster(program, cluster=spec)
    run = cluster_api.run_cluster(compiled, numerics=False)
    return _measured(run, "", "", 1, run.makespan_us)


def _how(parallelism: str, n: int, micro_batches: int, schedule: str) -> dict:
    """``compile_cluster``'s keywords for ``n`` devices of ``parallelism``."""
    if parallelism == "data":
        return {"data_parallel": n}
    if parallelism == "pipeline":
        return {"pipeline": n, "micro_batches": micro_batches, "schedule": schedule}
    return {"tensor_parallel": n}


def _point(
    program: Program,
    model: str,
    parallelism: str,
    n: int,
    how: dict,
    base: ScalingPoint,
    spec: ClusterSpec,
    batch: str,
) -> ScalingPoint:
    if n == 1:
        return ScalingPoint(**{**asdict(base), "model": model, "parallelism": parallelism})
    if n > spec.devices:
        return ScalingPoint(model, parallelism, n, note=f"{spec.name} has {spec.devices} devices")
    if parallelism == "tensor" and not tensor_parallel_available():
        return ScalingPoint(model, parallelism, n, note="tensor parallelism is not built yet")
    try:
        compiled = cluster_api.compile_cluster(program, cluster=spec, batch=batch, **how)
        run = cluster_api.run_cluster(compiled, numerics=False)
    except RtgError as err:
        return ScalingPoint(model, parallelism, n, note=f"{parallelism}: {err.message}")
    cut = compiled.meta.get("tensor")
    if cut is not None and not cut["cut"]:
        kept = ", ".join(cut["whole"]) or "none"
        note = f"tensor: no weight is cut (kept whole: {kept}), so no rank's work is divided"
        return ScalingPoint(model, parallelism, n, note=note)
    return _measured(run, model, parallelism, n, base.makespan_us)


def _measured(
    run: cluster_api.ClusterRun, model: str, parallelism: str, n: int, one_device_us: float
) -> ScalingPoint:
    result = run.result
    figures = device_figures(result)
    speedup = one_device_us / run.makespan_us if run.makespan_us > 0 else 0.0
    return ScalingPoint(
        model=model,
        parallelism=parallelism,
        devices=n,
        makespan_us=run.makespan_us,
        speedup=speedup,
        efficiency=speedup / n,
        bubble=max(bubble_fraction(result, figures), 0.0),  # (no rounding noise below zero)
        link_bytes=sum(link.bytes for link in result.links),
        link_utilization=max((link.utilization for link in result.links), default=0.0),
        memory_peak_bytes=max(f.memory_peak_bytes for f in figures),
    )
