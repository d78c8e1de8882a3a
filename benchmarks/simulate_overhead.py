"""What the emulator costs on top of the kernels it runs, against a like-for-like loop and Dask.

The baseline, the *task loop*, does the data work of a numeric run and nothing else: it walks
the compiled stream program's tasks — all of them, the host copies included (attention: 112)
— in the order the host submits them, over the same device memory the emulator uses: a fresh
``np.zeros(total_bytes, uint8)`` buffer with the params and constants written into their
regions, a typed view per operand. An ``h2d`` task writes the host input (in storage form)
into its view; a compute task calls the op's kernel (``run_kernel``, as the emulator does) on
its input views, rounding the result straight into its preallocated output view (``into=``:
no result array — the least a kernel can do); a ``d2h`` task copies its view out. The
emulator (``rtgraph.run``) does exactly that work through its event loop, host model, stream
queues, result collection and race check, and checks the inputs and params it is given; its
kernels write straight into device memory too, because the static race checker proves these
programs race-free (a racy program's tasks stage each result and write it when they finish,
one copy per task: docs/emulator.md). The ratio ``rtgraph run ÷ task loop`` is everything
that is not the data work. Both must give bit-equal outputs (checked before
timing).

Two tables:

1. **Bundled models** (transformer_block and attention at their default shapes, ``by-unit``
   streams, the default ``stream-ordered`` memory plan): the task loop, the numeric run and,
   for reference, the timing-only run (``numerics=False``). Target (issue 14): numeric run ÷
   task loop ≤ 1.05 on both.
2. **Per-task overhead on tiny kernels** (8 chains of 16×16 f32 ``relu(h @ w + b)``, about
   2,400 tasks, so the arithmetic is negligible): (time − baseline) ÷ tasks. rtgraph's numeric
   run is measured against the task loop; Dask's threaded scheduler (``dask.threaded.get``)
   runs the same op DAG as a graph of ``run_kernel`` calls on fresh arrays (no device memory,
   no host copies), so it is measured against the same calls in a plain loop over the op
   nodes — each runner against the loop that does its own work. Skipped with a message if
   Dask is not installed (a benchmark-only extra: ``pip install '.[bench]'``).

Inputs and params are generated once and passed to every contender, with one BLAS thread (set
before NumPy loads). Times are process CPU seconds (Dask's threads included), the best of
``--repeat`` rounds (at least 3 by default) in which the contenders take turns, so a slow
stretch of a shared machine does not land on one of them only.

Usage: python benchmarks/simulate_overhead.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import rtgraph  # noqa: E402
from rtgraph.bench import machine_note  # noqa: E402
from rtgraph.dtypes import DTYPES, from_storage, to_storage, to_value  # noqa: E402
from rtgraph.ir.graph import TensorType  # noqa: E402
from rtgraph.ir.interpreter import host_values  # noqa: E402
from rtgraph.ops import lookup, run_kernel  # noqa: E402
from rtgraph.stream_program.program import Launch, Operand, StreamProgram  # noqa: E402

DEVICE = "ascend-910b"
TARGET = 1.05  # issue 14: numeric run ÷ like-for-like kernel loop


def best_interleaved(repeat: int, *fns: Callable[[], object]) -> list[float]:
    """The best process-CPU time of each of ``fns`` over ``repeat`` rounds that run each once,
    in turn (taking turns keeps a slow stretch of a shared machine off one contender only)."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            t0 = time.process_time()
            fn()
            best[k] = min(best[k], time.process_time() - t0)
    return best


# --- the like-for-like baseline ----------------------------------------------------------------
def _view(memory: np.ndarray, o: Operand) -> np.ndarray:
    return np.ndarray(o.shape, DTYPES[o.dtype].storage, memory, o.offset, o.strides)


