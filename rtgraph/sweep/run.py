"""``rtgraph sweep``: read and check the file, run the points, write the table and its sidecar.

The output folder holds:

* ``table.csv`` (and ``table.parquet`` with pyarrow): one row per point (:mod:`.table`);
* ``sweep.json``: the sidecar — the sweep file and its sha256, mode, seed, axes, how many
  points were computed and how many came from the cache, the engine, rtgraph's code version,
  every column with what it holds, the Pareto objectives, and ``complete`` (false while the
  sweep runs: an interrupted sweep is continued with ``--resume``);
* ``cache/``: every point's result JSON, content-addressed (:mod:`.cache`); the table's
  ``result`` column names each row's file;
* with ``--pareto`` / ``--plot``, the pictures (``pareto.png``, ``X-vs-Y.png``).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from rtgraph.errors import UsageError
from rtgraph.files import write_atomic
from rtgraph.sweep.cache import ResultCache, code_version
from rtgraph.sweep.engine import EngineRun, Evaluate, run_points
from rtgraph.sweep.evaluate import WALL_CLOCK, evaluate_point, task_for
from rtgraph.sweep.points import points
from rtgraph.sweep.spec import Sweep, read_sweep
from rtgraph.sweep.table import COLUMNS, build_rows, pareto_front, write_tables

SIDECAR = "sweep.json"


@dataclass
class SweepRun:
    """A finished sweep: its rows, sidecar data and files written."""

    rows: list[dict[str, object]]
    meta: dict[str, object]
    files: list[Path]


def run_sweep(
    path: str | Path,
    out: str | Path,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    resume: bool = False,
    pareto: str | None = None,
    progress: bool = False,
    evaluate: Evaluate = evaluate_point,
) -> SweepRun:
    """Run the sweep file at ``path`` into folder ``out`` (see the module docstring)."""
    sweep = read_sweep(path)  # every located error before any work
    chosen = points(sweep)
    folder = Path(out)
    _check_folder(folder, sweep, resume)
    tasks = [task_for(sweep, p) for p in chosen]
    cache = ResultCache(folder / "cache")
    meta = _meta(sweep, len(chosen), pareto)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / SIDECAR, json.dumps(meta, indent=1) + "\n")
    started = time.perf_counter()
    engine = run_points(
        tasks, cache, workers=workers, scheduler=scheduler, progress=progress, evaluate=evaluate
    )
    wall_s = time.perf_counter() - started
    results = [cache.get(t.cache_key) or {"error": "result missing"} for t in tasks]
    paths = [cache.path(t.cache_key).relative_to(folder).as_posix() for t in tasks]
    rows = build_rows(chosen, results, paths)
    if pareto:
        for row, on in zip(rows, pareto_front(rows, pareto), strict=True):
            row["pareto"] = int(on)
    files = write_tables(rows, folder)
    meta.update(_engine_meta(engine, wall_s), complete=True, columns=_columns(rows))
    meta["tables"] = [f.name for f in files]
    files.append(write_atomic(folder / SIDECAR, json.dumps(meta, indent=1) + "\n"))
    return SweepRun(rows, meta, files)


def _check_folder(folder: Path, sweep: Sweep, resume: bool) -> None:
    """An interrupted sweep's folder is continued only with --resume, and only for its file."""
    try:
        before = json.loads((folder / SIDECAR).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        before = None
    if resume and before is None:
        raise UsageError(f"--resume: {folder} holds no sweep to resume", hint="drop --resume")
    if before is None:
        return
    same = before.get("sweep_sha256") == _sha256(sweep.text)
    if resume and not same:
        raise UsageError(
            f"--resume: {folder} holds a sweep of another file ({before.get('sweep')})",
            hint="resume with the file that started it, or choose another --out",
        )
    if not resume and not before.get("complete", False):
        raise UsageError(
            f"{folder} holds an interrupted sweep ({before.get('sweep')})",
            hint="continue it with --resume (finished points are kept), or choose another --out",
        )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _meta(sweep: Sweep, count: int, pareto: str | None) -> dict[str, object]:
    return {
        "sweep": str(sweep.path),
        "sweep_sha256": _sha256(sweep.text),
        "mode": sweep.mode,
        "samples": sweep.samples,
        "seed": sweep.seed,
        "numerics": sweep.numerics,
        "axes": {k: list(v) for k, v in sweep.axes.items()},
        "params": {k: list(v) for k, v in sweep.params.items()},
        "points": count,
        "pareto": pareto,
        "rtgraph": code_version(),
        "wall_clock_columns": list(WALL_CLOCK),
        "cache": "cache/",
        "complete": False,
    }


def _engine_meta(engine: EngineRun, wall_s: float) -> dict[str, object]:
    return {
        "computed": engine.computed,
        "cached": engine.cached,
        "engine": engine.engine,
        "workers": engine.workers,
        "dashboard": engine.dashboard,
        "wall_s": round(wall_s, 3),
    }


def _columns(rows: list[dict[str, object]]) -> dict[str, str]:
    """Every column of the table with what it holds."""
    found = {}
    for name in rows[0] if rows else COLUMNS:
        general = (
            "param_NAME"
            if name.startswith("param_")
            else "util_UNIT"
            if name.startswith("util_")
            else name
        )
        found[name] = COLUMNS.get(general, "")
    return found
