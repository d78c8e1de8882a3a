"""``--alloc``'s vocabulary: the static plan, or run-time allocation (:mod:`.allocate_at_runtime`)
from one of :mod:`rtgraph.alloc`'s allocators or ``mixed``.

Declared apart from the pass so that :mod:`rtgraph.compiler.options` can validate a mode without
importing the pass that takes the options. The CLI's help and ``docs/options.md`` are generated
from :data:`ALLOC_HELP`.
"""

from __future__ import annotations

from rtgraph.alloc import KIND_HELP, KINDS
from rtgraph.errors import did_you_mean

#: ``--alloc``'s vocabulary: the static plan, each allocator of :mod:`rtgraph.alloc`, and
#: ``mixed``. The CLI's help and ``docs/options.md`` are generated from it.
ALLOC_MODES: tuple[str, ...] = ("static", *KINDS, "mixed")
#: Each allocation mode with what it does (the CLI's help and ``docs/options.md``).
ALLOC_HELP: dict[str, str] = {
    "static": "the memory plan places every tensor at compile time",
    **{kind: f"at run time, {KIND_HELP[kind]}" for kind in KINDS},
    "mixed": "params (and @direct tensors) by direct allocation at load time, activations "
    "from the pool",
}


def alloc_problem(mode: str) -> tuple[str, str | None] | None:
    """What is wrong with ``mode`` as an allocation mode, and a hint; None when it names one."""
    if mode in ALLOC_MODES:
        return None
    hint = did_you_mean(mode, ALLOC_MODES) or f"choose one of: {', '.join(ALLOC_MODES)}"
    return "unknown allocation mode", hint
