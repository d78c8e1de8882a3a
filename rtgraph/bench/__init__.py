"""The headline benchmark: the runtime documentation's claims, measured on the bundled models.

One job per module, in the order a run takes: ``run`` compiles and runs the models into the
rows of ``rows``; ``claims`` judges them against the documentation's claims (pure functions);
``tables`` prints them as Markdown and ``figure`` draws them; ``report`` holds one run's rows
and hands them to those three; ``__main__`` is ``python -m rtgraph.bench``.
"""

from rtgraph.bench.machine import machine_note
from rtgraph.bench.report import BenchReport
from rtgraph.bench.run import ALLOC_MODES, MEMORY_PLANS, POLICIES, bench, model_paths

__all__ = [
    "ALLOC_MODES",
    "MEMORY_PLANS",
    "POLICIES",
    "BenchReport",
    "bench",
    "machine_note",
    "model_paths",
]
