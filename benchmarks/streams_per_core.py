"""Streams per core: how far `by-unit:N` (N = the cores) and `list` land from the optimum.

The setting of issue 15, item 5, as a runtime engineer would try it: random DAGs of 8–11
single-core kernels (whole durations 1–9 µs, each earlier task a predecessor with probability
``--density``) on a device whose Vector unit has m = 2 or 3 identical cores and every overhead
zero (no launch, ioctl, submit or event cost), so the emulated makespan is the schedule's own.
Each DAG is written as an ``.rtg`` program of ``kernel(unit = vector, us = …, after = […])``
tasks, compiled under each policy and emulated (timing only).

The optimum of each instance (P | prec | Cmax) comes from a branch and bound over *active*
schedules: some optimal schedule starts every task at time 0 or when another one finishes, so
the search branches, at each completion time, on which ready tasks start on the free cores
(leaving a core idle is a branch too), and prunes with the longest remaining path and the
remaining work ÷ cores. The list scheduler's proven bound seeds the incumbent.

Prints, per core count and policy: instances, mean and worst gap to the optimum, how many are
optimal, and the events (waits) the program needs on average.

Usage: python benchmarks/streams_per_core.py [--instances 100] [--seed 1] [--density 0.25]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rtgraph  # noqa: E402
from rtgraph.compiler.scheduling import Job, list_schedule  # noqa: E402
from rtgraph.stream_program import Wait  # noqa: E402

POLICIES = ("by-unit", "by-unit:{m}", "list")


@dataclass(frozen=True)
class Instance:
    durations: tuple[int, ...]
    preds: tuple[tuple[int, ...], ...]


def random_instance(rng: random.Random, density: float) -> Instance:
    n = rng.randint(8, 11)
    durations = tuple(rng.randint(1, 9) for _ in range(n))
    preds = tuple(tuple(j for j in range(i) if rng.random() < density) for i in range(n))
    return Instance(durations, preds)


def device_toml(cores: int) -> str:
    """The toy device with ``cores`` Vector cores and every overhead zero."""
    text = (ROOT / "rtgraph" / "device" / "specs" / "toy.toml").read_text()
    text = text.replace('name = "toy"', f'name = "zero{cores}"')
    out = []
    section = ""
    for line in text.splitlines():
        stripped = line.split("#")[0].strip()
        if stripped.startswith("["):
            section = stripped
        key = stripped.split("=")[0].strip()
        if key.endswith("_us"):
            line = f"{key} = 0.0"
        elif section == "[units.vector]" and key == "cores":
            line = f"cores = {cores}"
        out.append(line)
    return "\n".join(out) + "\n"


def rtg_text(inst: Instance) -> str:
    lines = ['device "toy"', "program dag() {"]
    for i, (d, ps) in enumerate(zip(inst.durations, inst.preds, strict=True)):
        after = f", after = [{', '.join(f't{p}' for p in ps)}]" if ps else ""
        lines.append(f"    t{i} = kernel(unit = vector, us = {d}{after})")
    lines.append("}")
    return "\n".join(lines) + "\n"


def optimum(inst: Instance, cores: int) -> int:
    """The least makespan of ``inst`` on ``cores`` identical cores (branch and bound)."""
    n, dur, preds = len(inst.durations), inst.durations, inst.preds
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    tail = [0] * n  # longest path from a task's start to the end
    for i in reversed(range(n)):
        tail[i] = dur[i] + max((tail[s] for s in succs[i]), default=0)
    jobs = [Job(float(d), "v", ps) for d, ps in zip(dur, preds, strict=True)]
    best = int(list_schedule(jobs, {"v": cores}).makespan)
    floor = max(max(tail), -(-sum(dur) // cores))
    if best == floor:
        return best

    def search(now: int, running: tuple[tuple[int, int], ...], done: frozenset, left: int) -> None:
        nonlocal best
        started = {j for _, j in running} | done
        ready = [j for j in range(n) if j not in started and all(p in done for p in preds[j])]
        # bound: every unstarted task no earlier than its predecessors allow, then its tail
        head = {j: e for e, j in running}
        bound = max((e for e, _ in running), default=now)
        for j in range(n):
            if j in started:
                continue
            h = max([now, *(head.get(p, now) for p in preds[j] if p not in done)])
            head[j] = h + dur[j]
            bound = max(bound, h + tail[j])
        busy = sum(e - now for e, _ in running)
        bound = max(bound, now + -(-(left + busy) // cores))
        if bound >= best:
            return
        if not ready and not running:
            best = now
            return
        free = cores - len(running)
        for k in range(min(free, len(ready)), -1, -1):
            for chosen in _subsets(ready, k):
                if k == 0 and not running:
                    continue  # idling with nothing running never ends
                now_running = tuple(sorted([*running, *((now + dur[j], j) for j in chosen)]))
                if not now_running:
                    continue
                t = now_running[0][0]
                finished = frozenset(j for e, j in now_running if e == t)
                still = tuple(r for r in now_running if r[0] > t)
                search(t, still, done | finished, left - sum(dur[j] for j in chosen))
                if best == floor:
                    return

    search(0, (), frozenset(), sum(dur))
    return best


def _subsets(items: list[int], k: int):
    if k == 0:
        yield ()
        return
    for i in range(len(items) - k + 1):
        for rest in _subsets(items[i + 1 :], k - 1):
            yield (items[i], *rest)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=100, help="DAGs per core count")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--density", type=float, default=0.25)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"random DAGs of 8–11 single-core kernels, edge density {args.density}, seed {args.seed}")
    print()
    print("| cores | policy | instances | mean gap | worst gap | optimal | waits (mean) |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for cores in (2, 3):
            path = Path(folder) / f"zero{cores}.toml"
            path.write_text(device_toml(cores))
            device = rtgraph.device(str(path))
            gaps: dict[str, list[float]] = {p.format(m=cores): [] for p in POLICIES}
            waits: dict[str, list[int]] = {p: [] for p in gaps}
            for _ in range(args.instances):
                inst = random_instance(rng, args.density)
                best = optimum(inst, cores)
                program = rtgraph.parse(rtg_text(inst), device=device)
                for policy in gaps:
                    compiled = rtgraph.compile(program, device=device, streams=policy)
                    span = rtgraph.run(compiled, device=device, numerics=False).makespan_us
                    gaps[policy].append(span / best - 1.0)
                    waits[policy].append(sum(isinstance(c, Wait) for c in compiled.commands))
            for policy, g in gaps.items():
                hits = sum(x < 1e-9 for x in g)
                print(
                    f"| {cores} | {policy} | {len(g)} | {100 * sum(g) / len(g):.2f} % "
                    f"| {100 * max(g):.1f} % | {hits} | {sum(waits[policy]) / len(g):.1f} |"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
