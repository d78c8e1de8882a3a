"""What the emulator costs on top of the kernels it runs, against a plain loop and against Dask.

Two tables:

1. **Bundled models** (transformer_block and attention at their default shapes, ``by-unit``
   streams, greedy memory): the numeric run (``rtgraph.run``, real NumPy kernels on the emulated
   device memory) against the same op kernels called in a plain Python loop over the program's
   op nodes (``run_kernel`` on a dict of arrays — the reference interpreter's loop, without
   data generation). The ratio is the emulator's whole overhead: event loop, host model, stream
   queues, device-memory views and copies. Target: ≤ 1.15 on the transformer block.
2. **Per-task overhead on a DAG of tiny kernels** (8 chains of 16×16 f32 ``relu(h @ w + b)``,
   about 2,400 tasks, so the arithmetic is negligible): (time − plain loop) ÷ tasks for rtgraph's
   numeric run and for Dask's threaded scheduler (``dask.threaded.get``) running the same DAG of
   ``run_kernel`` calls. Skipped with a message if Dask is not installed (it is not a
   dependency; ``pip install dask`` to run it).

Inputs and params are generated once and passed to every contender, with one BLAS thread (set
before NumPy loads). Times are the best of ``--repeat`` rounds in which the contenders take
turns, so a slow stretch of a shared machine does not land on one of them only: process CPU
seconds for the models (both contenders are single-threaded, and CPU time does not count the
time another tenant holds the core), wall seconds for the tiny-kernel DAG (Dask runs threads).

Usage: python benchmarks/simulate_overhead.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rtgraph  # noqa: E402
from rtgraph.bench import machine_note  # noqa: E402
from rtgraph.ir.interpreter import host_values  # noqa: E402
from rtgraph.ops import lookup, run_kernel  # noqa: E402

DEVICE = "ascend-910b"
TARGET = 1.15


def best_interleaved(repeat: int, *fns, clock=time.perf_counter) -> list[float]:
    """The best time of each of ``fns`` over ``repeat`` rounds that run each once, in turn.

    Taking turns keeps a slow stretch of a shared machine from landing on one contender only.
    """
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            t0 = clock()
            fn()
            best[k] = min(best[k], clock() - t0)
    return best


def kernel_steps(program):
    """(output, op, input names, attrs, output type) for every op node, in program order."""
    steps = []
    for node in program.op_nodes():
        steps.append(
            (
                node.output,
                lookup(node.op),
                node.inputs,
                node.attrs,
                program.tensors[node.output].type,
            )
        )
    return steps


def plain_loop(steps, values) -> dict:
    env = dict(values)
    for out, op, inputs, attrs, out_type in steps:
        env[out] = run_kernel(op, [env[name] for name in inputs], attrs, out_type)
    return env


def split_values(program, values):
    inputs = {t.name: values[t.name] for t in program.inputs()}
    params = {t.name: values[t.name] for t in program.params_()}
    return inputs, params


def model_row(name: str, repeat: int) -> tuple[str, int, float, float, float]:
    program = rtgraph.load(ROOT / "models" / f"{name}.rtg")
    values = host_values(program, None, None, 0)
    inputs, params = split_values(program, values)
    compiled = rtgraph.compile(program, device=DEVICE, streams="by-unit")
    steps = kernel_steps(program)
    env = plain_loop(steps, values)
    result = rtgraph.run(compiled, device=DEVICE, inputs=inputs, params=params)
    same = rtgraph.compare(result.outputs, {k: env[k] for k in program.outputs})
    assert all(r["equal"] for r in same.values()), "the loop and the emulator disagree"
    loop, emulated = best_interleaved(
        repeat,
        lambda: plain_loop(steps, values),
        lambda: rtgraph.run(compiled, device=DEVICE, inputs=inputs, params=params),
        clock=time.process_time,
    )
    return name, len(compiled.tasks), loop, emulated, emulated / loop


def tiny_program_text(chains: int = 8, steps: int = 100) -> str:
    lines = ['device "ascend-910b"', f"program tiny(N = {steps}) {{"]
    lines += ["    param w : f32[16, 16]", "    param b : f32[16]"]
    lines += [f"    input x{c} : f32[16, 16]" for c in range(chains)]
    lines += [f"    h{c} = x{c}" for c in range(chains)]
    lines.append("    for i in 0..N {")
    lines += [f"        h{c} = relu(h{c} @ w + b)" for c in range(chains)]
    lines.append("    }")
    lines += [f"    output y{c} = h{c} * 2.0" for c in range(chains)]
    lines.append("}")
    return "\n".join(lines)


def dask_graph(program, steps, values) -> tuple[dict, list[str]]:
    """The same DAG as a Dask graph: one ``run_kernel`` call per op node."""

    def call(op, attrs, out_type, *arrays):
        return run_kernel(op, list(arrays), attrs, out_type)

    graph: dict = {name: value for name, value in values.items()}
    for out, op, inputs, attrs, out_type in steps:
        graph[out] = (call, op, attrs, out_type, *inputs)
    return graph, list(program.outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    print("# Emulator overhead")
    print(f"machine: {machine_note()}")
    print(
        f"times: best of {args.repeat} rounds, contenders taking turns; the models in process "
        "CPU seconds (both single-threaded), the tiny-kernel DAG in wall seconds (Dask's threads)\n"
    )

    print("## Bundled models: numeric run vs the same kernels in a plain loop\n")
    print("| model | tasks | plain loop s | rtgraph run s | ratio | target |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in ("transformer_block", "attention"):
        model, tasks, loop, emulated, ratio = model_row(name, args.repeat)
        target = f"≤ {TARGET}" if name == "transformer_block" else ""
        print(f"| {model} | {tasks} | {loop:.3f} | {emulated:.3f} | {ratio:.2f} | {target} |")

    print("\n## Per-task overhead on a DAG of tiny kernels\n")
    program = rtgraph.parse(tiny_program_text(), "tiny.rtg")
    values = host_values(program, None, None, 0)
    inputs, params = split_values(program, values)
    compiled = rtgraph.compile(program, device=DEVICE, streams="by-unit")
    steps = kernel_steps(program)
    n = len(steps)
    contenders = {
        "plain loop": lambda: plain_loop(steps, values),
        "rtgraph run (numerics)": lambda: rtgraph.run(
            compiled, device=DEVICE, inputs=inputs, params=params
        ),
    }
    try:
        import dask
        from dask.threaded import get as threaded_get
    except ImportError:
        print("(Dask is not installed: its row is skipped; `pip install dask` to compare.)\n")
    else:
        graph, outputs = dask_graph(program, steps, values)
        contenders[f"dask {dask.__version__} threaded"] = lambda: threaded_get(graph, outputs)
    times = best_interleaved(args.repeat, *contenders.values())
    rows = list(zip(contenders, times, strict=True))
    loop, emulated = times[:2]
    print(f"{n} op nodes; {len(compiled.tasks)} device tasks with the host copies\n")
    print("| runner | total s | overhead per task µs | vs rtgraph |")
    print("|---|---:|---:|---:|")
    ours = (emulated - loop) / n
    for label, seconds in rows:
        per = (seconds - loop) / n * 1e6
        versus = f"{per / (ours * 1e6):.2f}×" if label != "plain loop" and ours > 0 else ""
        print(f"| {label} | {seconds:.4f} | {per:.1f} | {versus} |")


if __name__ == "__main__":
    main()
