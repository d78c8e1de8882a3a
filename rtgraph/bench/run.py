"""``rtgraph bench``: the headline comparison, measured on a set of models.

For every model the same emulated device answers three questions the runtime's documentation
makes claims about:

* **streams** — one stream (``single``) against one stream per unit type (``by-unit``) and the
  cost-aware ``list`` scheduler: makespan, utilization of each unit, speed-up over ``single``,
  and the events the compiler inserted (distinct events and event waits). Each policy runs
  under three memory plans, because reuse and parallelism pull against each other and the
  difference is part of the answer: ``stream-ordered`` (reuse only where the streams already
  order the two tensors, as a stream-ordered pool does: no false dependencies), ``greedy``
  (reuse by liveness in program order: the least memory, but reuse ties streams together) and
  ``none`` (no reuse).
* **memory** — the activation pool without reuse against the greedy and stream-ordered plans:
  bytes, saving, and the greedy plan over the max-live lower bound (1.0 is optimal).
* **allocation** — the static plan against run-time allocation from the ``direct`` driver
  (≈50 µs a call), a caching ``pool`` (≈1 µs) and ``mixed`` (params direct, activations pooled):
  host time spent in allocation calls and the makespan, replayed by the real allocators.

The **headline** sets the runtime documentation's own before/after claims (one stream ≈40 %
utilization, one stream per unit type ≥75 %; direct allocation ≈50 µs, pooled ≈1 µs; the host
submitting ahead of the device) against what the emulator measures on the models, and says
where the two disagree.

Every run is timing-only (``numerics=False``): the numbers are the emulator's clock, not this
machine's. ``bench`` returns a :class:`BenchReport`; ``markdown()`` is the table the README
quotes, ``figure()`` a picture, ``to_json()`` the raw figures.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rtgraph.errors import UsageError

POLICIES: tuple[str, ...] = ("single", "by-unit", "list")
MEMORY_PLANS: tuple[str, ...] = ("stream-ordered", "greedy", "none")
#: Every plan ``--memory`` may name (``timed`` is left out of the default run).
ALL_MEMORY_PLANS: tuple[str, ...] = (*MEMORY_PLANS, "timed")
ALLOC_MODES: tuple[str, ...] = ("direct", "pool", "mixed")
BASELINE = "single"
RESIDENT = ("param", "const", "buffer")
#: The models the headline is about (all models when none of these ran).
HEADLINE_MODELS: tuple[str, ...] = ("attention", "transformer_block")
#: The runtime documentation's figures the headline checks (utilization as a fraction).
CLAIM_ONE_STREAM = 0.40
CLAIM_BY_UNIT = 0.75
CLAIM_DIRECT_US = 50.0
CLAIM_POOL_US = 1.0


@dataclass(frozen=True)
class PolicyRow:
    """One model compiled under one stream policy and memory plan, and run."""

    model: str
    policy: str
    memory: str
    tasks: int
    makespan_us: float
    utilization: dict[str, float]
    speedup: float  # the same model's single-stream makespan ÷ this makespan (same memory plan)
    events: int  # distinct events used
    waits: int  # event waits inserted
    host_busy_us: float
    host_submit_us: float = 0.0  # host time in submission ioctls …
    host_overlap_us: float = 0.0  # … of which the device was running a task meanwhile

    @property
    def compute_utilization(self) -> float:
        """Cube plus Vector utilization (0..2): how much of both compute units is kept busy."""
        return self.utilization.get("cube", 0.0) + self.utilization.get("vector", 0.0)

    @property
    def host_overlap(self) -> float:
        """Share of the host's submission time during which the device was computing."""
        return self.host_overlap_us / self.host_submit_us if self.host_submit_us else 0.0


@dataclass(frozen=True)
class MemoryRow:
    """A model's activation pool without reuse and with the greedy plan."""

    model: str
    resident_bytes: int  # params, consts and fixed buffers (the same under every plan)
    none_bytes: int  # pool without reuse: every tensor its own region
    greedy_bytes: int  # pool of the greedy plan
    lower_bound: int  # the most bytes live at once (no plan can do better)
    stream_ordered_bytes: int = 0  # pool of the stream-ordered plan under by-unit streams

    @property
    def saving(self) -> float:
        return 1.0 - self.greedy_bytes / self.none_bytes if self.none_bytes else 0.0

    @property
    def over_bound(self) -> float:
        """Planned pool ÷ max-live lower bound (1.0: optimal)."""
        return self.greedy_bytes / self.lower_bound if self.lower_bound else 1.0


