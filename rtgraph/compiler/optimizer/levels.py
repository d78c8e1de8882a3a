"""The optimizer's vocabulary: its passes by name, in pipeline order, and what each level runs.

Declared here, apart from the passes, so that :mod:`rtgraph.compiler.options` can check an
``--passes`` list or an ``-O`` level without importing the passes (which take the options).
"""

from __future__ import annotations

#: Every optimizer pass, in the order a pipeline runs them, with what it does.
PASSES: dict[str, str] = {
    "fold_batchnorm": "batchnorm after a conv2d or matmul on params folds into its weights",
    "fold_constants": "ops on compile-time scalars become constants; x·1 is x",
    "fold_layout": "transpose of a transpose, reshape of a reshape, identity layouts: one or none",
    "eliminate_common_subexpressions": "one op applied twice to the same operands is computed once",
    "eliminate_dead_code": "ops whose results nothing uses are dropped",
    "choose_precision": "ops recomputed in the dtypes --precision asks for (f16, int8 with "
    "calibrated scales, or per op under an error budget); nothing under --precision keep",
    "fuse_epilogue": "a matmul / conv2d and the bias, scale, activation after it: one Cube task",
    "fuse_elementwise": "chains and trees of Vector ops become one task (inputs read once)",
    "tile_and_pipeline": "a Cube-to-Vector chain is cut into K tiles (K by the cost model) and "
    "emitted skewed, so one tile's Cube work overlaps the last one's Vector work",
    "stream_host_copies": "an input crosses the host link in row parts (K by the cost model) "
    "so work on its first rows starts early; an output's finished row blocks go back one by one",
    "order_for_overlap": "ops in the order a list schedule on the units starts them, so a "
    "stream per unit overlaps independent work",
}

#: The passes that rewrite the schedule, not the arithmetic's shape: ``-O2`` only.
PIPELINING = ("tile_and_pipeline", "stream_host_copies", "order_for_overlap")

#: What each ``-O`` level runs: ``-O1`` canonicalizes and fuses, ``-O2`` also tiles and
#: pipelines.
LEVELS: dict[int, tuple[str, ...]] = {
    0: (),
    1: tuple(p for p in PASSES if p not in PIPELINING),
    2: tuple(PASSES),
}

#: The level a compile runs when none is asked for.
DEFAULT_LEVEL = 2


def level_problem(level: object) -> tuple[str, str] | None:
    """Why ``level`` is not an optimization level, or None."""
    if isinstance(level, bool) or level not in LEVELS:
        return f"not an optimization level ({', '.join(map(str, LEVELS))})", "use -O0, -O1 or -O2"
    return None


def passes_problem(names: object) -> tuple[str, str] | None:
    """Why ``names`` is not a list of optimizer passes, or None."""
    if not isinstance(names, tuple) or not all(isinstance(n, str) for n in names):
        return "must be a tuple of pass names", f"passes: {', '.join(PASSES)}"
    for name in names:
        if name not in PASSES:
            return f"unknown pass {name!r}", f"passes: {', '.join(PASSES)}"
    return None
