"""Coalescing (issue 15): stacks and chains merge into blocks whose plans are plans of the records.

The merged problem keeps the load at every time (so the max-live bound), any plan of it unfolds
into a valid plan of the original of the same height, and the exact search, which tries it first,
reaches MiniMalloc's capacity on instances its search of the records alone cannot pack. The
merges made first — those every plan at the max-live bound makes — lose no plan there: where
the records pack at the bound (by brute force), so do their forced blocks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_memplan import brute_force_optimum, max_live, records_strategy
from test_memplan_exact import tiling

from rtgraph.compiler.memplan import Placement, Record, build_problem, check_placement, exact, plan
from rtgraph.compiler.memplan.coalesce import RULES, coalesce, forced
from rtgraph.compiler.memplan.exact import solve
from rtgraph.compiler.memplan.greedy import greedy_by_size_offsets, height_of
from rtgraph.compiler.memplan.records import read_records_csv

MINIMALLOC = Path(__file__).parent / "data" / "minimalloc"


def _load(problem, horizon: int) -> np.ndarray:
    """Live bytes at every integer time up to ``horizon``."""
    load = np.zeros(horizon + 1, dtype=np.int64)
    act = problem.active
    np.add.at(load, problem.lower[act], problem.size[act])
    np.add.at(load, problem.upper[act], -problem.size[act])
    return np.cumsum(load)


def _placement(records: list[Record], offsets: np.ndarray, height: int) -> Placement:
    mapping = {r.id: int(o) for r, o in zip(records, offsets.tolist(), strict=True)}
    return Placement(mapping, height, 0, "coalesced", False)


#: Few distinct times and sizes, so that lifetimes coincide and sizes repeat: stacks and chains.
mergeable = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 4), st.sampled_from([0, 4, 8, 12])),
    max_size=16,
).map(lambda rows: [Record(f"m{k}", a, a + d, s) for k, (a, d, s) in enumerate(rows)])


@settings(max_examples=120, deadline=None)
@given(
    records=st.one_of(records_strategy, mergeable),
    alignment=st.sampled_from([1, 8]),
    rule=st.sampled_from([*RULES, "forced"]),
)
def test_every_plan_of_the_blocks_unfolds_into_a_valid_plan_with_the_same_load(
    records, alignment, rule
):
    problem = build_problem(records, alignment)
    merged = forced(problem) if rule == "forced" else coalesce(problem, rule)
    assert merged.problem.n <= max(int(problem.active.sum()), 0)
    horizon = int(problem.upper.max(initial=0))
    assert np.array_equal(_load(merged.problem, horizon), _load(problem, horizon))
    assert merged.problem.lower_bound == problem.lower_bound
    offsets = merged.expand(greedy_by_size_offsets(merged.problem))
    height = height_of(problem, offsets)
    assert height == height_of(merged.problem, greedy_by_size_offsets(merged.problem))
    aligned = [
        Record(r.id, r.lower, r.upper, int(s)) for r, s in zip(records, problem.size, strict=True)
    ]
    assert check_placement(aligned, _placement(aligned, offsets, height)) == []
    assert (offsets[~problem.active] == 0).all() and (merged.block[~problem.active] == -1).all()


def test_a_stack_and_a_chain_fold_into_one_block_and_unfold_to_their_places():
    """a then b reuse the same 4 bytes (a chain); c lives over both (a stack with the chain)."""
    records = [Record("a", 0, 2, 4), Record("b", 2, 5, 4), Record("c", 0, 5, 2)]
    for rule in RULES:
        merged = coalesce(build_problem(records), rule)
        assert [(r.lower, r.upper, r.size) for r in merged.problem.records] == [(0, 5, 6)]
        offsets = merged.expand(np.array([10]))
        assert {r.id: int(o) for r, o in zip(records, offsets, strict=True)} in (
            {"a": 10, "b": 10, "c": 14},
            {"a": 12, "b": 12, "c": 10},
        )


def test_an_ambiguous_chain_is_left_unmerged():
    """Two records of size 4 end at 2 and one starts there: which one it reuses is a choice
    coalescing does not make."""
    records = [Record("a", 0, 2, 4), Record("b", 1, 2, 4), Record("c", 2, 5, 4)]
    merged = coalesce(build_problem(records), "chain")
    assert merged.problem.n == 3


def _busy(a_sizes: tuple[int, int, int], a_span_of_1_2: tuple[int, int]) -> list[Record]:
    """At time 10, x (size 5) ends and y (size 5) starts among three other ends and starts."""
    (s1, s2, s3), (lo1, lo2) = a_sizes, a_span_of_1_2
    return [
        Record("x", 0, 10, 5),
        Record("a1", lo1, 10, s1),
        Record("a2", lo2, 10, s2),
        Record("a3", 3, 10, s3),
        Record("y", 10, 20, 5),
        Record("b1", 10, 21, 6),
        Record("b2", 10, 22, 7),
        Record("b3", 10, 23, 9),
    ]


def test_chains_first_wait_at_a_busy_boundary_until_it_quiets():
    """Four blocks end and four start at 10: chains first, x and y (the only pair of one size)
    are not chained there — stacks first, they are. Once a1 and a2 (one lifetime) are stacked,
    three end at 10, and x and y are chained."""
    busy = build_problem(_busy((1, 2, 3), (1, 2)))
    same = [coalesce(busy, rule).block for rule in RULES]
    assert dict(zip(RULES, [b[0] == b[4] for b in same], strict=True)) == {
        "stack": True,
        "chain": False,
    }
    quiets = coalesce(build_problem(_busy((1, 2, 4), (1, 1))), "chain")
    assert quiets.block[0] == quiets.block[4] and quiets.block[1] == quiets.block[2]
    assert quiets.problem.n == 6


#: Small instances the bound is often met on: random records, and tilings of a rectangle.
tight = st.one_of(
    records_strategy.map(lambda rows: rows[:7]),
    st.builds(lambda n, seed: tiling(n, seed, height=8), st.integers(2, 7), st.integers(0, 999)),
)


@settings(max_examples=150, deadline=None)
@given(records=tight)
def test_forced_merges_lose_no_plan_at_the_bound(records):
    """Where some plan of the records is at max-live (brute force over canonical orders), some
    plan of the forced blocks is too: a search of the blocks at the bound loses nothing."""
    problem = build_problem(records)
    blocks = forced(problem)
    bound = max_live(records)
    assert blocks.problem.lower_bound == problem.lower_bound == bound
    if brute_force_optimum(records) == bound:
        assert brute_force_optimum(list(blocks.problem.records)) == bound


def _forced_at(records: list[Record]) -> tuple[list[tuple[int, int, int]], dict[str, int]]:
    """The forced blocks of ``records`` as ``(lower, upper, size)``, sorted, and each record's
    offset when the blocks are placed at 0, 2, 4, …"""
    merged = forced(build_problem(records))
    blocks = sorted((r.lower, r.upper, r.size) for r in merged.problem.records)
    at = merged.expand(np.arange(merged.problem.n, dtype=np.int64) * 2).tolist()
    return blocks, dict(zip([r.id for r in records], at, strict=True))


def test_forced_merges_fill_the_bytes_a_block_frees_between_full_sections():
    """Max-live is 6 everywhere: c lives throughout; when a (4 bytes) ends at 2, b1 and b2 (one
    lifetime) take exactly its bytes, and d, starting where they end, theirs — one block beside
    c's. Where the section after a boundary has bytes to spare, nothing is forced."""
    full = [
        Record("a", 0, 2, 4),
        Record("b1", 2, 5, 1),
        Record("b2", 2, 5, 3),
        Record("d", 5, 8, 4),
        Record("c", 0, 8, 2),
    ]
    blocks, offsets = _forced_at(full)
    assert blocks == [(0, 8, 2), (0, 8, 4)]
    assert offsets["a"] == offsets["d"] == min(offsets["b1"], offsets["b2"])
    assert abs(offsets["b1"] - offsets["b2"]) in (1, 3)  # side by side within a's bytes
    spare = [*full[:4], Record("c", 0, 2, 2), Record("e", 2, 8, 1)]  # after 2: 5 of 6 live
    assert forced(build_problem(spare)).problem.n == len(spare)