@dataclass(frozen=True)
class AllocRow:
    """A model run with one allocation mode under ``by-unit`` streams.

    Calls are split as a serving loop sees them: ``load`` calls allocate the resident tensors
    (params, consts) once; ``step`` calls allocate and free the activations every step.
    """

    model: str
    mode: str  # "static" or a run-time allocator
    load_calls: int
    load_us: float  # host time allocating resident tensors
    step_allocs: int  # activation allocations …
    step_frees: int  # … and frees
    step_us: float  # host time in them
    makespan_us: float
    peak_bytes: int
    source: str = "measured"  # replayed by the allocator at compile time, timed by the emulator
    alloc_latencies: tuple[float, ...] = ()  # every allocation call's host time, µs

    @property
    def median_alloc_us(self) -> float:
        """The typical cost of one allocation call (the median: pool misses are the outliers)."""
        return statistics.median(self.alloc_latencies) if self.alloc_latencies else 0.0

    @property
    def step_calls(self) -> int:
        return self.step_allocs + self.step_frees

    @property
    def us_per_step_call(self) -> float:
        return self.step_us / self.step_calls if self.step_calls else 0.0

    @property
    def step_makespan_us(self) -> float:
        """The makespan without the load-time allocations, which the host makes first."""
        return self.makespan_us - self.load_us


