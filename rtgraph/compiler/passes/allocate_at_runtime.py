"""Run-time allocation (``--alloc``): device memory from an allocator, as the host would get it.

Instead of a static plan, every tensor is allocated when the host submits its producer and
freed once the host has submitted its last use — the way an eager framework on a caching
allocator behaves. Because those calls happen on the host in submission order, the addresses
they return are a function of that order alone, so this pass can replay the allocator at
compile time: it walks the submission order, calls the allocator, and gives each tensor the
address it returned. The calls stay in the stream program as ``Alloc``/``Free`` host commands
costing the allocator's latency (≈50 µs direct, ≈1 µs from a pool), so they show on the host
lane. Reuse of a freed block by another stream is a byte-range hazard like any other: the
barrier pass orders it with an event, which is what a stream-ordered pool's inserted wait is.

Kinds: ``direct``, ``pool``, ``pytorch`` and ``buddy`` serve everything from that allocator;
``mixed`` serves params (and ``@direct`` tensors) from direct allocation at load time and
activations from the pool. Fixed-address buffers stay where the program put them, below the
allocators' address space.
"""

from __future__ import annotations

from dataclasses import replace

from rtgraph.alloc import from_memory_spec
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.passes.alloc_modes import alloc_problem
from rtgraph.compiler.passes.plan_memory import align_up
from rtgraph.compiler.taskgraph import Storage, TaskGraph
from rtgraph.device.spec import MemorySpec
from rtgraph.errors import UsageError
from rtgraph.stream_program.program import Alloc, Free, MemoryPlan, Region

RESIDENT = ("param", "const", "buffer")


def allocate_at_runtime(graph: TaskGraph, options: CompileOptions) -> TaskGraph:
    """``graph`` with ``memory`` from replaying ``options.alloc``'s allocator over the
    submission order (any mode but ``static``)."""
    return allocate_with(graph, options.alloc)


def allocate_with(graph: TaskGraph, kind: str) -> TaskGraph:
    """``graph`` with ``memory`` from replaying ``kind``'s allocator over the submission order."""
    if kind == "static" or alloc_problem(kind) is not None:
        problem = alloc_problem(kind) or ("the static plan is not a run-time allocator", None)
        raise UsageError(f"allocation mode '{kind}': {problem[0]}", hint=problem[1])
    assert graph.order is not None and graph.stream_of is not None
    mem = graph.device.memory
    storages = graph.storages
    fixed_end = max(
        (s.address + s.nbytes for s in storages.values() if s.address is not None), default=0
    )
    base = align_up(fixed_end, mem.alignment)

    # Where each storage is first and last touched, in submission order.
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for t in graph.order:
        task = graph.tasks[t]
        for name in (*task.reads, *task.writes):
            first.setdefault(name, t)
            last[name] = t

    resident = [s for s in storages.values() if s.address is None and s.kind in RESIDENT]
    pooled = [s for s in storages.values() if s.kind in ("input", "value")]
    start: list[Alloc] = []
    addresses: dict[str, int] = {}
    latency = {"alloc": 0.0, "free": 0.0}

    space_for_values = _resident_space(kind, mem, base, resident, start, addresses, latency)
    before, after = _replay_values(graph, pooled, first, last, space_for_values, addresses, latency)

    regions: dict[str, Region] = {}
    for s in storages.values():
        if s.address is not None:
            regions[s.name] = Region(s.name, s.address, s.nbytes, "buffer", 0, len(graph.tasks))
        elif s.name in addresses:
            lo, hi = (0, len(graph.tasks)) if s.kind in RESIDENT else (first[s.name], last[s.name])
            regions[s.name] = Region(s.name, addresses[s.name], s.nbytes, s.kind, lo, hi)
        else:  # a storage no task touches: give it a place all the same
            start.append(space_for_values.malloc(s.name, s.nbytes, 0, addresses, latency))
            regions[s.name] = Region(s.name, addresses[s.name], s.nbytes, s.kind, 0, 0)
    # Device memory as the emulator holds it: up to the highest byte any tensor occupies (the
    # allocators' reserved peaks are reported, not allocated: a buddy arena reserves it all).
    ends = max((r.offset + r.size for r in regions.values()), default=0)
    total = align_up(max(ends, 1), mem.alignment)
    stats = space_for_values.allocator.stats()
    notes = {
        **graph.notes,
        "alloc": {
            "kind": kind,
            "allocs": sum(len(v) for v in before.values()) + len(start),
            "alloc_latency_us": latency["alloc"],
            "free_latency_us": latency["free"],
            "peak_allocated_bytes": int(stats["allocated_bytes.all.peak"]),
            "peak_reserved_bytes": int(stats["reserved_bytes.all.peak"]),
            "fragmentation": float(stats.get("fragmentation", 0.0)),
            "total_bytes": total,
        },
    }
    return replace(
        graph,
        memory=MemoryPlan(f"runtime:{kind}", regions, total, mem.alignment),
        alloc_ops={"start": start, "before": before, "after": after},
        notes=notes,
    )


