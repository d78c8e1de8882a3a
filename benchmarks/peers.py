"""rtgraph against its peers on one DAG: the whole pipeline, a SimPy model, Dask threaded.

One random layered DAG (seeded: layers of ``--width`` tasks, each task after one to three
tasks of the layer before, on a random unit — Cube, Vector or DMA — for a random time, a
multiple of a quarter microsecond from 0.5 to 8 µs) is written as an ``.rtg`` program of
synthetic kernels (``k3_5 = kernel(unit = vector, us = 2.75, after = [k2_0, k2_4])``;
docs/language.md) and run by three contenders, in turn within each round, in one process.
The front end refuses a program of more than 4 MiB of text or 100,000 statements, so the
program is a layer of roots, then one random block of layers that a ``for`` loop repeats
(compile_scaling writes its chains with a loop too; its generator makes chains of real ops,
which cannot express a kernel DAG); sizes are rounded down to whole blocks: "100k" is
99,344 tasks and "1M" 999,440. The contenders:

a. **rtgraph**, each phase timed on its own: parse and check (``rtgraph.parse`` on the text),
   compile (``rtgraph.compile``, ``streams="by-unit"``: one stream per unit, so three
   streams), emulate in timing-only mode (``rtgraph.run(numerics=False)``); the whole
   pipeline is their sum in the same round.
b. **A SimPy model of the same device running the same stream program**, written as a SimPy
   user would: a host process that walks the compiled commands in order, batches them per
   stream and submits each batch with one ioctl (``ioctl_us + submit_us × entries``; a
   batch goes when it is full or the host moves on to another stream; a full stream queue,
   ``queue_depth`` entries not retired, blocks the host); a process per stream that takes
   its entries in order — a launch takes ``block_dim`` cores of its unit (a
   ``simpy.Container`` per unit), holds them for the task's duration and gives them back; a
   record triggers a ``simpy.Event`` per recorded generation, a wait yields the generation
   the host captured when it submitted the wait. Each task's duration is what rtgraph's cost
   model gives it (``rtgraph.timing.task_costs``: launch overhead + ``us``), computed before
   the clock starts — the model's input, as the DAG is; rtgraph's emulate still computes its
   costs inside ``run`` (issue 14 moves them to compile time). A second, smaller SimPy model
   — the streams and their events only, every entry queued at time 0, no host, no cores —
   simulates less (its makespan differs); it is timed for scale, not compared.
c. **Dask's threaded scheduler** (``dask.threaded.get``, its default thread pool) executing
   every task as a tiny NumPy function (16 float64s: one plus the elementwise maximum of the
   parents' results, so each result is the task's layer + 1, checked after the first round),
   with every task's key requested, not only the last. Dask executes rather than simulates:
   its row is the per-task cost of a general task scheduler, not a like-for-like simulator.
   Sizes above ``--dask-max`` tasks are skipped, and a round that takes more than
   ``--dask-budget`` CPU seconds (or raises ``MemoryError``) ends Dask's part; the table says
   so. At 99,344 tasks one round takes about two minutes and a peak of about 14 GB, most of it
   ``dask.order`` finding which roots each task connects to (dask/dask#11055); the memory
   table shows it.

**Where the SimPy model and the emulator agree, and where not.** Both model the host's
submission (ioctl and per-entry cost, batching, flush on a stream switch, queue depth), the
in-order streams (``reorder_window`` ≤ 1), events with generations, and unit cores; on the
generated programs the script checks that every task starts and ends at the same emulated
time in both and that the makespans are equal (the durations are binary fractions, so the
two sums agree bit for bit). The model does not cover what these programs do not use, and
refuses a program that does: syncs, barriers, callbacks, run-time allocation, host copies
(link bandwidth, pageable staging), HBM bandwidth sharing of real ops, a device with a reorder
window, ``batch_flush = "full"``. Its core pools serve requests first come, first served
(``Container`` semantics), where the emulator's dispatcher is greedy in stream-priority
order; with one stream per unit no request ever waits for cores, so the two cannot differ
here. The emulator also keeps per-stream time accounting, event logs and a race check that
the model does not — that is part of what ``rtgraph.run`` returns.

**How it is timed.** Process CPU time (``time.process_time``: Dask's threads included), one
BLAS thread, the best of ``--rounds`` rounds (at least 3) per contender and phase; in each
round the contenders run in the order above, with a ``gc.collect()`` between them (untimed)
so none inherits another's garbage. Each runs as its users run it: rtgraph pauses the
collector inside ``compile`` and ``run``, SimPy and Dask keep it on. The acceptance ratios
of issue 14 come from the same interleaved run: rtgraph emulate ÷ SimPy (target ≤ 0.5), the
whole pipeline in µs per task (target ≤ 40 at 100k tasks), the growth from each size to the
next (target ≤ 11× per ×10), and at a million tasks the whole pipeline's CPU seconds (target
≤ 60) and its peak resident memory (target ≤ 4 GB: the highest of its three phases' peaks).
The million-task size is in the default sizes and skips Dask (over ``--dask-max``).

Usage: python benchmarks/peers.py [--sizes 10000,100000,1000000] [--quick] [--rounds 3]
       [--width 16] [--seed 0] [--dask-max 100000] [--dask-budget 60]

SimPy and Dask are benchmark-only extras (``pip install '.[bench]'``); without one of them
its row says it was not installed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import itertools
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rtgraph  # noqa: E402
from rtgraph.bench import machine_note  # noqa: E402
from rtgraph.device.spec import DeviceSpec  # noqa: E402
from rtgraph.errors import RtgError  # noqa: E402
from rtgraph.ir.graph import OpNode, Program  # noqa: E402
from rtgraph.stream_program.program import Launch, Record, StreamProgram, Wait  # noqa: E402
from rtgraph.timing.task_costs import task_costs  # noqa: E402

DEVICE = "ascend-910b"
UNITS = ("cube", "vector", "dma")
UNIT_WEIGHTS = (0.4, 0.45, 0.15)
#: Task times, µs: quarter-microsecond multiples are exact in binary floating point, so the
#: emulator's and the SimPy model's sums of them are equal, not just close.
US_CHOICES = tuple(q / 4 for q in range(2, 33))
WIDTH = 16
BLOCK_LAYERS = 64  # layers in the block the program's loop repeats
MAX_PARENTS = 3
VALUE_SIZE = 16  # float64s each Dask task returns
MIN_ROUNDS = 3
EMULATE_TARGET = 0.5  # issue 14: emulate ≤ 0.5 × SimPy per task
PIPELINE_TARGET_US = 40.0  # issue 14: whole pipeline ≤ 40 µs per task at 100k tasks
GROWTH_TARGET = 11.0  # issue 14: within 11× per ×10 step
MILLION_TARGET_S = 60.0  # issue 14: a 1M-task program end to end in ≤ 60 s …
MILLION_TARGET_GIB = 4.0  # … and ≤ 4 GB peak resident memory


# --- the DAG every contender runs --------------------------------------------------------------
@dataclass(frozen=True)
class Dag:
    """A task DAG: per task its unit, its time (µs) and the tasks it comes after."""

    units: tuple[str, ...]
    us: tuple[float, ...]
    parents: tuple[tuple[int, ...], ...]

    def __len__(self) -> int:
        return len(self.units)

    def edges(self) -> list[tuple[int, int]]:
        """Every ``(parent, child)`` pair, children in task order."""
        return [(p, child) for child, ps in enumerate(self.parents) for p in ps]


@dataclass(frozen=True)
class LayeredDag:
    """Layers of ``width`` tasks: a layer of roots, then a block of layers ``repeats`` times.

    ``roots`` and every layer of ``block`` hold a ``(unit, us, parent slots)`` per slot, the
    parent slots indexing the layer before. Task ``layer × width + slot`` is that slot's task
    in that layer (the roots are layer 0); the DAG's order is layer by layer.
    """

    width: int
    roots: tuple[tuple[str, float, tuple[int, ...]], ...]
    block: tuple[tuple[tuple[str, float, tuple[int, ...]], ...], ...]
    repeats: int

    def layers(self) -> int:
        return 1 + len(self.block) * self.repeats

    def __len__(self) -> int:
        return self.layers() * self.width

    def flat(self) -> Dag:
        """The DAG task by task, parents as task numbers."""
        units, us, parents = [], [], []
        layers = [self.roots, *(layer for _ in range(self.repeats) for layer in self.block)]
        for n, layer in enumerate(layers):
            before = (n - 1) * self.width
            for unit, took, slots in layer:
                units.append(unit)
                us.append(took)
                parents.append(tuple(before + s for s in slots))
        return Dag(tuple(units), tuple(us), tuple(parents))


def layered_dag(
    tasks: int, seed: int = 0, width: int = WIDTH, block: int = BLOCK_LAYERS
) -> LayeredDag:
    """About ``tasks`` tasks in layers of ``width``, each after 1–3 tasks of the layer before.

    The language refuses a program of more than 4 MiB of text (and a 100k-task program
    written out is about 7 MB), so the layers after the roots are one random block of up to
    ``block`` layers that a ``for`` loop repeats — as compile_scaling writes its chains; the
    count is rounded down to whole blocks (at least two layers each): the front end runs at
    most 100,000 statements, so "100k" is 99,344 tasks.
    """
    rng = random.Random(seed)

    def task(parents: bool) -> tuple[str, float, tuple[int, ...]]:
        unit = rng.choices(UNITS, UNIT_WEIGHTS)[0]
        us = rng.choice(US_CHOICES)
        if not parents:
            return unit, us, ()
        k = rng.randint(1, min(MAX_PARENTS, width))
        return unit, us, tuple(sorted(rng.sample(range(width), k)))

    later = max(2, tasks // width - 1)  # layers after the roots
    repeats = max(1, later // block)
    per_block = max(2, later // repeats)
    roots = tuple(task(False) for _ in range(width))
    body = tuple(tuple(task(True) for _ in range(width)) for _ in range(per_block))
    return LayeredDag(width, roots, body, repeats)


def rtg_text(dag: LayeredDag, name: str = "peers") -> str:
    """The DAG as an ``.rtg`` program of synthetic kernels, its block in a ``for`` loop.

    The roots are ``c0``, ``c1``, …; in the loop, block layer k's tasks are ``k{k}_{slot}``
    and the block's last layer rebinds ``c0``, ``c1``, … (the loop-carried values).
    """

    def kernel(unit: str, us: float, after: list[str]) -> str:
        deps = f", after = [{', '.join(after)}]" if after else ""
        return f"kernel(unit = {unit}, us = {us:g}{deps})"

    lines = [f'device "{DEVICE}"', f"program {name}(N = {dag.repeats}) {{"]
    lines += [f"    c{j} = {kernel(u, t, [])}" for j, (u, t, _) in enumerate(dag.roots)]
    lines.append("    for i in 0..N {")
    last = len(dag.block) - 1
    for k, layer in enumerate(dag.block):
        before = "c" if k == 0 else f"k{k - 1}_"
        for j, (unit, us, slots) in enumerate(layer):
            bound = f"c{j}" if k == last else f"k{k}_{j}"
            lines.append(f"        {bound} = {kernel(unit, us, [f'{before}{s}' for s in slots])}")
    lines.append("    }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def dag_of_program(program: Program) -> Dag:
    """The DAG a parsed program says (units, times, ``after`` edges), to check the text."""
    kernels = [n for n in program.nodes if isinstance(n, OpNode) and n.op == "kernel"]
    index = {n.output: k for k, n in enumerate(kernels)}
    return Dag(
        tuple(n.attrs["unit"] for n in kernels),
        tuple(float(n.attrs["us"]) for n in kernels),
        tuple(tuple(sorted(index[a] for a in n.after)) for n in kernels),
    )


# --- Dask ----------------------------------------------------------------------------------
def tiny_kernel(*parents: np.ndarray) -> np.ndarray:
    """One task for Dask: one plus the elementwise maximum of its parents' results (or ones)."""
    out = np.ones(VALUE_SIZE)
    for p in parents:
        np.maximum(out, p + 1.0, out=out)
    return out


