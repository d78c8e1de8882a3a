"""How close each stream policy comes to a lower bound on the bundled models.

For every model in ``models/`` (default parameters) and every policy (single, by-unit,
by-unit:2, list), under the ``stream-ordered`` memory plan (reuse that adds no dependency; pass
``--memory`` for others), the emulated makespan on ``ascend-910b`` is divided by lower bounds
from :func:`rtgraph.compiler.bounds.makespan_lower_bound`, computed on the true dependencies
with every task at its cost-model duration alone:

* **classic** — the issue's bound: max(critical path, the busiest unit's work ÷ its cores);
* **LB** — the tightest of the bounds every schedule on this device must also pay: the critical
  path from the host's first submission; per unit, head + work ÷ cores + tail over the binding
  set of its tasks (Jackson's preemptive schedule), and the same for the tasks too wide to run
  two at a time; the same for the one shared HBM (every Cube/Vector byte crosses it, after its
  launch) and for the host link per direction; the host submitting every task in batches; all
  of it for each order in which the host copies can cross the link, the least over the orders.
  "binds" says which term sets LB.

The acceptance figure: on every model, ``by-unit`` or ``list`` within 15 % of the bound.

What no bound counts, and the emulated makespan does: event record/wait latency, running tasks
slowing each other on the shared HBM, and the host's extra ioctls when it moves between
streams (the bound gives it full batches).

Usage: python benchmarks/schedule_quality_models.py [--memory stream-ordered,greedy,none]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rtgraph  # noqa: E402
from rtgraph.bench import machine_note  # noqa: E402
from rtgraph.compiler.bounds import makespan_lower_bound  # noqa: E402

DEVICE = "ascend-910b"
POLICIES = ("single", "by-unit", "by-unit:2", "list")
ACCEPT = 1.15


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", default="stream-ordered")
    args = parser.parse_args()
    memories = args.memory.split(",")
    spec = rtgraph.device(DEVICE)
    models = sorted((ROOT / "models").glob("*.rtg"))

    print("# Schedule quality on the bundled models: makespan ÷ lower bound")
    print(
        f"device {DEVICE}; emulated times (machine-independent); script run on: {machine_note()}\n"
    )
    cells = "".join(f" {p} |" for p in POLICIES)
    head = "| model | memory | classic µs | LB µs | binds |"
    print(f"{head}{cells} best ÷ classic | best ÷ LB | ≤ 1.15 |")
    print("|---|---|---:|---:|---|" + "---:|" * len(POLICIES) + "---:|---:|---|")
    failures = []
    for path in models:
        program = rtgraph.load(path, device=spec)
        bound = makespan_lower_bound(program, spec)
        for memory in memories:
            makespan = {}
            for policy in POLICIES:
                compiled = rtgraph.compile(program, device=spec, streams=policy, memory=memory)
                makespan[policy] = rtgraph.run(compiled, device=spec, numerics=False).makespan_us
            best = min(makespan["by-unit"], makespan["list"])
            ok = best <= ACCEPT * bound.value
            if not ok:
                failures.append(f"{program.name} ({memory})")
            ratios = "".join(f" {makespan[p] / bound.value:.2f} |" for p in POLICIES)
            print(
                f"| {program.name} | {memory} | {bound.classic:,.1f} | {bound.value:,.1f} | "
                f"{bound.binding} |{ratios} {best / bound.classic:.2f} | "
                f"{best / bound.value:.2f} | {'yes' if ok else 'NO'} |"
            )
    print()
    print("Policy columns: makespan ÷ LB.")
    if failures:
        print(f"over 15 % above LB under both by-unit and list: {', '.join(failures)}")
    else:
        print("every model: by-unit or list within 15 % of LB")


if __name__ == "__main__":
    main()
