"""``--memory``'s vocabulary: the static memory plans :mod:`.plan_memory` implements.

Declared apart from the pass so that :mod:`rtgraph.compiler.options` can validate a plan's name
without importing the pass that takes the options. The CLI's help and ``docs/options.md`` are
generated from :data:`PLANS`.
"""

from __future__ import annotations

from rtgraph.errors import did_you_mean

#: The memory plans by name, each with what it reuses: ``--memory``'s vocabulary. The CLI's
#: help and ``docs/options.md`` are generated from it.
PLANS: dict[str, str] = {
    "none": "no reuse, every tensor its own region (the baseline a plan is measured against)",
    "greedy": "reuse by liveness in program order — the least memory, but reuse adds waits",
    "stream-ordered": "reuse only where the streams already order two tensors — no false "
    "dependencies",
    "timed": "reuse once the device's replayed timeline is done with a tensor — waits expected "
    "to be met already",
}
#: Plans that measure liveness on the streams, so they run after stream assignment.
AFTER_STREAMS = ("stream-ordered", "timed")


def plan_problem(name: str) -> tuple[str, str | None] | None:
    """What is wrong with ``name`` as a memory plan, and a hint; None when it names one."""
    if name in PLANS:
        return None
    return "unknown memory plan", did_you_mean(name, PLANS) or f"choose one of: {', '.join(PLANS)}"