def dask_graph(dag: Dag) -> tuple[dict[str, tuple], list[str]]:
    """The DAG as a Dask graph (``tN`` → ``(tiny_kernel, parent keys…)``) and every key."""
    keys = [f"t{i}" for i in range(len(dag))]
    graph = {keys[i]: (tiny_kernel, *(keys[p] for p in ps)) for i, ps in enumerate(dag.parents)}
    return graph, keys


def dask_results_right(dag: Dag, results: Sequence[np.ndarray], width: int) -> bool:
    """Every task ran: task i's result is its layer + 1 (the longest path to it, plus one)."""
    return len(results) == len(dag) and all(
        r.shape == (VALUE_SIZE,) and r[0] == i // width + 1 for i, r in enumerate(results)
    )


# --- SimPy -----------------------------------------------------------------------------------
LAUNCH, RECORD, WAIT = range(3)


@dataclass
class ModelRun:
    """What the SimPy model saw: each task's start and end (µs) and the makespan."""

    start: list[float | None]
    end: list[float | None]
    makespan_us: float


def task_durations(program: StreamProgram, spec: DeviceSpec) -> list[float]:
    """Each task's duration on ``spec`` as rtgraph's cost model gives it (launch + body)."""
    costs = task_costs(program, spec)
    if any(costs.bytes) or any(costs.link):
        raise ValueError("the SimPy model has no HBM or host-link sharing: synthetic kernels only")
    return [launch + body for launch, body in zip(costs.launch, costs.body, strict=True)]


