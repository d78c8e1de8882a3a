"""The optimizer's pipeline: the passes the options choose, run in order.

Lives apart from the package's ``__init__`` so that :mod:`rtgraph.compiler.options` can read
the vocabulary in :mod:`.levels` without importing the passes (which take the options).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from rtgraph.compiler.optimizer.choose_precision import any_pinned, choose_precision
from rtgraph.compiler.optimizer.eliminate_common_subexpressions import (
    eliminate_common_subexpressions,
)
from rtgraph.compiler.optimizer.eliminate_dead_code import eliminate_dead_code
from rtgraph.compiler.optimizer.fold_batchnorm import fold_batchnorm, fold_sites
from rtgraph.compiler.optimizer.fold_constants import fold_constants
from rtgraph.compiler.optimizer.fold_layout import fold_layout
from rtgraph.compiler.optimizer.fuse_elementwise import fuse_elementwise
from rtgraph.compiler.optimizer.fuse_epilogue import fuse_epilogue
from rtgraph.compiler.optimizer.levels import LEVELS, PASSES
from rtgraph.compiler.optimizer.order_for_overlap import order_for_overlap
from rtgraph.compiler.optimizer.stream_host_copies import stream_host_copies
from rtgraph.compiler.optimizer.tile_and_pipeline import tile_and_pipeline
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.parallel.group_of_one import group_of_one
from rtgraph.errors import UsageError
from rtgraph.ir.graph import Program

#: An optimizer pass: ``(program, options) -> program``.
OptPass = Callable[[Program, CompileOptions], Program]

#: Every pass by name (the order of :data:`~rtgraph.compiler.optimizer.levels.PASSES`).
PASS_FUNCTIONS: dict[str, OptPass] = {
    "fold_batchnorm": fold_batchnorm,
    "fold_constants": fold_constants,
    "fold_layout": fold_layout,
    "eliminate_common_subexpressions": eliminate_common_subexpressions,
    "eliminate_dead_code": eliminate_dead_code,
    "choose_precision": choose_precision,
    "fuse_epilogue": fuse_epilogue,
    "fuse_elementwise": fuse_elementwise,
    "tile_and_pipeline": tile_and_pipeline,
    "stream_host_copies": stream_host_copies,
    "order_for_overlap": order_for_overlap,
}
assert tuple(PASS_FUNCTIONS) == tuple(PASSES)

#: The passes whose choices depend most on the shapes they see: the tile counts and the host
#: copies' parts (a gear of a range is also compiled without them: rtgraph.compile_gears).
TILING_PASSES = ("tile_and_pipeline", "stream_host_copies")


def chosen_passes(options: CompileOptions) -> tuple[str, ...]:
    """The passes ``options`` ask for, in the order given (``passes``) or the level's."""
    if options.passes is not None:
        return options.passes
    return LEVELS[options.opt_level]


def optimize_steps(program: Program, options: CompileOptions) -> Iterator[tuple[str, Program]]:
    """Each chosen pass's name and the program after it, in order."""
    if program.has_explicit_streams:
        if options.precision != "keep":
            raise UsageError(
                f"--precision {options.precision}: program '{program.name}' places its work on "
                "streams itself, so it is compiled as written and no optimizer pass runs",
                hint="write the dtypes you want in the program, or leave --precision out",
            )
        return
    for name in chosen_passes(options):
        program = PASS_FUNCTIONS[name](program, options)
        yield name, program


def optimize(program: Program, options: CompileOptions, changed: set[str] | None = None) -> Program:
    """``program`` after every pass ``options`` choose (its collectives, run by one device,
    first made the identity: :func:`~rtgraph.compiler.parallel.group_of_one.group_of_one`);
    the names of the passes that changed it are added to ``changed`` when given (a pass that
    changes nothing returns the program it was given)."""
    program = group_of_one(program)
    result = program
    for name, after in optimize_steps(program, options):
        if changed is not None and after is not result:
            changed.add(name)
        result = after
    return result


def optimized_ir(program: Program, options: CompileOptions, after: str | None = None) -> Program:
    """``program`` after the pass ``after`` (None: after every chosen pass); a
    :class:`UsageError` when ``after`` is not among the passes ``options`` choose."""
    names = chosen_passes(options)
    if after is not None and after not in names:
        hint = f"the passes that run: {', '.join(names)}" if names else "add -O1 or --passes"
        raise UsageError(f"--after {after}: no such pass runs here", hint=hint)
    program = group_of_one(program)
    result = program
    for name, step in optimize_steps(program, options):
        result = step
        if name == after:
            break
    return result


def as_checked(program: Program, options: CompileOptions) -> Program:
    """``program`` as the passes that change its arithmetic by design leave it — the precision
    pass (under ``--precision``, or with a precision pinned) and batchnorm folding — else
    itself: what a run of ``program`` compiled under ``options`` is checked against, bit for
    bit. Every other pass keeps each element's arithmetic (docs/optimizer.md)."""
    if rewrites_precision(program, options):
        return optimized_ir(program, options, after="choose_precision")
    if folds(program, options):
        return optimized_ir(program, options, after="fold_batchnorm")
    return program


def rewrites_precision(program: Program, options: CompileOptions) -> bool:
    """Whether the precision pass changes ``program``'s dtypes under ``options``."""
    keep = options.precision == "keep" and not any_pinned(program)
    return not keep and "choose_precision" in chosen_passes(options)


def folds(program: Program, options: CompileOptions) -> bool:
    """Whether ``options`` fold a batchnorm of ``program`` into its conv or matmul (a program
    that places its work on streams itself is compiled as written)."""
    runs = "fold_batchnorm" in chosen_passes(options) and not program.has_explicit_streams
    return runs and bool(fold_sites(program))
