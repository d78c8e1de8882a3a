"""How fast the emulator runs: tasks per second, and the cost of real numerics.

Two tables:

1. Timing-only mode (``numerics=False``) on synthetic programs: N kernel tasks spread over 4
   streams and the three units, with a record/wait hand-off between streams every 8 tasks,
   submitted in batches of 16. Reports wall time, tasks/s and engine events per task.
2. Numeric mode on a generated chain of real ops (matmul on the cube, add/relu on the vector
   unit, 64×64 f32, ping-ponging between buffers, cube and vector on two streams with events):
   the emulator's wall time against calling the same kernels (``run_kernel``) in a plain
   Python loop over NumPy arrays — the ratio is the emulator's overhead per task.

Run: ``python benchmarks/simulate_speed.py [--quick]``. Times are the best of three runs,
in process CPU seconds (with one BLAS thread) and, for the first table, wall seconds too; they
depend on the machine — the script prints them, no test asserts them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# One BLAS thread: the comparison is about the emulator's own overhead, and process CPU time
# is then what a caller waits for (other processes on the machine inflate wall time).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rtgraph.device import (  # noqa: E402
    DeviceSpec,
    HostSpec,
    MemorySpec,
    ProfilingSpec,
    SchedulerSpec,
    UnitSpec,
)
from rtgraph.emulator import run  # noqa: E402
from rtgraph.ir import TensorType  # noqa: E402
from rtgraph.ops import lookup, run_kernel  # noqa: E402
from rtgraph.stream_program import (  # noqa: E402
    HostTensor,
    Launch,
    MemoryPlan,
    Operand,
    Record,
    Region,
    StreamInfo,
    StreamProgram,
    Task,
    Wait,
)
from rtgraph.timing.engine import Engine  # noqa: E402

UNITS = ("cube", "vector", "dma")


def device() -> DeviceSpec:
    """A mid-sized device: 8 cube, 16 vector cores, 4 DMA engines."""
    rates = {d: 1e12 for d in ("f16", "bf16", "f32", "i8", "i32")}
    return DeviceSpec(
        name="bench",
        description="benchmark device",
        firmware="7.5.0.1.129",
        compatible_runtimes=("8.0",),
        units={
            "cube": UnitSpec("cube", 8, 2.0, rates),
            "vector": UnitSpec("vector", 16, 2.0, rates),
            "dma": UnitSpec("dma", 4, 2.0, bandwidth=2e10),
        },
        memory=MemorySpec(1 << 34, 1.6e12, 512, 512, 50.0, 1.0),
        host=HostSpec(3e10, 2.0, 1e10, 3.0, 0.5, 16, 1.0, 1.0),
        scheduler=SchedulerSpec(2048, 0, "cann", 65535),
        profiling=ProfilingSpec(0.08, 0.2),
    )


def synthetic(n: int, streams: int = 4) -> StreamProgram:
    tasks, commands = [], []
    events = 0
    for i in range(n):
        s = i % streams
        unit = UNITS[i % 3]
        tasks.append(
            Task(
                id=i,
                name=f"k{i}",
                op="kernel",
                unit=unit,
                inputs=(),
                output=None,
                reads=(((i * 64) % 4096, (i * 64) % 4096 + 64),),
                writes=(),
                duration_us=float(1 + i % 7),
                block_dim=1 + i % 4,
            )
        )
        commands.append(Launch(s, i))
        if i % 8 == 7:
            e = events % 64
            commands.append(Record(s, e))
            commands.append(Wait((s + 1) % streams, e))
            events += 1
    return StreamProgram(
        name=f"synthetic{n}",
        device="bench",
        streams=[StreamInfo(i, f"s{i}") for i in range(streams)],
        tasks=tasks,
        commands=commands,
        memory=MemoryPlan("static", {}, 4096, 512),
        host_tensors=[],
        num_events=64,
    )


def _contig(name: str, offset: int, shape: tuple[int, ...]) -> Operand:
    return Operand(name, offset, shape, (shape[1] * 4, 4), "f32")


def numeric_chain(n: int, size: int = 64) -> StreamProgram:
    """x ← matmul(x, w) on s0 then x ← tanh/sigmoid(x) on s1, alternating, events between.

    (Bounded activations keep the values finite and away from denormals however long the
    chain.)
    """
    nbytes = size * size * 4
    regions = {
        "w": Region("w", 0, nbytes, "param"),
        "a": Region("a", nbytes, nbytes, "param"),
        "b": Region("b", 2 * nbytes, nbytes, "value"),
    }
    w, a, b = (_contig(k, r.offset, (size, size)) for k, r in regions.items())
    tasks, commands = [], []
    src, dst = a, b
    for i in range(n):
        if i % 2 == 0:
            op, inputs, s = "matmul", (src, w), 0
        else:
            op, inputs, s = ("tanh" if i % 4 == 1 else "sigmoid"), (src,), 1
        opdef = lookup(op)
        types = [TensorType(o.shape, o.dtype) for o in inputs]
        cost = opdef.cost(types, TensorType(dst.shape, "f32"), {})
        tasks.append(
            Task(
                id=i,
                name=f"{op}{i}",
                op=op,
                unit=opdef.unit_for({}),
                inputs=inputs,
                output=dst,
                reads=tuple(o.extent for o in inputs),
                writes=(dst.extent,),
                flops=cost.flops,
                bytes_read=cost.bytes_read,
                bytes_written=cost.bytes_written,
            )
        )
        if i:
            commands.append(Wait(s, (i - 1) % 2))
        commands.append(Launch(s, i))
        commands.append(Record(s, i % 2))
        src, dst = dst, src
    tasks.append(  # copy the chain's result out, after the last task on its stream
        Task(
            id=n,
            name="d2h:x",
            op="d2h",
            unit="dma",
            inputs=(src,),
            output=None,
            reads=(src.extent,),
            writes=(),
            bytes_read=nbytes,
            bytes_written=nbytes,
            host="x",
        )
    )
    commands.append(Launch(s, n))
    return StreamProgram(
        name=f"chain{n}",
        device="bench",
        streams=[StreamInfo(0, "cube"), StreamInfo(1, "vector")],
        tasks=tasks,
        commands=commands,
        memory=MemoryPlan("static", regions, 3 * nbytes, 512),
        host_tensors=[
            HostTensor("w", "param", (size, size), "f32"),
            HostTensor("a", "param", (size, size), "f32"),
            HostTensor("x", "output", (size, size), "f32"),
        ],
        num_events=2,
    )


def plain_loop(program: StreamProgram, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same kernels, called directly in program order on NumPy arrays."""
    values = {"a": params["a"], "w": params["w"], "b": np.zeros_like(params["a"])}
    ops = {t.op: lookup(t.op) for t in program.tasks}
    for t in program.tasks:
        if t.op == "d2h":
            values[t.host] = values[t.inputs[0].tensor]
            continue
        arrays = [values[o.tensor] for o in t.inputs]
        values[t.output.tensor] = run_kernel(
            ops[t.op], arrays, t.attrs, TensorType(t.output.shape, "f32")
        )
    return values