def check_modelled(program: StreamProgram, spec: DeviceSpec) -> None:
    """Refuse what the SimPy model does not model (see the module docstring)."""
    if spec.scheduler.reorder_window > 1:
        raise ValueError("the SimPy model runs in-order streams (reorder_window 0 or 1)")
    if spec.host.batch_flush != "switch":
        raise ValueError("the SimPy model flushes a batch on a stream switch only")
    other = {type(c).__name__ for c in program.commands} - {"Launch", "Record", "Wait"}
    if other:
        raise ValueError(f"the SimPy model has no {', '.join(sorted(other))} commands")


def simpy_run(program: StreamProgram, spec: DeviceSpec, duration: Sequence[float]) -> ModelRun:
    """Run ``program`` on a SimPy model of ``spec``'s host, streams and units."""
    import simpy

    env = simpy.Environment()
    n = len(program.tasks)
    start: list[float | None] = [None] * n
    end: list[float | None] = [None] * n
    cores = {kind: simpy.Container(env, u.cores, init=u.cores) for kind, u in spec.units.items()}
    depth = spec.scheduler.queue_depth
    queues = {s.id: simpy.Store(env) for s in program.streams}  # submitted batches
    room = {s.id: simpy.Container(env, depth, init=depth) for s in program.streams}
    batch_size = min(max(1, spec.host.batch_size), depth)
    host = spec.host

    def stream(sid: int):
        queue, free = queues[sid], room[sid]
        while True:
            batch = yield queue.get()
            for kind, ref in batch:
                if kind == LAUNCH:
                    task = program.tasks[ref]
                    pool = cores[task.unit]
                    yield pool.get(task.block_dim)
                    start[ref] = env.now
                    yield env.timeout(duration[ref])
                    end[ref] = env.now
                    pool.put(task.block_dim)
                elif kind == RECORD:
                    ref.succeed()
                elif ref is not None:  # a wait on the generation captured at submission
                    yield ref
                free.put(1)  # the entry retires: room in the stream's queue

    def submit(sid: int, batch: list):
        yield room[sid].get(len(batch))  # blocks while the queue is full
        yield env.timeout(host.ioctl_us + host.submit_us * len(batch))
        queues[sid].put(batch)

    def host_thread():
        latest: dict[int, simpy.Event] = {}  # event id → its latest recorded generation
        batch: list = []
        batch_stream = None
        for cmd in program.commands:
            kind = type(cmd)
            if kind is Launch:
                entry = (LAUNCH, cmd.task)
            elif kind is Record:
                latest[cmd.event] = env.event()
                entry = (RECORD, latest[cmd.event])
            elif kind is Wait:
                entry = (WAIT, latest.get(cmd.event))
            else:
                raise ValueError(f"the SimPy model has no {kind.__name__} command")
            if batch and cmd.stream != batch_stream:
                yield from submit(batch_stream, batch)
                batch = []
            batch_stream = cmd.stream
            batch.append(entry)
            if len(batch) >= batch_size:
                yield from submit(batch_stream, batch)
                batch = []
        if batch:
            yield from submit(batch_stream, batch)

    for s in program.streams:
        env.process(stream(s.id))
    env.process(host_thread())
    env.run()
    return ModelRun(start, end, env.now)


