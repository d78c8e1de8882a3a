"""How close the greedy memory plan comes to the max-live lower bound on the bundled models.

For every model in ``models/`` (default parameters) the activation pool (device copies of
inputs and every op result; params and consts are resident and the same under every plan) is
planned by ``plan_memory`` with ``greedy`` and compared with:

* **no reuse** (``none``): every tensor its own region — the baseline a planner is measured on;
* **max-live**: the most bytes live at any one program position — no placement can use less,
  so ``greedy ÷ max-live`` is the plan's distance from optimal (acceptance: ≤ 1.10).

Also shown: the whole device footprint (resident + pool) under each plan, and the
``stream-ordered`` plan (the default) under ``by-unit`` streams: it reuses bytes only where the
streams already order the two tensors, so its lifetimes are longer; it is shown against its
own max-live bound (the same packing problem on those lifetimes) and against greedy's.
Lifetimes are program positions, as the planner sees them; all figures are bytes, independent
of the machine.

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
        "| greedy ÷ max-live | ≤ 1.10 | total none MiB | total greedy MiB "
        "| stream-ordered MiB (by-unit) | ÷ its max-live | ÷ greedy |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    worst = 0.0
    for path in sorted((ROOT / "models").glob("*.rtg")):
        program = rtgraph.load(path, device=spec)
        notes = {}
        for memory in ("none", "greedy"):
            compiled = rtgraph.compile(program, device=spec, streams="single", memory=memory)
            notes[memory] = compiled.meta["memory"]
        greedy = notes["greedy"]
        ordered = rtgraph.compile(program, device=spec, streams="by-unit", memory="stream-ordered")
        so = ordered.meta["memory"]
        so_bound = so["pool_lower_bound"] / so["pool_bytes"] if so["pool_bytes"] else 1.0
        so_greedy = so["pool_bytes"] / greedy["pool_bytes"] if greedy["pool_bytes"] else 1.0
        pooled = sum(1 for r in compiled.memory.regions.values() if r.kind in ("input", "value"))
        bound = greedy["pool_lower_bound"]
        ratio = greedy["pool_bytes"] / bound if bound else 1.0
        worst = max(worst, ratio)
        print(
            f"| {program.name} | {pooled} | {mib(greedy['resident_bytes'])} "
            f"| {mib(greedy['pool_none_bytes'])} | {mib(greedy['pool_bytes'])} | {mib(bound)} "
            f"| {greedy['saving']:.0%} | {ratio:.3f} | {'yes' if ratio <= ACCEPT else 'NO'} "
            f"| {mib(notes['none']['total_bytes'])} | {mib(greedy['total_bytes'])} "
            f"| {mib(so['pool_bytes'])} | {1 / so_bound if so_bound else 1.0:.3f} "
            f"| {so_greedy:.2f} |"
        )
    print(f"\nworst greedy ÷ max-live: {worst:.3f} (acceptance ≤ {ACCEPT})")


if __name__ == "__main__":
    main()
