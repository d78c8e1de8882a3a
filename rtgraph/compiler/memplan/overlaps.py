"""Finding records that share bytes while both are live, without a list of conflicting pairs.

A placement is sound when no two records overlap as rectangles of time × address. Checking it
pair by pair needs the conflict lists, which a *dense* problem (more than ``MAX_PAIRS`` pairs)
does not have. :func:`sweep_overlaps` sweeps over time instead, keeping the live records ordered
by offset: while the live records are disjoint in memory, a record starting now overlaps one of
them iff it overlaps its neighbour below or its neighbour above, so each start costs two
neighbour queries. A record found overlapping is reported and left out of the live set, which
keeps it disjoint: the sweep reports at least one overlap whenever there is any (not every pair,
whose number can grow with the square of the records), in ``O(n log n)`` time and ``O(n)``
memory.
"""

from __future__ import annotations

import numpy as np

from rtgraph.compiler.memplan.problem import Problem


class _RankSet:
    """A set of the integers ``0..n-1`` with insert, remove and nearest neighbours.

    A byte per integer and a flag per block of :attr:`BLOCK` integers: a neighbour query scans
    at most two blocks and the block flags, each scan a ``bytearray.find`` (C speed).
    """

    BLOCK = 4096

    def __init__(self, n: int) -> None:
        self.present = bytearray(n)
        self.count = [0] * (n // self.BLOCK + 1)
        self.flags = bytearray(len(self.count))

    def add(self, k: int) -> None:
        self.present[k] = 1
        b = k // self.BLOCK
        self.count[b] += 1
        self.flags[b] = 1

    def discard(self, k: int) -> None:
        if self.present[k]:
            self.present[k] = 0
            b = k // self.BLOCK
            self.count[b] -= 1
            if not self.count[b]:
                self.flags[b] = 0

    def after(self, k: int) -> int:
        """The least member above ``k``, or -1."""
        b, size = k // self.BLOCK, self.BLOCK
        j = self.present.find(1, k + 1, (b + 1) * size)
        if j >= 0:
            return j
        nb = self.flags.find(1, b + 1)
        return -1 if nb < 0 else self.present.find(1, nb * size, (nb + 1) * size)

    def before(self, k: int) -> int:
        """The greatest member below ``k``, or -1."""
        b, size = k // self.BLOCK, self.BLOCK
        j = self.present.rfind(1, b * size, k)
        if j >= 0:
            return j
        pb = self.flags.rfind(1, 0, b)
        return -1 if pb < 0 else self.present.rfind(1, pb * size, (pb + 1) * size)


def sweep_overlaps(problem: Problem, offsets: np.ndarray, usable: np.ndarray) -> list[tuple]:
    """Pairs ``(i, j)`` of records that overlap in memory while both are live (see the module
    docstring: at least one whenever any exists), among the active records marked ``usable``.

    ``offsets`` are int64 and each ``offset + size`` is at most 2**62 (the caller checks), so
    the tops below cannot overflow.
    """
    act = np.flatnonzero(problem.active & usable)
    if len(act) == 0:
        return []
    by_offset = act[np.lexsort((act, offsets[act]))]
    rank = np.zeros(problem.n, dtype=np.int64)
    rank[by_offset] = np.arange(len(act))
    times = np.concatenate([problem.upper[act], problem.lower[act]])
    starts = np.concatenate([np.zeros(len(act), np.int8), np.ones(len(act), np.int8)])
    who = np.concatenate([act, act])
    events = np.lexsort((who, starts, times))  # at one time, ends before starts: half-open
    low = offsets.tolist()
    top = (offsets + problem.size).tolist()
    rank_of, at_rank = rank.tolist(), by_offset.tolist()
    live = _RankSet(len(act))
    found: list[tuple] = []
    for e, is_start in zip(who[events].tolist(), starts[events].tolist(), strict=True):
        r = rank_of[e]
        if not is_start:
            live.discard(r)
            continue
        below, above = live.before(r), live.after(r)
        if below >= 0 and top[at_rank[below]] > low[e]:
            found.append((at_rank[below], e))
        elif above >= 0 and low[at_rank[above]] < top[e]:
            found.append((e, at_rank[above]))
        else:
            live.add(r)
    return found