def simpy_streams_only(program: StreamProgram, duration: Sequence[float]) -> ModelRun:
    """A smaller SimPy model that simulates less: the streams and their events, no host.

    Every entry is in its stream's queue at time 0 (no submission cost, no queue depth) and a
    task never waits for cores. Not like-for-like — its makespan differs from the emulator's —
    it shows what the host and the unit pools cost a SimPy model.
    """
    import simpy

    env = simpy.Environment()
    n = len(program.tasks)
    start: list[float | None] = [None] * n
    end: list[float | None] = [None] * n
    entries: dict[int, list] = {s.id: [] for s in program.streams}
    latest: dict[int, simpy.Event] = {}
    for cmd in program.commands:  # generations captured in submission order, as the host does
        kind = type(cmd)
        if kind is Launch:
            entries[cmd.stream].append((LAUNCH, cmd.task))
        elif kind is Record:
            latest[cmd.event] = env.event()
            entries[cmd.stream].append((RECORD, latest[cmd.event]))
        elif kind is Wait:
            entries[cmd.stream].append((WAIT, latest.get(cmd.event)))
        else:
            raise ValueError(f"the SimPy model has no {kind.__name__} command")

    def stream(queue: list):
        for kind, ref in queue:
            if kind == LAUNCH:
                start[ref] = env.now
                yield env.timeout(duration[ref])
                end[ref] = env.now
            elif kind == RECORD:
                ref.succeed()
            elif ref is not None:
                yield ref

    for queue in entries.values():
        env.process(stream(queue))
    env.run()
    return ModelRun(start, end, env.now)


