"""How low the static memory planner packs published instances, and how long it takes.

Reads the shared benchmark data (``../shared/benchmarks`` from the repository root, or the
directory in ``RTGRAPH_SHARED_BENCHMARKS``) and prints two tables:

* MiniMalloc's challenging instances A–K (capacity 1,048,576 bytes, which MiniMalloc's exact
  solver meets on all): max-live lower bound, greedy-by-size height ÷ capacity, our height ÷
  capacity and ÷ lower bound, whether the height is proven optimal, the seconds until the
  plan returned was found and the planning time;
* the small classic cases in ``memplan/``: our height against the lower bound each reaches;
* a family of guillotine instances with a known optimum, generated here (:func:`guillotine`):
  300 to 3,300 buffers cut out of one (time × address) rectangle, whose optimum is the
  rectangle's height, which is also max-live;
* seeded synthetic compiler-like workloads (chains with skip connections) of 100 to 3,000
  tensors, for the cost of ``"fast"`` (the compiler's default) and ``"best"``.

Usage: ``python benchmarks/memory_planning.py [--method exact|best|heuristic|fast|
greedy_by_size] [--time-limit S] [--budget N] [--only A,B,...] [--tables guillotine,...]``.
``exact`` (the default) searches each MiniMalloc instance for up to ``--time-limit`` seconds
(30) and each guillotine instance for a third of that. ``--tables`` prints only some of
minimalloc, classic, guillotine, synthetic. Tables whose data is missing are skipped with a
message; the exit status is 1 if some plan overlaps or fails its target.
"""

from __future__ import annotations

import argparse
import csv
import heapq
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


def timed_plan(
    records,
    method: str,
    budget: int | None,
    time_limit: float | None = None,
    capacity: int | None = None,
):
    wall, cpu = time.perf_counter(), time.process_time()
    placement = plan(
        records, method=method, budget=budget, time_limit=time_limit, capacity=capacity
    )
    return placement, time.perf_counter() - wall, time.process_time() - cpu


