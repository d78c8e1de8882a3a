"""How low the static memory planner packs published instances, and how long it takes.

Reads the shared benchmark data (``../shared/benchmarks`` from the repository root, or the
directory in ``RTGRAPH_SHARED_BENCHMARKS``) and prints two tables:

* MiniMalloc's challenging instances A–K (capacity 1,048,576 bytes, which MiniMalloc's exact
  solver meets on all): max-live lower bound, greedy-by-size height ÷ capacity, our height ÷
  capacity and ÷ lower bound, and the planning time;
* the small classic cases in ``memplan/``: our height against the lower bound each reaches.

Usage: ``python benchmarks/memory_planning.py [--method best|fast|greedy_by_size]
[--budget N] [--only A,B,...]``. Exits 0 with a message when the data is missing.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from rtgraph.memplan import (  # noqa: E402
    check_placement,
    greedy_by_size,
    plan,
    read_records_csv,
)
from rtgraph.memplan.planner import DEFAULT_BUDGET  # noqa: E402


def shared_benchmarks() -> Path:
    env = os.environ.get("RTGRAPH_SHARED_BENCHMARKS")
    return Path(env) if env else ROOT.parent / "shared" / "benchmarks"


def machine() -> str:
    return (
        f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"NumPy {np.__version__}"
    )


def reference(folder: Path) -> dict[str, dict[str, str]]:
    path = folder / "RESULTS_local_check.csv"
    if not path.exists():
        return {}
    with path.open(newline="") as f:
        return {row["benchmark"]: row for row in csv.DictReader(f)}


def timed_plan(records, method: str, budget: int):
    wall, cpu = time.perf_counter(), time.process_time()
    placement = plan(records, method=method, budget=budget)
    return placement, time.perf_counter() - wall, time.process_time() - cpu


def minimalloc_table(folder: Path, method: str, budget: int, only: set[str] | None) -> bool:
    paths = sorted(folder.glob("*.*.csv"))
    paths = [p for p in paths if p.name.split(".")[0] != "RESULTS_local_check"]
    paths = [p for p in paths if p.name.split(".")[1].isdigit()]
    if only:
        paths = [p for p in paths if p.name.split(".")[0] in only]
    ref = reference(folder)
    print(f"\nMiniMalloc challenging instances ({folder}), method={method}, budget={budget}")
    head = (
        f"{'inst':>5} {'n':>4} {'lower bd':>9} {'capacity':>9} {'greedy/cap':>10} "
        f"{'ours/cap':>9} {'ours/lb':>8} {'wall s':>7} {'cpu s':>6}  {'ok':>2}  how"
    )
    print(head)
    print("-" * len(head))
    all_ok = True
    ratios = []
    for path in paths:
        name, capacity = path.name.split(".")[0], int(path.name.split(".")[1])
        records = read_records_csv(path)
        base = greedy_by_size(records)
        ours, wall, cpu = timed_plan(records, method, budget)
        sound = not check_placement(records, ours)
        # Strictly below the baseline, unless the baseline is already optimal.
        good = ours.height < base.height or ours.height == ours.lower_bound
        all_ok &= sound and good
        if name in ref:
            ratios.append(ours.height / capacity)
        mark = "ok" if sound and good else ("!!" if not sound else "no")
        print(
            f"{name:>5} {len(records):>4} {ours.lower_bound:>9} {capacity:>9} "
            f"{base.height / capacity:>10.3f} {ours.height / capacity:>9.4f} "
            f"{ours.height / max(ours.lower_bound, 1):>8.4f} {wall:>7.2f} {cpu:>6.2f}  {mark:>2}  "
            f"{ours.method}"
        )
        row = ref.get(name)
        if row and int(row["greedy_by_size_offset_height"]) != base.height:
            print(f"      note: reference greedy height {row['greedy_by_size_offset_height']}")
    if ratios:
        print(
            f"challenging instances: mean ours/capacity {np.mean(ratios):.4f}, "
            f"worst {max(ratios):.4f}, at or below capacity {sum(r <= 1 for r in ratios)}"
            f"/{len(ratios)}"
        )
    print("ok = no overlap and strictly below greedy-by-size (or at the lower bound)")
    return all_ok


def memplan_table(folder: Path, method: str, budget: int) -> bool:
    print(f"\nClassic small cases ({folder}), method={method}")
    head = f"{'case':<32} {'n':>3} {'lower bound':>12} {'ours':>12} {'at bound':>8} {'wall s':>7}"
    print(head)
    print("-" * len(head))
    all_ok = True
    for path in sorted(folder.glob("*.csv")):
        records = read_records_csv(path)
        ours, wall, _ = timed_plan(records, method, budget)
        at = ours.height == ours.lower_bound and not check_placement(records, ours)
        all_ok &= at
        print(
            f"{path.stem:<32} {len(records):>3} {ours.lower_bound:>12,} {ours.height:>12,} "
            f"{'yes' if at else 'NO':>8} {wall:>7.3f}"
        )
    return all_ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="best", choices=("best", "fast", "greedy_by_size"))
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    parser.add_argument("--only", help="comma-separated MiniMalloc instance names, e.g. A,E")
    args = parser.parse_args(argv)
    data = shared_benchmarks()
    if not data.is_dir():
        print(f"skipped: shared benchmark data not found at {data} (set RTGRAPH_SHARED_BENCHMARKS)")
        return 0
    print(f"machine: {machine()}")
    only = set(args.only.split(",")) if args.only else None
    ok = True
    if (data / "minimalloc").is_dir():
        ok &= minimalloc_table(data / "minimalloc", args.method, args.budget, only)
    else:
        print("skipped MiniMalloc instances: folder minimalloc/ missing")
    if (data / "memplan").is_dir() and not only:
        ok &= memplan_table(data / "memplan", args.method, args.budget)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
