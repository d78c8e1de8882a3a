"""Scheduling a task DAG onto classes of identical cores, independent of rtgraph's IR.

:func:`list_schedule` gives every job a start time and a lane (stream) within its unit class;
:func:`read_stg` reads the STG benchmark graphs it is judged on.
"""

from rtgraph.compiler.scheduling.list_scheduler import (
    DEFAULT_BUDGET,
    Job,
    Schedule,
    list_schedule,
    lower_bound,
)
from rtgraph.compiler.scheduling.stg import read_stg

__all__ = ["DEFAULT_BUDGET", "Job", "Schedule", "list_schedule", "lower_bound", "read_stg"]