def test_a_forced_merge_can_make_another_boundary_forced():
    """At 2, b1 and b2 start inside a's bytes with two lifetimes: no order is forced yet. At 5
    and 6 each is followed by one record of its size (forced chains), after which both live
    [2, 8): one lifetime, so the merge at 2 is forced too."""
    records = [
        Record("c", 0, 8, 2),
        Record("a", 0, 2, 4),
        Record("b1", 2, 5, 1),
        Record("b2", 2, 6, 3),
        Record("e", 5, 8, 1),
        Record("f", 6, 8, 3),
    ]
    blocks, offsets = _forced_at(records)
    assert blocks == [(0, 8, 2), (0, 8, 4)]
    assert offsets["b1"] == offsets["e"] and offsets["b2"] == offsets["f"]


def test_unknown_rules_are_refused():
    with pytest.raises(ValueError, match="rule"):
        coalesce(build_problem([Record("a", 0, 1, 1)]), "diagonal")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_coalesced_tilings_reach_the_optimum_in_a_small_budget(seed):
    """A 300-record guillotine tiling folds back into a few blocks whose plan is optimal."""
    records = tiling(300, seed)
    p = plan(records, method="best", budget=3_000)
    assert check_placement(records, p) == []
    assert p.height == 64 and p.proven and p.method.startswith("coalesced/")


@pytest.mark.parametrize("name", ["A", "E", "I"])
def test_minimalloc_instances_fit_the_capacity_only_with_coalescing(monkeypatch, name):
    """Under one work budget, coalescing packs these at MiniMalloc's capacity, proven at their
    max-live bound; the search of the records alone does not."""
    records = read_records_csv(MINIMALLOC / f"{name}.1048576.csv")
    p = plan(records, method="best", budget=5_000, capacity=1_048_576)
    assert check_placement(records, p) == []
    assert p.height == p.lower_bound == 1_048_576 and p.proven
    monkeypatch.setattr(exact, "RULES", ())
    alone = plan(records, method="best", budget=5_000, capacity=1_048_576)
    assert alone.height > 1_048_576 and not alone.proven


def test_the_blocks_search_keeps_to_the_budget_and_is_deterministic():
    """Placements among the blocks are charged by the blocks' share of the records: the total
    stays within the budget (up to rounding, a placement a call), the same twice."""
    problem = build_problem(tiling(1000, 1))
    start = greedy_by_size_offsets(problem)
    runs = [solve(problem, start, "greedy", budget=2_000) for _ in range(2)]
    assert runs[0].nodes <= 2_000 + 50
    assert runs[0].nodes == runs[1].nodes and np.array_equal(runs[0].offsets, runs[1].offsets)
