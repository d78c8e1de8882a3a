"""Coalescing: a smaller problem whose every plan is a plan of the original.

Two buffers can be planned as one block when the block's plan says where both go:

* a **stack** — records with the same lifetime, one on top of the other: a block living over
  that lifetime whose size is their sum;
* a **chain** — a record ending at time ``t`` and one of the same size starting at ``t``,
  at the same offset, the second reusing the first's bytes: a block of that size living over
  both lifetimes.

Blocks merge further in turn (a chain of stacks, a stack of chains, ...). The load — the bytes
live at each time — does not change, so the merged problem has the same max-live bound: a
plan of the blocks at the bound is an optimal plan of the records, and the merged problem,
with a fraction of the records, is far easier to search. Every plan of the blocks unfolds into
a valid plan of the records (:meth:`Coalesced.expand`); the converse does not hold — a merge
may pair records that no optimal plan puts together — so this is a heuristic restriction the
exact search explores beside the records' own search
(:func:`~rtgraph.compiler.memplan.exact.solve`), never a proof.

Some merges lose nothing at the bound, and both rules make them first (:func:`forced`): between
two *full* sections (load = max-live) a plan at the bound wastes no byte, so the bytes freed
at a boundary are the bytes taken there — one block ending there is followed, inside its
bytes, by the ones starting there (when they share a lifetime, in any order), and one block
starting there takes the bytes of the ones ending there. Only the merges after these can
pair records wrongly. On the benchmark's 3,300-buffer guillotine tilings the forced merges
fold 3,300 records into about 1,560 blocks, none of them against the tiling they were cut
from; with them first, the tilings the search packed at 1.004–1.088 × the optimum came to
1.000–1.019 × it. MiniMalloc's A–K meet their bound at few sections: there they merge 1–99
records of 154–454 and leave the blocks after the other merges nearly as they were.

This is where real buffers come from: tensors produced by one task and freed by one task
share a lifetime, and an elementwise chain frees an input of the size of the output it starts
(the exact-size reuse of TFLite's arena and PyTorch's caching allocator). On MiniMalloc's
instances A–K coalescing leaves 11–167 blocks of 154–454 records, and a perfect tiling of
time × address cut by guillotine cuts folds back towards its cuts.

Which merge comes first matters where a record could join either: :data:`RULES` names the two
orders the search tries — every stack before any chain, and the reverse. A chain merges only
when it is unambiguous: exactly one record of that size ends at ``t`` and exactly one starts;
chains first, it also waits while the boundary is busy (:data:`QUIET_BOUNDARY`), which is
where unrelated records of one size meet.

Merging is a work-list over five indexes (by lifetime, by end and size, by start and size, by
end, by start): ``O(n log n)`` for ``n`` records — each merge is done once and touches only
the keys of the blocks it removes and makes, and a boundary turning quiet is looked at once.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from rtgraph.compiler.memplan.problem import Problem, build_problem
from rtgraph.compiler.memplan.records import Record

__all__ = ["RULES", "Coalesced", "coalesce", "forced"]

#: The merge orders: ``"stack"`` merges every stack it can before any chain, ``"chain"`` the
#: reverse. In the memory_planning benchmark the stacks-first blocks are the ones packed first
#: on MiniMalloc's A–E, G, I and K, the chains-first ones on F, H and J; chains first fold two
#: of the three 300-buffer tilings into one block.
RULES = ("stack", "chain")
#: Under the ``"chain"`` rule, a boundary where this many blocks end and as many start is too
#: busy to chain at: there, two unrelated records of one size meet by chance. In the
#: benchmark's 3,300-buffer tiling of seed 0, 35 of the 42 unique same-size pairs of records
#: that are not a true chain meet at such boundaries, against 13 of the 706 true ones. Blocks
#: merged elsewhere quiet a boundary down, and its chains are taken then.
QUIET_BOUNDARY = 4

_STACK, _CHAIN = 0, 1


@dataclass(frozen=True)
class Coalesced:
    """The merged problem and how each original record sits in its block.

    ``block[i]`` is the merged record (an index into ``problem.records``) holding original
    record ``i`` and ``shift[i]`` its offset inside the block; inactive records have block -1.
    """

    problem: Problem
    block: np.ndarray
    shift: np.ndarray

    def expand(self, offsets: np.ndarray) -> np.ndarray:
        """The original records' offsets, given the blocks' (inactive records at 0)."""
        inside = self.block >= 0
        out = np.zeros(len(self.block), dtype=np.int64)
        out[inside] = offsets[self.block[inside]] + self.shift[inside]
        return out


def forced(problem: Problem) -> Coalesced:
    """Only the merges every plan at the lower bound makes (:meth:`_Merger.force`): a plan of
    these blocks at the bound is a plan of the records, and the records have a plan at the
    bound only if the blocks have one — so a search of the blocks there is as complete as the
    records' own, and its proof that none exists holds for the records."""
    merger = _Merger(problem, None)
    merger.force()
    return merger.result()


