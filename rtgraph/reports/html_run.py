"""One run as a self-contained HTML page: ``rtgraph report`` and ``rtgraph run --html``.

The page answers, top to bottom, the questions a person asks of a run: how long, how busy
(summary: makespan, utilization per unit, streams, host), where the time went (the timeline,
each task's details on hover), where the bytes went (the memory plan over time), what to try
(the advisor), whether the answer is right (the check against the reference interpreter), what
the compiler did (its report and, when the optimizer ran, ``explain``), and every task in a
sortable table. :func:`run_report` returns the HTML; the CLI writes it atomically.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator.results import RunResult
from rtgraph.reports.advisor import Advice
from rtgraph.reports.html_page import Markup, Section, escape, page, table
from rtgraph.reports.html_timeline import legend, svg_memory, svg_timeline
from rtgraph.reports.style import bytes_label
from rtgraph.stream_program.listing import compile_report
from rtgraph.stream_program.program import StreamProgram

#: The most rows the task table lists (the longest tasks first when there are more).
MAX_TABLE_ROWS = 5_000


def run_report(
    result: RunResult,
    program: StreamProgram,
    device: DeviceSpec,
    *,
    advice: Sequence[Advice] = (),
    check: Mapping[str, Mapping[str, Any]] | None = None,
    check_mode: str = "none",
    explain: str | None = None,
) -> str:
    """The HTML page of one run of ``program`` on ``device``.

    ``check`` is :func:`rtgraph.compare`'s report (None: not checked, and the page says so);
    ``explain`` is the optimizer's account (:func:`rtgraph.reports.explain.explain`).
    """
    capacity = {name: unit.cores for name, unit in device.units.items()}
    timeline, cut = svg_timeline(result, capacity)
    sections = [
        Section("summary", "Summary", _summary(result, program)),
        Section(
            "timeline",
            "Timeline",
            legend(result.tasks) + (f"<p class=muted>{escape(cut)}</p>" if cut else "") + timeline,
        ),
    ]
    memory, left_out = svg_memory(program, result) if program.memory.regions else ("", "")
    if memory:
        note = f"<p class=muted>{escape(left_out)}</p>" if left_out else ""
        head = (
            f"<p class=muted>{escape(program.memory.policy)} plan, "
            f"{escape(bytes_label(program.memory.total_bytes))} in all; each block is a "
            "region from the first task that touched it to the last.</p>"
        )
        sections.append(Section("memory", "Memory", head + note + memory))
    sections.append(Section("advice", "Advice", _advice(advice)))
    sections.append(Section("check", "Check against the reference", _check(check, check_mode)))
    compiler = "<pre>" + escape("\n".join(compile_report(program))) + "</pre>"
    if explain:
        compiler += "<h3>What the optimizer did</h3><pre>" + escape(explain) + "</pre>"
    sections.append(Section("compiler", "Compiler", compiler))
    sections.append(Section("tasks", "Tasks", _tasks(result)))
    title = f"{result.program} on {result.device}"
    subtitle = (
        f"makespan {result.makespan_us:,.3f} µs · {len(result.tasks):,} tasks · "
        f"{result.events} events · memory peak {bytes_label(result.memory_peak_bytes)}"
    )
    return page(title, subtitle, sections)


def _summary(result: RunResult, program: StreamProgram) -> str:
    host = result.host
    figures = table(
        ["figure", "value"],
        [
            ["makespan", f"{result.makespan_us:,.3f} µs"],
            ["tasks", f"{len(result.tasks):,}"],
            ["events, barriers", f"{result.events}, {result.barriers}"],
            ["memory peak", bytes_label(result.memory_peak_bytes)],
            [
                "host: busy / blocked",
                f"{result.host.busy_us:,.3f} / {result.host.blocked_us:,.3f} µs",
            ],
            ["host: ioctls, callbacks", f"{host.ioctls:,}, {host.callbacks:,}"],
            ["policy", str(program.meta.get("policy", "—"))],
            *([["padding", result.padding.describe()]] if result.padding is not None else []),
        ],
        numeric=[False, True],
    )
    units = table(
        ["unit", "utilization"],
        [[u, (f"{v:.1%}", v)] for u, v in result.utilization.items()],
        numeric=[False, True],
    )
    streams = table(
        ["stream", "name", "priority", "tasks", "busy µs", "waiting µs", "idle µs"],
        [
            [
                s.stream,
                s.name,
                s.priority,
                s.tasks,
                round(s.busy_us, 3),
                round(s.waiting_us, 3),
                round(s.idle_us, 3),
            ]
            for s in result.streams
        ],
    )
    return figures + units + streams


def _advice(advice: Sequence[Advice]) -> str:
    if not advice:
        return "<p class=muted>Nothing to suggest: no finding passed the advisor's thresholds.</p>"
    rows = []
    for a in advice:
        evidence = ", ".join(f"{k} = {v}" for k, v in a.evidence.items() if not isinstance(v, list))
        rows.append([a.kind, a.message, evidence])
    return table(["finding", "what to try", "evidence"], rows)


def _check(check: Mapping[str, Mapping[str, Any]] | None, mode: str) -> str:
    if check is None or mode == "none":
        why = "the run was timing-only or --check none" if check is None else "--check none"
        return f"<p class=muted>Not checked: {escape(why)}.</p>"
    rows = []
    for name, r in check.items():
        verdict = Markup('<span class="ok">bit-equal</span>')
        if not r["equal"]:
            verdict = Markup('<span class="bad">DIFFERS</span>')
        rows.append(
            [
                name,
                r["checked"],
                f"{r['max_abs']:.3g}",
                f"{r['max_rel']:.3g}",
                r["nonfinite"],
                verdict,
            ]
        )
    scope = "every element" if mode == "full" else "a sample of elements per output"
    head = f"<p class=muted>{escape(mode)} check: {scope}.</p>"
    return head + table(
        ["output", "elements checked", "max abs", "max rel", "inf/NaN", "verdict"],
        rows,
        numeric=[False, True, True, True, True, False],
    )


def _tasks(result: RunResult) -> str:
    ran = [t for t in result.tasks if t.start is not None and t.end is not None]
    note = ""
    if len(ran) > MAX_TABLE_ROWS:
        ran = sorted(ran, key=lambda t: t.start - t.end)[:MAX_TABLE_ROWS]  # type: ignore[operator]
        note = f"<p class=muted>The {MAX_TABLE_ROWS:,} longest tasks of {len(result.tasks):,}.</p>"
    rows = [
        [t.id, t.name, t.op, t.unit, t.stream, t.cores]
        + [round(v, 3) for v in (t.submit or 0.0, t.start, t.end, t.end - t.start)]  # type: ignore[operator]
        for t in ran
    ]
    headers = ["id", "name", "op", "unit", "stream", "cores", "submit µs", "start µs"]
    return note + table(
        [*headers, "end µs", "duration µs"],
        rows,
        sortable=True,
        numeric=[True, False, False, False, True, True, True, True, True, True],
        table_id="task-table",
    )
