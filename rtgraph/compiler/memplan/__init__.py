"""Static memory planning: byte offsets in one device pool for tensors with known lifetimes.

:func:`plan` is the entry point (records in, :class:`Placement` out: offsets, height, the
best lower bound and whether the height is ``proven`` optimal); :func:`plan_lifetimes`
is the compiler's shorthand for ``(size, first_use, last_use)`` triples; :func:`check_placement`
lists what is wrong with a placement. Records travel as MiniMalloc CSV files
(:func:`read_records_csv`, :func:`write_offsets_csv`). Every input is bounded before it costs
work or memory — the ``MAX_*`` limits below, listed in ``docs/limits.md``.
"""

from rtgraph.compiler.memplan.planner import (
    DEFAULT_BUDGET,
    DEFAULT_TIME_LIMIT,
    MAX_SEARCH_WORK,
    METHODS,
    Placement,
    Violation,
    check_placement,
    greedy_by_size,
    plan,
    plan_lifetimes,
)
from rtgraph.compiler.memplan.problem import MAX_PAIRS, Problem, build_problem
from rtgraph.compiler.memplan.records import (
    MAX_POOL_BYTES,
    MAX_RECORD_FILE_BYTES,
    MAX_RECORDS,
    MAX_TIME,
    Record,
    parse_records_csv,
    read_records_csv,
    write_offsets_csv,
)

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_TIME_LIMIT",
    "MAX_PAIRS",
    "MAX_POOL_BYTES",
    "MAX_RECORDS",
    "MAX_RECORD_FILE_BYTES",
    "MAX_SEARCH_WORK",
    "MAX_TIME",
    "METHODS",
    "Placement",
    "Problem",
    "Record",
    "Violation",
    "build_problem",
    "check_placement",
    "greedy_by_size",
    "parse_records_csv",
    "plan",
    "plan_lifetimes",
    "read_records_csv",
    "write_offsets_csv",
]
