"""What batchnorm folding did to a run's numbers (``rtgraph run``'s note after its check).

A run of a program whose batchnorms the optimizer folded is checked bit for bit against the
folded program (:func:`~rtgraph.compiler.optimizer.pipeline.as_checked`); :func:`folds_moved`
says how far that moved the outputs from the program as written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from rtgraph.compiler.optimizer.pipeline import folds, rewrites_precision
from rtgraph.compiler.options import CompileOptions
from rtgraph.ir.accuracy import accuracy
from rtgraph.ir.graph import Program
from rtgraph.ir.reference import Reference


def folds_moved(
    program: Program,
    options: CompileOptions,
    outputs: Mapping[str, np.ndarray],
    reference: Callable[[Program], Reference],
) -> dict[str, tuple[float, float]] | None:
    """How far batchnorm folding moved each of a run's ``outputs`` from ``program`` as written
    (its ``reference``: a function of a program): the largest difference over the checked
    elements, and that as a share of the output's largest magnitude there (the run itself is
    checked against :func:`~rtgraph.compiler.optimizer.pipeline.as_checked`). None when nothing
    folded, or when the precision pass rewrote the program too: the precision report
    (:func:`~rtgraph.reports.precision.run_precision`) measures the two together then."""
    if not folds(program, options) or rewrites_precision(program, options):
        return None
    unfolded = reference(program)
    moved = {}
    for name, want in unfolded.items():
        a = accuracy(unfolded.elements(name, outputs[name]), unfolded.elements(name, want))
        moved[name] = (a.max_abs, a.max_rel)
    return moved