def coalesce(problem: Problem, rule: str) -> Coalesced:
    """Merge ``problem``'s active records into blocks, stacks or chains first as ``rule`` says.

    The merged problem keeps the original's alignment (block sizes are sums of aligned sizes)
    and load at every time, hence its lower bound.
    """
    if rule not in RULES:
        raise ValueError(f"unknown coalescing rule {rule!r}")
    merger = _Merger(problem, QUIET_BOUNDARY if rule == "chain" else None)
    merger.force()
    merger.run(first=_STACK if rule == "stack" else _CHAIN)
    return merger.result()


class _Merger:
    """The work-list state: blocks by lifetime, by (end, size), by (start, size), by end and
    by start. ``quiet``: chains wait at boundaries where as many blocks end and start (None:
    never)."""

    def __init__(self, problem: Problem, quiet: int | None) -> None:
        self.problem = problem
        self.quiet = quiet
        act = np.flatnonzero(problem.active)
        self.lo = problem.lower[act].tolist()
        self.up = problem.upper[act].tolist()
        self.size = problem.size[act].tolist()
        self.children: list[list[int]] = [[] for _ in act]
        self.kind: list[int] = [-1] * len(act)
        self.leaf = act
        self.alive: set[int] = set(range(len(act)))
        self.by_span: dict[tuple[int, int], set[int]] = defaultdict(set)
        self.by_end: dict[tuple[int, int], set[int]] = defaultdict(set)
        self.by_start: dict[tuple[int, int], set[int]] = defaultdict(set)
        self.todo: tuple[list, list] = ([], [])  # heaps of keys to look at, stacks and chains
        self.ending_at: dict[int, set[int]] = defaultdict(set)
        self.starting_at: dict[int, set[int]] = defaultdict(set)
        #: While force() runs: at each boundary it may merge at, the lifetimes of the blocks
        #: starting and ending there, counted.
        self.spans: dict[int, tuple[Counter[tuple[int, int]], ...]] | None = None
        #: Whether merges put keys on the work-lists (not while force() runs: it lists the
        #: blocks it leaves once, at its end).
        self.listing = True
        for b in range(len(act)):
            self._index(b)

    def _index(self, b: int) -> None:
        span, s = (self.lo[b], self.up[b]), self.size[b]
        self.by_span[span].add(b)
        self.by_end[(span[1], s)].add(b)
        self.by_start[(span[0], s)].add(b)
        self.starting_at[span[0]].add(b)
        self.ending_at[span[1]].add(b)
        if self.spans is not None:
            self._count(span, 1)
        if self.listing:
            self._list(b)

    def _list(self, b: int) -> None:
        """Put block ``b``'s keys on the work-lists."""
        span, s = (self.lo[b], self.up[b]), self.size[b]
        heapq.heappush(self.todo[_STACK], span)
        heapq.heappush(self.todo[_CHAIN], (span[0], s))
        heapq.heappush(self.todo[_CHAIN], (span[1], s))

    def _remove(self, b: int) -> None:
        span, s = (self.lo[b], self.up[b]), self.size[b]
        self.alive.discard(b)
        self.by_span[span].discard(b)
        self.by_end[(span[1], s)].discard(b)
        self.by_start[(span[0], s)].discard(b)
        self.starting_at[span[0]].discard(b)
        self.ending_at[span[1]].discard(b)
        if self.spans is not None:
            self._count(span, -1)
        if self.listing:
            heapq.heappush(self.todo[_CHAIN], (span[0], s))  # may have become unambiguous
            heapq.heappush(self.todo[_CHAIN], (span[1], s))

    def _count(self, span: tuple[int, int], by: int) -> None:
        """Count a block of lifetime ``span`` in (1) or out (-1) at its ends that force()
        looks at: the lifetimes starting and ending at each, so that whether they are one is
        known at once, however many blocks there are."""
        assert self.spans is not None
        for end, which in ((span[0], 0), (span[1], 1)):
            counts = self.spans.get(end)
            if counts is not None:
                c = counts[which]
                c[span] += by
                if not c[span]:
                    del c[span]

    def _busy(self, t: int) -> bool:
        """Whether chains at ``t`` wait (see :data:`QUIET_BOUNDARY`); never under ``"stack"``."""
        if self.quiet is None:
            return False
        return min(len(self.ending_at[t]), len(self.starting_at[t])) >= self.quiet

    def _make(self, kind: int, parts: list[int], lo: int, up: int, size: int) -> None:
        # Blocks at a boundary never grow in number (a chain keeps them, a stack merges
        # them), so each boundary turns quiet at most once: then its chains are looked at.
        busy = [t for p in parts for t in (self.lo[p], self.up[p]) if self._busy(t)]
        for p in parts:
            self._remove(p)
        b = len(self.lo)
        self.lo.append(lo)
        self.up.append(up)
        self.size.append(size)
        self.children.append(parts)
        self.kind.append(kind)
        self.alive.add(b)
        self._index(b)
        for t in set(busy) if self.listing else ():
            if not self._busy(t):
                for c in (*self.ending_at[t], *self.starting_at[t]):
                    heapq.heappush(self.todo[_CHAIN], (t, self.size[c]))

    def force(self) -> None:
        """Make the merges every plan at the lower bound makes, before any other.

        At a boundary ``t`` between two *full* sections (their load is max-live) a plan at the
        bound wastes no byte on either side, so the bytes the blocks ending at ``t`` free are
        exactly the bytes the blocks starting at ``t`` take (the others live on both sides, in
        the same bytes). One block ending there is followed by the ones starting there, inside
        its bytes: if they share one lifetime, their order among themselves does not matter —
        a stack, chained to it. One block starting there takes the bytes of the ones ending
        there, so those lie side by side: one lifetime, a stack, chained to it. A merged
        block's ends may make its boundaries forced in turn. On a tiling of time × address
        (the benchmark's guillotine instances, where every section is full) this folds about
        half of the records; on MiniMalloc's A–K, whose bound is met at a few sections, little.
        Each boundary is looked at when it may have changed (a block made there ends at it):
        ``O(n log n)``.
        """
        p = self.problem
        totals = p.section_total
        bound = p.lower_bound
        act = np.flatnonzero(p.active)
        if len(act) == 0:
            return
        times = np.unique(np.concatenate([p.lower[act], p.upper[act]]))
        full = np.flatnonzero((totals[:-1] == bound) & (totals[1:] == bound)) + 1
        forced = set(times[full].tolist())
        if not forced:
            return
        self.spans = spans = {t: (Counter(), Counter()) for t in forced}
        self.listing = False
        for b in self.alive:
            self._count((self.lo[b], self.up[b]), 1)
        todo = sorted(forced)
        heapq.heapify(todo)
        while todo:
            t = heapq.heappop(todo)
            n_end, n_start = len(self.ending_at[t]), len(self.starting_at[t])
            one_start, one_end = (len(c) == 1 for c in spans[t])
            if not ((n_end == 1 and one_start) or (n_start == 1 and one_end)):
                continue  # O(1): a busy boundary may be looked at once per merge beside it
            ending, starting = sorted(self.ending_at[t]), sorted(self.starting_at[t])
            size = sum(self.size[b] for b in ending)
            if size != sum(self.size[b] for b in starting):
                continue  # cannot happen between full sections; never merge unequal sides
            sides = []
            for group in (ending, starting):
                if len(group) > 1:
                    lo, up = self.lo[group[0]], self.up[group[0]]
                    self._make(_STACK, group, lo, up, size)
                    group = [len(self.lo) - 1]
                sides.append(group[0])
            a, b = sides
            self._make(_CHAIN, [a, b], self.lo[a], self.up[b], size)
            for end in (self.lo[a], self.up[b]):
                if end in forced:
                    heapq.heappush(todo, end)
        self.spans = None  # run() has no use for them
        self.listing = True
        if len(self.lo) > len(self.leaf):  # it merged: the work-lists are stale
            for b in sorted(self.alive):
                self._list(b)

    def run(self, first: int) -> None:
        """Merge until no key in either work-list allows a merge, ``first``'s list first."""
        order = (first, 1 - first)
        while True:
            for which in order:
                if self._step(which):
                    break
            else:
                return

    def _step(self, which: int) -> bool:
        """Merge at the first key of ``which``'s list that allows it; False when none does."""
        heap = self.todo[which]
        while heap:
            key = heapq.heappop(heap)
            if which == _STACK:
                parts = sorted(self.by_span.get(key, ()))
                if len(parts) > 1:
                    total = sum(self.size[p] for p in parts)
                    self._make(_STACK, parts, key[0], key[1], total)
                    return True
            else:
                ending, starting = self.by_end.get(key, ()), self.by_start.get(key, ())
                if len(ending) == 1 and len(starting) == 1 and not self._busy(key[0]):
                    (a,), (b,) = ending, starting
                    self._make(_CHAIN, [a, b], self.lo[a], self.up[b], key[1])
                    return True
        return False

    def result(self) -> Coalesced:
        """The blocks left as a problem, and each original record's block and shift in it."""
        blocks = sorted(self.alive)
        at = {b: k for k, b in enumerate(blocks)}
        n_all = len(self.lo)
        root = np.full(n_all, -1, dtype=np.int64)
        shift = np.zeros(n_all, dtype=np.int64)
        for b in blocks:
            root[b] = at[b]
        for b in range(n_all - 1, -1, -1):  # parents are made after their children
            offset = 0
            for c in self.children[b]:
                root[c], shift[c] = root[b], shift[b] + offset
                if self.kind[b] == _STACK:
                    offset += self.size[c]
        records = [
            Record(f"block{k}", self.lo[b], self.up[b], self.size[b]) for k, b in enumerate(blocks)
        ]
        merged = build_problem(records, self.problem.alignment)
        n = self.problem.n
        block = np.full(n, -1, dtype=np.int64)
        where = np.zeros(n, dtype=np.int64)
        leaves = len(self.leaf)
        block[self.leaf] = root[:leaves]
        where[self.leaf] = shift[:leaves]
        return Coalesced(merged, block, where)