def best_of(fn, repeat: int) -> tuple[float, float]:
    """Best wall-clock and process-CPU seconds over ``repeat`` calls."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - w0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one repeat")
    args = parser.parse_args()
    spec = device()
    repeat = 1 if args.quick else 3
    sizes = (2_000, 10_000) if args.quick else (10_000, 100_000)

    print("timing-only mode (numerics=False), 4 streams, batch 16")
    print(
        f"{'tasks':>8} {'wall s':>8} {'cpu s':>8} {'tasks/s (cpu)':>14} {'events/task':>12} "
        f"{'makespan µs':>12}"
    )
    for n in sizes:
        program = synthetic(n)
        wall, cpu = best_of(lambda p=program: run(p, spec, numerics=False, batch_size=16), repeat)
        steps, makespan = _count_steps(program, spec)
        print(
            f"{n:>8} {wall:>8.3f} {cpu:>8.3f} {n / cpu:>14,.0f} {steps / n:>12.2f} "
            f"{makespan:>12,.1f}"
        )

    print()
    print("numeric mode vs the same kernels in a plain loop (f32 chain, 2 streams; cpu s)")
    print(
        f"{'tasks':>8} {'size':>5} {'emulator':>9} {'timing only':>12} {'plain loop':>11} "
        f"{'ratio':>6} {'equal':>6}"
    )
    chains = ((500, 64), (100, 256)) if args.quick else ((5000, 64), (1000, 256))
    for n, size in chains:
        program = numeric_chain(n, size)
        rng = np.random.default_rng(0)
        params = {
            "w": rng.standard_normal((size, size), dtype=np.float32) * np.float32(1.5 / size**0.5),
            "a": rng.standard_normal((size, size), dtype=np.float32),
        }
        result: dict = {}

        def emulate(p=program, kw=params, out=result):
            out["emu"] = run(p, spec, params=kw)

        def loop_only(p=program, kw=params, out=result):
            out["ref"] = plain_loop(p, kw)

        _, emu = best_of(emulate, repeat)
        _, timing = best_of(lambda p=program: run(p, spec, numerics=False), repeat)
        _, loop = best_of(loop_only, repeat)
        equal = np.array_equal(result["emu"].outputs["x"], result["ref"]["x"])
        print(
            f"{n:>8} {size:>5} {emu:>9.3f} {timing:>12.3f} {loop:>11.3f} {emu / loop:>6.2f} "
            f"{equal!s:>6}"
        )


def _count_steps(program: StreamProgram, spec: DeviceSpec) -> tuple[int, float]:
    """Engine events one run pops, and its makespan."""
    counted = {}
    original = Engine.run

    def counting(self: Engine) -> None:
        original(self)
        counted["steps"] = self.steps

    Engine.run = counting  # type: ignore[method-assign]
    try:
        result = run(program, spec, numerics=False, batch_size=16)
    finally:
        Engine.run = original  # type: ignore[method-assign]
    return counted["steps"], result.makespan_us


if __name__ == "__main__":
    main()
