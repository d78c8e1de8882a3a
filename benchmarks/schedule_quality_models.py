"""How close each stream policy comes to a lower bound on the bundled models.

For every model in ``models/`` (default parameters) and every policy (single, by-unit,
by-unit:2, list), under the default memory plan (greedy) and without reuse (none), the emulated
makespan on ``ascend-910b`` is divided by a lower bound computed from the same cost model:

* **LB** (the issue's bound) = max(critical path of the task DAG, the busiest unit's work ÷ its
  cores), with each task's duration its cost-model estimate alone on an idle device
  (``launch + max(compute, bytes ÷ HBM bandwidth)``; copies ``launch + link or engine time``)
  and its work = duration × block_dim. Edges are the program's data and ``after=`` edges only,
  so false dependencies from memory reuse count against the schedule, as they should.
* **LB+HBM** adds a bound the emulated device also obeys: every Cube/Vector byte crosses the
  one shared HBM, so the makespan is at least the total of those bytes ÷ bandwidth (plus the
  first task's launch). It is tighter on memory-bound models, where LB is optimistic.

The acceptance figure: on every model, ``by-unit`` or ``list`` within 15 % of LB. The column
"binds" says which term of the bound binds (cp: critical path; unit: a unit's work; hbm).

What no bound here counts, and the emulated makespan does: the host's submission (an ioctl of
``ioctl_us`` per batch, and under ``batch_flush = "switch"`` one every time the host moves to
another stream's command), event record/wait latency, HBM sharing between running tasks, and a
single in-order DMA stream where the bound lets copies use all DMA engines at once.

Usage: python benchmarks/schedule_quality_models.py [--memory greedy,none]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rtgraph  # noqa: E402
from rtgraph.bench import machine_note  # noqa: E402
from rtgraph.emulator.timing import task_costs  # noqa: E402
from rtgraph.scheduling import Job, lower_bound  # noqa: E402

DEVICE = "ascend-910b"
POLICIES = ("single", "by-unit", "by-unit:2", "list")
ACCEPT = 1.15


def bounds(compiled, spec) -> tuple[float, float, str]:
    """(LB, LB+HBM, which term binds) for a compiled program on ``spec``."""
    costs = task_costs(compiled, spec)
    bandwidth = spec.memory.bandwidth
    jobs = []
    for t in compiled.tasks:
        moved = costs.bytes[t.id] * 1e6 / bandwidth
        duration = costs.launch[t.id] + max(costs.body[t.id], moved)
        jobs.append(Job(duration, t.unit, tuple(sorted(t.deps)), costs.cores[t.id]))
    capacity = {u: spec.units[u].cores for u in sorted({j.unit for j in jobs})}
    lb = lower_bound(jobs, capacity)
    work = {
        u: sum(j.duration * j.demand for j in jobs if j.unit == u) / c for u, c in capacity.items()
    }
    hbm = sum(costs.bytes) * 1e6 / bandwidth + min(
        (costs.launch[t.id] for t in compiled.tasks if costs.bytes[t.id]), default=0.0
    )
    binding = "hbm" if hbm > lb else ("unit" if max(work.values(), default=0.0) >= lb else "cp")
    return lb, max(lb, hbm), binding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", default="greedy,none")
    args = parser.parse_args()
    memories = args.memory.split(",")
    spec = rtgraph.device(DEVICE)
    models = sorted((ROOT / "models").glob("*.rtg"))

    print("# Schedule quality on the bundled models: makespan ÷ lower bound")
    print(
        f"device {DEVICE}; emulated times (machine-independent); script run on: {machine_note()}\n"
    )
    header = "| model | memory | LB µs | LB+HBM µs | binds |" + "".join(f" {p} |" for p in POLICIES)
    print(header + " best of by-unit/list | ≤ 1.15 |")
    print("|---|---|---:|---:|---|" + "---:|" * len(POLICIES) + "---:|---|")
    failures = []
    for path in models:
        program = rtgraph.load(path, device=spec)
        for memory in memories:
            ratios = {}
            lb = lbh = 0.0
            binding = ""
            for policy in POLICIES:
                compiled = rtgraph.compile(program, device=spec, streams=policy, memory=memory)
                result = rtgraph.run(compiled, device=spec, numerics=False)
                lb, lbh, binding = bounds(compiled, spec)
                ratios[policy] = result.makespan_us / lb
            best = min(ratios["by-unit"], ratios["list"])
            ok = best <= ACCEPT
            if not ok:
                failures.append(f"{program.name} ({memory})")
            cells = "".join(f" {ratios[p]:.2f} |" for p in POLICIES)
            print(
                f"| {program.name} | {memory} | {lb:,.1f} | {lbh:,.1f} | {binding} |{cells} "
                f"{best:.2f} | {'yes' if ok else 'NO'} |"
            )
    print()
    if failures:
        print(f"over 15 % above LB under by-unit and list: {', '.join(failures)}")
    else:
        print("every model: by-unit or list within 15 % of LB")


if __name__ == "__main__":
    main()
