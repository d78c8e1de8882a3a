"""A 200-point sweep on the default local Dask cluster against ``--workers 1``: wall time,
speed-up, and whether the two tables agree.

The sweep is issue 21's acceptance sweep: bundled models × stream policies × memory plans ×
devices (5 × 5 × 4 × 2 = 200 points, timing-only, each model at its own size). Each engine
runs it once into a fresh folder (no cache to read), interleaved: cluster, then serial (the
cluster's start-up — worker processes importing rtgraph — is inside its time). The tables must
be identical but for ``compile_s``, the one wall-clock column. The machine is shared, so the
1-, 5- and 15-minute load averages are printed before and after each run.

A virtual machine's two CPUs do not always compute as two: when the host is busy, two
processes each run slower than one alone. So the machine's own parallel speed-up is measured
before and after the sweeps — a pure-Python loop run in one process, then in two at once:
``2 × (one alone) ÷ (two together)``, 2.00× on two free cores — and the sweep's speed-up is
also given as a fraction of it (the part of the machine's parallelism the cluster used).

Prints one Markdown table: engine, workers, points, wall seconds, speed-up over serial, load.

Usage: python benchmarks/sweep.py [--quick] [--workers N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rtgraph.bench import machine_note  # noqa: E402
from rtgraph.sweep import run_sweep  # noqa: E402
from rtgraph.sweep.evaluate import WALL_CLOCK  # noqa: E402

#: Five bundled models whose points take a second or more each: the work must outweigh the
#: cluster's start-up (two worker processes importing Dask and rtgraph: ~12 s on a loaded
#: 2-core machine) for the speed-up to measure the workers rather than the start-up.
MODELS = ("attention_naive", "transformer_naive", "bert_encoder", "llm_decode", "unet_block")
QUICK_MODELS = ("mlp", "double_buffer")
SWEEP = """[sweep]
mode = "grid"

[axes]
model = [{models}]
device = ["ascend-910b", "ascend-310p"]
streams = ["auto", "single", "by-unit", "by-unit:2", "list"]
memory = ["none", "greedy", "stream-ordered", "timed"]
"""


def _spin(_: int = 0) -> int:
    """A fixed pure-Python loop (the kind of work a sweep point is)."""
    total = 0
    for i in range(12_000_000):
        total += i
    return total


def machine_parallelism() -> float:
    """How many times faster two processes finish two loops than one process finishes one
    each in turn: 2 × (wall of one loop alone) ÷ (wall of two loops at once)."""
    started = time.perf_counter()
    _spin()
    alone = time.perf_counter() - started
    with multiprocessing.get_context("fork").Pool(2) as pool:
        started = time.perf_counter()
        pool.map(_spin, range(2))
        together = time.perf_counter() - started
    return 2 * alone / together


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small models: 80 points")
    parser.add_argument("--workers", type=int, help="cluster workers (default: one per CPU)")
    args = parser.parse_args(argv)
    models = QUICK_MODELS if args.quick else MODELS
    paths = ", ".join(f'"{(ROOT / "models" / m).with_suffix(".rtg").as_posix()}"' for m in models)
    before_runs = machine_parallelism()
    with tempfile.TemporaryDirectory() as folder:
        sweep = Path(folder) / "sweep.toml"
        sweep.write_text(SWEEP.format(models=paths), encoding="utf-8")
        runs = []
        for name, workers in (("local cluster", args.workers), ("serial", 1)):
            before = load()
            started = time.perf_counter()
            done = run_sweep(sweep, Path(folder) / name.replace(" ", "-"), workers=workers)
            runs.append((name, done, time.perf_counter() - started, before, load()))
    after_runs = machine_parallelism()
    serial_s = runs[-1][2]
    tables = [
        [{k: v for k, v in row.items() if k not in WALL_CLOCK} for row in done.rows]
        for _, done, *_ in runs
    ]
    print(f"Sweep of {len(models)} models × 5 policies × 4 memory plans × 2 devices.\n")
    print("| engine | workers | points | computed | wall s | speed-up | load before → after |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, done, seconds, before, after in runs:
        meta = done.meta
        print(
            f"| {name} | {meta['workers']} | {meta['points']} | {meta['computed']} | "
            f"{seconds:.1f} | {serial_s / seconds:.2f}× | {before} → {after} |"
        )
    same = tables[0] == tables[1]
    refused = sum(1 for row in runs[0][1].rows if row["error"])
    print(f"\nTables identical (but for {', '.join(WALL_CLOCK)}): {'yes' if same else 'NO'}.")
    print(f"Points refused by the compiler or emulator: {refused}.")
    ceiling = (before_runs + after_runs) / 2
    speedup = serial_s / runs[0][2]
    print(
        f"The machine's own two-process speed-up (a pure-Python loop, one process against two): "
        f"{before_runs:.2f}× before the sweeps, {after_runs:.2f}× after; the cluster's "
        f"{speedup:.2f}× is {speedup / ceiling:.0%} of their mean."
    )
    print(f"Machine: {machine_note()}; load averages are 1/5/15-minute.")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
