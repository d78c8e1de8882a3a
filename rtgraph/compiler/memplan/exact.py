"""Exact planning: branch and bound from the heuristics' best plan to a proof, or to a limit.

The search (:func:`~rtgraph.compiler.memplan.search.fits_within`) answers one question: does
every record fit under a capacity? :func:`solve` asks it over and over:

1. the incumbent is the heuristic portfolio's best plan, and the lower bound max-live rounded
   up to the granule (every canonical height is a multiple of the gcd of the sizes);
2. first at the lower bound, with half of what is left (most instances have their
   optimum there, and a plan at the bound is proven optimal at once);
3. then bisecting between the best proven-infeasible capacity and the incumbent, each probe
   with a third of what is left. A probe that fails by running out of work moves the
   bisection up but not the bound: only a proof of infeasibility raises the lower bound;
4. when the bisection closes without a proof, it starts again from the proven bound with
   what is left — nogoods kept from the earlier rounds (below) make the second pass cheaper.

Each probe tries its strategies round-robin with doubling node limits, as MiniMalloc does with
its preorders, so whichever suits the instance finishes early. A strategy is a preorder and a
mode of the search: with the branch on tight sections (and the order kept across splits), or
as MiniMalloc searches (see :func:`~rtgraph.compiler.memplan.search.fits_within`). Neither
mode dominates: on MiniMalloc's instance A and on guillotine tilings the first finds plans at
the lower bound that the second misses within 8 CPU seconds, on instance K and other tilings
the reverse. The search remembers failed node states (*nogoods*) per strategy; a nogood found
under a capacity holds under any smaller one, so a strategy's nogoods are kept while the
capacity only falls.

It stops at a proof (height = lower bound) or when the work budget (search placements) or the
time limit runs out, with the best plan found. The answer says whether it is ``proven``. Under
a work budget alone the result is deterministic; a time limit makes *when* it stops depend on
the machine, so the compiler never passes one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rtgraph.compiler.memplan.greedy import PREORDERS, height_of, preorder_ranks
from rtgraph.compiler.memplan.problem import Problem
from rtgraph.compiler.memplan.search import Outcome, fits_within

__all__ = ["BISECT_SHARE", "FIRST_SHARE", "ExactResult", "solve"]

#: The share of the work and time left that the first probe of a round, at the lower bound,
#: may take: most instances have their optimum there (8 of MiniMalloc's 11), and a plan there
#: needs no further proof.
FIRST_SHARE = 0.5
#: The share each bisection probe may take of what is left.
BISECT_SHARE = 1 / 3


@dataclass(frozen=True)
class ExactResult:
    """The best plan found, the best proven lower bound, and whether they meet.

    ``time_to_best`` is the seconds from the start of :func:`solve` until the plan returned
    was found (0.0 when it is the incumbent); ``nodes`` the search placements spent.
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
) -> ExactResult:
    """Lower ``offsets`` (named ``name``) by search, until proven optimal or out of budget.

    ``budget`` is the search placements allowed in total, ``time_limit`` the seconds (None: no
    limit). See the module docstring for the order of the probes.
    """
    start = clock()
    stop_at = None if time_limit is None else start + time_limit
    height = height_of(problem, offsets)
    g = problem.granule
    proven_low = -(-problem.lower_bound // g) * g  # no plan is lower
    best_time = 0.0
    left = budget
    if height <= proven_low or left <= 0:
        proven = height <= proven_low
        return ExactResult(offsets, name, height, min(height, proven_low), proven, 0, 0.0)
    state = _State(problem, start, stop_at, clock)
    while height > proven_low and left > 0 and not state.expired():
        low, cap, share = proven_low, proven_low, FIRST_SHARE  # the bound first, then bisect
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
            cap, share = low + (height - low) // (2 * g) * g, BISECT_SHARE
        if low < height:
            break  # out of budget or time
    proven = height <= proven_low
    bound = height if proven else proven_low
    return ExactResult(offsets, name, height, bound, proven, state.nodes, best_time)


class _State:
    """What the probes of one :func:`solve` share: preorders, nogoods, the clock."""

    def __init__(
        self, problem: Problem, start: float, stop_at: float | None, clock: Callable[[], float]
    ) -> None:
        self.problem = problem
        ranks = {h: preorder_ranks(problem, h) for h in PREORDERS}
        self.strategies = [(h, tight, ranks[h]) for h in PREORDERS for tight in (True, False)]
        self.nogoods: dict[tuple[str, bool], tuple[int, dict[int, int]]] = {}  # → (cap, set)
        self.stop_at = stop_at
        self.clock = clock
        self.nodes = 0

    def expired(self) -> bool:
        return self.stop_at is not None and self.clock() >= self.stop_at

    def probe(
        self, capacity: int, budget: int, time_share: float
    ) -> tuple[tuple[np.ndarray, str] | None, Outcome, int]:
        """Look for a plan within ``capacity``: each preorder in turn, with doubling limits.

        Returns the plan found (with its name) or None, the outcome, and the placements used.
        A proof that the capacity is infeasible ends the probe at once. The probe may take
        ``budget`` placements and ``time_share`` of the time left.
        """
        stop = None
        if self.stop_at is not None:
            now = self.clock()
            stop = now + max(self.stop_at - now, 0.0) * time_share
        deadline = None if stop is None else (lambda: self.clock() >= stop)
        used = 0
        limit = 2 * max(self.problem.n, 1)
        while used < budget and not (deadline is not None and deadline()):
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
            limit *= 2
        return None, Outcome.BUDGET, used

    def _nogoods(self, strategy: tuple[str, bool], capacity: int) -> dict[int, int]:
        """The strategy's nogoods, if all were found under a capacity at least as large.

        A set is labelled with the least capacity it was searched under (so every nogood in it
        holds under that capacity and any smaller one); a larger capacity starts a new set.
        """
        kept = self.nogoods.get(strategy)
        found = {} if kept is None or kept[0] < capacity else kept[1]
        self.nogoods[strategy] = (capacity, found)
        return found
