"""Branch and bound over canonical placements: does every record fit under a given capacity?

This is the decision procedure behind ``plan(method="exact"|"best")``, after Moffitt's MiniMalloc
(ASPLOS 2023). It searches *canonical* placements — records placed in non-decreasing offset
order, each directly on top of the placed records it conflicts with — which contain an optimal
plan, and prunes with:

* **canonical order**: along a branch, the pair (offset, preorder rank) of successive records
  strictly increases, so each set of placements is generated once;
* **dominance**: never place a record at or above ``offset + size`` of another unplaced
  record — that one would fit in the gap below, so the branch cannot beat one that fills it;
* **section inference**: in every section (a time span with a fixed live set), the lowest
  offset any unplaced record there can take, plus the sizes still to place there, must fit.
  A record *behind* the last placement in canonical order cannot take its lowest offset any
  more: only a later placement (at or above the last one) can raise it, so it counts as a
  granule above the last placement — without this, a section whose every record is behind
  looked fillable and the search went hundreds of placements deeper before failing;
* **tight sections**: when a section's remaining sizes fill exactly what is left above the
  next offset, some record must sit at that offset there; the node branches only on which one,
  in the section with the fewest such candidates (exact cover's rule), best fit first. At
  max-live every section is tight, which is where an optimal plan is most often sought;
* **dynamic decomposition**: when placing a record leaves no unplaced record spanning some
  time boundary, the two sides are independent and are solved one after the other — a failure
  on one side backjumps straight to the placement that split them, instead of retrying
  every combination of the other side. The sides keep the canonical order of the placement
  that split them (each side's placements are a subsequence of one canonical order, so no
  plan is lost), which is what makes the rule for records behind it hold across splits;
* **nogoods** (dominance of partial solutions): every placed record sits at or below every
  offset still to come, so the rest of the search depends only on the unplaced records and
  their lowest offsets. A node whose candidates are exhausted records that state (a 128-bit
  hash) with its (offset, rank) threshold; a later node in the same state with a threshold
  at least as high has no more completions and is cut. The caller may keep the nogoods
  between calls for the same preorder, the same mode and a capacity no larger.

The search is depth-first with an explicit stack (no recursion limit to hit) and stops after
``budget`` placements, or when ``deadline()`` says so (checked every 256 placements): it
answers FOUND (with offsets), INFEASIBLE (proved: the capacity is too small) or BUDGET (gave
up). Without a deadline nothing depends on the wall clock, so the same input always gets the
same answer. Each node costs ``O(k log k + S log S)`` NumPy work for ``k`` unplaced
records and ``S`` sections of its partition (``O(k·S)`` by the cover matrix when that is small).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rtgraph.compiler.memplan.problem import Problem

_INF = np.iinfo(np.int64).max

#: Records × sections up to which the search keeps a boolean matrix of which record lives in
#: which section (8 MB at most).
MAX_COVER_CELLS = 8_000_000

#: Records × sections up to which a node checks every section of its partition, not only
#: those whose lowest offsets the last placement changed.
FULL_CHECK_CELLS = 200_000

#: Nogoods (failed node states) remembered per strategy (preorder and mode) and capacity: a
#: dict entry of about 120 bytes, so at most ~12 MB for each of the eight strategies.
MAX_NOGOODS = 100_000


class Outcome(enum.Enum):
    FOUND = "found"
    INFEASIBLE = "infeasible"
    BUDGET = "budget"


@dataclass(frozen=True)
class SearchResult:
    outcome: Outcome
    offsets: np.ndarray | None
    nodes: int


def fits_within(
    problem: Problem,
    ranks: np.ndarray,
    capacity: int,
    budget: int,
    *,
    deadline: Callable[[], bool] | None = None,
    nogoods: dict[int, int] | None = None,
    tight: bool = True,
) -> SearchResult:
    """Search for a placement of ``problem`` with height ``<= capacity``.

    ``ranks`` is the preorder used to break ties between records with the same lowest offset
    (see :func:`~rtgraph.compiler.memplan.greedy.preorder_ranks`); ``budget`` caps the number of
    placements tried. ``tight=False`` searches as MiniMalloc does: no branch on tight sections,
    each side of a split restarting the canonical order, records behind it counted where they
    stand. Both are complete; each finds some plans far sooner than the other (see
    :mod:`~rtgraph.compiler.memplan.exact`), and nogoods of one do not carry to the other.
    Returns the outcome, the offsets if found, and the placements used.
    """
    return _Search(problem, ranks, capacity, budget, deadline, nogoods, tight).run()


@dataclass(eq=False)
class _Context:
    """The independent partitions one decomposition produced, still to be solved in turn."""

    pending: list[tuple[np.ndarray, int, int]]
    owner: int  # stack index of the frame whose placement split them; -1 for the start
    parent: _Context | None
    last_low: int = -1  # the placement that split them: every later one must come after it
    last_rank: int = -1


@dataclass(eq=False)
class _Frame:
    """A search node: a partition's unplaced records and the placements still to try."""

    part: np.ndarray
    lo: int
    hi: int
    ctx: _Context
    root: bool
    cand: list[int]
    cand_offset: list[int]
    key: int = 0  # the node's state, hashed (see _Search._state_key)
    last: int = 0  # the (offset, rank) every placement here must exceed, as one integer
    pos: int = 0
    undo: tuple | None = field(default=None)
    # The order every placement below must follow, when it is not the placement's own
    # (offset, rank): after a branch on a tight section (see _Search._tight_branch).
    next_low: int | None = None
    next_rank: int = -1


