"""Constructive placements: one pass over the records, no backtracking.

Two families, both fast enough to run several times and keep the best:

* :func:`greedy_by_size_offsets` — the classic TFLite / Pisarchyk–Lee planner: records by
  decreasing size, each put in the tightest gap left between the already-placed records it
  conflicts with (or on top of them). It is the baseline every result is compared against.
* :func:`skyline_offsets` — *canonical* placement, the construction MiniMalloc searches over:
  always place next the record whose lowest legal offset is smallest (ties broken by a
  preorder), directly on top of the placed records it conflicts with. Placing records in
  non-decreasing offset order means no gap is left that a later record could have used, and
  every optimal plan is reachable this way for *some* order, so the preorder is the only
  choice a canonical greedy makes.

:func:`portfolio_offsets` keeps the lowest of them: the exact search's starting plan.

Offsets are returned as an int64 array indexed like ``problem.records`` (inactive records at 0).
"""

from __future__ import annotations

import heapq

import numpy as np

from rtgraph.compiler.memplan.problem import Problem

#: Preorders for canonical placement, as MiniMalloc names them: letters are sort keys in
#: priority order, each descending — W lifetime width, A area (size × width), T the largest
#: section total the record lives through, Z size; S sorts by start time (ascending). Listed
#: in the order the search tries them: on MiniMalloc's instances TWA most often finds a plan
#: at the lower bound soonest, then WAT, SZ and TAW.
PREORDERS = ("TWA", "WAT", "SZ", "TAW")


def preorder_ranks(problem: Problem, heuristic: str) -> np.ndarray:
    """Each record's position in the preorder named by ``heuristic`` (see :data:`PREORDERS`).

    Ties fall back to record position, so the ranks are a permutation and deterministic.
    """
    width = problem.upper - problem.lower
    keys = {
        "W": -width,
        "A": -_area_rank(problem.size, width),
        "T": -_max_section_total(problem),
        "Z": -problem.size,
        "S": problem.lower,
    }
    columns = [np.arange(problem.n)] + [keys[c] for c in reversed(heuristic)]
    order = np.lexsort(columns)
    ranks = np.empty(problem.n, dtype=np.int64)
    ranks[order] = np.arange(problem.n)
    return ranks


