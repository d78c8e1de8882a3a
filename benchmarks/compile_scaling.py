"""How compile time and timing-only emulation grow with the number of tasks.

Generates ``.rtg`` programs of about 1k, 10k and 100k tasks — eight independent chains of
``relu(h @ w + b)`` (a Cube matmul, then two Vector ops), unrolled by a ``for`` loop — and
for each size prints:

* the front end (parse, check, unroll) and every back-end pass (``streams="by-unit"`` and the
  default ``memory="stream-ordered"``, or ``--memory greedy``), each in µs per task, timed
  inside the real ``compile_program`` (a pass that runs twice is summed);
* the growth factor of the whole compile from 10k to 100k tasks (10.0 is linear);
* timing-only emulation (``numerics=False``) in tasks per second.

If the compile grows faster than about 13× from 10k to 100k tasks, the script names the pass
whose time grew most (run it under ``python -m cProfile`` to see the function).

Usage: python benchmarks/compile_scaling.py [--sizes 1000,10000,100000] [--repeat N]
       [--memory stream-ordered|greedy|none]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rtgraph  # noqa: E402
from rtgraph.bench import machine_note  # noqa: E402
from rtgraph.compiler import pipeline as compiler  # noqa: E402

CHAINS = 8
OPS_PER_STEP = 3  # matmul, add, relu
LINEAR_ENOUGH = 13.0  # 10k → 100k growth above this is reported as super-linear


def program_text(
    tasks: int, step: str = "relu({h} @ w + b)", ops_per_step: int = OPS_PER_STEP
) -> str:
    """A program of about ``tasks`` tasks: CHAINS independent chains, unrolled by a loop, each
    iteration ``h = step`` (``{h}`` stands for the chain's value) of ``ops_per_step`` ops."""
    steps = max(1, tasks // (CHAINS * ops_per_step))
    lines = ['device "ascend-910b"', f"program scale(N = {steps}) {{"]
    lines += ["    param w : f16[64, 64]", "    param b : f16[64]"]
    lines += [f"    input x{c} : f16[64, 64]" for c in range(CHAINS)]
    lines += [f"    h{c} = x{c}" for c in range(CHAINS)]
    lines.append("    for i in 0..N {")
    lines += [f"        h{c} = {step.format(h=f'h{c}')}" for c in range(CHAINS)]
    lines.append("    }")
    lines += [f"    output y{c} = h{c}" for c in range(CHAINS)]
    lines.append("}")
    return "\n".join(lines)


def pass_list(memory: str) -> str:
    """The name of the compiler's pass list that ``memory`` selects (static allocation)."""
    passes = compiler.pipeline(compiler.CompileOptions(memory=memory))
    return next(name for name in PASS_LISTS if getattr(compiler, name) is passes)


#: The pipeline module's pass lists, by attribute name.
PASS_LISTS = ("PASSES", "STREAM_ORDERED_PASSES", "RUNTIME_ALLOC_PASSES")


def timed_passes(times: dict[str, float], passes):
    """``passes`` with each pass wrapped to add its CPU time to ``times``."""

    def wrap(run):
        @functools.wraps(run)  # keeps the pass's name for the graph check
        def timed(graph, options):
            t0 = time.process_time()
            try:
                return run(graph, options)
            finally:
                times[run.__name__] = times.get(run.__name__, 0.0) + time.process_time() - t0

        return timed

    return tuple(wrap(run) for run in passes)


def measure(tasks: int, repeat: int, memory: str) -> dict[str, float]:
    text = program_text(tasks)
    best: dict[str, float] = {}
    for _ in range(repeat):
        times: dict[str, float] = {}
        t0 = time.process_time()
        program = rtgraph.parse(text, "scale.rtg")
        times["front end"] = time.process_time() - t0
        attribute = pass_list(memory)
        original = getattr(compiler, attribute)
        setattr(compiler, attribute, timed_passes(times, original))
        try:
            t0 = time.process_time()
            compiled = rtgraph.compile(
                program, device="ascend-910b", streams="by-unit", memory=memory
            )
            times["compile"] = time.process_time() - t0
        finally:
            setattr(compiler, attribute, original)
        t0 = time.process_time()
        rtgraph.run(compiled, device="ascend-910b", numerics=False)
        times["emulate"] = time.process_time() - t0
        times["tasks"] = len(compiled.tasks)
        for key, value in times.items():
            best[key] = min(best.get(key, value), value)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs per size")
    parser.add_argument("--memory", default="stream-ordered")
    args = parser.parse_args()
    names = list(dict.fromkeys(run.__name__ for run in getattr(compiler, pass_list(args.memory))))
    sizes = [int(s) for s in args.sizes.split(",")]

    print("# Compile and timing-only emulation scaling")
    print(f"machine: {machine_note()}")
    print(f"memory plan {args.memory}; times: process CPU seconds, best of {args.repeat} run(s)\n")
    results = {n: measure(n, args.repeat, args.memory) for n in sizes}
    stages = ["front end", *names, "compile"]
    header = f"| {'stage (µs per task)':<25} |" + "".join(
        f" {int(results[n]['tasks']):>10,} |" for n in sizes
    )
    print(header)
    print("|" + "-" * 27 + "|" + "".join("-" * 11 + ":|" for _ in sizes))
    for stage in stages:
        cells = "".join(f" {1e6 * results[n][stage] / results[n]['tasks']:>10.1f} |" for n in sizes)
        print(f"| {stage:<25} |{cells}")
    cells = "".join(f" {results[n]['tasks'] / results[n]['emulate']:>10,.0f} |" for n in sizes)
    print(f"| {'emulate: tasks/s':<25} |{cells}")

    big = [n for n in sizes if n >= 10_000]
    if len(big) >= 2:
        lo, hi = big[0], big[-1]
        ratio = results[hi]["tasks"] / results[lo]["tasks"]
        grow = results[hi]["compile"] / results[lo]["compile"]
        emu = results[hi]["emulate"] / results[lo]["emulate"]
        print(
            f"\ngrowth {int(results[lo]['tasks']):,} → {int(results[hi]['tasks']):,} tasks "
            f"(×{ratio:.1f}): compile ×{grow:.1f}, emulation ×{emu:.1f}"
        )
        worst = max(
            names,
            key=lambda name: results[hi][name] / max(results[lo][name], 1e-9),
        )
        factor = results[hi][worst] / max(results[lo][worst], 1e-9)
        verdict = "near-linear" if grow <= LINEAR_ENOUGH * ratio / 10 else "SUPER-LINEAR"
        print(f"compile is {verdict}; the pass that grew most: {worst} (×{factor:.1f})")


if __name__ == "__main__":
    main()
