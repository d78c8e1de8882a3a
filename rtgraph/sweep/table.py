"""A sweep's results as one tidy table: a row per point, a column per axis and per figure.

The columns, in order (:data:`COLUMNS` says what each holds; ``sweep.json`` repeats it):
``point``, the axes (``model`` … ``precision``), ``program`` (its name), one ``param_NAME``
per swept parameter, the figures (``makespan_us``, one ``util_UNIT`` per unit the devices
have, ``memory_peak_bytes``, ``events``, ``waits``, ``tasks``, ``hbm_bytes``,
``host_busy_us``, ``compile_s``, and ``max_rel_error`` when numerics are on), ``error``
(the rendered error of a point that was refused, else empty), ``result`` (its per-point
JSON, relative to the output folder) and, with ``--pareto``, ``pareto`` (1 on the front,
else 0). Written as CSV, and as Parquet when pyarrow is installed.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from rtgraph.errors import UsageError, did_you_mean
from rtgraph.files import write_atomic
from rtgraph.sweep.spec import AXES

FIGURES: dict[str, str] = {
    "makespan_us": "emulated makespan, µs",
    "memory_peak_bytes": "device memory peak, bytes",
    "events": "distinct events the run used",
    "waits": "event waits the compiler inserted",
    "tasks": "tasks of the compiled program",
    "hbm_bytes": "bytes the tasks read and write in device memory",
    "host_busy_us": "emulated host time spent submitting and allocating, µs",
    "compile_s": "compile time on this machine, s (the only wall-clock column)",
    "max_rel_error": "largest error of an output against the reference, over the output's "
    "largest magnitude (numerics)",
}
COLUMNS: dict[str, str] = {
    "point": "the point's stable key (a hash of its axis and parameter values)",
    "model": "the model file, as the sweep file names it",
    "device": "the device spec (the program's own when the file sweeps none)",
    "streams": "stream policy",
    "memory": "static memory plan",
    "alloc": "allocation: static plan or a run-time allocator",
    "opt_level": "optimization level",
    "batch_size": "host submission batch (empty: the device's)",
    "fast_math": "fused kernels keep f32 intermediates",
    "precision": "the dtypes the program computes in (--precision)",
    "program": "the program's name (empty when the point was refused before parsing)",
    "param_NAME": "a swept program parameter",
    "makespan_us": FIGURES["makespan_us"],
    "util_UNIT": "share of the run a unit type was busy (0..1)",
    **{k: v for k, v in FIGURES.items() if k != "makespan_us"},
    "error": "why the point was refused (compiler or emulator error), else empty",
    "result": "the point's result JSON, relative to the output folder",
    "pareto": "1 when the point is on the --pareto front, else 0",
}
#: Short names --pareto and --plot accept for the figures people ask for most.
ALIASES = {
    "makespan": "makespan_us",
    "memory": "memory_peak_bytes",
    "peak": "memory_peak_bytes",
    "hbm": "hbm_bytes",
    "compile": "compile_s",
    "error": "max_rel_error",
}


def build_rows(
    points: Sequence, results: Sequence[Mapping], paths: Sequence[str]
) -> list[dict[str, object]]:
    """One row per point from its axis values and its result (the same order)."""
    units = sorted({u for r in results for u in r.get("utilization", {})})
    rows = []
    for point, result, path in zip(points, results, paths, strict=True):
        row: dict[str, object] = {"point": point.key}
        row.update({a: point.values[a] for a in AXES})
        row["device"] = row["device"] or result.get("device")  # the program's own
        row["program"] = result.get("program")
        row.update({f"param_{k}": v for k, v in point.params.items()})
        row["makespan_us"] = result.get("makespan_us")
        utilization = result.get("utilization", {})
        row.update({f"util_{u}": utilization.get(u) for u in units})
        for name in FIGURES:
            if name != "makespan_us" and (name != "max_rel_error" or "max_rel_error" in result):
                row[name] = result.get(name)
        row["error"] = result.get("error", "")
        row["result"] = path
        rows.append(row)
    return rows


def column(rows: Sequence[Mapping], name: str) -> str:
    """The table column ``name`` names (an alias, or a column), else a usage error."""
    name = ALIASES.get(name, name)
    known = list(rows[0]) if rows else list(COLUMNS)
    if name not in known:
        hint = did_you_mean(name, [*known, *ALIASES]) or f"columns: {', '.join(known)}"
        raise UsageError(f"no column '{name}' in the sweep's table", hint=hint)
    return name


def pareto_front(rows: Sequence[Mapping], objectives: str) -> list[bool]:
    """Which rows are on the Pareto front of ``objectives`` (``a,b``: minimise each; ``-a``
    maximises ``a``). A row is on it when no other row is at least as good in every objective
    and better in one; rows with an error or a missing figure are never on it."""
    wanted = [o.strip() for o in objectives.split(",") if o.strip()]
    if len(wanted) < 2:
        raise UsageError(f"--pareto {objectives}: name two or more columns", hint="makespan,memory")
    signs = [(column(rows, o.lstrip("-")), -1.0 if o.startswith("-") else 1.0) for o in wanted]
    scores: list[tuple[float, ...] | None] = []
    for row in rows:
        values = [row.get(c) for c, _ in signs]
        usable = not row.get("error") and all(isinstance(v, int | float) for v in values)
        scores.append(
            tuple(s * float(v) for v, (_, s) in zip(values, signs, strict=True)) if usable else None
        )
    return [
        a is not None
        and not any(
            b is not None and all(y <= x for x, y in zip(a, b, strict=True)) and b != a
            for b in scores
        )
        for a in scores
    ]


def to_csv(rows: Sequence[Mapping]) -> str:
    """The table as CSV text (None as an empty cell, booleans as true/false)."""
    out = io.StringIO()
    if not rows:
        return ""
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(v) for k, v in row.items()})
    return out.getvalue()


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # shortest round-trip text: two runs compare exactly
    return value


def write_tables(rows: Sequence[Mapping], folder: Path) -> list[Path]:
    """``table.csv`` (and ``table.parquet`` when pyarrow is installed) in ``folder``."""
    written = [write_atomic(folder / "table.csv", to_csv(rows))]
    try:
        # pyarrow is optional and heavy: Parquet is written only where it is installed.
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return written
    buffer = pa.BufferOutputStream()
    table = pa.Table.from_pylist([{k: _cell(v) for k, v in r.items()} for r in rows])
    pq.write_table(table, buffer)
    written.append(write_atomic(folder / "table.parquet", buffer.getvalue().to_pybytes()))
    return written
