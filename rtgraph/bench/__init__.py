"""The headline benchmark: the runtime documentation's claims, measured on the bundled models."""

from rtgraph.bench.run import (
    ALLOC_MODES,
    MEMORY_PLANS,
    POLICIES,
    BenchReport,
    bench,
    machine_note,
    main,
    model_paths,
)

__all__ = [
    "ALLOC_MODES",
    "MEMORY_PLANS",
    "POLICIES",
    "BenchReport",
    "bench",
    "machine_note",
    "main",
    "model_paths",
]
