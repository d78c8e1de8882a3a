"""Exact planning: branch and bound from the heuristics' best plan to a proof, or to a limit.

The search (:func:`~rtgraph.compiler.memplan.search.fits_within`) answers one question: does
every record fit under a capacity? :func:`solve` asks it over and over:

1. the incumbent is the heuristic portfolio's best plan, and the lower bound max-live rounded
   up to the granule (every canonical height is a multiple of the gcd of the sizes);
2. the problem *coalesced* (:mod:`~rtgraph.compiler.memplan.coalesce`: records of one
   lifetime stacked, a record and the one of its size that starts where it ends chained),
   stacks first and chains first: the blocks' heuristic plan, unfolded, is the incumbent if
   lower, and every round of every probe below searches the blocks (with their own
   preorders, nogoods and doubling limits) before the records. Blocks keep max-live, so a
   block plan at the bound is optimal, and with a fraction of the records (A: 11 blocks of
   154 records, E: 54 of 215, F: 120 of 296, I: 104 of 374) they are far easier to search:
   the blocks pack every one of MiniMalloc's A–K within the capacity, at the bound (E and I
   took the records' search alone more than 30 s), and the guillotine tilings of 300 and
   1,000 buffers fold back into blocks packed at their optimum (on 3,300 buffers, after the
   merges every plan at the bound makes, they start a search that ends 0–1.9 % above it,
   where the records' alone ended 23–27 % above). A block may pair records
   that no optimal plan puts together, so the blocks prove nothing: a search of theirs that
   runs out says nothing about the records, whose own search goes on beside it;
3. first at the caller's capacity, if one is given and the plan is above it (the question
   MiniMalloc answers: a plan within the pool), then at the lower bound, each with half of
   what is left (most instances have their optimum there, and a plan at the bound is
   proven optimal at once);
4. then bisecting between the best proven-infeasible capacity and the incumbent, each probe
   with a third of what is left. A probe that fails by running out of work moves the
   bisection up but not the bound: only a proof of infeasibility raises the lower bound;
5. when the bisection closes without a proof, it starts again from the proven bound with
   what is left — nogoods kept from the earlier rounds (below) make the second pass cheaper.

Each probe tries its strategies round-robin with doubling node limits, as MiniMalloc does with
its preorders, so whichever suits the instance finishes early. The complete search's strategies
are a preorder and a mode: with the branch on tight sections (and the order kept across
splits), or as MiniMalloc searches (see :func:`~rtgraph.compiler.memplan.search.fits_within`).
After them, in every round, comes the *skyline fill*
(:func:`~rtgraph.compiler.memplan.fill.fill_within`), a search that finds plans but cannot
prove that none exists: in each of its own orders (:data:`FILL_ORDERS`), resuming where it
stopped (twice the limit), then with a fresh shuffled tie-break (half the limit). Last, so that
a small budget (the compiler's) is spent as before the fill existed, on the strategies that
find most of its plans — except on :data:`FILL_FIRST_FROM` records or more, where the fill also
takes a turn first: there one round of the strategies costs seconds (16 placements a record at
0.3–0.6 ms each). No strategy dominates: on MiniMalloc's instance A and on guillotine tilings
the tight mode finds plans at the lower bound that MiniMalloc's misses within 8 CPU seconds, on
instance K and other tilings the reverse; alone, the fill packs MiniMalloc's D at the capacity
(6,658 placements, 2.3 CPU s), H (831, 0.2 s, by lifetime) and the benchmark's 1,000-buffer
tilings at their optimum (1,200-2,900, under 1 s), which the complete search misses in 30 s and
10 s. The searches remember failed node states (*nogoods*); a nogood of the complete search
found under a capacity holds under any smaller one, so a strategy's nogoods are kept while the
capacity only falls; the fill keeps its own for one capacity.

It stops at a proof (height = lower bound) or when the work budget (search placements) or the
time limit runs out, with the best plan found. The answer says whether it is ``proven``. Under
a work budget alone the result is deterministic; a time limit makes *when* it stops depend on
the machine, so the compiler never passes one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from rtgraph.compiler.memplan.coalesce import RULES, Coalesced, coalesce
from rtgraph.compiler.memplan.fill import Spans, fill_within
from rtgraph.compiler.memplan.greedy import PREORDERS, height_of, portfolio_offsets, preorder_ranks
from rtgraph.compiler.memplan.problem import Problem
from rtgraph.compiler.memplan.search import Outcome, fits_within

__all__ = ["BISECT_SHARE", "FIRST_SHARE", "ExactResult", "solve"]

#: The share of the work and time left that the first probe of a round, at the lower bound,
#: may take: most instances have their optimum there (8 of MiniMalloc's 11), and a plan there
#: needs no further proof.
FIRST_SHARE = 0.5
#: The share each bisection probe may take of what is left.
BISECT_SHARE = 1 / 3
#: Runs of the skyline fill with shuffled tie-breaks in each round of a probe, after the one
#: that breaks ties by size then lifetime (and resumes where it stopped, by its nogoods). Its
#: searches are heavy-tailed: on MiniMalloc's instances a fresh shuffle (seeds 1, 2, 3, ...
#: in turn, so the plan is still deterministic) often finds at once what the first misses.
#: The shuffled runs get half the node limit of a complete-search strategy, the resuming run
#: twice it: more fill runs starved the strategies that find A and G.
FILL_SHUFFLES = 1
#: The fill's own orders, each resumed every round (by its nogoods) with twice a strategy's
#: node limit: ties broken by size then lifetime (None), and by lifetime then size (0). Its
#: searches at max-live are heavy-tailed: on the benchmark's 1,000-buffer tilings each packs
#: one of seeds 1 and 2 in about 1,200 placements and misses the other within 9,000.
FILL_ORDERS: tuple[int | None, ...] = (None, 0)
#: Records from which the fill takes its turn before the strategies' (their round costs
#: 16 placements a record: on 1,000 records, seconds before the fill would start).
FILL_FIRST_FROM = 1_000


@dataclass(frozen=True)
class ExactResult:
    """The best plan found, the best proven lower bound, and whether they meet.

    ``time_to_best`` is the seconds from the start (``solve``'s ``started``: for
    :func:`~rtgraph.compiler.memplan.planner.plan`, the call) until the plan returned was
    found — for the incumbent, when the search began; ``nodes`` the search placements spent.
    """

    offsets: np.ndarray
    name: str
    height: int
    lower_bound: int
    proven: bool
    nodes: int
    time_to_best: float


def solve(
    problem: Problem,
    offsets: np.ndarray,
    name: str,
    *,
    budget: int,
    time_limit: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    started: float | None = None,
    capacity: int | None = None,
    coalescing: bool = True,
) -> ExactResult:
    """Lower ``offsets`` (named ``name``) by search, until proven optimal or out of budget.

    ``budget`` is the search placements allowed in total, ``time_limit`` the seconds (None: no
    limit) from ``started`` (a ``clock()`` reading; None: now), which is also where the time
    to the best plan counts from. ``capacity`` (None: none) is a pool the plan must fit: while
    the plan is above it, each round probes there first — the question MiniMalloc answers —
    and goes on to the lower bound only once a plan fits. ``coalescing`` (the default) searches
    the coalesced problems too. See the module docstring for the order of the probes.
    """
    now = clock()
    start = now if started is None else started
    stop_at = None if time_limit is None else start + time_limit
    height = height_of(problem, offsets)
    g = problem.granule
    proven_low = -(-problem.lower_bound // g) * g  # no plan is lower
    best_time = now - start  # the heuristic start's, until the search betters it
    left = budget
    if height <= proven_low or left <= 0:
        proven = height <= proven_low
        return ExactResult(offsets, name, height, min(height, proven_low), proven, 0, best_time)
    target = -1 if capacity is None else capacity // g * g
    merged = []  # the coalesced problems that merge something, by rule
    for rule in RULES if coalescing else ():
        blocks = coalesce(problem, rule)
        if blocks.problem.n < int((blocks.block >= 0).sum()):
            merged.append((rule, blocks))
            full = blocks.expand(portfolio_offsets(blocks.problem)[0])
            h = height_of(problem, full)
            if h < height:  # the blocks' heuristic plan: a better start
                offsets, height, name = full, h, f"coalesced/{rule}"
    state = _State(problem, start, stop_at, clock, merged)
    while height > proven_low and left > 0 and not state.expired():
        # The capacity first while the plan is above it, the bound first, then bisect.
        low, share = proven_low, FIRST_SHARE
        cap = target if proven_low < target < height else proven_low
        while low < height and left > 0 and not state.expired():
            found, outcome, used = state.probe(cap, max(int(left * share), 1), share)
            left -= used
            if found is not None:
                offsets, name = found
                height, best_time = height_of(problem, offsets), clock() - start
            else:
                low = cap + g
                if outcome is Outcome.INFEASIBLE:
                    proven_low = max(proven_low, low)
            if cap == target and found is not None:
                cap, share = low, FIRST_SHARE  # it fits: now the bound
            else:
                cap, share = low + (height - low) // (2 * g) * g, BISECT_SHARE
        if low < height:
            break  # out of budget or time
    proven = height <= proven_low
    bound = height if proven else proven_low
    return ExactResult(offsets, name, height, bound, proven, budget - left, best_time)


class _State:
    """What the probes of one :func:`solve` share: preorders, nogoods, the clock."""

    def __init__(
        self,
        problem: Problem,
        start: float,
        stop_at: float | None,
        clock: Callable[[], float],
        merged: Sequence[tuple[str, Coalesced]] = (),
    ) -> None:
        self.problem = problem
        #: The coalesced problems by rule, each searched by its own state in every round of a
        #: probe.
        self.merged = [(r, m, _State(m.problem, start, stop_at, clock)) for r, m in merged]
        ranks = {h: preorder_ranks(problem, h) for h in PREORDERS}
        self.strategies = [(h, tight, ranks[h]) for h in PREORDERS for tight in (True, False)]
        self.nogoods: dict[tuple[str, bool], tuple[int, dict[int, int]]] = {}  # → (cap, set)
        self.fill_nogoods: tuple[int, dict[int, Spans]] = (-1, {})  # capacity, states
        self.fill_done = -1  # a capacity the fill exhausted: no use retrying it there
        self.stop_at = stop_at
        self.clock = clock
        self.nodes = 0

    def expired(self) -> bool:
        return self.stop_at is not None and self.clock() >= self.stop_at

    def probe(
        self, capacity: int, budget: int, time_share: float
    ) -> tuple[tuple[np.ndarray, str] | None, Outcome, int]:
        """Look for a plan within ``capacity``: each preorder in turn, with doubling limits,
        the coalesced problems' (see :meth:`_round`) before the records'.

        Returns the plan found (with its name) or None, the outcome, and the placements used.
        A proof that the capacity is infeasible ends the probe at once. The probe may take
        ``budget`` placements and ``time_share`` of the time left.
        """
        stop = None
        if self.stop_at is not None:
            now = self.clock()
            stop = now + max(self.stop_at - now, 0.0) * time_share
        deadline = None if stop is None else (lambda: self.clock() >= stop)
        used, n = 0, max(self.problem.n, 1)
        limit = 2 * n
        shuffles = [iter(range(1, 2**62)) for _ in range(len(self.merged) + 1)]
        done: set[int] = set()  # coalesced problems proven not to fit: no plan of theirs here
        while used < budget and not (deadline is not None and deadline()):
            for k, (rule, merged, sub) in enumerate(self.merged):
                if k in done or used >= budget:
                    continue
                # A placement among m blocks costs m/n of one among the n records: charged
                # so (and with limits scaled so), the work cap — placements × records — holds.
                m = sub.problem.n
                plan, outcome, spent = sub._round(
                    capacity, limit * m // n, (budget - used) * n // m, deadline, shuffles[k + 1]
                )
                used += -(-spent * m // n)
                if plan is not None:
                    name = f"coalesced/{rule}+{plan[1]}"
                    return (merged.expand(plan[0]), name), Outcome.FOUND, used
                if outcome is Outcome.INFEASIBLE:
                    done.add(k)
            found = self._round(capacity, limit, max(budget - used, 0), deadline, shuffles[0])
            used += found[2]
            if found[0] is not None or found[1] is Outcome.INFEASIBLE:
                return found[0], found[1], used
            limit *= 2
        return None, Outcome.BUDGET, used

    def _round(
        self,
        capacity: int,
        limit: int,
        budget: int,
        deadline: Callable[[], bool] | None,
        shuffles: Iterator[int],
    ) -> tuple[tuple[np.ndarray, str] | None, Outcome, int]:
        """One round of a probe: every strategy with ``limit`` placements, then the fill's
        turn (first too, from :data:`FILL_FIRST_FROM` records). Returns as :meth:`probe`."""
        used = 0
        if self.problem.n >= FILL_FIRST_FROM:  # the strategies' rounds cost 16n placements
            found = self._fill_turn(capacity, limit, budget, deadline, shuffles)
            used += found[2]
            if found[0] is not None:
                return found
        for heuristic, tight, rank in self.strategies:
            step = min(limit, budget - used)
            if step <= 0:
                break
            result = fits_within(
                self.problem,
                rank,
                capacity,
                step,
                deadline=deadline,
                nogoods=self._nogoods((heuristic, tight), capacity),
                tight=tight,
            )
            used += result.nodes
            self.nodes += result.nodes
            if result.outcome is Outcome.FOUND:
                name = f"search/{heuristic}" + ("+tight" if tight else "")
                return (result.offsets, name), result.outcome, used
            if result.outcome is Outcome.INFEASIBLE:
                return None, result.outcome, used
        found = self._fill_turn(capacity, limit, budget - used, deadline, shuffles)
        return found[0], found[1], used + found[2]

    def _fill_turn(
        self,
        capacity: int,
        limit: int,
        budget: int,
        deadline: Callable[[], bool] | None,
        shuffles: Iterator[int],
    ) -> tuple[tuple[np.ndarray, str] | None, Outcome, int]:
        """One turn of the fill: in its two own orders (:data:`FILL_ORDERS`), then
        ``FILL_SHUFFLES`` seeded shuffles."""
        used = 0
        for seed in [*FILL_ORDERS, *(next(shuffles) for _ in range(FILL_SHUFFLES))]:
            own = seed is None or seed == 0
            step = min(limit * 2 if own else limit // 2, budget - used)
            if capacity == self.fill_done or step <= 0:
                break
            result = fill_within(
                self.problem,
                capacity,
                step,
                deadline=deadline,
                nogoods=self._fill_nogoods(capacity),
                seed=seed,
            )
            used += result.nodes
            self.nodes += result.nodes
            if result.outcome is Outcome.FOUND:
                name = "search/fill" + (
                    "" if seed is None else "/long" if seed == 0 else f"#{seed}"
                )
                return (result.offsets, name), result.outcome, used
            if result.nodes < step and not (deadline is not None and deadline()):
                self.fill_done = capacity  # exhausted: the fill has nothing more here
        return None, Outcome.BUDGET, used

    def _fill_nogoods(self, capacity: int) -> dict[int, Spans]:
        """The fill's failed states, kept between the probes of one capacity."""
        kept_cap, found = self.fill_nogoods
        if kept_cap != capacity:
            found = {}
        self.fill_nogoods = (capacity, found)
        return found

    def _nogoods(self, strategy: tuple[str, bool], capacity: int) -> dict[int, int]:
        """The strategy's nogoods, if all were found under a capacity at least as large.

        A set is labelled with the least capacity it was searched under (so every nogood in it
        holds under that capacity and any smaller one); a larger capacity starts a new set.
        """
        kept = self.nogoods.get(strategy)
        found = {} if kept is None or kept[0] < capacity else kept[1]
        self.nogoods[strategy] = (capacity, found)
        return found
