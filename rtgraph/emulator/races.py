"""The dynamic race detector: conflicting tasks that really overlapped in time, or ran in the
wrong order.

Two tasks race in a run when their execution intervals ``[start, end)`` overlap and their byte
ranges conflict — one writes bytes the other reads or writes (the tasks' ``reads``/``writes``).
They also race when the task the program puts second ran wholly before the one it conflicts
with (an *inverted* pair: a reader that ran before its writer read stale bytes, as on hardware
without the barrier): those pairs are the nearest conflicts in submission order — the order
the compiler found its hazards on and made the program keep (:func:`program_conflicts`, the
hazard tracker's, computed once per program) — checked against the run's times.
The kind is named in program order (task ids, the order the reference interpreter computes in),
whatever order the two were issued or started in: the task the program puts first writes and
the later one reads → RAW; reads then writes → WAR; both write → WAW. Unlike the static checker
(:mod:`rtgraph.stream_program.races`, happens-before over the program), this reports what *did*
collide in
one timeline, so a missing barrier that the schedule happened to hide is not reported here.

Everything is vectorised: tasks sorted by start give, for each task, the contiguous run of
later-starting tasks that begin before it ends (one ``searchsorted``); those time-overlapping
pairs are expanded to pairs of their byte ranges and tested at once. The work is proportional
to the number of overlapping pairs (bounded by the device's concurrency), not to n².
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from rtgraph.stream_program.hazards import AccessTracker

KINDS = ("RAW", "WAR", "WAW")


@dataclass(frozen=True)
class ObservedRace:
    """Tasks ``first`` and ``second`` (in program order) touched ``[lo, hi)`` while both ran."""

    first: int
    second: int
    kind: str
    lo: int
    hi: int
    first_stream: int
    second_stream: int
    overlap_start: float
    overlap_end: float
    #: The second task ran wholly before the first (``overlap_start``: its start,
    #: ``overlap_end``: the first's start) instead of beside it.
    inverted: bool = False

    def describe(self, names: Sequence[str] | None = None) -> str:
        def name(t: int) -> str:
            return f"task {t}" + (f" '{names[t]}'" if names is not None else "")

        if self.inverted:
            return (
                f"{self.kind}: {name(self.second)} (stream {self.second_stream}) ran before "
                f"{name(self.first)} (stream {self.first_stream}), which the program puts "
                f"first; both touch bytes [{self.lo}, {self.hi}) "
                f"(t={self.overlap_start:g} µs, the first started at {self.overlap_end:g} µs)"
            )
        return (
            f"{self.kind}: {name(self.first)} (stream {self.first_stream}) and "
            f"{name(self.second)} (stream {self.second_stream}) touch bytes "
            f"[{self.lo}, {self.hi}) while both run "
            f"(t={self.overlap_start:g}..{self.overlap_end:g} µs)"
        )


def access_table(
    reads: Sequence[Sequence[tuple[int, int]]], writes: Sequence[Sequence[tuple[int, int]]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every non-empty access as CSR arrays grouped by task: (ptr, lo, hi, is_write)."""
    n = len(reads)
    owners, bounds, kinds = [], [], []
    for ranges, is_write in ((reads, False), (writes, True)):
        counts = np.fromiter(map(len, ranges), np.int64, n)
        flat = np.array(list(chain.from_iterable(ranges)), np.int64).reshape(-1, 2)
        owners.append(np.repeat(np.arange(n), counts))
        bounds.append(flat)
        kinds.append(np.full(flat.shape[0], is_write))
    owner = np.concatenate(owners)
    lo, hi = np.concatenate(bounds).T
    write = np.concatenate(kinds)
    keep = np.flatnonzero(lo < hi)
    order = keep[np.argsort(owner[keep], kind="stable")]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner[order], minlength=n), out=ptr[1:])
    return ptr, lo[order], hi[order], write[order]