def load() -> str:
    """The 1-minute load average (the machine is shared: times depend on it)."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "n/a"


def minimalloc_table(
    folder: Path, method: str, budget: int | None, limit: float, only: set[str] | None
) -> bool:
    paths = sorted(folder.glob("*.*.csv"))
    paths = [p for p in paths if p.name.split(".")[0] != "RESULTS_local_check"]
    paths = [p for p in paths if p.name.split(".")[1].isdigit()]
    if only:
        paths = [p for p in paths if p.name.split(".")[0] in only]
    ref = reference(folder)
    print(
        f"\nMiniMalloc challenging instances ({folder}), method={method}, budget={budget}, "
        f"time limit {limit:g} s, the capacity given (as MiniMalloc is), load average {load()}"
    )
    head = (
        f"{'inst':>5} {'n':>4} {'lower bd':>9} {'capacity':>9} {'greedy/cap':>10} "
        f"{'ours/cap':>9} {'ours/lb':>8} {'proven':>6} {'best s':>6} {'wall s':>7} "
        f"{'cpu s':>6}  {'ok':>2}  how"
    )
    print(head)
    print("-" * len(head))
    all_ok = True
    ratios = []
    for path in paths:
        name, capacity = path.name.split(".")[0], int(path.name.split(".")[1])
        records = read_records_csv(path)
        base = greedy_by_size(records)
        ours, wall, cpu = timed_plan(records, method, budget, limit, capacity)
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
            f"{ours.height / max(ours.lower_bound, 1):>8.4f} {'yes' if ours.proven else 'no':>6} "
            f"{ours.time_to_best:>6.1f} {wall:>7.2f} {cpu:>6.2f}  {mark:>2}  {ours.method}"
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
    print(
        "ok = no overlap and strictly below greedy-by-size (or at the lower bound); "
        "ours/lb uses the best proven bound; best s = seconds until the plan was found"
    )
    return all_ok


def memplan_table(folder: Path, method: str, budget: int | None, limit: float) -> bool:
    print(f"\nClassic small cases ({folder}), method={method}")
    head = (
        f"{'case':<32} {'n':>3} {'lower bound':>12} {'ours':>12} {'at bound':>8} "
        f"{'proven':>6} {'wall s':>7}"
    )
    print(head)
    print("-" * len(head))
    all_ok = True
    for path in sorted(folder.glob("*.csv")):
        records = read_records_csv(path)
        ours, wall, _ = timed_plan(records, method, budget, limit)
        at = ours.height == ours.lower_bound and not check_placement(records, ours)
        all_ok &= at
        print(
            f"{path.stem:<32} {len(records):>3} {ours.lower_bound:>12,} {ours.height:>12,} "
            f"{'yes' if at else 'NO':>8} {'yes' if ours.proven else 'no':>6} {wall:>7.3f}"
        )
    return all_ok


def guillotine(n: int, seed: int, height: int = 1 << 20, quantum: int = 256) -> list[Record]:
    """``n`` buffers cut from the rectangle [0, 2n) × [0, height) (time × bytes); optimum = height.

    Start from the one rectangle; repeatedly take the piece of largest area (ties: the oldest)
    and cut it in two, across time at a random task boundary or across the address range at a
    random multiple of ``quantum`` (a fair coin when both are possible), until there are ``n``
    pieces. Each piece becomes a buffer living over its time span with its address range's size.
    The pieces tile the rectangle, so at every time the live bytes add up to ``height`` (the
    max-live bound) and the tiling itself is a plan of that height: the optimum, by
    construction. Unlike the compiler-like workloads below (≈ 1.000 for every planner), every
    section is full here, so no byte may be wasted anywhere.
    """
    rng = np.random.default_rng(seed)
    horizon = 2 * n
    pieces = [(-horizon * height, 0, 0, horizon, 0, height)]  # (-area, serial, t0, t1, a0, a1)
    serial = 1
    while len(pieces) < n:
        _, k, t0, t1, a0, a1 = heapq.heappop(pieces)
        width, slots = t1 - t0, (a1 - a0) // quantum
        if width < 2 and slots < 2:
            heapq.heappush(pieces, (0, k, t0, t1, a0, a1))  # too small to cut: never again
            continue
        if width >= 2 and (slots < 2 or rng.random() < 0.5):
            cut = int(rng.integers(t0 + 1, t1))
            halves = [(t0, cut, a0, a1), (cut, t1, a0, a1)]
        else:
            cut = a0 + quantum * int(rng.integers(1, slots))
            halves = [(t0, t1, a0, cut), (t0, t1, cut, a1)]
        for t0_, t1_, a0_, a1_ in halves:
            heapq.heappush(pieces, (-(t1_ - t0_) * (a1_ - a0_), serial, t0_, t1_, a0_, a1_))
            serial += 1
    pieces.sort(key=lambda p: p[1])
    return [Record(f"b{k}", p[2], p[3], p[5] - p[4]) for k, p in enumerate(pieces)]


def guillotine_table(method: str, budget: int | None, limit: float) -> bool:
    print(
        f"\nGuillotine instances with a known optimum (seeded), method={method}, "
        f"time limit {limit:g} s, load average {load()}"
    )
    head = (
        f"{'n':>5} {'seed':>4} {'greedy/opt':>10} {'fast/opt':>8} {'ours/opt':>8} "
        f"{'proven':>6} {'best s':>6} {'wall s':>7} {'cpu s':>6}  how"
    )
    print(head)
    print("-" * len(head))
    all_ok = True
    ratios = []
    for n in (300, 1000, 3300):
        for seed in (0, 1, 2):
            records = guillotine(n, seed)
            optimum = 1 << 20
            base = greedy_by_size(records)
            fast = plan(records, method="fast")
            ours, wall, cpu = timed_plan(records, method, budget, limit)
            sound = not check_placement(records, ours)
            all_ok &= sound and ours.lower_bound <= optimum and ours.height <= base.height
            ratios.append(ours.height / optimum)
            print(
                f"{n:>5} {seed:>4} {base.height / optimum:>10.4f} {fast.height / optimum:>8.4f} "
                f"{ours.height / optimum:>8.4f} {'yes' if ours.proven else 'no':>6} "
                f"{ours.time_to_best:>6.1f} {wall:>7.2f} {cpu:>6.2f}  {ours.method}"
            )
    print(
        f"guillotine family: mean ours/optimum {np.mean(ratios):.4f}, worst {max(ratios):.4f}, "
        f"at the optimum {sum(r == 1 for r in ratios)}/{len(ratios)}"
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


def synthetic_table(budget: int | None) -> bool:
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


#: The tables, in the order printed (``--tables`` picks some).
TABLES = ("minimalloc", "classic", "guillotine", "synthetic")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--method",
        default="exact",
        choices=("exact", "best", "heuristic", "fast", "greedy_by_size"),
    )
    parser.add_argument("--budget", type=int, help="search placements (default: the method's)")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds per instance")
    parser.add_argument("--only", help="comma-separated MiniMalloc instance names, e.g. A,E")
    parser.add_argument(
        "--tables",
        default=",".join(TABLES),
        help=f"comma-separated tables to print, of {','.join(TABLES)} (default: all)",
    )
    args = parser.parse_args(argv)
    tables = set(args.tables.split(","))
    if not tables <= set(TABLES):
        parser.error(f"--tables: unknown {sorted(tables - set(TABLES))}; known: {TABLES}")
    data = shared_benchmarks()
    print(f"machine: {machine()}")
    only = set(args.only.split(",")) if args.only else None
    ok = True
    if "minimalloc" in tables:
        if not data.is_dir():
            where = f"{data} (set RTGRAPH_SHARED_BENCHMARKS)"
            print(f"skipped: shared benchmark data not found at {where}")
        elif (data / "minimalloc").is_dir():
            ok &= minimalloc_table(
                data / "minimalloc", args.method, args.budget, args.time_limit, only
            )
        else:
            print("skipped MiniMalloc instances: folder minimalloc/ missing")
    if (data / "memplan").is_dir() and not only and "classic" in tables:
        ok &= memplan_table(data / "memplan", args.method, args.budget, args.time_limit)
    if not only and "guillotine" in tables:
        ok &= guillotine_table(args.method, args.budget, args.time_limit / 3)
    if not only and "synthetic" in tables:
        ok &= synthetic_table(args.budget if args.budget is not None else DEFAULT_BUDGET)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