# --- measuring ---------------------------------------------------------------------------------
def reset_peak_rss() -> None:
    """Hand freed heap back to the OS and reset the process's resident-memory high-water mark
    (Linux with glibc; elsewhere a no-op), so a peak is not what an earlier call left behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_mib() -> int | None:
    """The process's resident-memory high-water mark since the last reset, MiB (Linux)."""
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    return None


@dataclass
class SizeResult:
    """One size: per row the best CPU seconds and the lowest peak resident memory (MiB) over
    the rounds, why a row was not run, and what the first round checked."""

    tasks: int
    edges: int
    best: dict[str, float] = field(default_factory=dict)
    peak_mib: dict[str, int] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)

    def time(self, row: str, fn: Callable[[], object]) -> tuple[float, object]:
        """Run ``fn`` on a collected heap and a reset memory mark; keep its CPU time and peak."""
        gc.collect()  # nobody inherits the previous contender's garbage (untimed)
        reset_peak_rss()
        t0 = time.process_time()
        out = fn()
        took = time.process_time() - t0
        self.keep(row, took, peak_rss_mib())
        return took, out

    def keep(self, row: str, seconds: float, peak: int | None) -> None:
        self.best[row] = min(self.best.get(row, seconds), seconds)
        if peak is not None:  # the least disturbed round, as for times
            self.peak_mib[row] = min(self.peak_mib.get(row, peak), peak)

    def refused(self, err: RtgError) -> None:
        """The front end refused the program: rtgraph's rows and SimPy's say so."""
        self.notes["parse + check"] = f"refused: {err.message}"
        for row in ("compile", "emulate", "pipeline"):
            self.notes[row] = "not run: the front end refused the program"
        for row in ("simpy", "simpy streams only"):
            self.notes.setdefault(row, "not run: it runs the program rtgraph compiles")
        for row in ("parse + check", "compile", "emulate", "pipeline"):
            self.best.pop(row, None)
            self.peak_mib.pop(row, None)


