"""rtgraph's exact memory planner against MiniMalloc's own solver, on the same instances.

MiniMalloc (Moffitt, ASPLOS 2023; github.com/google/minimalloc) is the exact solver issue 15
names as the bar. This script runs its command-line binary and ``plan(method="exact")`` in
turn on each instance, both asked MiniMalloc's question — a plan within the capacity — with
the same time limit, and prints what each found and the CPU seconds it took (the binary's
from the children's resource usage, ours from the process's):

* MiniMalloc's challenging instances A–K (capacity 1,048,576, their files' names), read from
  ``../shared/benchmarks/minimalloc`` (or ``$RTGRAPH_SHARED_BENCHMARKS/minimalloc``);
* the guillotine tilings of ``memory_planning.py`` (300, 1,000 and 3,300 buffers, seeds 0–2),
  whose optimum is the capacity given, with a third of the time limit, as there.

The binary is not a dependency: give it with ``--binary PATH`` (or ``$MINIMALLOC_BIN``; else
``minimalloc`` on the PATH). Without one the script says how to build it and exits 0. It was
built for the figures in benchmarks/README.md from google/minimalloc at 9f5cf81 with
abseil-cpp at its submodule's commit (b75a3ff; googletest and the C++ tests left out of
``CMakeLists.txt``): ``cmake .. -DCMAKE_BUILD_TYPE=Release && make minimalloc``.

Usage: python benchmarks/minimalloc_peer.py [--binary PATH] [--time-limit S] [--tables
minimalloc,guillotine]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from memory_planning import guillotine, machine, shared_benchmarks  # noqa: E402

from rtgraph.compiler.memplan import Record, check_placement, plan, read_records_csv  # noqa: E402

_HEIGHT = re.compile(r"Validation PASS, height (\d+)")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_minimalloc(
    binary: str, path: Path, capacity: int, limit: float
) -> tuple[int | None, float]:
    """MiniMalloc's height within ``capacity`` (None: no plan within the limit) and its CPU s."""
    before = children_cpu()
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [
                binary,
                f"--capacity={capacity}",
                f"--input={path}",
                f"--output={Path(tmp) / 'out.csv'}",
                f"--timeout={limit:g}s",
                "--validate",
            ],
            capture_output=True,
            text=True,
            timeout=limit + 60,
            check=False,
        )
    found = _HEIGHT.search(done.stdout + done.stderr)
    return (int(found.group(1)) if found else None), children_cpu() - before


def run_ours(records: list[Record], capacity: int, limit: float) -> tuple[int, bool, float]:
    """Our plan's height, whether it is proven optimal, and the CPU seconds it took."""
    cpu = time.process_time()
    placement = plan(records, method="exact", time_limit=limit, capacity=capacity)
    spent = time.process_time() - cpu
    assert not check_placement(records, placement), "an invalid plan"
    return placement.height, placement.proven, spent


def row(name: str, n: int, capacity: int, theirs: tuple, ours: tuple) -> str:
    height, cpu = theirs
    mm = f"{height / capacity:>9.4f}" if height is not None else f"{'none':>9}"
    return (
        f"{name:>10} {n:>5} {capacity:>9} {mm} {cpu:>7.2f}   "
        f"{ours[0] / capacity:>9.4f} {'yes' if ours[1] else 'no':>6} {ours[2]:>7.2f}"
    )


def header(title: str) -> None:
    print(f"\n{title}")
    head = (
        f"{'instance':>10} {'n':>5} {'capacity':>9} {'MM/cap':>9} {'MM cpu':>7}   "
        f"{'ours/cap':>9} {'proven':>6} {'cpu s':>7}"
    )
    print(head)
    print("-" * len(head))


def minimalloc_instances(binary: str, limit: float) -> tuple[int, int]:
    folder = shared_benchmarks() / "minimalloc"
    paths = sorted(p for p in folder.glob("[A-K].*.csv") if p.name.split(".")[1].isdigit())
    header(f"MiniMalloc's challenging instances ({folder}), time limit {limit:g} s each")
    wins = [0, 0]
    for path in paths:
        capacity = int(path.name.split(".")[1])
        records = read_records_csv(path)
        theirs = run_minimalloc(binary, path, capacity, limit)
        ours = run_ours(records, capacity, limit)
        wins[0] += theirs[0] is not None
        wins[1] += ours[0] <= capacity
        print(row(path.name.split(".")[0], len(records), capacity, theirs, ours))
    print(f"within the capacity: MiniMalloc {wins[0]}/{len(paths)}, ours {wins[1]}/{len(paths)}")
    return wins[0], wins[1]


def guillotine_instances(binary: str, limit: float) -> None:
    header(f"Guillotine tilings (optimum = capacity = 1,048,576), time limit {limit:g} s each")
    found = [0, 0]
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n in (300, 1000, 3300):
            for seed in (0, 1, 2):
                records = guillotine(n, seed)
                path = Path(tmp) / f"g{n}_{seed}.csv"
                lines = ["id,lower,upper,size"]
                lines += [f"{r.id},{r.lower},{r.upper},{r.size}" for r in records]
                path.write_text("\n".join(lines) + "\n")
                capacity = 1 << 20
                theirs = run_minimalloc(binary, path, capacity, limit)
                ours = run_ours(records, capacity, limit)
                found[0] += theirs[0] is not None
                found[1] += ours[0] <= capacity
                total += 1
                print(row(f"{n}/{seed}", n, capacity, theirs, ours))
    print(f"at the optimum: MiniMalloc {found[0]}/{total}, ours {found[1]}/{total}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=os.environ.get("MINIMALLOC_BIN") or "minimalloc")
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--tables", default="minimalloc,guillotine")
    args = ap.parse_args()
    binary = shutil.which(args.binary)
    if binary is None:
        print(
            f"skipped: no MiniMalloc binary ({args.binary!r}); build it from "
            "github.com/google/minimalloc and pass --binary PATH (see this script's docstring)"
        )
        return 0
    print(f"machine: {machine()}; MiniMalloc: {binary}")
    tables = set(args.tables.split(","))
    if "minimalloc" in tables:
        minimalloc_instances(binary, args.time_limit)
    if "guillotine" in tables:
        guillotine_instances(binary, args.time_limit / 3)
    print("MM = MiniMalloc; 'none' = no plan within the capacity in the time limit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