@dataclass
class BenchReport:
    """The figures of one ``bench`` run (see the module docstring)."""

    device: str
    models: list[str]
    params: dict[str, dict[str, int]]
    policies: list[PolicyRow] = field(default_factory=list)
    memory: list[MemoryRow] = field(default_factory=list)
    allocation: list[AllocRow] = field(default_factory=list)

    def policy_row(self, model: str, policy: str, memory: str = "stream-ordered") -> PolicyRow:
        for row in self.policies:
            if (row.model, row.policy, row.memory) == (model, policy, memory):
                return row
        raise KeyError((model, policy, memory))

    def markdown(self) -> str:
        """The three tables, in GitHub markdown."""
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
                _policy_table(self.policies),
                "",
                "### Memory: activation pool without reuse vs the plans",
                "",
                _memory_table(self.memory),
                "",
                "### Allocation: static plan vs run-time allocators (by-unit streams)",
                "",
                _alloc_table(self.allocation),
            ]
        )

    def headline_models(self) -> list[str]:
        chosen = [m for m in HEADLINE_MODELS if m in self.models]
        return chosen or list(self.models)

    def headline_memory(self) -> str:
        plans = list(dict.fromkeys(r.memory for r in self.policies))
        return "stream-ordered" if "stream-ordered" in plans else plans[0]

    def headline(self) -> str:
        """The runtime's claims against the measured figures, one row per claim."""
        models = self.headline_models()
        memory = self.headline_memory()
        rows: list[list[str]] = []
        if self.policies:
            single = {m: self.policy_row(m, BASELINE, memory) for m in models}
            unit = {m: self.policy_row(m, "by-unit", memory) for m in models if self._has(m)}

            def per_model(rows_by: Mapping[str, PolicyRow]) -> str:
                return "; ".join(
                    f"{m} {_pct(r.utilization.get('cube', 0))} / "
                    f"{_pct(r.utilization.get('vector', 0))}"
                    for m, r in rows_by.items()
                )

            def verdict(values: list[float], ok) -> str:
                bad = [v for v in values if not ok(v)]
                if not bad:
                    return "agrees"
                return f"differs: {', '.join(_pct(v) for v in bad)}"

            one = [r.utilization.get(u, 0.0) for r in single.values() for u in ("cube", "vector")]
            rows.append(
                [
                    "one stream: Cube / Vector utilization",
                    f"≈ {_pct(CLAIM_ONE_STREAM)}",
                    per_model(single),
                    verdict(one, lambda v: abs(v - CLAIM_ONE_STREAM) <= 0.10),
                ]
            )
            if unit:
                sep = [r.utilization.get(u, 0.0) for r in unit.values() for u in ("cube", "vector")]
                rows.append(
                    [
                        "a stream per unit type: Cube / Vector utilization",
                        f"≥ {_pct(CLAIM_BY_UNIT)}",
                        per_model(unit),
                        verdict(sep, lambda v: v >= CLAIM_BY_UNIT - 0.005),
                    ]
                )
                lifts = {
                    m: r.compute_utilization / single[m].compute_utilization
                    for m, r in unit.items()
                }
                claimed = CLAIM_BY_UNIT / CLAIM_ONE_STREAM
                rows.append(
                    [
                        "Cube + Vector utilization, a stream per unit ÷ one stream",
                        f"≈ {claimed:.2f}× (75 % ÷ 40 %)",
                        "; ".join(f"{m} {v:.2f}×" for m, v in lifts.items()),
                        "agrees" if min(lifts.values()) >= 1.8 else "lower",
                    ]
                )
                submit = sum(r.host_submit_us for r in unit.values())
                overlap = sum(r.host_overlap_us for r in unit.values())
                share = overlap / submit if submit else 0.0
                rows.append(
                    [
                        "the host submits while the device computes",
                        "asynchronous launch",
                        f"{_pct(share)} of {submit:,.0f} µs of submission overlaps device work",
                        "agrees" if share >= 0.5 else "differs: the host mostly runs alone",
                    ]
                )
        by_mode: dict[str, list[float]] = {}
        for r in self.allocation:
            by_mode.setdefault(r.mode, []).extend(r.alloc_latencies)
        for mode, claim, label in (
            ("direct", CLAIM_DIRECT_US, "direct device allocation (aclrtMalloc), per call"),
            ("pool", CLAIM_POOL_US, "caching-pool allocation, per call"),
        ):
            calls = by_mode.get(mode)
            if not calls:
                continue
            median, mean = statistics.median(calls), statistics.fmean(calls)
            rows.append(
                [
                    label,
                    f"≈ {claim:g} µs",
                    f"median {median:.1f} µs, mean {mean:.1f} µs over {len(calls)} calls",
                    "agrees" if median <= 2 * claim and median >= claim / 2 else "differs",
                ]
            )
        header = ["claim (runtime documentation)", "claimed", "measured by rtgraph", "verdict"]
        note = (
            f"Models: {', '.join(models)}; streams compared under the `{memory}` memory plan; "
            "allocation over every model, static plan vs run-time allocators under by-unit."
        )
        return _table(header, rows, [False, True, False, False]) + "\n\n" + note

    def _has(self, model: str) -> bool:
        return any(r.model == model and r.policy == "by-unit" for r in self.policies)

    def to_json(self) -> dict[str, Any]:
        """Every figure, JSON-ready (derived columns included)."""
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
        }

    def figure(self):
        """Makespan and Cube + Vector utilization per policy, and the memory plans, per model."""
        import numpy as np

        from rtgraph.reports.style import new_figure, stream_color

        models = self.models
        policies = list(dict.fromkeys(r.policy for r in self.policies))
        memories = list(dict.fromkeys(r.memory for r in self.policies))
        fig = new_figure(4.0 + 1.6 * len(models), 9.0)
        ax_time, ax_util, ax_mem = fig.subplots(3, 1)
        x = np.arange(len(models))
        slots = [(p, m) for m in memories for p in policies]
        width = 0.8 / max(len(slots), 1)
        for k, (policy, memory) in enumerate(slots):
            rows = [self.policy_row(model, policy, memory) for model in models]
            offset = x - 0.4 + width * (k + 0.5)
            style = {
                "color": stream_color(policies.index(policy)),
                "hatch": ("", "//", "..", "xx")[memories.index(memory) % 4] or None,
                "edgecolor": "white",
                "label": f"{policy} ({memory})",
            }
            ax_time.bar(offset, [r.makespan_us for r in rows], width, **style)
            ax_util.bar(offset, [r.compute_utilization for r in rows], width, **style)
        ax_time.set_ylabel("makespan (µs)")
        ax_time.set_title("Stream policies: makespan")
        ax_util.set_ylabel("cube + vector utilization")
        ax_util.set_title("Stream policies: Cube + Vector utilization (max 2.0)")
        for ax in (ax_time, ax_util):
            ax.set_xticks(x, models)
            ax.legend(fontsize=7, ncols=2)
        by_model = {r.model: r for r in self.memory}

        def mib(field: str) -> list[float]:
            return [getattr(by_model[m], field) / 2**20 if m in by_model else 0.0 for m in models]

        ax_mem.bar(x - 0.27, mib("none_bytes"), 0.27, label="no reuse", color="#999999")
        ax_mem.bar(
            x, mib("stream_ordered_bytes"), 0.27, label="stream-ordered (by-unit)", color="#56B4E9"
        )
        ax_mem.bar(x + 0.27, mib("greedy_bytes"), 0.27, label="greedy", color="#0072B2")
        ax_mem.scatter(
            x + 0.27, mib("lower_bound"), marker="_", s=300, color="black", label="max-live bound"
        )
        ax_mem.set_yscale("log")
        ax_mem.set_ylabel("activation pool (MiB)")
        ax_mem.set_title("Memory: pool without reuse vs the plans")
        ax_mem.set_xticks(x, models)
        ax_mem.legend(fontsize=7)
        return fig