def resident_loads(program: StreamProgram, values: Mapping[str, np.ndarray]) -> list[tuple]:
    """(contiguous operand of its region, value) of every param and constant a task uses."""
    loads = []
    for h in program.host_tensors:
        region = program.memory.regions.get(h.name)
        if h.role not in ("param", "const") or region is None:
            continue
        if h.role == "param":
            value = values[h.name]
        else:
            scalar = to_value(np.asarray(0.0 if h.value is None else h.value), h.dtype)
            value = np.broadcast_to(scalar, h.shape)
        strides, step = [], DTYPES[h.dtype].itemsize
        for n in reversed(h.shape):
            strides.append(step)
            step *= n
        operand = Operand(h.name, region.offset, tuple(h.shape), tuple(reversed(strides)), h.dtype)
        loads.append((operand, value))
    return loads


def task_loop(
    program: StreamProgram, values: Mapping[str, np.ndarray], loads: list[tuple]
) -> dict[str, np.ndarray]:
    """The numeric run's data work, task by task in submission order (see the docstring)."""
    memory = np.zeros(program.memory.total_bytes, np.uint8)
    for operand, value in loads:  # the model load: params and constants into their regions
        _view(memory, operand)[...] = to_storage(value, operand.dtype).reshape(operand.shape)
    outputs: dict[str, np.ndarray] = {}
    tasks = program.tasks
    for cmd in program.commands:
        if type(cmd) is not Launch:
            continue
        t = tasks[cmd.task]
        if t.op == "h2d":
            host = values[t.host]  # type: ignore[index]
            rows = t.attrs.get("rows")
            if rows is not None:
                host = host[rows[0] : rows[1]]
            out = t.output
            _view(memory, out)[...] = to_storage(host, out.dtype).reshape(out.shape)  # type: ignore[union-attr]
        elif t.op == "d2h":
            src = t.inputs[0]
            value = from_storage(np.array(_view(memory, src)), src.dtype)
            rows = t.attrs.get("rows")
            if rows is None:
                outputs[t.host] = value  # type: ignore[index]
            else:
                whole = outputs.get(t.host)  # type: ignore[arg-type]
                if whole is None:
                    shape = next(h.shape for h in program.host_tensors if h.name == t.host)
                    whole = outputs[t.host] = np.zeros(shape, value.dtype)  # type: ignore[index]
                whole[rows[0] : rows[1]] = value.reshape(whole[rows[0] : rows[1]].shape)
        elif t.duration_us is None:  # a synthetic kernel computes nothing
            arrays = [from_storage(_view(memory, o), o.dtype) for o in t.inputs]
            out = t.output
            out_type = TensorType(out.shape, out.dtype)  # type: ignore[union-attr]
            run_kernel(lookup(t.op), arrays, t.attrs, out_type, into=_view(memory, out))  # type: ignore[arg-type]
    return outputs


# --- Dask's baseline: the op nodes, fresh arrays ------------------------------------------------
def kernel_steps(program):
    """(output, op, input names, attrs, output type) for every op node, in program order."""
    return [
        (node.output, lookup(node.op), node.inputs, node.attrs, program.tensors[node.output].type)
        for node in program.op_nodes()
    ]


def op_loop(steps, values) -> dict:
    """The op nodes' kernels on a dict of fresh arrays: the work Dask's graph does."""
    env = dict(values)
    for out, op, inputs, attrs, out_type in steps:
        env[out] = run_kernel(op, [env[name] for name in inputs], attrs, out_type)
    return env


def dask_graph(program, steps, values) -> tuple[dict, list[str]]:
    """The same DAG as a Dask graph: one ``run_kernel`` call per op node."""

    def call(op, attrs, out_type, *arrays):
        return run_kernel(op, list(arrays), attrs, out_type)

    graph: dict = {name: value for name, value in values.items()}
    for out, op, inputs, attrs, out_type in steps:
        graph[out] = (call, op, attrs, out_type, *inputs)
    return graph, list(program.outputs)


# --- the tables ----------------------------------------------------------------------------------
def split_values(program, values):
    inputs = {t.name: values[t.name] for t in program.inputs()}
    params = {t.name: values[t.name] for t in program.params_()}
    return inputs, params