def _area_rank(size: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Keys that sort like ``size * width``, exactly.

    The products themselves when the largest fits in int64; else (sizes and times up to 2**62
    can multiply to 2**124) each product's rank among the exact Python-integer products.
    """
    if len(size) == 0 or int(size.max()) * int(width.max()) < 2**63:
        return size * width
    exact = np.array([s * w for s, w in zip(size.tolist(), width.tolist(), strict=True)], object)
    return np.unique(exact, return_inverse=True)[1].astype(np.int64).reshape(-1)


def skyline_offsets(problem: Problem, ranks: np.ndarray) -> np.ndarray:
    """Canonical greedy: repeatedly place the record with the lowest legal offset.

    A record's lowest legal offset is the highest top among the placed records it conflicts
    with; it only rises as records are placed, so a heap with lazy deletion finds the next
    record. ``O((n + P) log n)`` for ``P`` conflicting pairs.
    """
    size = problem.size.tolist()
    # A record's floor is its lowest legal offset while unplaced, "infinity" once placed, so
    # one comparison skips both placed records and records already high enough.
    done = np.iinfo(np.int64).max
    floor = np.where(problem.active, 0, done)
    offsets = np.zeros(problem.n, dtype=np.int64)
    rank = ranks.tolist()
    heap = [(0, rank[i], i) for i in np.flatnonzero(problem.active).tolist()]
    heapq.heapify(heap)
    ptr, idx = problem.conflict_ptr.tolist(), problem.conflict_idx
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        low, _, i = pop(heap)
        if low != floor[i]:
            continue  # stale entry: the record was placed or its floor rose since
        floor[i] = done
        offsets[i] = low
        top = low + size[i]
        c = idx[ptr[i] : ptr[i + 1]]
        c = c[floor[c] < top]
        floor[c] = top
        for j in c.tolist():
            push(heap, (top, rank[j], j))
    return offsets


def greedy_by_size_offsets(problem: Problem, *, fit: str = "best") -> np.ndarray:
    """Records by decreasing size (ties by position), each at the best gap that fits.

    ``fit="best"`` takes the smallest gap between placed conflicting records that holds the
    record (TFLite's ``GreedyBySize``, which reproduces the published reference heights);
    ``fit="first"`` takes the lowest such gap. With no gap the record goes on top of them
    all. ``O(n log n + P log P)``.
    """
    size = problem.size
    act = np.flatnonzero(problem.active)
    order = act[np.lexsort((act, -size[act]))]
    placed = np.zeros(problem.n, dtype=bool)
    offsets = np.zeros(problem.n, dtype=np.int64)
    best_fit = fit == "best"
    ptr, idx = problem.conflict_ptr, problem.conflict_idx
    for i in order.tolist():
        c = idx[ptr[i] : ptr[i + 1]]
        c = c[placed[c]]
        placed[i] = True
        if len(c) == 0:
            continue
        low = offsets[c]
        by = np.argsort(low, kind="stable")
        starts = low[by]
        tops = np.maximum.accumulate(starts + size[c][by])
        below = np.concatenate(([0], tops[:-1]))
        gaps = starts - below
        fits = np.flatnonzero(gaps >= size[i])
        if len(fits) == 0:
            offsets[i] = tops[-1]
        elif best_fit:
            offsets[i] = below[fits[np.argmin(gaps[fits])]]
        else:
            offsets[i] = below[fits[0]]
    return offsets


def portfolio_offsets(problem: Problem) -> tuple[np.ndarray, str]:
    """The lowest of the one-pass heuristics and its name: greedy-by-size, then the skyline
    under each preorder (first wins ties, so the choice is stable), stopping at the bound."""
    best, name = greedy_by_size_offsets(problem), "greedy_by_size"
    height = height_of(problem, best)
    for heuristic in PREORDERS:
        if height == problem.lower_bound:
            break
        offsets = skyline_offsets(problem, preorder_ranks(problem, heuristic))
        h = height_of(problem, offsets)
        if h < height:
            best, name, height = offsets, f"skyline/{heuristic}", h
    return best, name


def height_of(problem: Problem, offsets: np.ndarray) -> int:
    """The pool height a placement needs: the highest ``offset + size`` of an active record."""
    act = problem.active
    return int((offsets[act] + problem.size[act]).max()) if act.any() else 0


def _max_section_total(problem: Problem) -> np.ndarray:
    """For each active record, the largest section total over the sections it lives in."""
    out = np.zeros(problem.n, dtype=np.int64)
    act = np.flatnonzero(problem.active)
    if len(act) == 0:
        return out
    out[act] = range_max(problem.section_total, problem.section_lo[act], problem.section_hi[act])
    return out


def range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``max(values[lo[k]:hi[k]])`` for every k (all ranges non-empty), by a sparse table.

    ``O(S log W + K)`` for ``S`` values, ``K`` ranges and the widest range ``W``: the table has
    one row per power of two up to ``W``, and every range is answered by one gather from two
    of its blocks (the searches call this at every node, so it is a handful of NumPy calls).
    """
    if len(lo) == 0:
        return np.empty(0, dtype=values.dtype)
    n = len(values)
    level = np.frexp((hi - lo).astype(np.float64))[1] - 1
    table = np.empty((int(level.max()) + 1, n), dtype=values.dtype)
    table[0] = values
    step = 1
    for j in range(1, len(table)):  # row j holds the maxima of blocks of 2**j (where they fit)
        np.maximum(table[j - 1, : n - step], table[j - 1, step:], out=table[j, : n - step])
        table[j, n - step :] = table[j - 1, n - step :]  # never read: no block starts there
        step *= 2
    return np.maximum(table[level, lo], table[level, hi - (1 << level)])


def sweep_offsets(problem: Problem) -> np.ndarray:
    """Linear-scan placement in start order, reusing a freed block of exactly the same size.

    The planner for *dense* problems, where most lifetimes overlap and conflict lists would
    grow with the square of the records: records are taken by start time (larger first at the
    same time); blocks whose lifetime has ended go back to a free list per size; a record takes
    the lowest free block of its size, else a new block on top. ``O(n log n)`` whatever the
    overlap. Without coalescing it can leave gaps a packing planner would fill, which matters
    little where there is little reuse to find.
    """
    offsets = np.zeros(problem.n, dtype=np.int64)
    act = np.flatnonzero(problem.active)
    order = act[np.lexsort((-problem.size[act], problem.lower[act]))]
    ending: list[tuple[int, int]] = []  # (upper, record)
    free: dict[int, list[int]] = {}  # size → heap of free offsets
    top = 0
    lower, upper, size = problem.lower.tolist(), problem.upper.tolist(), problem.size.tolist()
    for i in order.tolist():
        while ending and ending[0][0] <= lower[i]:
            _, j = heapq.heappop(ending)
            heapq.heappush(free.setdefault(size[j], []), int(offsets[j]))
        blocks = free.get(size[i])
        if blocks:
            offsets[i] = heapq.heappop(blocks)
        else:
            offsets[i] = top
            top += size[i]
        heapq.heappush(ending, (upper[i], i))
    return offsets