def machine_note() -> str:
    """One line naming the machine a wall-clock figure was measured on."""
    import platform

    import numpy as np

    threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    return (
        f"{platform.platform()}; {platform.machine()}, {os.cpu_count()} CPUs; "
        f"Python {platform.python_version()}, NumPy {np.__version__} (BLAS threads: {threads})"
    )


# --- running ----------------------------------------------------------------------------------


def model_paths(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The ``.rtg`` files named by ``paths``; a folder stands for its ``*.rtg`` files, sorted."""
    found: list[Path] = []
    for entry in paths:
        path = Path(entry)
        if path.is_dir():
            inside = sorted(path.glob("*.rtg"))
            if not inside:
                raise UsageError(f"folder {path} has no .rtg files")
            found.extend(inside)
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"{path}: no such file or folder", hint="give .rtg files or folders")
    if not found:
        raise UsageError("no models to benchmark", hint="for example: rtgraph bench models/")
    return list(dict.fromkeys(found))


def bench(
    paths: Sequence[str | os.PathLike[str]],
    *,
    device: str = "ascend-910b",
    progress: bool | None = True,
    params: Mapping[str, Mapping[str, int]] | None = None,
    policies: Sequence[str] = POLICIES,
    memories: Sequence[str] = MEMORY_PLANS,
    allocs: Sequence[str] = ALLOC_MODES,
    stream: TextIO | None = None,
) -> BenchReport:
    """Benchmark every model in ``paths`` on ``device`` (see the module docstring).

    ``params`` overrides program parameters per model name (``{"attention": {"S": 128}}``).
    ``progress``: True draws a progress bar on ``stream`` (stderr by default; redrawn in place
    on a terminal, one line per model otherwise), False is silent, None draws it only on a
    terminal. ``single`` is always run: it is the baseline of every speed-up.
    """
    from rtgraph import api

    files = model_paths(paths)
    for name, allowed in (("memory plan", ALL_MEMORY_PLANS), ("allocation mode", ALLOC_MODES)):
        given = memories if name == "memory plan" else allocs
        for item in given:
            if item not in allowed:
                raise UsageError(
                    f"unknown {name} '{item}'", hint=f"choose from: {', '.join(allowed)}"
                )
    if not memories:
        raise UsageError("bench needs at least one memory plan", hint="e.g. greedy")
    order = [BASELINE, *(p for p in policies if p != BASELINE)]
    spec = api.device(device)
    params = params or {}
    out = stream if stream is not None else sys.stderr
    show = progress if progress is not None else out.isatty()
    bar = _Progress(len(files) * (len(memories) * len(order) + 1 + len(allocs)), out, show)

    report = BenchReport(device=spec.name, models=[], params={})
    for path in files:
        program = api.load(path, dict(params.get(path.stem, {})), device=spec)
        name = program.name
        report.models.append(name)
        report.params[name] = dict(program.params)
        bar.model(name)
        for memory in memories:
            base: float | None = None
            for policy in order:
                bar.step(f"{name}: {policy} ({memory})")
                compiled = api.compile(program, device=spec, streams=policy, memory=memory)
                result = api.run(compiled, device=spec, numerics=False)
                base = result.makespan_us if base is None else base
                report.policies.append(_policy_row(name, policy, memory, compiled, result, base))
        bar.step(f"{name}: memory plans")
        report.memory.append(_memory_row(name, program, spec))
        report.allocation.append(_alloc_row(name, "static", program, spec))
        for mode in allocs:
            bar.step(f"{name}: alloc {mode}")
            report.allocation.append(_alloc_row(name, mode, program, spec))
    bar.finish()
    return report


def _policy_row(name, policy, memory, compiled, result, base: float) -> PolicyRow:
    from rtgraph.stream_program.program import Wait

    return PolicyRow(
        model=name,
        policy=policy,
        memory=memory,
        tasks=len(compiled.tasks),
        makespan_us=result.makespan_us,
        utilization={k: float(v) for k, v in result.utilization.items()},
        speedup=base / result.makespan_us if result.makespan_us > 0 else 1.0,
        events=result.events,
        waits=sum(1 for c in compiled.commands if isinstance(c, Wait)),
        host_busy_us=result.host.busy_us,
        **_host_overlap(result),
    )


def _host_overlap(result) -> dict[str, float]:
    """Host submission time, and how much of it the device spent running tasks."""
    from rtgraph.reports.advisor import covered, segments

    ran = [t for t in result.tasks if t.start is not None and t.end is not None]
    busy = segments([t.start for t in ran], [t.end for t in ran])
    submits = [h for h in result.host_activities if h.kind == "submit"]
    starts, ends = [h.start for h in submits], [h.end for h in submits]
    return {
        "host_submit_us": float(sum(b - a for a, b in zip(starts, ends, strict=True))),
        "host_overlap_us": float(covered(busy, starts, ends).sum()),
    }


def _memory_row(name: str, program, spec) -> MemoryRow:
    from rtgraph import api

    notes = api.compile(program, device=spec, streams=BASELINE, memory="greedy").meta["memory"]
    ordered = api.compile(program, device=spec, streams="by-unit", memory="stream-ordered")
    return MemoryRow(
        model=name,
        resident_bytes=int(notes["resident_bytes"]),
        none_bytes=int(notes["pool_none_bytes"]),
        greedy_bytes=int(notes["pool_bytes"]),
        lower_bound=int(notes["pool_lower_bound"]),
        stream_ordered_bytes=int(ordered.meta["memory"]["pool_bytes"]),
    )


def _alloc_row(name: str, mode: str, program, spec) -> AllocRow:
    from rtgraph import api
    from rtgraph.stream_program.program import Alloc, Free

    alloc = "static" if mode == "static" else mode
    compiled = api.compile(program, device=spec, streams="by-unit", alloc=alloc)
    result = api.run(compiled, device=spec, numerics=False)
    regions = compiled.memory.regions
    calls = [c for c in compiled.commands if isinstance(c, Alloc | Free)]
    load = [c for c in calls if regions[c.tensor].kind in RESIDENT]
    step = [c for c in calls if regions[c.tensor].kind not in RESIDENT]
    return AllocRow(
        model=name,
        mode=mode,
        load_calls=len(load),
        load_us=sum(c.latency_us for c in load),
        step_allocs=sum(1 for c in step if isinstance(c, Alloc)),
        step_frees=sum(1 for c in step if isinstance(c, Free)),
        step_us=sum(c.latency_us for c in step),
        makespan_us=result.makespan_us,
        peak_bytes=result.memory_peak_bytes,
        alloc_latencies=tuple(c.latency_us for c in calls if isinstance(c, Alloc)),
    )


class _Progress:
    """A plain-text progress bar: redrawn in place on a terminal, a line per model elsewhere."""

    WIDTH = 24

    def __init__(self, total: int, out: TextIO, show: bool) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.out = out
        self.show = show
        self.tty = show and out.isatty()

    def model(self, name: str) -> None:
        if self.show and not self.tty:
            print(f"bench: [{self.done}/{self.total}] {name}", file=self.out, flush=True)

    def step(self, label: str) -> None:
        self.done += 1
        if self.tty:
            filled = self.WIDTH * self.done // self.total
            bar = "#" * filled + "." * (self.WIDTH - filled)
            self.out.write(f"\r[{bar}] {self.done}/{self.total} {label[:48]:<48}")
            self.out.flush()

    def finish(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()
        elif self.show:
            print(f"bench: [{self.total}/{self.total}] done", file=self.out, flush=True)


# --- tables -----------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    rule = ["---:" if r else "---" for r in right]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def _policy_table(rows: Sequence[PolicyRow]) -> str:
    base = {(r.model, r.memory): r for r in rows if r.policy == BASELINE}
    body = []
    for r in rows:
        single = base.get((r.model, r.memory))
        lift = r.compute_utilization / single.compute_utilization if single else float("nan")
        body.append(
            [
                r.model,
                r.memory,
                r.policy,
                f"{r.makespan_us:,.1f}",
                f"{r.speedup:.2f}×",
                _pct(r.utilization.get("cube", 0.0)),
                _pct(r.utilization.get("vector", 0.0)),
                _pct(r.utilization.get("dma", 0.0)),
                _pct(r.compute_utilization),
                f"{lift:.2f}×",
                str(r.events),
                str(r.waits),
            ]
        )
    header = [
        "model",
        "memory",
        "streams",
        "makespan µs",
        "speed-up",
        "cube",
        "vector",
        "dma",
        "cube+vector",
        "÷ single",
        "events",
        "waits",
    ]
    return _table(header, body, [False] * 3 + [True] * 9)


def _memory_table(rows: Sequence[MemoryRow]) -> str:
    body = [
        [
            r.model,
            _mib(r.resident_bytes),
            _mib(r.none_bytes),
            _mib(r.greedy_bytes),
            _pct(r.saving),
            _mib(r.lower_bound),
            f"{r.over_bound:.2f}",
            _mib(r.stream_ordered_bytes),
        ]
        for r in rows
    ]
    header = [
        "model",
        "params MiB",
        "no reuse MiB",
        "greedy MiB",
        "saving",
        "max-live MiB",
        "greedy ÷ max-live",
        "stream-ordered MiB (by-unit)",
    ]
    return _table(header, body, [False] + [True] * 7)


def _alloc_table(rows: Sequence[AllocRow]) -> str:
    static = {r.model: r for r in rows if r.mode == "static"}
    body = []
    for r in rows:
        base = static.get(r.model)
        step = r.step_makespan_us
        slower = step / base.step_makespan_us if base and base.step_makespan_us else float("nan")
        body.append(
            [
                r.model,
                r.mode,
                f"{r.load_calls} / {r.load_us:,.0f}",
                f"{r.step_calls} / {r.step_us:,.0f}",
                f"{r.us_per_step_call:.1f}" if r.step_calls else "–",
                f"{r.median_alloc_us:.1f}" if r.alloc_latencies else "–",
                f"{step:,.1f}",
                f"{slower:.2f}×",
                _mib(r.peak_bytes),
                r.source,
            ]
        )
    header = [
        "model",
        "allocation",
        "load: calls / µs",
        "step: calls / µs",
        "µs per step call",
        "median µs per alloc",
        "step makespan µs",
        "÷ static",
        "peak MiB",
        "figures",
    ]
    return _table(header, body, [False, False] + [True] * 7 + [False])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rtgraph.bench models/ [--json] [--figure out.png]`` (as ``rtgraph bench``)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(
        prog="python -m rtgraph.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("paths", nargs="+", help=".rtg files or folders of them")
    parser.add_argument("--device", default="ascend-910b")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--figure", metavar="OUT", help="also save the picture (.png, .svg, .pdf)")
    args = parser.parse_args(argv)
    try:
        report = bench(args.paths, device=args.device, progress=None)
        if args.figure:
            from rtgraph.reports.style import save_figure

            save_figure(report.figure(), args.figure)
    except UsageError as e:
        print(e.render(), file=sys.stderr)
        return 2
    print(json.dumps(report.to_json(), indent=1) if args.json else report.markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
