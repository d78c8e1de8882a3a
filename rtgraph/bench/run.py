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

This module compiles and runs the models and fills a :class:`~rtgraph.bench.report.BenchReport`
with rows; :mod:`rtgraph.bench.claims` sets the runtime documentation's claims against them.
Every run is timing-only (``numerics=False``): the numbers are the emulator's clock, not this
machine's.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rtgraph import api
from rtgraph.bench.precision import precision_rows
from rtgraph.bench.progress import Progress
from rtgraph.bench.report import BenchReport
from rtgraph.bench.rows import (
    BASELINE,
    EMULATED,
    SPEC_COSTED,
    AllocRow,
    MemoryRow,
    OptRow,
    PolicyRow,
)
from rtgraph.compiler.optimizer.precision_vocabulary import PRECISIONS
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.passes.memory_plans import PLANS
from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator.results import RunResult
from rtgraph.errors import UsageError
from rtgraph.ir.graph import Program
from rtgraph.reports.advisor import covered, segments
from rtgraph.stream_program.program import Alloc, Free, StreamProgram, Wait

POLICIES: tuple[str, ...] = ("single", "by-unit", "list")
#: The plans a default run compares (``timed`` is left out; ``--memory`` may name any of PLANS).
MEMORY_PLANS: tuple[str, ...] = ("stream-ordered", "greedy", "none")
ALLOC_MODES: tuple[str, ...] = ("direct", "pool", "mixed")
#: Region kinds allocated once at load time; every other region is allocated every step.
RESIDENT = ("param", "const", "buffer")


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


def _every_model(
    values: Mapping[str, int], files: Sequence[Path], spec: DeviceSpec
) -> dict[Path, dict[str, int]]:
    """``values`` split by model: each model gets those of its declared parameters (read from
    its defaults); a :class:`UsageError` for a name no model declares, before any work."""
    if not values:
        return {}
    chosen = {}
    for path in files:
        names = api.load(path, device=spec).params
        chosen[path] = {k: v for k, v in values.items() if k in names}
    unused = set(values) - {k for mine in chosen.values() for k in mine}
    if unused:
        raise UsageError(
            f"-D {sorted(unused)[0]}: no model benchmarked declares that parameter",
            hint="-D NAME=VALUE sets NAME in every model that declares it; "
            "-D MODEL.NAME=VALUE sets it in one",
        )
    return chosen


def bench(
    paths: Sequence[str | os.PathLike[str]],
    *,
    device: str = "ascend-910b",
    progress: bool | None = True,
    params: Mapping[str, Mapping[str, int]] | None = None,
    policies: Sequence[str] = POLICIES,
    memories: Sequence[str] = MEMORY_PLANS,
    allocs: Sequence[str] = ALLOC_MODES,
    precisions: Sequence[str] = (),
    stream: TextIO | None = None,
    jobs: int | None = None,
) -> BenchReport:
    """Benchmark every model in ``paths`` on ``device`` (see the module docstring).

    ``params`` overrides program parameters per model name (``{"attention": {"S": 128}}``);
    under the key ``"*"``, for every model that declares the parameter (a name no model
    declares is a :class:`UsageError`, before any work).
    ``progress``: True draws a progress bar on ``stream`` (stderr by default; redrawn in place
    on a terminal, one line per model otherwise), False is silent, None draws it only on a
    terminal. ``single`` is always run: it is the baseline of every speed-up. ``precisions``
    adds the precision table for those forms (:mod:`rtgraph.bench.precision`; f32 always runs,
    the baseline of its speed-ups). ``jobs``: how many processes benchmark models side by side
    (None: one per CPU, at most one per model; 1: this process alone). The report is the same
    for every ``jobs`` — each figure is the emulated clock, and the models come in order.
    """
    files = model_paths(paths)
    _check_choices(memories, allocs, precisions)
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise UsageError(f"jobs {jobs!r} is not a positive integer", hint="--jobs 1 runs serially")
    order = [BASELINE, *(p for p in policies if p != BASELINE)]
    spec = api.device(device)
    params = params or {}
    out = stream if stream is not None else sys.stderr
    show = progress if progress is not None else out.isatty()
    plan = _Plan(spec, tuple(memories), tuple(order), tuple(allocs), tuple(precisions))
    bar = Progress(len(files) * plan.steps, out, show)
    every = _every_model(params.get("*", {}), files, spec)
    work = [(path, {**every.get(path, {}), **params.get(path.stem, {})}) for path in files]
    workers = min(jobs or os.cpu_count() or 1, len(work))
    report = BenchReport(device=spec.name, models=[], params={})
    if workers <= 1:
        parts: Iterable[BenchReport] = (_bench_model(p, c, plan, bar) for p, c in work)
        for part in parts:
            _merge(report, part)
    else:  # a fresh server process forks the workers (safe beside threads); a model each
        context = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            futures = [pool.submit(_bench_model, p, c, plan, None) for p, c in work]
            for future in futures:
                part = future.result()
                bar.model(part.models[0])
                bar.advance(plan.steps, f"{part.models[0]}: done")
                _merge(report, part)
    bar.finish()
    return report


@dataclass(frozen=True)
class _Plan:
    """What every model is benchmarked under (one bench run's choices)."""

    spec: DeviceSpec
    memories: tuple[str, ...]
    order: tuple[str, ...]  # the policies, the baseline first
    allocs: tuple[str, ...]
    precisions: tuple[str, ...]

    @property
    def steps(self) -> int:
        """The progress bar's steps per model."""
        return len(self.memories) * len(self.order) + 2 + len(self.allocs) + bool(self.precisions)


