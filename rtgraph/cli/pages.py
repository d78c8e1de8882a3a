"""``rtgraph report``'s pages: a run's (``run --html`` too) and a sweep folder's.

The run page needs only what ``run`` computed. The sweep page reads the folder ``rtgraph
sweep`` wrote (``table.csv``, ``sweep.json``) and re-runs the points worth a closer look —
the Pareto front, or each model's fastest point when the sweep named no objectives — at most
:data:`MAX_RUN_PAGES` of them, timing only, to give each its own run page under ``runs/``.
A sweep file that has moved since leaves the table and plot, without run pages, and says so.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from rtgraph import api
from rtgraph.cli.arguments import compile_options
from rtgraph.errors import RtgError, UsageError
from rtgraph.files import atomic_output
from rtgraph.ir.reference import check_mode
from rtgraph.reports.advisor import advise
from rtgraph.reports.explain import explain
from rtgraph.sweep.evaluate import task_for
from rtgraph.sweep.points import points
from rtgraph.sweep.spec import AXES, read_sweep
from rtgraph.sweep.table import ALIASES

#: The most points of a sweep that get their own run page.
MAX_RUN_PAGES = 24
SIDECAR, TABLE = "sweep.json", "table.csv"


def _write(path: Path, text: str) -> None:
    with atomic_output(path) as out:
        out.write(text.encode())


def write_run_page(args: argparse.Namespace, path: str, compiled_as, result, check) -> None:
    """The run's HTML page (:mod:`rtgraph.reports.html_run`), written whole or not at all;
    ``explain`` is included when the optimizer ran on a ``.rtg`` program."""
    # matplotlib (the timeline's lanes and ticks): loaded only when a page is asked for
    from rtgraph.reports.html_run import run_report

    program, compiled, spec = compiled_as
    explained = None
    options = compile_options(args) if program is not None else None
    if options is not None and (options.passes or options.opt_level):
        explained = explain(program, options.for_device(spec))
    page = run_report(
        result,
        compiled,
        spec,
        advice=advise(result, compiled, spec),
        check=check,
        check_mode=check_mode(program, args.check) if check is not None else "none",
        explain=explained,
    )
    _write(Path(path), page)


def is_sweep_folder(path: str) -> bool:
    return Path(path).is_dir() and (Path(path) / SIDECAR).is_file()


def write_sweep_page(folder: str, out: str | None) -> Path:
    """The sweep page of ``folder`` (default ``folder/report.html``), with run pages."""
    # matplotlib (the run pages' timelines): loaded only when a page is asked for
    from rtgraph.reports.html_run import run_report
    from rtgraph.reports.html_sweep import front, sweep_report

    root = Path(folder)
    try:
        meta = json.loads((root / SIDECAR).read_text(encoding="utf-8"))
        with open(root / TABLE, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, ValueError) as e:
        raise UsageError(
            f"{folder}: not a finished sweep folder ({e})", hint="run rtgraph sweep FILE --out DIR"
        ) from None
    x, y = _objectives(meta, rows)
    if rows and "pareto" in rows[0]:  # the sweep's own front (its objectives' directions)
        on_front = {k for k, r in enumerate(rows) if r.get("pareto") == "1"}
    else:
        on_front = front(rows, x, y)
    chosen = [r for k, r in enumerate(rows) if k in on_front and not r.get("error")]
    chosen = chosen[:MAX_RUN_PAGES]
    pages: dict[str, str] = {}
    note = ""
    try:
        sweep = read_sweep(str(meta.get("sweep", "")))
        by_key = {p.key: p for p in points(sweep)}
    except RtgError as e:
        sweep, by_key = None, {}
        note = f"no run pages: the sweep file cannot be read now ({e.message})"
    for row in chosen if sweep is not None else []:
        point = by_key.get(row["point"])
        if point is None:
            continue
        task = task_for(sweep, point)
        program = api.parse(task.text, task.filename, task.params, device=task.device)
        spec = api.device_for(task.device, program.device)
        compiled = api.compile(program, device=spec, options=task.options)
        result = api.run(compiled, device=spec, numerics=False)
        name = f"runs/{row['point']}.html"
        (root / "runs").mkdir(exist_ok=True)
        _write(
            root / name, run_report(result, compiled, spec, advice=advise(result, compiled, spec))
        )
        pages[row["point"]] = name
    target = Path(out) if out else root / "report.html"
    links = (
        pages
        if target.parent.resolve() == root.resolve()
        else {k: str((root / v).resolve()) for k, v in pages.items()}
    )
    axes = [a for a in AXES if a in (rows[0] if rows else {})]
    axes += [c for c in (rows[0] if rows else {}) if c.startswith("param_")]
    page = sweep_report(
        rows, meta, x=x, y=y, axes=axes, run_pages=links, on_front=on_front, note=note
    )
    _write(target, page)
    return target


def _objectives(meta: dict, rows: list[dict[str, str]]) -> tuple[str, str]:
    """The plot's two columns: the sweep's ``--pareto`` objectives, else makespan × memory."""
    named = [
        ALIASES.get(n.strip().lstrip("-"), n.strip().lstrip("-"))
        for n in str(meta.get("pareto") or "").split(",")
        if n.strip()
    ]
    have = set(rows[0]) if rows else set()
    named = [n for n in named if n in have]
    if len(named) >= 2:
        return named[0], named[1]
    return "makespan_us", "memory_peak_bytes"