def measure(size: int, args: argparse.Namespace, spec: DeviceSpec, dask_ok: bool) -> SizeResult:
    layered = layered_dag(size, args.seed, args.width)
    text = rtg_text(layered)
    dag = layered.flat()
    result = SizeResult(len(dag), len(dag.edges()))
    notes = result.notes
    try:
        import simpy  # noqa: F401
    except ImportError:
        notes["simpy"] = notes["simpy streams only"] = "not installed"
    run_dask = False
    try:
        from dask.threaded import get as threaded_get
    except ImportError:
        notes["dask"] = "not installed"
    else:
        if size > args.dask_max:
            notes["dask"] = f"skipped: over --dask-max {args.dask_max:,}"
        elif not dask_ok:
            notes["dask"] = "skipped: stopped at a smaller size"
        else:
            run_dask = True
            graph, keys = dask_graph(dag)

    for r in range(args.rounds):
        if "pipeline" not in notes:
            try:
                compiled, emulated = run_rtgraph(text, spec, result)
            except RtgError as err:
                result.refused(err)
        if "pipeline" not in notes:
            if r == 0:
                first_round_checks(compiled, emulated, dag, result.checks)
            if "simpy" not in notes:
                run_simpy(compiled, emulated, spec, result, first_round=r == 0)
            del compiled, emulated
        if run_dask:
            try:
                took, results = result.time("dask", lambda: threaded_get(graph, keys))
            except MemoryError:
                notes["dask"] = "out of memory"
                run_dask = False
                continue
            if r == 0:
                right = dask_results_right(dag, results, args.width)  # type: ignore[arg-type]
                result.checks["dask results"] = "right" if right else "WRONG"
            del results
            if took > args.dask_budget:
                rounds = f"{r + 1} round" + ("s" if r else "")
                notes["dask"] = f"{rounds}, over the {args.dask_budget:g} s budget"
                run_dask = False
    return result


def run_rtgraph(text: str, spec: DeviceSpec, result: SizeResult) -> tuple[StreamProgram, object]:
    """One round of rtgraph's pipeline, each phase timed: the compiled program and its run."""
    parse_s, program = result.time(
        "parse + check", lambda: rtgraph.parse(text, "peers.rtg", device=spec)
    )
    compile_s, compiled = result.time(
        "compile", lambda p=program: rtgraph.compile(p, device=spec, streams="by-unit")
    )
    del program
    emulate_s, emulated = result.time(
        "emulate", lambda: rtgraph.run(compiled, device=spec, numerics=False)
    )
    peaks = [result.peak_mib.get(row) for row in ("parse + check", "compile", "emulate")]
    peak = max(peaks) if None not in peaks else None  # type: ignore[type-var]
    result.keep("pipeline", parse_s + compile_s + emulate_s, peak)
    return compiled, emulated  # type: ignore[return-value]


def run_simpy(
    compiled: StreamProgram, emulated, spec: DeviceSpec, result: SizeResult, first_round: bool
) -> None:
    """One round of both SimPy models on the compiled program; the first round checks them."""
    check_modelled(compiled, spec)
    durations = task_durations(compiled, spec)
    _, modelled = result.time("simpy", lambda: simpy_run(compiled, spec, durations))
    if first_round:
        result.checks["simpy makespan"] = f"{modelled.makespan_us:,.2f}"  # type: ignore[attr-defined]
        result.checks["same timeline"] = same_timeline(emulated, modelled)  # type: ignore[arg-type]
    del modelled
    _, smaller = result.time("simpy streams only", lambda: simpy_streams_only(compiled, durations))
    if first_round:
        result.checks["streams-only makespan"] = f"{smaller.makespan_us:,.2f}"  # type: ignore[attr-defined]


def first_round_checks(compiled: StreamProgram, emulated, dag: Dag, checks: dict[str, str]) -> None:
    """What the first round's products say: the DAG got through, and the emulated makespan.

    The compiler numbers tasks in program order, which is the DAG's order (there are no host
    copies), so task ``i`` of the stream program is task ``i`` of the DAG.
    """
    deps = [tuple(sorted(t.deps)) for t in compiled.tasks]
    same = deps == list(dag.parents)
    checks["compiled DAG"] = "same edges" if same else "EDGES DIFFER"
    start = [t.start for t in emulated.tasks]
    end = [t.end for t in emulated.tasks]
    kept = all(start[child] >= end[p] for p, child in dag.edges())
    checks["edges kept"] = "yes" if kept else "NO: a task started before its parent ended"
    checks["streams"] = str(len(compiled.streams))
    checks["waits"] = f"{sum(type(c) is Wait for c in compiled.commands):,}"
    checks["rtgraph makespan"] = f"{emulated.makespan_us:,.2f}"


