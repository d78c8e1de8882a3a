"""How fast the emulator runs: tasks per second, the whole pipeline, and the cost of numerics.

Three tables:

1. **The emulator only**, timing-only mode (``numerics=False``): ``rtgraph.emulator.run`` on
   synthetic stream programs built directly in Python — no ``.rtg`` text, no parse, no
   compile, so this is *not* what a user's program costs end to end. N kernel tasks spread
   over 4 streams and the three units, with a record/wait hand-off between streams every 8
   tasks, submitted in batches of 16. Reports wall time, tasks/s and engine events per task.
2. **The whole pipeline** for the same programs written as ``.rtg`` source (explicit
   streams; the same kernels on the same streams with the same records and waits, in a
   ``for`` loop; every task reads one 4 KiB buffer where the built program gives each a 64-byte
   window of it — reads only, so no hazard either way): ``rtgraph.parse`` → ``rtgraph.compile``
   (``streams="explicit"``, batch 16) → ``rtgraph.run`` (timing only), each phase and the total
   in process CPU seconds, and µs per task. *same streams* checks that the compiled program has
   the same tasks (unit, duration, cores) and each stream the same commands in the same order
   as the built one. The compiler submits them in a different order — each stream's commands
   in runs of up to a batch (``order_submissions``), where the built program interleaves the
   streams task by task — so its emulated makespan differs and is shown beside table 1's.
   A size the front end refuses (it runs at most 100,000 statements, and the 100k-task
   program has 125,000 with its records and waits) is reported as refused.
3. **Numeric mode** on a generated chain of real ops (matmul on the cube, tanh/sigmoid on the
   vector unit, 64×64 f32, ping-ponging between buffers, cube and vector on two streams with
   events): the emulator's CPU time against ``simulate_overhead``'s task loop, which does the
   same data work (the same tasks in submission order, the kernels writing into the same
   preallocated device memory) and nothing else — the ratio is the emulator's overhead — with
   the timing-only run beside it; the three take turns in each round.

Run: ``python benchmarks/simulate_speed.py [--quick]`` (``--quick``: 2k and 10k tasks, shorter
chains). Times are the best of three runs, in process CPU seconds (with one BLAS thread) and,
for the first table, wall seconds too; they depend on the machine — the script prints them, no
test asserts them.
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

import rtgraph  # noqa: E402
from rtgraph.device import (  # noqa: E402
    DeviceSpec,
    HostSpec,
    MemorySpec,
    ProfilingSpec,
    SchedulerSpec,
    UnitSpec,
)
from rtgraph.emulator import run  # noqa: E402
from rtgraph.emulator.hardware import DeviceLoop  # noqa: E402
from rtgraph.errors import RtgError  # noqa: E402
from rtgraph.ir import TensorType  # noqa: E402
from rtgraph.ops import lookup  # noqa: E402
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simulate_overhead import best_interleaved, resident_loads, task_loop  # noqa: E402

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


#: Tasks after which the pattern of ``synthetic`` repeats in stream, unit, cores and records
#: (a multiple of the 4 streams, the 3 units and the record interval of 8).
PERIOD = 24


def synthetic_text(n: int, streams: int = 4) -> str:
    """``synthetic(n)`` as ``.rtg`` source: a ``for`` loop over PERIOD tasks, then the rest.

    Task i: stream ``i % 4``, unit ``UNITS[i % 3]``, ``us = 1 + i % 7``, ``block_dim = 1 + i % 4``;
    after every 8th, a record of ``ev[(i // 8) % 64]`` on its stream and a wait on the next.
    """
    if streams != 4:
        raise ValueError("the loop's period assumes 4 streams")
    lines = [
        "program synthetic() {",
        "    buffer B : bytes[4096] at 0",
        f"    stream {', '.join(f's{k}' for k in range(streams))}",
        "    event ev[64]",
    ]

    def task(j: int, base: str, records: str, name: str, indent: str) -> list[str]:
        """Task ``base + j`` (``base`` a multiple of PERIOD, ``records`` the records before)."""
        s = j % streams
        kernel = (
            f"{name} = kernel(unit = {UNITS[j % 3]}, us = 1 + ({base} + {j}) % 7, "
            f"reads = [B], block_dim = {1 + j % 4})"
        )
        if j % 8 != 7:
            return [f"{indent}on s{s} {{ {kernel} }}"]
        event = f"ev[({records} + {j // 8}) % 64]"
        return [
            f"{indent}on s{s} {{ {kernel}; record {event} }}",
            f"{indent}on s{(s + 1) % streams} {{ wait {event} }}",
        ]

    loops, rest = divmod(n, PERIOD)
    lines.append(f"    for r in 0..{loops} {{")
    for j in range(PERIOD):
        lines += task(j, f"{PERIOD} * r", f"{PERIOD // 8} * r", f"k{j}", " " * 8)
    lines.append("    }")
    for j in range(rest):
        lines += task(j, str(loops * PERIOD), str(loops * PERIOD // 8), f"rest{j}", " " * 4)
    lines.append("}")
    return "\n".join(lines) + "\n"


def same_streams(built: StreamProgram, compiled: StreamProgram) -> bool:
    """The same tasks (unit, duration, cores) and, per stream, the same commands in order
    (event ids aside: the compiler numbers its own)."""

    def tasks(p: StreamProgram) -> list[tuple]:
        return [(t.unit, t.duration_us, t.block_dim) for t in p.tasks]

    def streams(p: StreamProgram) -> dict[int, list[tuple]]:
        per: dict[int, list[tuple]] = {s.id: [] for s in p.streams}
        for c in p.commands:
            per[c.stream].append((type(c).__name__, c.task if isinstance(c, Launch) else None))
        return per

    return tasks(built) == tasks(compiled) and streams(built) == streams(compiled)


def pipeline_row(n: int, spec: DeviceSpec, repeat: int) -> str:
    """Table 2's row for ``n`` tasks: each phase's best CPU seconds over ``repeat`` rounds."""
    text = synthetic_text(n)
    best = {"parse": float("inf"), "compile": float("inf"), "emulate": float("inf")}
    total = float("inf")
    for _ in range(repeat):
        times = {}
        t0 = time.process_time()
        try:
            program = rtgraph.parse(text, "synthetic.rtg", device=spec)
        except RtgError as err:
            return f"{n:>8}  refused by the front end: {err.message}"
        times["parse"] = time.process_time() - t0
        t0 = time.process_time()
        compiled = rtgraph.compile(program, device=spec, streams="explicit", batch_size=16)
        times["compile"] = time.process_time() - t0
        t0 = time.process_time()
        result = rtgraph.run(compiled, device=spec, numerics=False, batch_size=16)
        times["emulate"] = time.process_time() - t0
        for phase, took in times.items():
            best[phase] = min(best[phase], took)
        total = min(total, sum(times.values()))
    same = "yes" if same_streams(synthetic(n), compiled) else "NO"
    return (
        f"{n:>8} {best['parse']:>12.3f} {best['compile']:>8.3f} {best['emulate']:>8.3f} "
        f"{total:>8.3f} {1e6 * total / n:>8.1f} {same:>13} {result.makespan_us:>12,.1f}"
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
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    args = parser.parse_args()
    spec = device()
    repeat = 3
    sizes = (2_000, 10_000) if args.quick else (10_000, 100_000)

    print(
        "the emulator only: rtgraph.emulator.run(numerics=False) on stream programs built in "
        "Python (no parse, no compile); 4 streams, batch 16"
    )
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
    print(
        "the whole pipeline for the same programs written as .rtg (explicit streams): "
        "parse -> compile -> emulate (timing only), best of each phase; cpu s"
    )
    print(
        f"{'tasks':>8} {'parse+check':>12} {'compile':>8} {'emulate':>8} {'total':>8} "
        f"{'µs/task':>8} {'same streams':>13} {'makespan µs':>12}"
    )
    for n in sizes:
        print(pipeline_row(n, spec, repeat))
    print(
        "(the compiled program submits each stream's commands in runs of up to a batch, where "
        "the built one interleaves the streams task by task: hence its other makespan)"
    )

    print()
    print(
        "numeric mode vs simulate_overhead's task loop doing the same data work (f32 chain, "
        "2 streams; cpu s, best of rounds in which the three take turns)"
    )
    print(
        f"{'tasks':>8} {'size':>5} {'emulator':>9} {'timing only':>12} {'task loop':>11} "
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

        loads = resident_loads(program, params)

        def loop_only(p=program, kw=params, ld=loads, out=result):
            out["ref"] = task_loop(p, kw, ld)

        emu, timing, loop = best_interleaved(
            repeat, emulate, lambda p=program: run(p, spec, numerics=False), loop_only
        )
        equal = np.array_equal(result["emu"].outputs["x"], result["ref"]["x"])
        print(
            f"{n:>8} {size:>5} {emu:>9.3f} {timing:>12.3f} {loop:>11.3f} {emu / loop:>6.2f} "
            f"{equal!s:>6}"
        )


def _count_steps(program: StreamProgram, spec: DeviceSpec) -> tuple[int, float]:
    """Engine events one run pops, and its makespan."""
    counted = {}
    original = DeviceLoop.run  # the emulator's event loop (an Engine with dispatch built in)

    def counting(self: DeviceLoop) -> None:
        original(self)
        counted["steps"] = self.steps

    DeviceLoop.run = counting  # type: ignore[method-assign]
    try:
        result = run(program, spec, numerics=False, batch_size=16)
    finally:
        DeviceLoop.run = original  # type: ignore[method-assign]
    return counted["steps"], result.makespan_us


if __name__ == "__main__":
    main()