def _expand(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For counts c: the owner index of each of sum(c) slots, and the slot's rank within it."""
    owner = np.repeat(np.arange(counts.size), counts)
    first = np.cumsum(counts) - counts
    rank = np.arange(owner.size) - first[owner]
    return owner, rank


def detect_races(
    start: Sequence[float | None],
    end: Sequence[float | None],
    program_rank: Sequence[int],
    stream: Sequence[int],
    reads: Sequence[Sequence[tuple[int, int]]],
    writes: Sequence[Sequence[tuple[int, int]]],
) -> list[ObservedRace]:
    """Races among tasks that ran (``start``/``end`` not None), one per task pair and kind.

    ``program_rank[t]`` is task ``t``'s place in program order: it orients each pair and so
    names its kind.
    Byte ranges of one pair and kind are merged into their hull ``[min lo, max hi)``.
    """
    s = np.array(start, np.float64)  # None → NaN
    e = np.array(end, np.float64)
    return races_in(s, e, program_rank, stream, lambda: access_table(reads, writes))


def races_in(
    start: np.ndarray,
    end: np.ndarray,
    program_rank: Sequence[int],
    stream: Sequence[int],
    accesses: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
) -> list[ObservedRace]:
    """:func:`detect_races` on float columns (NaN: never started or ended), with the byte
    accesses of every task (:func:`access_table`) asked for only if some tasks overlapped."""
    ids = np.flatnonzero(~(np.isnan(start) | np.isnan(end)))
    if ids.size < 2:
        return []
    s = start[ids]
    e = end[ids]
    rank = np.asarray(program_rank, np.int64)[ids]
    order = np.lexsort((rank, s))  # by start, then program order
    ids, s, e, rank = ids[order], s[order], e[order], rank[order]
    # Time-overlapping pairs (i, j), i before j in start order: j in (i, upto[i]).
    upto = np.searchsorted(s, e, side="left")
    counts = np.maximum(upto - np.arange(ids.size) - 1, 0)
    pi, k = _expand(counts)
    pj = pi + 1 + k
    keep = e[pj] > s[pi]  # strict overlap (a zero-length task overlaps nothing)
    pi, pj = pi[keep], pj[keep]
    if pi.size == 0:
        return []
    # Expand each pair to its access pairs.
    ptr, lo, hi, w = accesses()
    ti, tj = ids[pi], ids[pj]
    ni, nj = ptr[ti + 1] - ptr[ti], ptr[tj + 1] - ptr[tj]
    p, k = _expand(ni * nj)
    a = ptr[ti[p]] + k // nj[p]
    b = ptr[tj[p]] + k % nj[p]
    hit = (w[a] | w[b]) & (lo[a] < hi[b]) & (lo[b] < hi[a])
    p, a, b = p[hit], a[hit], b[hit]
    if p.size == 0:
        return []
    # Orient every pair in program order: the task the program puts first is "first".
    swap = rank[pi[p]] > rank[pj[p]]
    a, b = np.where(swap, b, a), np.where(swap, a, b)
    wa, wb = w[a], w[b]
    kind = np.where(wa & wb, 2, np.where(wa, 0, 1))  # RAW / WAR / WAW
    olo = np.maximum(lo[a], lo[b])
    ohi = np.minimum(hi[a], hi[b])
    key = p * 3 + kind
    order = np.argsort(key, kind="stable")
    key, olo, ohi = key[order], olo[order], ohi[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    group_lo = np.minimum.reduceat(olo, starts)
    group_hi = np.maximum.reduceat(ohi, starts)
    group_key = key[starts]
    races = []
    for gk, glo, ghi in zip(group_key.tolist(), group_lo.tolist(), group_hi.tolist(), strict=True):
        pair, kd = divmod(gk, 3)
        i, j = int(pi[pair]), int(pj[pair])
        if rank[i] > rank[j]:
            i, j = j, i
        first, second = int(ids[i]), int(ids[j])
        races.append(
            ObservedRace(
                first=first,
                second=second,
                kind=KINDS[kd],
                lo=glo,
                hi=ghi,
                first_stream=int(stream[first]),
                second_stream=int(stream[second]),
                overlap_start=float(max(s[i], s[j])),
                overlap_end=float(min(e[i], e[j])),
            )
        )
    races.sort(key=lambda r: (r.overlap_start, r.first, r.second, r.kind))
    return races


def program_conflicts(
    reads: Sequence[Sequence[tuple[int, int]]],
    writes: Sequence[Sequence[tuple[int, int]]],
    ids: Sequence[int],
) -> np.ndarray:
    """The nearest conflicting pairs when the tasks ``ids`` run in that order (the accesses
    given in the same order), as rows (first, second, kind, lo, hi) of task ids: each task
    against the last writer and the readers since of the bytes it touches — the pairs whose
    order decides what a task reads or leaves behind."""
    tracker = AccessTracker()
    rows = []
    for t, r, w in zip((int(i) for i in ids), reads, writes, strict=True):
        if r or w:
            found = tracker.access(t, r, w)
            rows += [(c.src, c.dst, KINDS.index(c.kind), c.lo, c.hi) for c in found]
    return np.array(rows, np.int64).reshape(-1, 5)


def inversions(
    start: np.ndarray, end: np.ndarray, stream: Sequence[int], conflicts: np.ndarray
) -> list[ObservedRace]:
    """The pairs of ``conflicts`` whose second task started and ended before the first started
    (NaN times — a task that never ran — are never inverted)."""
    first, second = conflicts[:, 0], conflicts[:, 1]
    bad = np.flatnonzero((start[second] < start[first]) & (end[second] <= start[first]))
    return [
        ObservedRace(
            first=int(first[k]),
            second=int(second[k]),
            kind=KINDS[int(conflicts[k, 2])],
            lo=int(conflicts[k, 3]),
            hi=int(conflicts[k, 4]),
            first_stream=int(stream[int(first[k])]),
            second_stream=int(stream[int(second[k])]),
            overlap_start=float(start[second[k]]),
            overlap_end=float(start[first[k]]),
            inverted=True,
        )
        for k in bad.tolist()
    ]