def same_timeline(emulated, modelled: ModelRun) -> str:
    """Whether SimPy and the emulator start and end every task at the same time."""
    starts = [t.start for t in emulated.tasks]
    ends = [t.end for t in emulated.tasks]
    if starts == modelled.start and ends == modelled.end:
        if emulated.makespan_us == modelled.makespan_us:
            return "yes"
        return "tasks yes, makespan NO"
    differ = sum(
        (a != b) or (c != d)
        for a, b, c, d in zip(starts, modelled.start, ends, modelled.end, strict=True)
    )
    return f"NO ({differ:,} tasks differ)"


# --- the report --------------------------------------------------------------------------------
ROWS = (
    ("parse + check", "rtgraph parse + check (`rtgraph.parse`)"),
    ("compile", "rtgraph compile (`by-unit`)"),
    ("emulate", "rtgraph emulate (timing only)"),
    ("pipeline", "rtgraph whole pipeline (the three above)"),
    ("simpy", "SimPy model of the same device and program"),
    ("simpy streams only", "SimPy, streams and events only (simulates less: no host, no pools)"),
    ("dask", "Dask threaded, executing every task"),
)


def cell(result: SizeResult, row: str) -> str:
    if row in result.best:
        us = 1e6 * result.best[row] / result.tasks
        note = result.notes.get(row)
        return f"{us:,.1f}" + (f" ({note})" if note else "")
    return f"({result.notes.get(row, 'not run')})"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "—"


def growth(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}×" if a is not None and b else "—"


