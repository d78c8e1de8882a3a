"""Run-time device-memory allocators for the emulator: direct, caching pools, buddy.

All implement :class:`~rtgraph.alloc.base.Allocator` (``malloc``/``free``/``empty_cache``/
``stats``/``snapshot``/``blocks``). Build one from a device's memory spec with
:func:`from_memory_spec`; ``docs/allocators.md`` describes each policy.

=========  ==========================================================================
kind       what it models
=========  ==========================================================================
direct     ``aclrtMalloc``/``aclrtFree`` per request (≈50 µs, nothing cached)
pool       rtgraph's caching pool: segments, best fit, stream-ordered reuse with waits
pytorch    PyTorch's caching allocator rules (small/large pools, per-stream reuse)
buddy      power-of-two buddy blocks over one arena
=========  ==========================================================================
"""

from __future__ import annotations

import inspect

from rtgraph.alloc.base import Allocator
from rtgraph.alloc.buddy import BuddyAllocator
from rtgraph.alloc.caching_pool import CachingPool, PyTorchCachingAllocator
from rtgraph.alloc.direct import DirectAllocator, aclrt_malloc_size
from rtgraph.alloc.records import Allocation, BlockInfo, Frame, SegmentInfo, TraceEntry
from rtgraph.alloc.snapshot import build_snapshot, load_snapshot, to_json, write_snapshot
from rtgraph.alloc.stats import recount
from rtgraph.device.spec import MemorySpec
from rtgraph.errors import DeviceError, did_you_mean

KINDS: tuple[str, ...] = ("direct", "pool", "pytorch", "buddy")
#: What each kind models (the CLI's help and ``docs/options.md`` quote it).
KIND_HELP: dict[str, str] = {
    "direct": "aclrtMalloc/aclrtFree per request (≈50 µs a call, nothing cached)",
    "pool": "from rtgraph's caching pool (segments, best fit, stream-ordered reuse; ≈1 µs a call)",
    "pytorch": "by PyTorch's caching allocator rules (small/large pools, per-stream reuse)",
    "buddy": "from power-of-two buddy blocks over one arena",
}

_CLASSES: dict[str, type[Allocator]] = {
    "direct": DirectAllocator,
    "pool": CachingPool,
    "pytorch": PyTorchCachingAllocator,
    "buddy": BuddyAllocator,
}


def _spec_options(kind: str, mem: MemorySpec) -> dict[str, object]:
    """Constructor arguments a memory spec determines for each kind."""
    if kind == "direct":
        return {
            "alignment": mem.alignment,
            "granularity": mem.granularity,
            "large_page": mem.large_page,
            "large_page_threshold": mem.large_page_threshold,
            "latency_us": mem.direct_alloc_us,
            "free_latency_us": mem.direct_free_us,
        }
    common: dict[str, object] = {
        "alignment": mem.alignment,
        "large_page": mem.large_page,
        "latency_us": mem.pool_alloc_us,
        "driver_latency_us": mem.direct_alloc_us,
        "driver_free_latency_us": mem.direct_free_us,
    }
    if kind in ("pool", "pytorch"):
        common["large_page_threshold"] = mem.large_page_threshold
    if kind == "pool":
        common["segment_size"] = mem.large_page
    return common


def from_memory_spec(kind: str, mem: MemorySpec, **options: object) -> Allocator:
    """The allocator of ``kind`` for a device memory spec; ``options`` override spec values.

    E.g. ``from_memory_spec("pool", spec.memory, coalesce="deferred", memory_fraction=0.9)``.
    """
    cls = _CLASSES.get(kind)
    if cls is None:
        raise DeviceError(
            f"unknown allocator kind {kind!r} (known: {', '.join(KINDS)})",
            hint=did_you_mean(kind, KINDS),
        )
    accepted = _accepted_options(cls)
    for name in sorted(options):
        if name not in accepted:
            raise DeviceError(
                f"the {kind} allocator has no option {name!r}",
                hint=did_you_mean(name, accepted) or f"options: {', '.join(sorted(accepted))}",
            )
    merged = {**_spec_options(kind, mem), **options}
    return cls(mem.capacity, **merged)


def _accepted_options(cls: type[Allocator]) -> list[str]:
    names = []
    for klass in cls.__mro__:
        if klass is object or "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        names += [p.name for p in params if p.kind is p.KEYWORD_ONLY]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return sorted(set(names) - {"policy"})


__all__ = [
    "KINDS",
    "KIND_HELP",
    "Allocation",
    "Allocator",
    "BlockInfo",
    "BuddyAllocator",
    "CachingPool",
    "DirectAllocator",
    "Frame",
    "PyTorchCachingAllocator",
    "SegmentInfo",
    "TraceEntry",
    "aclrt_malloc_size",
    "build_snapshot",
    "from_memory_spec",
    "load_snapshot",
    "recount",
    "to_json",
    "write_snapshot",
]
