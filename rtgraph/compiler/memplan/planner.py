"""Static memory planning: give every tensor an offset in one pool, as low as it can go.

The compiler knows, for every tensor, its size and its lifetime in task order. Tensors whose
lifetimes overlap must not share bytes; the planner assigns offsets so they never do and the
pool's height — the highest ``offset + size`` — is as small as it can make it. Nothing can
be lower than the *max-live* bound: the most bytes live at one moment.

Methods (all deterministic: same records, same offsets):

``"greedy_by_size"``
    The TFLite / Pisarchyk–Lee baseline, kept as the floor every other method must beat.
``"heuristic"`` (alias ``"fast"``)
    The best of a small portfolio of one-pass heuristics — greedy-by-size and canonical
    skyline placement under four preorders, stopping early at the lower bound.
    ``O((n + P) log n)`` for ``n`` records and ``P`` conflicting pairs: a few tens of
    milliseconds for a thousand tensors.
``"exact"``
    The portfolio's best as the incumbent, then branch and bound over canonical placements
    (:mod:`rtgraph.compiler.memplan.exact` driving :mod:`rtgraph.compiler.memplan.search`),
    of the records and, in the same rounds, of the problem coalesced into blocks (buffers of
    one lifetime stacked, same-size buffers reusing each other's bytes chained:
    :mod:`rtgraph.compiler.memplan.coalesce`),
    alternating with a skyline fill that finds some tight plans the search misses but proves
    nothing (:func:`~rtgraph.compiler.memplan.fill.fill_within`): first for a plan at the
    lower bound, then bisecting on the capacity, until the plan is proven optimal or the time limit
    (default :data:`DEFAULT_TIME_LIMIT`) runs out. The placement says whether it is
    ``proven`` and gives the best lower bound proved.
``"best"``
    The same search under a fixed number of placements (``budget``, default
    :data:`DEFAULT_BUDGET`) and no time limit, so its answer never depends on the machine:
    the compiler's method (with a smaller budget). Each placement costs about
    ``O(k + S)`` NumPy work for the ``k`` records and ``S`` sections of the piece being solved
    (0.1–0.3 ms on the MiniMalloc instances). Since a placement's cost grows with the records,
    placements × records is capped too (:data:`MAX_SEARCH_WORK`), and a problem too large for
    the search to place every record within that is not searched.

A CP-SAT model (OR-Tools ``NoOverlap2D`` over lifetime × address, hinted with the portfolio's
plan, 2 workers) was measured as a further method and not kept: after 30 s it stood at
1.094–1.167 × the capacity on MiniMalloc's A, E, H and I, above what this search reaches.

A *dense* problem — more than :data:`MAX_PAIRS` overlapping pairs, as when most tensors
live to the end of the program — is placed by a linear scan that reuses freed blocks of the
same size, whatever the method (``greedy_by_size`` too): ``O(n log n)`` where a pair list would
not fit in memory; :func:`check_placement` checks it by a sweep over time.

Every input is bounded before it costs work or memory (:mod:`.problem`, ``docs/limits.md``):
records, times, sizes and their total, the alignment and the search's work; sizes, offsets
and heights are exact (int64 that provably cannot overflow, Python integers at the seams).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np

from rtgraph.compiler.memplan.exact import ExactResult, solve
from rtgraph.compiler.memplan.greedy import (
    greedy_by_size_offsets,
    height_of,
    portfolio_offsets,
    sweep_offsets,
)
from rtgraph.compiler.memplan.overlaps import sweep_overlaps
from rtgraph.compiler.memplan.problem import MAX_PAIRS, Problem, build_problem
from rtgraph.compiler.memplan.records import MAX_POOL_BYTES, Record
from rtgraph.errors import InputError, did_you_mean

METHODS = ("best", "exact", "heuristic", "fast", "greedy_by_size")

#: Seconds ``plan(method="exact")`` searches when no time limit is given.
DEFAULT_TIME_LIMIT = 10.0

#: Search placements ``plan(method="best")`` may try when no budget is given. At roughly
#: 50–150 µs a placement this bounds the search at a few seconds; problems the heuristics
#: already solve to the lower bound never search at all.
DEFAULT_BUDGET = 30_000

#: Search placements × active records ``plan(method="best")`` may spend, whatever the budget:
#: a placement costs time in proportion to the records of the piece it works on, so the budget
#: applies in full up to a few thousand records and shrinks beyond. A plan found by search
#: places every record once, so with fewer placements than records the search is skipped: it
#: runs only up to 10,000 records, and a larger problem keeps the heuristics' plan in seconds.
MAX_SEARCH_WORK = 100_000_000

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_TIME_LIMIT",
    "MAX_PAIRS",
    "MAX_SEARCH_WORK",
    "METHODS",
    "Placement",
    "Violation",
    "check_placement",
    "greedy_by_size",
    "plan",
    "plan_lifetimes",
]


@dataclass(frozen=True)
class Placement:
    """Where each record goes: ``offsets[id]``, a multiple of the alignment.

    ``height`` is the pool size the plan needs (max of offset + aligned size), ``lower_bound``
    the best bound no plan can beat — max-live, or more where the search proved a capacity
    infeasible — and ``method`` names the algorithm whose answer this is (e.g.
    ``"greedy_by_size"``, ``"skyline/TWA"``, ``"search/TAW"``). ``proven`` says the height is
    optimal: it equals the lower bound (rounded up to the gcd of the sizes, which every
    canonical height is a multiple of). ``time_to_best`` is the seconds the search took to
    find this plan (0.0 for a heuristic's; not compared, as it depends on the machine).
    """

    offsets: dict[str, int]
    height: int
    lower_bound: int
    method: str
    proven: bool = False
    time_to_best: float = field(default=0.0, compare=False)

    @property
    def gap(self) -> float:
        """``(height - lower_bound) / lower_bound``: how far from optimal at most (0.0: none)."""
        return (self.height - self.lower_bound) / self.lower_bound if self.lower_bound else 0.0

    @property
    def ratio(self) -> float:
        """``height / lower_bound`` (1.0 is optimal; 1.0 for an empty plan)."""
        return self.height / self.lower_bound if self.lower_bound else 1.0


@dataclass(frozen=True)
class Violation:
    """One way a placement breaks its contract; ``str()`` gives the explanation."""

    kind: str  # "overlap", "misaligned", "missing", "negative", "range" or "height"
    ids: tuple[str, ...]
    message: str

    def __str__(self) -> str:
        return self.message


def plan(
    records: Sequence[Record],
    *,
    alignment: int = 1,
    method: str = "best",
    budget: float | None = None,
    time_limit: float | None = None,
    capacity: int | None = None,
) -> Placement:
    """Offsets for ``records`` in one pool, overlapping lifetimes never overlapping in memory.

    Sizes are rounded up to ``alignment`` and every offset is a multiple of it. ``method`` is
    one of :data:`METHODS` (see the module docstring for what each costs); ``budget`` is the
    number of search placements ``"best"`` and ``"exact"`` may try (``None``:
    :data:`DEFAULT_BUDGET` for ``"best"``, no limit but the work cap for ``"exact"``; never
    more than :data:`MAX_SEARCH_WORK` divided by the active records, and none when that is
    fewer than the records); ``time_limit`` the seconds ``"exact"`` may take, counted from
    the call, the heuristic start included (``None``: :data:`DEFAULT_TIME_LIMIT`) —
    ``"best"`` takes one too, but has none by default, so that its answer never depends on
    the machine. ``capacity`` is the pool the plan must fit, in bytes (``None``: none): the
    search asks first for a plan within it — the decision MiniMalloc answers, which a
    compiler with a device's memory size in hand needs — and looks lower only once one fits.
    Whether the plan fits is ``placement.height <= capacity``.
    Raises :class:`~rtgraph.errors.InputError` for bad records, alignment, method, budget,
    time limit or capacity, or records past a limit (see
    :func:`~rtgraph.compiler.memplan.problem.build_problem`).
    """
    if method not in METHODS:
        hint = did_you_mean(method, METHODS) if isinstance(method, str) else None
        raise InputError(
            f"unknown planning method {method!r}",
            hint=hint or f"choose one of: {', '.join(METHODS)}",
        )
    started = time.perf_counter()  # the time limit counts the heuristic start too
    nodes = _check_budget(budget, exact=method == "exact")
    seconds = _check_time_limit(time_limit)
    _check_capacity(capacity)
    if method == "exact" and seconds is None:
        seconds = DEFAULT_TIME_LIMIT
    problem = build_problem(records, alignment)
    active = int(problem.active.sum())
    nodes = min(nodes, MAX_SEARCH_WORK // max(active, 1))
    if nodes < active:
        nodes = 0  # too few placements to place every record once: the search cannot succeed
    if problem.dense:
        return _placement(problem, sweep_offsets(problem), "sweep/size-class")
    if method == "greedy_by_size":
        offsets, name = greedy_by_size_offsets(problem), "greedy_by_size"
    else:
        offsets, name = portfolio_offsets(problem)
        if method in ("best", "exact"):
            found = solve(
                problem,
                offsets,
                name,
                budget=nodes,
                time_limit=seconds,
                started=started,
                capacity=capacity,
            )
            return _placement(problem, found.offsets, found.name, found)
    return _placement(problem, offsets, name)


def greedy_by_size(records: Sequence[Record], alignment: int = 1) -> Placement:
    """The TFLite / Pisarchyk–Lee baseline: largest first, each into the tightest gap.

    Records go in order of decreasing size (ties by position); each takes the smallest gap
    between the already-placed records it conflicts with that holds it, or goes on top of
    them. ``O(n log n + P log P)``. A dense problem (more than :data:`MAX_PAIRS` pairs) is
    placed by the linear scan instead, and the placement's ``method`` says so.
    """
    problem = build_problem(records, alignment)
    if problem.dense:
        return _placement(problem, sweep_offsets(problem), "sweep/size-class")
    return _placement(problem, greedy_by_size_offsets(problem), "greedy_by_size")


def plan_lifetimes(
    sizes_first_last: Sequence[tuple[int, int, int]],
    alignment: int = 1,
    *,
    method: str = "fast",
    budget: float | None = None,
) -> tuple[list[int], int]:
    """Offsets and total pool size for tensors given as ``(size, first_use, last_use)``.

    ``last_use`` is *inclusive* (the tensor is still read by task ``last_use``), unlike a
    :class:`Record`'s half-open ``upper``. Offsets come back in input order. This is the
    compiler's entry point, so it defaults to ``method="fast"`` (tens of milliseconds for a
    thousand tensors); pass ``method="best"`` to search as well.
    """
    records = []
    for k, item in enumerate(sizes_first_last):
        if not isinstance(item, Sequence) or len(item) != 3:
            raise InputError(
                f"lifetime #{k} must be (size, first_use, last_use), not {item!r}",
                hint="give each tensor as a 3-tuple of integers",
            )
        size, first, last = item
        for name, value in (("size", size), ("first_use", first), ("last_use", last)):
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
                raise InputError(
                    f"lifetime #{k}: {name} must be a non-negative integer, not {value!r}",
                    hint="sizes are bytes and uses are task positions",
                )
        if last < first:
            raise InputError(
                f"lifetime #{k}: last_use {last} is before first_use {first}",
                hint="last_use is inclusive: a tensor used by one task has first == last",
            )
        records.append(Record(str(k), int(first), int(last) + 1, int(size)))
    placement = plan(records, alignment=alignment, method=method, budget=budget)
    return [placement.offsets[r.id] for r in records], placement.height


def check_placement(
    records: Sequence[Record], placement: Placement, *, alignment: int = 1
) -> list[Violation]:
    """Every way ``placement`` breaks its contract for ``records``; empty when it is sound.

    Checks that each record has an integer offset, non-negative, a multiple of ``alignment``
    and ending by 2**62 (:data:`~rtgraph.compiler.memplan.records.MAX_POOL_BYTES`); that no
    two conflicting records share a byte (sizes rounded up to ``alignment``, as planned); and
    that ``placement.height`` covers every record. ``O(n log n + P)``; a dense problem is
    checked by a sweep over time (:mod:`~rtgraph.compiler.memplan.overlaps`), which lists at
    least one overlap whenever there is any rather than every pair.
    """
    problem = build_problem(records, alignment)
    out: list[Violation] = []
    offsets = np.zeros(problem.n, dtype=np.int64)
    usable = np.zeros(problem.n, dtype=bool)  # has an offset the overlap checks can use
    sizes = problem.size.tolist()
    for k, r in enumerate(problem.records):
        off = placement.offsets.get(r.id)
        if off is None:
            out.append(Violation("missing", (r.id,), f"record '{r.id}' has no offset"))
        elif isinstance(off, bool) or not isinstance(off, Integral):
            out.append(Violation("missing", (r.id,), f"record '{r.id}' has offset {off!r}"))
        elif off < 0:
            out.append(Violation("negative", (r.id,), f"record '{r.id}' has offset {off} < 0"))
        elif off + sizes[k] > MAX_POOL_BYTES:
            out.append(
                Violation(
                    "range", (r.id,), f"record '{r.id}' at offset {off} ends past 2**62 bytes"
                )
            )
        else:
            offsets[k], usable[k] = off, True
            if off % alignment:
                message = f"record '{r.id}' at offset {off} is not a multiple of {alignment}"
                out.append(Violation("misaligned", (r.id,), message))
    ends = offsets + problem.size  # at most 2**62 where usable, 0 + size elsewhere
    for i, j in _overlapping_pairs(problem, offsets, ends, usable):
        ri, rj = problem.records[i], problem.records[j]
        out.append(
            Violation(
                "overlap",
                (ri.id, rj.id),
                f"records '{ri.id}' [{offsets[i]}, {ends[i]}) and '{rj.id}' "
                f"[{offsets[j]}, {ends[j]}) overlap in memory while both are live "
                f"(lifetimes [{ri.lower}, {ri.upper}) and [{rj.lower}, {rj.upper}))",
            )
        )
    need = height_of(problem, np.where(usable, offsets, 0))
    if placement.height < need:
        out.append(Violation("height", (), f"height {placement.height} < {need} the offsets need"))
    return out


def _overlapping_pairs(
    problem: Problem, offsets: np.ndarray, ends: np.ndarray, usable: np.ndarray
) -> list[tuple[int, int]]:
    """Conflicting records sharing bytes: every pair, from the conflict lists; for a dense
    problem, those a sweep over time finds."""
    if problem.dense:
        return sweep_overlaps(problem, offsets, usable)
    ptr, idx = problem.conflict_ptr, problem.conflict_idx
    a = np.repeat(np.arange(problem.n), np.diff(ptr))
    b = idx
    pairs = (a < b) & usable[a] & usable[b]
    a, b = a[pairs], b[pairs]
    clash = np.flatnonzero((offsets[a] < ends[b]) & (offsets[b] < ends[a]))
    return list(zip(a[clash].tolist(), b[clash].tolist(), strict=True))


# --- the methods ------------------------------------------------------------------------------


def _placement(
    problem: Problem, offsets: np.ndarray, method: str, found: ExactResult | None = None
) -> Placement:
    """The placement of ``offsets``; proven optimal when at the (granule-rounded) bound or
    when the exact search says so."""
    mapping = {r.id: int(o) for r, o in zip(problem.records, offsets.tolist(), strict=True)}
    height = height_of(problem, offsets)
    if found is not None:
        return Placement(
            mapping, height, found.lower_bound, method, found.proven, found.time_to_best
        )
    bound, g = problem.lower_bound, problem.granule
    return Placement(mapping, height, bound, method, height <= -(-bound // g) * g)


def _check_time_limit(seconds: float | None) -> float | None:
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, Real) or not 0 <= seconds < 1e9:
        raise InputError(
            f"time limit must be a non-negative number of seconds, not {seconds!r}",
            hint="give a number of seconds, e.g. 10 (0: keep the heuristics' plan)",
        )
    return float(seconds)


def _check_capacity(capacity: int | None) -> None:
    if capacity is None:
        return
    if isinstance(capacity, bool) or not isinstance(capacity, Integral) or capacity <= 0:
        raise InputError(
            f"capacity must be a positive number of bytes, not {capacity!r}",
            hint="give the pool's size in bytes, e.g. 1048576",
        )
    if capacity > MAX_POOL_BYTES:
        raise InputError(
            f"capacity must be at most {MAX_POOL_BYTES} (2**62), not {capacity}",
            hint="no plan can be larger than 2**62 bytes",
        )


def _check_budget(budget: float | None, *, exact: bool = False) -> int:
    if budget is None:
        return MAX_SEARCH_WORK if exact else DEFAULT_BUDGET
    if isinstance(budget, bool) or not isinstance(budget, Real) or not budget >= 0:
        raise InputError(
            f"budget must be a non-negative number of search placements, not {budget!r}",
            hint="use None for the default, 0 to skip the search",
        )
    return int(min(budget, 2**62))