def _resident_space(
    kind: str,
    mem: MemorySpec,
    base: int,
    resident: list[Storage],
    start: list[Alloc],
    addresses: dict[str, int],
    latency: dict[str, float],
) -> _Space:
    """Allocate the resident storages at load time (into ``start``) and return the space the
    activations come from: the same allocator, or under ``mixed`` a pool above the direct
    allocations."""
    if kind != "mixed":
        one = _Space(
            from_memory_spec(kind, replace(mem, capacity=mem.capacity - base), base_address=base),
            kind,
        )
        for s in resident:
            start.append(one.malloc(s.name, s.nbytes, 0, addresses, latency))
        return one
    direct_space = _Space(from_memory_spec("direct", mem, base_address=base), "direct")
    for s in resident:
        start.append(direct_space.malloc(s.name, s.nbytes, 0, addresses, latency))
    pool_base = align_up(direct_space.high_water, mem.alignment)
    pool = from_memory_spec(
        "pool", replace(mem, capacity=mem.capacity - pool_base), base_address=pool_base
    )
    return _Space(pool, "pool")


def _replay_values(
    graph: TaskGraph,
    pooled: list[Storage],
    first: dict[str, int],
    last: dict[str, int],
    space: _Space,
    addresses: dict[str, int],
    latency: dict[str, float],
) -> tuple[dict[int, list[Alloc]], dict[int, list[Free]]]:
    """Each activation allocated just before its first task and freed just after its last,
    walking the submission order: the host commands before and after each task."""
    assert graph.order is not None and graph.stream_of is not None
    before: dict[int, list[Alloc]] = {}
    after: dict[int, list[Free]] = {}
    frees_at: dict[int, list[str]] = {}
    for s in pooled:
        if s.name in last:
            frees_at.setdefault(last[s.name], []).append(s.name)
    born: dict[int, list[str]] = {}
    for s in pooled:
        if s.name in first:
            born.setdefault(first[s.name], []).append(s.name)
    for t in graph.order:
        q = graph.stream_of[t]
        for name in born.get(t, ()):
            before.setdefault(t, []).append(
                space.malloc(name, graph.storages[name].nbytes, q, addresses, latency)
            )
        for name in frees_at.get(t, ()):
            after.setdefault(t, []).append(space.free(name, q, latency))
    return before, after


class _Space:
    """One allocator (placed in device memory by its ``base_address``) and its handles."""

    def __init__(self, allocator, label: str) -> None:
        self.allocator = allocator
        self.label = label
        self.handles: dict[str, int] = {}
        self.high_water = 0

    def malloc(
        self, name: str, nbytes: int, stream: int, addresses: dict[str, int], latency: dict
    ) -> Alloc:
        a = self.allocator.malloc(max(nbytes, 1), stream)
        self.handles[name] = a.handle
        addresses[name] = a.address
        self.high_water = max(self.high_water, a.address + a.size)
        latency["alloc"] += a.latency_us
        used, held = self.totals()
        return Alloc(stream, name, a.address, a.size, a.latency_us, self.label, used, held)

    def free(self, name: str, stream: int, latency: dict) -> Free:
        cost = self.allocator.free(self.handles.pop(name), stream)
        latency["free"] += cost
        used, held = self.totals()
        return Free(stream, name, cost, self.label, used, held)

    def totals(self) -> tuple[int, int]:
        stats = self.allocator.stats()
        return int(stats["allocated_bytes.all.current"]), int(stats["reserved_bytes.all.current"])