def report(results: list[SizeResult], args: argparse.Namespace) -> None:
    sizes = [f"{r.tasks:,} tasks" for r in results]
    print("| µs per task | " + " | ".join(sizes) + " |")
    print("|---|" + "---:|" * len(results))
    for key, label in ROWS:
        print(f"| {label} | " + " | ".join(cell(r, key) for r in results) + " |")

    print("\n### The acceptance ratios of issue 14\n")
    print("| ratio | " + " | ".join(sizes) + " | target |")
    print("|---|" + "---:|" * len(results) + "---|")
    emu = [ratio(r.best.get("emulate"), r.best.get("simpy")) for r in results]
    print(f"| rtgraph emulate ÷ SimPy | {' | '.join(emu)} | ≤ {EMULATE_TARGET} |")
    per = [cell(r, "pipeline") for r in results]
    print(f"| whole pipeline, µs per task | {' | '.join(per)} | ≤ {PIPELINE_TARGET_US:g} at 100k |")
    dask = [ratio(r.best.get("pipeline"), r.best.get("dask")) for r in results]
    print(f"| whole pipeline ÷ Dask executing | {' | '.join(dask)} | |")
    whole = [f"{r.best['pipeline']:.1f}" if "pipeline" in r.best else "—" for r in results]
    print(f"| whole pipeline, CPU s | {' | '.join(whole)} | ≤ {MILLION_TARGET_S:g} at 1M |")
    peak = [
        f"{r.peak_mib['pipeline'] / 1024:.2f}" if "pipeline" in r.peak_mib else "—" for r in results
    ]
    limit = f"≤ {MILLION_TARGET_GIB:g} at 1M"
    print(f"| its peak resident memory, GiB | {' | '.join(peak)} | {limit} |")

    if len(results) >= 2:
        steps = list(itertools.pairwise(results))
        print("\n### Growth from each size to the next (time ratio; linear is the task ratio)\n")
        heads = [f"{lo.tasks:,} → {hi.tasks:,} (×{hi.tasks / lo.tasks:.1f})" for lo, hi in steps]
        print("| contender / phase | " + " | ".join(heads) + " | target |")
        print("|---|" + "---:|" * len(steps) + "---|")
        for key, label in ROWS:
            cells = [growth(hi.best.get(key), lo.best.get(key)) for lo, hi in steps]
            target = f"≤ {GROWTH_TARGET:g}× per ×10" if key == "pipeline" else ""
            print(f"| {label} | " + " | ".join(cells) + f" | {target} |")

    if any(r.peak_mib for r in results):
        print("\n### Peak resident memory while each ran, MiB\n")
        print(
            "(the process's high-water mark during the call, reset before it, the lowest over "
            "the rounds: it includes what was already resident — the interpreter, the libraries, "
            "the DAG and its text, Dask's graph, and for SimPy rtgraph's compiled program and "
            "run)\n"
        )
        print("| contender / phase | " + " | ".join(sizes) + " |")
        print("|---|" + "---:|" * len(results))
        for key, label in ROWS:
            cells = [f"{r.peak_mib[key]:,}" if key in r.peak_mib else "—" for r in results]
            print(f"| {label} | " + " | ".join(cells) + " |")

    print("\n### Checks (first round)\n")
    keys = (
        ("edges", "DAG edges"),
        ("compiled DAG", "compiled program's task deps vs the DAG"),
        ("edges kept", "emulated: every task starts after its parents end"),
        ("streams", "streams"),
        ("waits", "cross-stream waits"),
        ("rtgraph makespan", "rtgraph emulated makespan µs"),
        ("simpy makespan", "SimPy makespan µs"),
        ("streams-only makespan", "SimPy streams-only makespan µs (no host: differs)"),
        ("same timeline", "SimPy = emulator, every task's start and end"),
        ("dask results", "Dask results (each task's layer + 1)"),
    )
    print("| check | " + " | ".join(sizes) + " |")
    print("|---|" + "---:|" * len(results))
    for key, label in keys:
        values = [f"{r.edges:,}" if key == "edges" else r.checks.get(key, "—") for r in results]
        print(f"| {label} | " + " | ".join(values) + " |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="10000,100000,1000000", help="task counts, comma-separated"
    )
    parser.add_argument("--quick", action="store_true", help="sizes 1000,10000")
    parser.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    parser.add_argument("--width", type=int, default=WIDTH, help="tasks per layer")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dask-max", type=int, default=100_000, help="largest size Dask runs")
    parser.add_argument(
        "--dask-budget", type=float, default=60.0, help="CPU seconds a Dask round may take"
    )
    args = parser.parse_args(argv)
    sizes = [1_000, 10_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    spec = rtgraph.device(DEVICE)

    print("# Peers: rtgraph, a SimPy model and Dask on one random layered DAG")
    print(f"machine: {machine_note()}")
    print(f"peers: {versions()}")
    print(
        f"DAG: seed {args.seed}, layers of {args.width} synthetic kernels, each after 1–"
        f"{MAX_PARENTS} of the layer before; units cube/vector/dma "
        f"{'/'.join(f'{w:.0%}' for w in UNIT_WEIGHTS)}; device {DEVICE}"
    )
    print(
        f"times: process CPU seconds, best of {args.rounds} rounds in which the contenders take "
        "turns, one BLAS thread\n"
    )
    print(
        "rtgraph parses the DAG's .rtg text, compiles it (by-unit: three streams) and emulates "
        "it without numerics. The SimPy model runs the program rtgraph compiled on a model of "
        "the same host (batched ioctls, queue depth), streams, events and unit cores, with the "
        "cost model's durations: the same timeline, task by task (checked below). The smaller "
        "SimPy model leaves the host and the cores out — it simulates less, so it is shown for "
        "scale, not compared. Dask executes every task (a tiny NumPy function) and returns "
        "every result: a general scheduler's cost per task, not a simulator's. "
        "Method and caveats: the docstring of benchmarks/peers.py.\n"
    )
    results: list[SizeResult] = []
    dask_ok = True
    for size in sizes:
        print(f"peers: {size:,} tasks …", file=sys.stderr, flush=True)
        result = measure(size, args, spec, dask_ok)
        note = result.notes.get("dask", "")
        dask_ok = dask_ok and not ("out of memory" in note or "budget" in note)
        results.append(result)
    report(results, args)


def versions() -> str:
    found = []
    for name in ("simpy", "dask"):
        try:
            module = __import__(name)
        except ImportError:
            found.append(f"{name} not installed (pip install '.[bench]')")
        else:
            found.append(f"{name} {module.__version__}")
    return ", ".join(found)


if __name__ == "__main__":
    main()
