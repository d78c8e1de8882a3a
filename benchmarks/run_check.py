"""What ``rtgraph run`` costs a user, whole, and what its check against the reference adds.

Runs the command a user types — ``python -m rtgraph run MODEL`` — as a child process, once
per check mode (``--check`` as the program defaults it, ``full``, ``none``), and times each in
process CPU seconds (the child's user + system time: import, parse, compile, the numeric run
and the check). Beside them, in this process, one evaluation of the reference interpreter on
the same program (``rtgraph.ir.interpreter.evaluate``, seed 0: what ``--check full``
evaluates), so the full check's cost can be compared with what it must do at least: the run
without a check plus one reference evaluation. Issue 14's targets: the default check within
5 CPU seconds on ``models/attention.rtg``, and ``--check full`` within 1.1 × (no check + one
reference evaluation).

Every contender runs with one BLAS thread, as every benchmark here does (set for the
children too): a multi-threaded BLAS spins its threads between calls and charges their time
to the process, which on this 2-core machine costs wall time as well. The best of
``--repeat`` rounds in which the contenders take turns.

Usage: python benchmarks/run_check.py [--repeat N] [MODEL ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rtgraph  # noqa: E402
from rtgraph.bench import machine_note  # noqa: E402
from rtgraph.ir.interpreter import evaluate  # noqa: E402
from rtgraph.ir.reference import check_mode  # noqa: E402

DEFAULT_TARGET_S = 5.0  # issue 14: `rtgraph run models/attention.rtg` with the default check
FULL_TARGET = 1.1  # issue 14: --check full ≤ 1.1 × (no check + one reference evaluation)
MODES = ("default", "full", "none")


def child_cpu(model: Path, mode: str) -> float:
    """CPU seconds of ``python -m rtgraph run MODEL [--check MODE]`` (exit status 0 asked)."""
    command = [sys.executable, "-m", "rtgraph", "run", str(model)]
    if mode != "default":
        command += ["--check", mode]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def reference_cpu(model: Path) -> float:
    """CPU seconds of one reference evaluation of ``model`` (parsed beforehand)."""
    program = rtgraph.load(model)
    t0 = time.process_time()
    evaluate(program, seed=0)
    return time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["models/attention.rtg"])
    parser.add_argument("--repeat", type=int, default=3, help="rounds (best of)")
    args = parser.parse_args(argv)
    print(f"machine: {machine_note()}")
    print(f"times: CPU seconds (user + system), best of {args.repeat} rounds, one BLAS thread\n")
    print(
        "| model | default check | run s (default) | run s (full) | run s (none) "
        "| reference s | full ÷ (none + reference) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    ok = True
    for name in args.models:
        model = ROOT / name
        best = dict.fromkeys((*MODES, "reference"), float("inf"))
        for _ in range(args.repeat):
            for mode in MODES:
                best[mode] = min(best[mode], child_cpu(model, mode))
            best["reference"] = min(best["reference"], reference_cpu(model))
        ratio = best["full"] / (best["none"] + best["reference"])
        default = check_mode(rtgraph.load(model), None)
        print(
            f"| {name} | {default} | {best['default']:.2f} | {best['full']:.2f} "
            f"| {best['none']:.2f} | {best['reference']:.2f} | {ratio:.2f} |"
        )
        ok &= best["default"] <= DEFAULT_TARGET_S and ratio <= FULL_TARGET
    print(
        f"\ntargets (issue 14): run with the default check ≤ {DEFAULT_TARGET_S:g} s; "
        f"full ÷ (none + reference) ≤ {FULL_TARGET:g}. "
        + ("Both met." if ok else "Not met: see the table.")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
