"""How low the static memory planner packs published instances, and how long it takes.

Reads the shared benchmark data (``../shared/benchmarks`` from the repository root, or the
directory in ``RTGRAPH_SHARED_BENCHMARKS``) and prints two tables:

* MiniMalloc's challenging instances A–K (capacity 1,048,576 bytes, which MiniMalloc's exact
  solver meets on all): max-live lower bound, greedy-by-size height ÷ capacity, our height ÷
  capacity and ÷ lower bound, and the planning time;
* the small classic cases in ``memplan/``: our height against the lower bound each reaches;
* seeded synthetic compiler-like workloads (chains with skip connections) of 100 to 3,000
  tensors, for the cost of ``"fast"`` (the compiler's default) and ``"best"``.

Usage: ``python benchmarks/memory_planning.py [--method best|fast|greedy_by_size]
[--budget N] [--only A,B,...]``. Tables whose data is missing are skipped with a message;
the exit status is 1 if some plan overlaps or fails its target.
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

from rtgraph.compiler.memplan import (  # noqa: E402
    Record,
    build_problem,
    check_placement,
    greedy_by_size,
    plan,
    read_records_csv,
)
from rtgraph.compiler.memplan.planner import DEFAULT_BUDGET  # noqa: E402


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


def synthetic(n: int, seed: int) -> list[Record]:
    """A DNN-like workload: most tensors die within a few tasks, a tenth live long."""
    rng = np.random.default_rng(seed)
    short = rng.geometric(0.4, n)
    long = rng.integers(5, 200, n)
    life = np.where(rng.random(n) < 0.9, short, long)
    size = rng.choice([1, 2, 4, 8, 16, 64], n) * rng.integers(1, 9, n) * 4096
    return [Record(f"t{k}", k, int(k + 1 + life[k]), int(size[k])) for k in range(n)]


def synthetic_table(budget: int) -> bool:
    print("\nSynthetic compiler-like workloads (seeded), alignment 512")
    head = (
        f"{'n':>5} {'seed':>4} {'pairs':>7} {'greedy/lb':>9} {'fast/lb':>8} {'fast ms':>8} "
        f"{'best/lb':>8} {'best s':>7}"
    )
    print(head)
    print("-" * len(head))
    all_ok = True
    for n in (100, 1000, 3000):
        for seed in (0, 1, 2):
            records = synthetic(n, seed)
            pairs = build_problem(records, 512).n_conflicts
            base = greedy_by_size(records, 512)
            wall = time.perf_counter()
            fast = plan(records, alignment=512, method="fast")
            fast_ms = (time.perf_counter() - wall) * 1e3
            wall = time.perf_counter()
            best = plan(records, alignment=512, method="best", budget=budget)
            best_s = time.perf_counter() - wall
            all_ok &= best.height <= fast.height <= base.height
            lb = max(best.lower_bound, 1)
            print(
                f"{n:>5} {seed:>4} {pairs:>7} {base.height / lb:>9.4f} {fast.height / lb:>8.4f} "
                f"{fast_ms:>8.1f} {best.height / lb:>8.4f} {best_s:>7.2f}"
            )
    return all_ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="best", choices=("best", "fast", "greedy_by_size"))
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    parser.add_argument("--only", help="comma-separated MiniMalloc instance names, e.g. A,E")
    args = parser.parse_args(argv)
    data = shared_benchmarks()
    print(f"machine: {machine()}")
    only = set(args.only.split(",")) if args.only else None
    ok = True
    if not data.is_dir():
        print(f"skipped: shared benchmark data not found at {data} (set RTGRAPH_SHARED_BENCHMARKS)")
    elif (data / "minimalloc").is_dir():
        ok &= minimalloc_table(data / "minimalloc", args.method, args.budget, only)
    else:
        print("skipped MiniMalloc instances: folder minimalloc/ missing")
    if (data / "memplan").is_dir() and not only:
        ok &= memplan_table(data / "memplan", args.method, args.budget)
    if not only:
        ok &= synthetic_table(args.budget)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