_LEAF = object()


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class _Search:
    def __init__(
        self,
        problem: Problem,
        ranks: np.ndarray,
        capacity: int,
        budget: int,
        deadline: Callable[[], bool] | None,
        nogoods: dict[int, int] | None,
        tight: bool = True,
    ) -> None:
        p = problem
        self.tight = tight
        self.deadline = deadline
        self.nogoods: dict[int, int] = {} if nogoods is None else nogoods
        ids = np.arange(p.n, dtype=np.uint64)
        self.salt = (_mix(ids + np.uint64(0x51ED)), _mix(ids + np.uint64(0xC0FFEE)))
        self.p = p
        self.cap = int(capacity)
        self.granule = p.granule
        self.budget = int(budget)
        self.nodes = 0
        self.size = p.size
        self.slo = p.section_lo
        self.shi = p.section_hi
        self.rank = ranks.astype(np.int64)
        self.rank_list = self.rank.tolist()
        self.placed = ~p.active
        self.offset = np.zeros(p.n, dtype=np.int64)
        self.low = np.zeros(p.n, dtype=np.int64)  # lowest legal offset of each unplaced record
        n_sec = p.n_sections
        self.floor = np.zeros(n_sec, dtype=np.int64)  # top of the placed records, per section
        self.total = p.section_total.copy()  # sizes still to place, per section
        act = np.flatnonzero(p.active)
        spans = np.zeros(n_sec + 1, dtype=np.int64)
        np.add.at(spans, self.slo[act], 1)
        np.add.at(spans, np.maximum(self.shi[act] - 1, 0), -1)
        self.cuts = np.cumsum(spans)[:n_sec]  # unplaced records spanning boundary s | s+1
        # (offset, rank) pairs compared as one integer when that cannot overflow.
        self.key_scale = p.n + 1
        bound = (int(p.size.sum()) + 1) * self.key_scale
        self.packed_keys = bound < 2**62
        self.stack: list[_Frame] = []
        # Which sections each record lives in, as a matrix, when it is small: the per-section
        # minima below are then one masked reduction instead of a sparse-table pass.
        self.cover = None
        if p.n * n_sec <= MAX_COVER_CELLS:
            sec = np.arange(n_sec)
            self.cover = (sec >= self.slo[:, None]) & (sec < self.shi[:, None])
            self.cover &= p.active[:, None]

    # --- driver -----------------------------------------------------------------------------

    def run(self) -> SearchResult:
        act = np.flatnonzero(self.p.active)
        if len(act) == 0 or self.p.n_sections == 0:
            return SearchResult(Outcome.FOUND, self.offset.copy(), 0)
        if self.p.lower_bound > self.cap:
            return SearchResult(Outcome.INFEASIBLE, None, 0)
        state = self._open(_Context(self._split(act, 0, self.p.n_sections), -1, None))
        stack = self.stack
        while state is None:
            f = stack[-1]
            if f.undo is not None:
                self._unplace(f.undo)
                f.undo = None
            if f.pos == len(f.cand):
                stack.pop()
                self._fail(f)
                if f.root:
                    state = self._backjump(f.ctx)
                continue
            if self.nodes >= self.budget or (
                self.deadline is not None and not self.nodes & 255 and self.deadline()
            ):
                state = Outcome.BUDGET
                break
            self.nodes += 1
            i = f.cand[f.pos]
            low = f.cand_offset[f.pos]
            f.pos += 1
            f.undo = self._place(i, low)
            t_low, t_rank = (
                (low, self.rank_list[i]) if f.next_low is None else (f.next_low, f.next_rank)
            )
            if self._splits(i, f.lo, f.hi):
                pieces = self._split(f.part, f.lo, f.hi)
                ctx = _Context(pieces, len(stack) - 1, f.ctx)
                if self.tight:  # the sides keep the order (else each restarts it)
                    ctx.last_low, ctx.last_rank = t_low, t_rank
                state = self._open(ctx)
                continue
            child = self._frame(
                f.part, f.lo, f.hi, t_low, t_rank, f.ctx, root=False, changed=f.undo[6:]
            )
            if child is _LEAF:
                state = self._open(f.ctx)
            elif child is not None:
                stack.append(child)
        if state is Outcome.FOUND:
            return SearchResult(state, self.offset.copy(), self.nodes)
        return SearchResult(state, None, self.nodes)

    def _open(self, ctx: _Context) -> Outcome | None:
        """Start the next pending partition (the current one of ``ctx`` is complete)."""
        while True:
            if ctx.pending:
                part, lo, hi = ctx.pending.pop()
                frame = self._frame(part, lo, hi, ctx.last_low, ctx.last_rank, ctx, root=True)
                if frame is None:
                    return self._backjump(ctx)
                self.stack.append(frame)
                return None
            if ctx.parent is None:
                return Outcome.FOUND
            ctx = ctx.parent  # every partition of ctx is done: so is the one that split

    def _backjump(self, ctx: _Context) -> Outcome | None:
        """A partition of ``ctx`` cannot be placed: undo back to the placement that split it."""
        if ctx.owner < 0:
            return Outcome.INFEASIBLE
        stack = self.stack
        while len(stack) - 1 > ctx.owner:
            g = stack.pop()
            if g.undo is not None:
                self._unplace(g.undo)
                g.undo = None
        return None

    # --- state changes ----------------------------------------------------------------------

    def _place(self, i: int, low: int) -> tuple:
        top = low + int(self.size[i])
        self.placed[i] = True
        self.offset[i] = low
        p = self.p
        c = p.conflict_idx[p.conflict_ptr[i] : p.conflict_ptr[i + 1]]
        c = c[~self.placed[c]]
        c = c[self.low[c] < top]
        old_low = self.low[c]
        self.low[c] = top
        a, b = int(self.slo[i]), int(self.shi[i])
        old_floor = self.floor[a:b].copy()
        self.floor[a:b] = top
        self.total[a:b] -= self.size[i]
        self.cuts[a : b - 1] -= 1
        if len(c):  # the sections whose lowest offsets may have changed
            a = min(a, int(self.slo[c].min()))
            b = max(b, int(self.shi[c].max()))
        return (i, c, old_low, int(self.slo[i]), int(self.shi[i]), old_floor, a, b)

    def _unplace(self, undo: tuple) -> None:
        i, c, old_low, a, b, old_floor, _, _ = undo
        self.cuts[a : b - 1] += 1
        self.total[a:b] += self.size[i]
        self.floor[a:b] = old_floor
        self.low[c] = old_low
        self.placed[i] = False

    def _splits(self, i: int, lo: int, hi: int) -> bool:
        """Did placing ``i`` leave a boundary inside ``[lo, hi)`` that no unplaced record spans?"""
        a = max(int(self.slo[i]), lo)
        b = min(int(self.shi[i]) - 1, hi - 1)
        return b > a and not self.cuts[a:b].all()

    def _split(self, part: np.ndarray, lo: int, hi: int) -> list[tuple[np.ndarray, int, int]]:
        """The unplaced records of ``part`` grouped by the boundaries no record spans.

        Returned last-first, so that popping from the end solves them in time order.
        """
        u = part[~self.placed[part]]
        if len(u) == 0:
            return []
        cut_at = np.flatnonzero(self.cuts[lo : hi - 1] == 0) + lo + 1
        piece = np.searchsorted(cut_at, self.slo[u], side="right")
        by = np.argsort(piece, kind="stable")
        u, piece = u[by], piece[by]
        starts = np.flatnonzero(np.diff(piece, prepend=-1))
        pieces = []
        for s, e in zip(starts.tolist(), [*starts[1:].tolist(), len(u)], strict=True):
            sub = u[s:e]
            pieces.append((sub, int(self.slo[sub].min()), int(self.shi[sub].max())))
        pieces.reverse()
        return pieces

    # --- one node ---------------------------------------------------------------------------

    def _frame(
        self,
        part: np.ndarray,
        lo: int,
        hi: int,
        last_low: int,
        last_rank: int,
        ctx: _Context,
        *,
        root: bool,
        changed: tuple[int, int] | None = None,
    ) -> _Frame | object | None:
        """The node for ``part`` after a placement at ``last_low``: its candidate placements.

        ``changed`` is the range of sections where the last placement may have raised some
        record's lowest offset (None: check them all). Returns ``_LEAF`` when nothing is left
        to place, ``None`` when the node is pruned.
        """
        u = part[~self.placed[part]]
        if len(u) == 0:
            return _LEAF
        low = self.low[u]
        total = self.total[lo:hi]
        rank = self.rank[u]
        if self.packed_keys:
            key = low * self.key_scale + rank
            ahead = key > last_low * self.key_scale + last_rank
        else:
            ahead = (low > last_low) | ((low == last_low) & (rank > last_rank))
        # A record behind the last placement in canonical order cannot go where it stands
        # when splits keep the order (see _Context): only a later placement, at or above
        # last_low, can raise it, so it goes at last_low + a granule or higher. (When a
        # split restarts the order, it may yet go where it stands.)
        reach = np.where(ahead, low, last_low + self.granule) if self.tight else low
        # Lowest offsets only rise: a record that cannot fit above its own cannot fit at all.
        if int((reach + self.size[u]).max()) > self.cap:
            return None
        # Section inference: in each section, the lowest offset an unplaced record there can
        # take (and never below the last placement) plus the sizes still to place must fit.
        # Elsewhere the parent's check still holds: its floors did not move, and the one-step
        # look-ahead that admitted this placement covered last_low + every section's total;
        # the whole partition is checked anyway when that is cheap.
        a, b = (lo, hi) if changed is None else (max(lo, changed[0]), min(hi, changed[1]))
        if self.cover is not None and len(u) * (hi - lo) <= FULL_CHECK_CELLS:
            a, b = lo, hi
        if b > a:
            inside = (self.slo[u] < b) & (self.shi[u] > a)
            near = u[inside]
            near_total = self.total[a:b]
            if len(near):
                lowest = self._lowest(near, reach[inside], a, b)
                floor = np.where(near_total > 0, lowest, self.floor[a:b])
            else:
                floor = self.floor[a:b]
            if int((np.maximum(floor, last_low) + near_total).max()) > self.cap:
                return None
        order = np.argsort(key, kind="stable") if self.packed_keys else np.lexsort((rank, low))
        keep = ahead[order]
        u, low, reach = u[order], low[order], reach[order]
        # Dominance: a record placed at or above some unplaced record's lowest top would
        # leave a gap that record fits in. Inference one step ahead: after placing a record
        # at low_i, every section of the partition still needs low_i + its remaining total
        # (the placed record's own sections need exactly that, the others at least).
        keep &= low < int((low + self.size[u]).min())
        keep &= low <= self.cap - int(total.max())
        if not keep.any():
            return None
        key = self._state_key(u, low)
        last = (last_low + 1) * self.key_scale + last_rank + 1  # Python int: exact
        known = self.nogoods.get(key)
        if known is not None and known <= last:
            return None
        tight = self._tight_branch(u, low, reach, keep, lo, hi) if self.tight else True
        if tight is None:
            return None
        if tight is not True:
            frame = _Frame(part, lo, hi, ctx, root, tight[0], tight[1])
            nxt = tight[1][0]
            frame.next_low, frame.next_rank = (nxt, -1) if nxt > last_low else (last_low, last_rank)
        else:
            frame = _Frame(part, lo, hi, ctx, root, u[keep].tolist(), low[keep].tolist())
        frame.key, frame.last = key, last
        return frame

    def _tight_branch(
        self,
        u: np.ndarray,
        low: np.ndarray,
        reach: np.ndarray,
        keep: np.ndarray,
        lo: int,
        hi: int,
    ) -> tuple[list[int], list[int]] | bool | None:
        """The branch on a *tight* section, when there is one: True when there is none, None
        when the node is pruned, else the candidates to try and their offsets.

        Every placement from here on is at or above ``nxt``, the lowest offset of a candidate.
        A section whose remaining sizes fill exactly ``[nxt, capacity)`` leaves no byte to
        waste: some record must sit at ``nxt`` in it — so some unplaced record there must be
        able to go that low (else the node is pruned) — and only a candidate at ``nxt`` that
        lives there can be that record. Branching on which one, in the section with the
        fewest (as in exact cover), is complete, and far narrower than branching on every
        candidate when the capacity is tight (at max-live, every section is). ``O(k + S)``.
        """
        nxt = int(low[keep][0])
        total = self.total[lo:hi]
        tight = np.flatnonzero((total > 0) & (total == self.cap - nxt))
        if len(tight) == 0:
            return True
        first = self.slo[u] - lo
        end = self.shi[u] - lo
        counts = np.zeros(hi - lo + 1, dtype=np.int64)
        low_enough = reach <= nxt  # records that can still sit at nxt or lower
        np.add.at(counts, first[low_enough], 1)
        np.add.at(counts, end[low_enough], -1)
        if not np.cumsum(counts)[tight].all():
            return None  # a tight section's records all sit above nxt: bytes wasted
        at = np.flatnonzero(keep & (low == nxt))
        counts[:] = 0
        np.add.at(counts, first[at], 1)
        np.add.at(counts, end[at], -1)
        counts = np.cumsum(counts)[tight]
        if counts.min() == 0:
            return None
        s = int(tight[int(np.argmin(counts))])
        at = at[(first[at] <= s) & (end[at] > s)]
        chosen = u[at]
        if len(chosen) > 1:
            # Best fit first: a record whose top meets the skyline just outside its span, on
            # either side, leaves it flat there, as a tiling's pieces do.
            top = nxt + self.size[chosen]
            pad = np.concatenate(([-1], self.floor[lo:hi], [-1]))
            fit = (pad[first[at]] == top).astype(np.int64) + (pad[end[at] + 1] == top)
            chosen = chosen[np.argsort(-fit, kind="stable")]
        return chosen.tolist(), [nxt] * len(chosen)

    def _state_key(self, u: np.ndarray, low: np.ndarray) -> int:
        """A 128-bit hash of a node's state: its unplaced records and their lowest offsets.

        Every record already placed sits at or below every offset still to come, so it
        constrains the rest only through these lowest offsets: two nodes with the same state
        have the same completions, whichever placements led to them. Order-free (a sum).
        """
        mixed = _mix(low.astype(np.uint64))
        a = int(_mix(mixed ^ self.salt[0][u]).sum(dtype=np.uint64))
        b = int(_mix(mixed + self.salt[1][u]).sum(dtype=np.uint64))
        return a << 64 | b

    def _fail(self, f: _Frame) -> None:
        """Remember that ``f``'s state has no completion after ``f.last`` (a nogood)."""
        known = self.nogoods.get(f.key)
        if known is None:
            if len(self.nogoods) >= MAX_NOGOODS:
                return
            self.nogoods[f.key] = f.last
        elif f.last < known:
            self.nogoods[f.key] = f.last

    def _lowest(self, u: np.ndarray, low: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """Per section of ``[lo, hi)``, the least ``low`` of the records ``u`` living there.

        Sections no record covers get the int64 maximum. With the cover matrix, one masked
        minimum over ``k × S`` cells; without, :func:`section_minima`.
        """
        if self.cover is not None:
            return np.where(self.cover[u, lo:hi], low[:, None], _INF).min(axis=0)
        return section_minima(self.slo, self.shi, u, low, lo, hi)


def section_minima(
    slo: np.ndarray, shi: np.ndarray, u: np.ndarray, low: np.ndarray, lo: int, hi: int
) -> np.ndarray:
    """Per section of ``[lo, hi)``, the least ``low[k]`` of the records ``u[k]`` living there.

    Records live over the sections ``[slo, shi)`` (each overlapping ``[lo, hi)``); sections no
    record covers get the int64 maximum. Each record's span, clipped, is covered by two
    power-of-two blocks, as in a sparse table; minima are scattered onto the blocks and pushed
    down level by level: ``O(k + S log S)`` for ``k`` records and ``S`` sections.
    """
    n = hi - lo
    first = np.maximum(slo[u], lo) - lo
    end = np.minimum(shi[u], hi) - lo
    level = (np.frexp((end - first).astype(np.float64))[1] - 1).astype(np.int64)
    depth = int(level.max()) + 1
    table = np.full((depth, n), _INF, dtype=np.int64)
    base = level * n
    np.minimum.at(
        table.reshape(-1),
        np.concatenate((base + first, base + end - (1 << level))),
        np.concatenate((low, low)),
    )
    for j in range(depth - 1, 0, -1):
        width = n - (1 << j) + 1
        if width <= 0:
            continue
        half = 1 << (j - 1)
        row = table[j, :width]
        below = table[j - 1]
        np.minimum(below[:width], row, out=below[:width])
        np.minimum(below[half : half + width], row, out=below[half : half + width])
    return table[0]
