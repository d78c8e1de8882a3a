"""How close the greedy memory plan comes to the max-live lower bound on the bundled models.

For every model in ``models/`` (default parameters) the activation pool (device copies of
inputs and every op result; params and consts are resident and the same under every plan) is
planned by ``plan_memory`` with ``greedy`` and compared with:

* **no reuse** (``none``): every tensor its own region — the baseline a planner is measured on;
* **max-live**: the most bytes live at any one program position — no placement can use less,
  so ``greedy ÷ max-live`` is the plan's distance from optimal (acceptance: ≤ 1.10).

Also shown: the whole device footprint (resident + pool) under each plan. Lifetimes are program
positions, as the planner sees them; all figures are bytes, independent of the machine.

Usage: python benchmarks/memory_quality.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rtgraph  # noqa: E402
from rtgraph.bench import machine_note  # noqa: E402

DEVICE = "ascend-910b"
ACCEPT = 1.10


def mib(n: int) -> str:
    return f"{n / 2**20:,.2f}"


def main() -> None:
    spec = rtgraph.device(DEVICE)
    print("# Memory plan quality on the bundled models: greedy pool ÷ max-live lower bound")
    print(f"device {DEVICE}; byte counts (machine-independent); run on: {machine_note()}\n")
    print(
        "| model | tensors | resident MiB | no reuse MiB | greedy MiB | max-live MiB | saving "
        "| greedy ÷ max-live | ≤ 1.10 | total none MiB | total greedy MiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    worst = 0.0
    for path in sorted((ROOT / "models").glob("*.rtg")):
        program = rtgraph.load(path, device=spec)
        notes = {}
        for memory in ("none", "greedy"):
            compiled = rtgraph.compile(program, device=spec, streams="single", memory=memory)
            notes[memory] = compiled.meta["memory"]
        greedy = notes["greedy"]
        pooled = sum(1 for r in compiled.memory.regions.values() if r.kind in ("input", "value"))
        bound = greedy["pool_lower_bound"]
        ratio = greedy["pool_bytes"] / bound if bound else 1.0
        worst = max(worst, ratio)
        print(
            f"| {program.name} | {pooled} | {mib(greedy['resident_bytes'])} "
            f"| {mib(greedy['pool_none_bytes'])} | {mib(greedy['pool_bytes'])} | {mib(bound)} "
            f"| {greedy['saving']:.0%} | {ratio:.3f} | {'yes' if ratio <= ACCEPT else 'NO'} "
            f"| {mib(notes['none']['total_bytes'])} | {mib(greedy['total_bytes'])} |"
        )
    print(f"\nworst greedy ÷ max-live: {worst:.3f} (acceptance ≤ {ACCEPT})")


if __name__ == "__main__":
    main()
