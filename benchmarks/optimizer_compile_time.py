"""Compile time with the graph optimizer (-O2) against without it (-O0), at up to 100k tasks.

The programs are :mod:`compile_scaling`'s — independent chains of ``softmax(relu(h @ w + b))``
steps unrolled by a loop, so that every -O2 pass has work: the bias and ReLU fuse into the Cube
task where the device allows, the rest into Vector kernels, and each chain is a candidate for
tiling and the list-schedule ordering. For each size the whole ``compile_program`` (the same
``by-unit`` streams and ``stream-ordered`` plan) is timed in process CPU seconds, -O0 and -O2
taking turns, best of ``--repeat`` rounds; the table gives both, their ratio (the target is at
most 1.5), the tasks each compiles to, and the optimizer's own share of the -O2 time.

Usage: python benchmarks/optimizer_compile_time.py [--sizes 10000,100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rtgraph  # noqa: E402
from rtgraph.bench import machine_note  # noqa: E402
from rtgraph.compiler import CompileOptions, compile_program  # noqa: E402
from rtgraph.compiler.optimizer.pipeline import optimize  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_scaling import program_text as chains_text  # noqa: E402

#: Each iteration of each chain: a matmul, the bias add, ReLU and softmax.
STEP = "softmax(relu({h} @ w + b), axis = -1)"


def program_text(tasks: int) -> str:
    """About ``tasks`` tasks at -O0: compile_scaling's chains with a softmax in every step."""
    return chains_text(tasks, STEP, ops_per_step=4)


def cpu(fn) -> tuple[float, object]:
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    device = rtgraph.device("ascend-910b")
    print(machine_note())
    print()
    print("| tasks at -O0 | -O0 s | -O2 s | -O2 ÷ -O0 | tasks at -O2 | optimizer s (in -O2) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        program = rtgraph.parse(program_text(size), "scale.rtg")
        best: dict[int, float] = {}
        tasks: dict[int, int] = {}
        opt_s = float("inf")
        for _ in range(args.repeat):
            for level in (0, 2):
                options = CompileOptions(streams="by-unit", opt_level=level)
                took, compiled = cpu(lambda o=options, p=program: compile_program(p, device, o))
                best[level] = min(best.get(level, float("inf")), took)
                tasks[level] = len(compiled.tasks)  # type: ignore[attr-defined]
            bound = CompileOptions(streams="by-unit", opt_level=2).for_device(device)
            opt_s = min(opt_s, cpu(lambda b=bound, p=program: optimize(p, b))[0])
        print(
            f"| {tasks[0]:,} | {best[0]:.2f} | {best[2]:.2f} | {best[2] / best[0]:.2f} "
            f"| {tasks[2]:,} | {opt_s:.2f} |"
        )


if __name__ == "__main__":
    main()