def prepared(program):
    """The compiled program, host values and loads; the task loop checked against a run."""
    values = host_values(program, None, None, 0)
    inputs, params = split_values(program, values)
    compiled = rtgraph.compile(program, device=DEVICE, streams="by-unit")
    loads = resident_loads(compiled, values)
    looped = task_loop(compiled, values, loads)
    result = rtgraph.run(compiled, device=DEVICE, inputs=inputs, params=params)
    same = rtgraph.compare(result.outputs, looped)
    assert set(looped) == set(program.outputs), "the task loop missed an output"
    assert all(r["equal"] for r in same.values()), "the task loop and the emulator disagree"
    return compiled, values, inputs, params, loads


def model_row(name: str, repeat: int) -> str:
    program = rtgraph.load(ROOT / "models" / f"{name}.rtg")
    compiled, values, inputs, params, loads = prepared(program)
    loop, emulated, timing = best_interleaved(
        repeat,
        lambda: task_loop(compiled, values, loads),
        lambda: rtgraph.run(compiled, device=DEVICE, inputs=inputs, params=params),
        lambda: rtgraph.run(compiled, device=DEVICE, numerics=False),
    )
    return (
        f"| {name} | {len(compiled.tasks)} | {loop:.3f} | {emulated:.3f} | {timing:.3f} "
        f"| {emulated / loop:.2f} | ≤ {TARGET} |"
    )


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


TASK_LOOP = "task loop (compiled tasks, device memory)"
OP_LOOP = "op loop (op nodes, fresh arrays)"


def tiny_table(repeat: int) -> None:
    program = rtgraph.parse(tiny_program_text(), "tiny.rtg")
    compiled, values, inputs, params, loads = prepared(program)
    steps = kernel_steps(program)
    env = op_loop(steps, values)
    looped = task_loop(compiled, values, loads)
    assert all(np.array_equal(env[k], v) for k, v in looped.items()), "the two loops disagree"
    n_tasks, n_ops = len(compiled.tasks), len(steps)

    def emulate() -> object:
        return rtgraph.run(compiled, device=DEVICE, inputs=inputs, params=params)

    # (runner, what it runs, the baseline its overhead is taken over, how many tasks)
    rows: list[tuple[str, Callable[[], object], str | None, int]] = [
        (TASK_LOOP, lambda: task_loop(compiled, values, loads), None, n_tasks),
        ("rtgraph run (numerics)", emulate, TASK_LOOP, n_tasks),
        ("rtgraph run (timing only)", lambda: rtgraph.run(compiled, numerics=False), None, n_tasks),
        (OP_LOOP, lambda: op_loop(steps, values), None, n_ops),
    ]
    try:
        import dask
        from dask.threaded import get as threaded_get
    except ImportError:
        print("(Dask is not installed: its row is skipped; `pip install '.[bench]'` to compare.)\n")
    else:
        graph, outputs = dask_graph(program, steps, values)
        label = f"dask {dask.__version__} threaded (op nodes)"
        rows.append((label, lambda: threaded_get(graph, outputs), OP_LOOP, n_ops))
    times = best_interleaved(repeat, *(fn for _, fn, _, _ in rows))
    seconds = {label: took for (label, *_), took in zip(rows, times, strict=True)}
    print(f"{n_ops} op nodes; {n_tasks} device tasks with the host copies\n")
    print("| runner | tasks | total s | µs per task | over its baseline, µs per task |")
    print("|---|---:|---:|---:|---:|")
    for label, _, baseline, n in rows:
        took = seconds[label]
        over = f"{(took - seconds[baseline]) / n * 1e6:.1f}" if baseline else ""
        print(f"| {label} | {n:,} | {took:.4f} | {took / n * 1e6:.1f} | {over} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    print("# Emulator overhead")
    print(f"machine: {machine_note()}")
    print(
        f"times: process CPU seconds, best of {args.repeat} rounds in which the contenders take "
        "turns\n"
    )

    print("## Bundled models: numeric run vs the task loop doing the same data work\n")
    print("| model | tasks | task loop s | rtgraph run s | timing-only run s | ratio | target |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in ("transformer_block", "attention"):
        print(model_row(name, args.repeat))

    print("\n## Per-task overhead on tiny kernels\n")
    tiny_table(args.repeat)


if __name__ == "__main__":
    main()
