"""The bench's rows as GitHub Markdown tables: streams, memory, allocation and the headline."""

from __future__ import annotations

from collections.abc import Sequence

from rtgraph.bench.precision import PrecisionRow
from rtgraph.bench.rows import BASELINE, AllocRow, HeadlineRow, MemoryRow, OptRow, PolicyRow


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """A Markdown table; ``right[i]`` right-aligns column ``i`` (numbers)."""
    rule = ["---:" if r else "---" for r in right]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def pct(x: float) -> str:
    """A fraction as a whole percentage: ``0.349`` → ``35 %``."""
    return f"{100 * x:.0f} %"


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def headline_table(rows: Sequence[HeadlineRow]) -> str:
    """One line per claim: what was claimed, when it agrees, what was measured, the verdict."""
    header = ["claim (runtime documentation)", "claimed", "agrees if", "measured by rtgraph"]
    body = [[r.claim, r.claimed, r.agrees_if, r.measured, r.verdict] for r in rows]
    return table([*header, "verdict"], body, [False, True, False, False, False])


def policy_table(rows: Sequence[PolicyRow]) -> str:
    """Makespan, speed-up, utilization, lift over ``single`` and events, per model and policy."""
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
                pct(r.utilization.get("cube", 0.0)),
                pct(r.utilization.get("vector", 0.0)),
                pct(r.utilization.get("dma", 0.0)),
                pct(r.compute_utilization),
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
    return table(header, body, [False] * 3 + [True] * 9)


def memory_table(rows: Sequence[MemoryRow]) -> str:
    """The activation pool without reuse, under greedy (against max-live) and stream-ordered."""
    body = [
        [
            r.model,
            mib(r.resident_bytes),
            mib(r.none_bytes),
            mib(r.greedy_bytes),
            pct(r.saving),
            mib(r.lower_bound),
            f"{r.over_bound:.2f}",
            "yes" if r.proven else "no",
            mib(r.stream_ordered_bytes),
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
        "proven optimal",
        "stream-ordered MiB (by-unit)",
    ]
    return table(header, body, [False] + [True] * 6 + [False, True])


def alloc_table(rows: Sequence[AllocRow]) -> str:
    """Allocation calls and their host time, and the step makespan against the static plan."""
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
                mib(r.peak_bytes),
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
    return table(header, body, [False, False] + [True] * 7 + [False])


def opt_table(rows: Sequence[OptRow]) -> str:
    """Per model, -O0 against -O2: tasks, HBM bytes moved, makespans and utilization lift."""
    base = {r.model: r for r in rows if r.level == 0}
    body = []
    for r in rows:
        o0 = base.get(r.model)
        saved = 1 - r.hbm_bytes / o0.hbm_bytes if o0 and o0.hbm_bytes else 0.0
        body.append(
            [
                r.model,
                f"-O{r.level}",
                str(r.tasks),
                f"{r.hbm_bytes / 2**20:,.1f}",
                pct(saved) if r.level else "—",
                f"{r.single_us:,.1f}",
                f"{r.by_unit_us:,.1f}",
                pct(r.cube_by_unit),
                pct(r.single_compute),
                pct(r.by_unit_compute),
                f"{r.lift:.2f}×",
            ]
        )
    header = [
        "model",
        "level",
        "tasks",
        "HBM MiB moved",
        "saved",
        "single µs",
        "by-unit µs",
        "cube (by-unit)",
        "cube+vector single",
        "cube+vector by-unit",
        "÷ single",
    ]
    return table(header, body, [False, False] + [True] * 9)


def precision_table(rows: Sequence[PrecisionRow]) -> str:
    """Per model and precision: makespan, speed-up over f32, the worst output's error against
    the f32 program, the ops per dtype and the compile's CPU time."""
    body = [
        [
            r.model,
            r.precision,
            f"{r.makespan_us:,.1f}",
            f"{r.speedup:.2f}×",
            f"{r.cosine:.6f}",
            f"{r.sqnr_db:.1f}",
            f"{r.max_rel:.2g}",
            r.mix,
            f"{r.compile_s:.1f}",
        ]
        for r in rows
    ]
    header = [
        "model",
        "precision",
        "makespan µs",
        "vs f32",
        "cosine",
        "SQNR dB",
        "max rel",
        "ops by dtype",
        "compile s (CPU)",
    ]
    return table(header, body, [False, False, True, True, True, True, True, False, True])
