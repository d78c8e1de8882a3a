"""The skyline fill: a search that finds tight plans by filling the skyline from its lowest point.

:func:`fill_within` answers the same question as the complete search
(:func:`~rtgraph.compiler.memplan.search.fits_within`) — does every record fit under a
capacity? — but only ever says yes or "not found": it branches where a tiling is most
constrained, which finds plans at max-live that the canonical search misses, and it is not
complete where bytes may be wasted. :mod:`~rtgraph.compiler.memplan.exact` gives it a turn in
every probe.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rtgraph.compiler.memplan.greedy import range_max
from rtgraph.compiler.memplan.problem import Problem
from rtgraph.compiler.memplan.search import Outcome, SearchResult, section_minima

__all__ = ["MAX_FILL_NOGOODS", "Spans", "fill_within"]

_INF = np.iinfo(np.int64).max

#: Sets of section ranges ``[lo, hi)``: where the fill read why a state has no completion
#: (sorted, disjoint).
Spans = tuple[tuple[int, int], ...]

#: Failed states the fill remembers per capacity (about 150 bytes each).
MAX_FILL_NOGOODS = 200_000


def fill_within(
    problem: Problem,
    capacity: int,
    budget: int,
    *,
    deadline: Callable[[], bool] | None = None,
    nogoods: dict[int, Spans] | None = None,
    seed: int | None = None,
) -> SearchResult:
    """Look for a plan of height ``<= capacity`` by filling the skyline from its lowest point.

    A depth-first search over *bottom-left* placements, after the skyline algorithms of
    strip packing (and TelaMalloc's sweep): the state is the placed records' top per section
    (the skyline). At a *valley* of the skyline — a stretch at level ``h`` over sections
    ``[t0, t1)`` whose neighbours are higher, the lowest stretch being one — the byte at
    ``(t0, h)`` is either taken by a record that starts at ``t0`` and ends by ``t1`` — it sits
    flush at ``h``, and its neighbours being higher, nothing else can — or left empty, raising
    the section to the next level something can start at (only where the section has bytes
    to spare); where section ``t1 - 1`` has none to spare, the byte at ``(t1 - 1, h)`` must
    likewise be taken by a record ending at ``t1`` and starting at ``t0`` or later. The node
    branches on the corner of any valley with the fewest options, and a corner with none
    ends the branch at once (a tiling's thousand-record instances went from never packed in
    10 s to packed in about 1,200 placements). Records with the same lifetime and size are
    tried once; a record whose top meets the skyline next to it (or whose other end closes
    the valley) is tried first. Pruned by MiniMalloc's inferences on the skyline: a record
    whose lowest offset (the highest skyline over its life) plus its size exceeds the
    capacity, or a section whose lowest offset any record there can take plus the sizes still
    to place there does not fit, ends the branch; a placement that would leave a full section
    beside it with no record able to take its byte at ``h`` is not tried. Valleys are taken in
    the leftmost *component* not yet filled (sections no unplaced record crosses out of:
    MiniMalloc's temporal decomposition, applied as the search goes). A failure is explained
    by the sections it was read from (the corner's valley and its walls; the failing record's
    life; the lives of the records left in the failing section); an exhausted node answers for
    the union of its own and its children's, and backjumps past every choice that placed
    nothing there (conflict-directed backjumping): such a choice cannot change the failure.

    This finds plans at a tight capacity (max-live, where every byte of a full section must
    be used) far sooner than the canonical search on tilings and on several of MiniMalloc's
    instances, but it is not complete where bytes may be wasted, so it never answers
    INFEASIBLE: an exhausted search says BUDGET with fewer placements than allowed. Failed
    states (a hash of the placed set and of the levels wasted, with the sections that explain
    the failure) go into ``nogoods``, which the caller may keep between calls at the same
    capacity: they do not depend on the tie-break. ``seed`` shuffles the ties between equally good
    options (None: larger, then longer-lived, first; 0: longer-lived, then larger, first).
    Deterministic.
    """
    fill = _Fill(problem, int(capacity), nogoods if nogoods is not None else {}, seed)
    return fill.run(int(budget), deadline)


def _union(one: Spans, two: Spans) -> Spans:
    """The union of two sets of section ranges ``[lo, hi)``, as sorted disjoint ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(one + two):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


class _Fill:
    """One fill search (see :func:`fill_within`): the skyline, the records left, the stack."""

    def __init__(
        self,
        problem: Problem,
        capacity: int,
        nogoods: dict[int, Spans],
        seed: int | None,
    ) -> None:
        p = problem
        self.p, self.cap, self.nogoods = p, capacity, nogoods
        n_sec = self.n_sec = p.n_sections
        self.act = np.flatnonzero(p.active)
        self.slo_l, self.shi_l = p.section_lo.tolist(), p.section_hi.tolist()
        self.size_l = p.size.tolist()
        width = p.upper - p.lower
        act = self.act
        order = act[np.lexsort((act, -width[act], -p.size[act]))]
        self.by_start: list[list[int]] = [[] for _ in range(n_sec + 1)]
        self.by_end: list[list[int]] = [[] for _ in range(n_sec + 1)]
        for i in order.tolist():
            self.by_start[self.slo_l[i]].append(i)
            self.by_end[self.shi_l[i]].append(i)
        self.floor = np.zeros(n_sec + 1, dtype=np.int64)  # top of the placed records
        self.floor[n_sec] = _INF  # a sentinel: no record lives past the last section
        self.remaining = np.zeros(n_sec + 1, dtype=np.int64)  # sizes still to place
        self.remaining[:n_sec] = p.section_total
        # cross[b]: unplaced records living on both sides of boundary b (before section b).
        cross = np.zeros(n_sec + 2, dtype=np.int64)
        np.add.at(cross, p.section_lo[act] + 1, 1)
        np.add.at(cross, p.section_hi[act], -1)
        self.cross = np.cumsum(cross)[: n_sec + 1]
        self.placed = ~p.active
        self.offsets = np.zeros(p.n, dtype=np.int64)
        rng = np.random.default_rng(0x5EED)
        self.zobrist = rng.integers(1, 2**63, p.n, dtype=np.int64).tolist()
        # Ties between equally good options: by size, then life (None), life then size (0),
        # or shuffled.
        self.tie: list | None = None
        if seed == 0:
            self.tie = list(zip((-width).tolist(), (-p.size).tolist(), strict=True))
        elif seed is not None:
            self.tie = np.random.default_rng(seed).random(p.n).tolist()

    def run(self, budget: int, deadline: Callable[[], bool] | None) -> SearchResult:
        p, cap = self.p, self.cap
        if len(self.act) == 0 or p.n_sections == 0:
            return SearchResult(Outcome.FOUND, self.offsets.copy(), 0)
        if p.lower_bound > cap:
            return SearchResult(Outcome.INFEASIBLE, None, 0)
        left, nodes = len(self.act), 0
        # A frame: [options, next option, the option applied (its undo), state, spans]: the
        # section ranges its failure depends on (where its options were read, joined by each
        # failure below it that it had to answer for).
        stack: list[list] = [self._options()]
        while stack:
            f = stack[-1]
            if f[2] is not None:
                left += self._undo(f[2])
                f[2] = None
            if f[1] == len(f[0]):
                # Exhausted: no completion from here, for a reason read in its spans alone.
                # The frames below whose option lies outside them cannot change that
                # (conflict-directed backjumping): undo them unasked; the frame that can
                # answers for the spans too.
                stack.pop()
                spans = f[4]
                if len(self.nogoods) < MAX_FILL_NOGOODS:
                    self.nogoods.setdefault(f[3], spans)
                while stack and stack[-1][2] is not None:
                    _, a, b, _ = stack[-1][2]
                    if any(a < hi and b > lo for lo, hi in spans):
                        stack[-1][4] = _union(stack[-1][4], spans)
                        break
                    left += self._undo(stack.pop()[2])
                continue
            if nodes >= budget or (deadline is not None and not nodes & 63 and deadline()):
                return SearchResult(Outcome.BUDGET, None, nodes)
            nodes += 1
            i, t0, level = f[0][f[1]]
            f[1] += 1
            state = f[3]
            if i >= 0:  # place record i at the level
                a, b = self.slo_l[i], self.shi_l[i]
                f[2] = (i, a, b, self.floor[a:b].copy())
                self.floor[a:b] = level + self.size_l[i]
                self.remaining[a:b] -= self.size_l[i]
                self.cross[a + 1 : b] -= 1
                self.placed[i] = True
                self.offsets[i] = level
                left -= 1
                state ^= self.zobrist[i]
                if left == 0:
                    return SearchResult(Outcome.FOUND, self.offsets.copy(), nodes)
            else:  # leave section t0 empty up to the level
                f[2] = (-1, t0, t0 + 1, self.floor[t0 : t0 + 1].copy())
                state ^= hash((t0, int(self.floor[t0]), level))
                self.floor[t0] = level
            known = self.nogoods.get(state)
            if known is not None:
                stack.append([[], 0, None, state, known])
            elif i >= 0:
                c = p.conflict_idx[p.conflict_ptr[i] : p.conflict_ptr[i + 1]]
                stack.append(self._options(state, c))
            else:
                live = (p.section_lo <= t0) & (p.section_hi > t0)
                stack.append(self._options(state, np.flatnonzero(live)))
        return SearchResult(Outcome.BUDGET, None, nodes)

    def _undo(self, undo: tuple) -> int:
        """Take back a frame's option; 1 when it had placed a record, else 0."""
        i, a, b, old = undo
        self.floor[a:b] = old
        if i < 0:
            return 0
        self.remaining[a:b] += self.size_l[i]
        self.cross[a + 1 : b] += 1
        self.placed[i] = False
        return 1

    def _component(self, s: int) -> tuple[int, int]:
        """The sections ``[lo, hi)`` around section ``s`` that no unplaced record crosses out
        of: what happens there is independent of every other section."""
        cross = self.cross
        lo = s - int(np.argmax(cross[s::-1] == 0))  # cross[0] is 0
        hi = s + 1 + int(np.argmax(cross[s + 1 :] == 0))  # cross[n_sec] is 0
        return lo, hi

    def _dead(self, near: np.ndarray | None) -> tuple[int, int] | None:
        """The sections ``[lo, hi)`` whose skyline and records show that no plan under the
        capacity completes this state, or None.

        MiniMalloc's inferences on the skyline: a record's lowest offset is the highest
        skyline over its life, and it fails when that plus its size exceeds the capacity
        (spatial); a section fails when the lowest offset any record there can take plus the
        sizes still to place there exceeds it (section inference). Only the sections of the
        records in ``near`` (None: all), whose lowest offsets the last step may have raised,
        are checked: nothing else changed. The failure depends on the failing record's life,
        or on the lives of the records still to place in the failing section.
        """
        p, n_sec = self.p, self.n_sec
        u = np.flatnonzero(~self.placed)
        if near is not None:
            near = near[~self.placed[near]]
            if len(near) == 0:
                return None
            a, b = int(p.section_lo[near].min()), int(p.section_hi[near].max())
            u = u[(p.section_lo[u] < b) & (p.section_hi[u] > a)]
        else:
            a, b = 0, n_sec
        slo, shi = p.section_lo[u], p.section_hi[u]
        lowest = range_max(self.floor[:n_sec], slo, shi)
        over = np.flatnonzero(lowest + p.size[u] > self.cap)
        if len(over):
            return int(slo[over[0]]), int(shi[over[0]])
        rem = self.remaining[a:b]
        low = section_minima(p.section_lo, p.section_hi, u, lowest, a, b)
        bad = np.flatnonzero((low + rem > self.cap) & (rem > 0))
        if len(bad) == 0:
            return None
        d = a + int(bad[0])
        there = (slo <= d) & (shi > d)
        return int(slo[there].min(initial=d)), int(shi[there].max(initial=d + 1))

    def _options(self, state: int = 0, near: np.ndarray | None = None) -> list:
        """A new frame for this state: the branches at the most constrained corner of a
        skyline valley in the leftmost unfinished component, best first, as
        ``(record, section, level)`` (record -1 leaves the section empty up to the level);
        none when the state is dead.

        A *valley* is a stretch ``[t0, t1)`` at level ``h`` whose neighbours are higher (or
        outside the component); the global lowest stretch is one. Its bottom-left byte
        ``(t0, h)`` can only be taken by a record starting at ``t0`` and ending by ``t1``, sat
        at ``h`` (the neighbours only rise), or be left empty; where section ``t1 - 1`` has no
        byte to spare, its bottom-right byte must be taken by a record ending at ``t1`` and
        starting at ``t0`` or later. Every valley's corners are counted; the node branches on
        the corner with the fewest options (lowest, then leftmost, first on ties), and a
        corner with none ends the branch at once instead of when it becomes the lowest.
        """
        dead = self._dead(near)
        if dead is not None:
            return [[], 0, None, state, (dead,)]
        floor, remaining, cap = self.floor, self.remaining, self.cap
        lo, hi = self._component(int(np.argmax(remaining > 0)))
        level = floor[lo:hi]
        starts = np.flatnonzero(np.diff(level, prepend=-1)) + lo  # stretches of one level
        ends = np.append(starts[1:], hi)
        lv = floor[starts]
        higher = np.append(lv[1:], _INF) > lv
        valleys = np.flatnonzero(np.insert(lv[1:] < lv[:-1], 0, True) & higher)
        best: tuple[list, int, int] | None = None
        for v in valleys[np.lexsort((valleys, lv[valleys]))].tolist():
            t0, t1, h = int(starts[v]), int(ends[v]), int(lv[v])
            corner = self._corner(t0, t1, h, True)
            if h + remaining[t1 - 1] == cap and len(corner[0]) > 1:
                right = self._corner(t0, t1, h, False)
                corner = right if len(right[0]) < len(corner[0]) else corner
            if best is None or len(corner[0]) < len(best[0]):
                best = corner
                if not best[0]:
                    break
        assert best is not None  # the lowest stretch of the component is a valley
        return [best[0], 0, None, state, (best[1:],)]

    def _corner(self, t0: int, t1: int, h: int, left: bool) -> tuple[list, int, int]:
        """The options at the bottom-left (``left``) or bottom-right byte of the valley
        ``[t0, t1)`` at level ``h`` (see :meth:`_options`), best first: a record whose top
        meets the skyline beside the valley, or whose other end is the valley's, first; and
        the sections ``[lo, hi)`` they were read from."""
        floor, remaining, cap = self.floor, self.remaining, self.cap
        placed, size_l = self.placed, self.size_l
        far = self.shi_l if left else self.slo_l  # the end of a record away from the corner
        room = cap - h
        lf = int(floor[t0 - 1]) if t0 > 0 else -1
        rf = int(floor[t1]) if t1 < self.n_sec else -1
        seen: set[tuple[int, int]] = set()
        ranked = []
        for i in self.by_start[t0] if left else self.by_end[t1]:
            e, z = far[i], size_l[i]
            if placed[i] or z > room or (e, z) in seen or (e > t1 if left else e < t0):
                continue
            seen.add((e, z))
            # The section beside i's far end, left at h below i's top, is full: a record
            # must take its byte at h from there (start at e, or end at e).
            s = e if left else e - 1
            if (
                (e < t1 if left else e > t0)
                and h + remaining[s] == cap
                and not any(
                    not placed[j] and size_l[j] <= room and (far[j] <= t1 if left else far[j] >= t0)
                    for j in (self.by_start[e] if left else self.by_end[e])
                )
            ):
                continue
            top = h + z
            tie = len(ranked) if self.tie is None else self.tie[i]
            ranked.append((-((top == lf) + (e == (t1 if left else t0)) + (top == rf)), tie, i))
        ranked.sort()
        options = [(i, t0, h) for _, _, i in ranked]
        lo, hi = max(t0 - 1, 0), min(t1 + 1, self.n_sec)
        spare = cap - h - int(remaining[t0])
        if left and spare > 0:  # or leave (t0, h) empty: up to where the next record could start
            level = lf if lf > h else _INF
            for i in self.by_start[t0]:
                if not placed[i]:
                    hi = max(hi, self.shi_l[i])
                    at = int(floor[t0 : self.shi_l[i]].max())
                    if h < at < level:
                        level = at
            options.append((-1, t0, min(level, h + spare)))
        return options, lo, hi