def _bench_model(
    path: Path, chosen: dict[str, int], plan: _Plan, bar: Progress | None
) -> BenchReport:
    """One model's rows (``bar``: the progress to step, None in a worker process)."""
    spec = plan.spec
    program = api.load(path, chosen, device=spec)
    name = program.name
    part = BenchReport(device=spec.name, models=[name], params={name: dict(program.params)})
    step = bar.step if bar is not None else (lambda label: None)
    if bar is not None:
        bar.model(name)
    for memory in plan.memories:
        base: float | None = None
        for policy in plan.order:
            step(f"{name}: {policy} ({memory})")
            compiled = api.compile(program, device=spec, streams=policy, memory=memory)
            result = api.run(compiled, device=spec, numerics=False)
            base = result.makespan_us if base is None else base
            part.policies.append(policy_row(name, policy, memory, compiled, result, base))
    step(f"{name}: memory plans")
    part.memory.append(_memory_row(name, program, spec))
    part.allocation.append(_alloc_row(name, "static", program, spec))
    for mode in plan.allocs:
        step(f"{name}: alloc {mode}")
        part.allocation.append(_alloc_row(name, mode, program, spec))
    step(f"{name}: -O0 vs -O2")
    part.optimizer += [_opt_row(name, level, program, spec) for level in OPT_LEVELS]
    if plan.precisions:
        step(f"{name}: precision {', '.join(plan.precisions)}")
        part.precision += precision_rows(name, program, spec, plan.precisions)
    return part


def _merge(report: BenchReport, part: BenchReport) -> None:
    """Add one model's rows to ``report``."""
    report.models += part.models
    report.params.update(part.params)
    report.policies += part.policies
    report.memory += part.memory
    report.allocation += part.allocation
    report.optimizer += part.optimizer
    report.precision += part.precision


#: The optimization levels the bench compares.
OPT_LEVELS = (0, 2)


def _opt_row(name: str, level: int, program: Program, spec: DeviceSpec) -> OptRow:
    runs = {}
    for policy in (BASELINE, "by-unit"):
        options = CompileOptions(streams=policy, opt_level=level)
        compiled = api.compile(program, device=spec, options=options)
        runs[policy] = (compiled, api.run(compiled, device=spec, numerics=False))
    compiled, single = runs[BASELINE]
    by_unit = runs["by-unit"][1]
    return OptRow(
        model=name,
        level=level,
        tasks=len(compiled.tasks),
        hbm_bytes=sum(t.bytes_read + t.bytes_written for t in compiled.tasks),
        single_us=single.makespan_us,
        by_unit_us=by_unit.makespan_us,
        single_compute=_compute(single),
        by_unit_compute=_compute(by_unit),
        cube_by_unit=float(by_unit.utilization.get("cube", 0.0)),
    )


def _compute(result: RunResult) -> float:
    return float(result.utilization.get("cube", 0.0) + result.utilization.get("vector", 0.0))


def _check_choices(
    memories: Sequence[str], allocs: Sequence[str], precisions: Sequence[str] = ()
) -> None:
    """Reject an unknown memory plan, allocation mode or precision, or no memory plan, before
    any run."""
    for name, given, allowed in (
        ("memory plan", memories, tuple(PLANS)),
        ("allocation mode", allocs, ALLOC_MODES),
        ("precision", precisions, tuple(PRECISIONS)),
    ):
        for item in given:
            if item not in allowed:
                raise UsageError(
                    f"unknown {name} '{item}'", hint=f"choose from: {', '.join(allowed)}"
                )
    if not memories:
        raise UsageError("bench needs at least one memory plan", hint="e.g. greedy")


def policy_row(
    name: str,
    policy: str,
    memory: str,
    compiled: StreamProgram,
    result: RunResult,
    base: float,
) -> PolicyRow:
    """The figures of one run of ``compiled`` under ``policy`` and ``memory``: makespan,
    utilization per unit, events and waits, host time; ``base`` is the single-stream
    makespan its speed-up is against (``rtgraph sweep`` records a point with it too)."""
    host_submit_us, host_overlap_us = _host_overlap(result)
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
        host_submit_us=host_submit_us,
        host_overlap_us=host_overlap_us,
    )


def _host_overlap(result: RunResult) -> tuple[float, float]:
    """Host time in submission ioctls, and how much of it the device spent running tasks."""
    ran = [t for t in result.tasks if t.start is not None and t.end is not None]
    busy = segments([t.start for t in ran], [t.end for t in ran])
    submits = [h for h in result.host_activities if h.kind == "submit"]
    starts, ends = [h.start for h in submits], [h.end for h in submits]
    submit_us = float(sum(b - a for a, b in zip(starts, ends, strict=True)))
    return submit_us, float(covered(busy, starts, ends).sum())


def _memory_row(name: str, program: Program, spec: DeviceSpec) -> MemoryRow:
    notes = api.compile(program, device=spec, streams=BASELINE, memory="greedy").meta["memory"]
    ordered = api.compile(program, device=spec, streams="by-unit", memory="stream-ordered")
    return MemoryRow(
        model=name,
        resident_bytes=int(notes["resident_bytes"]),
        none_bytes=int(notes["pool_none_bytes"]),
        greedy_bytes=int(notes["pool_bytes"]),
        lower_bound=int(notes["pool_lower_bound"]),
        stream_ordered_bytes=int(ordered.meta["memory"]["pool_bytes"]),
        proven=bool(notes.get("pool_proven", False)),
    )


def _alloc_row(name: str, mode: str, program: Program, spec: DeviceSpec) -> AllocRow:
    """One allocation mode (``static`` or a run-time allocator) under by-unit streams."""
    compiled = api.compile(program, device=spec, streams="by-unit", alloc=mode)
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
        source=EMULATED if mode == "static" else SPEC_COSTED,
        alloc_latencies=tuple(c.latency_us for c in calls if isinstance(c, Alloc)),
    )
