"""Sweeps: a grid or a sample of compile options, devices and program parameters, each point
compiled and run, the figures in one tidy table (``rtgraph sweep FILE.toml``; docs/sweeps.md).

One job per module, in the order a sweep takes: ``spec`` reads and checks the sweep file
(located errors before any work), ``points`` enumerates or samples its points, ``evaluate``
runs one point, ``cache`` keeps each result on disk under a content hash, ``engine`` runs the
points serially or on Dask, ``table`` writes the tidy table and marks the Pareto front, and
``run`` ties them together.
"""

from rtgraph.sweep.run import SIDECAR, SweepRun, run_sweep
from rtgraph.sweep.spec import SweepError, read_sweep

__all__ = ["SIDECAR", "SweepError", "SweepRun", "read_sweep", "run_sweep"]
