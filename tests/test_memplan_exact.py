"""The exact planner: `proven` answers, the lower bounds it proves, its limits and its CLI."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_memplan import (
    GAP_INSTANCE,
    brute_force_optimum,
    max_live,
    overlapping_pairs,
    pisarchyk_lee_records,
    records_strategy,
)

import rtgraph.compiler.memplan.fill as fill_module
from rtgraph.cli import main
from rtgraph.compiler.memplan import (
    Placement,
    Record,
    build_problem,
    check_placement,
    exact,
    greedy_by_size,
    plan,
)
from rtgraph.compiler.memplan.exact import solve
from rtgraph.compiler.memplan.fill import fill_within
from rtgraph.compiler.memplan.greedy import PREORDERS, greedy_by_size_offsets, preorder_ranks
from rtgraph.compiler.memplan.search import Outcome, fits_within
from rtgraph.errors import InputError


def tiling(n: int, seed: int, height: int = 64) -> list[Record]:
    """``n`` records cut from the rectangle [0, 2n) × [0, height): every byte is needed, so
    the optimum is ``height`` = max-live (the benchmark's guillotine family, small)."""
    rng = np.random.default_rng(seed)
    pieces = [(0, 2 * n, 0, height)]
    while len(pieces) < n:
        k = max(range(len(pieces)), key=lambda j: (pieces[j][1] - pieces[j][0]) * pieces[j][3])
        t0, t1, a0, a1 = pieces.pop(k)
        if t1 - t0 >= 2 and (a1 - a0 < 2 or rng.random() < 0.5):
            cut = int(rng.integers(t0 + 1, t1))
            pieces += [(t0, cut, a0, a1), (cut, t1, a0, a1)]
        elif a1 - a0 >= 2:
            cut = int(rng.integers(a0 + 1, a1))
            pieces += [(t0, t1, a0, cut), (t0, t1, cut, a1)]
        else:
            pieces.append((t0, t1, a0, a1))
            break
    return [Record(f"p{k}", t0, t1, a1 - a0) for k, (t0, t1, a0, a1) in enumerate(pieces)]


@settings(max_examples=60, deadline=None)
@given(records=records_strategy, alignment=st.sampled_from([1, 8]))
def test_every_exact_packing_is_valid_and_proven_means_at_the_bound(records, alignment):
    base = greedy_by_size(records, alignment)
    for method, budget in (("exact", 3_000), ("best", 500), ("heuristic", None)):
        p = plan(records, alignment=alignment, method=method, budget=budget, time_limit=60)
        assert overlapping_pairs(records, p, alignment) == []
        assert check_placement(records, p, alignment=alignment) == []
        assert max_live(records, alignment) <= p.lower_bound <= p.height <= base.height
        assert p.proven == (p.height == p.lower_bound) == (p.gap == 0.0)


@settings(max_examples=60, deadline=None)
@given(records=records_strategy.filter(lambda rs: len(rs) <= 6))
def test_proven_answers_and_proved_bounds_agree_with_brute_force(records):
    optimum = brute_force_optimum(records)
    p = plan(records, method="exact", budget=50_000, time_limit=60)
    assert p.lower_bound <= optimum  # a proved bound never exceeds the optimum
    assert p.height >= optimum
    if p.proven:
        assert p.height == optimum


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(3, 7),
    extra=st.one_of(st.none(), st.tuples(st.integers(0, 13), st.integers(1, 6), st.integers(1, 8))),
)
def test_the_search_decides_tight_capacities_exactly(seed, n, extra):
    # Small tilings fill every time step to the capacity, the case where the search branches
    # on a tight section and counts records behind the canonical order higher; an extra
    # record makes some steps loose again. At every capacity from max-live to the brute-force
    # optimum, under every preorder and in both modes, the search must find a plan exactly
    # when one exists.
    records = tiling(n, seed, height=8)
    if extra is not None:
        a, w, z = extra
        records.append(Record("x", a, a + w, z))
    optimum = brute_force_optimum(records)
    problem = build_problem(records)
    for capacity in range(problem.lower_bound, optimum + 1):
        for heuristic, tight in itertools.product(PREORDERS, (True, False)):
            ranks = preorder_ranks(problem, heuristic)
            result = fits_within(problem, ranks, capacity, 10**6, tight=tight)
            assert result.outcome is (Outcome.FOUND if capacity >= optimum else Outcome.INFEASIBLE)
            if result.offsets is not None:
                offsets = {r.id: int(o) for r, o in zip(records, result.offsets, strict=True)}
                placement = Placement(offsets, capacity, problem.lower_bound, "search")
                assert check_placement(records, placement) == []


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(8, 30))
def test_the_search_never_misses_a_tiling(seed, n):
    # A tiling packs at max-live by construction: under every preorder the search must find a
    # plan there and never claim that none exists (no pruning rule may cut every tiling).
    records = tiling(n, seed)
    problem = build_problem(records)
    for heuristic, tight in itertools.product(PREORDERS, (True, False)):
        result = fits_within(problem, preorder_ranks(problem, heuristic), 64, 10**6, tight=tight)
        assert result.outcome is Outcome.FOUND


def fill_placement(records: list[Record], offsets: np.ndarray, capacity: int) -> Placement:
    """The fill's offsets as a placement claiming ``capacity``, for check_placement."""
    mapping = {r.id: int(o) for r, o in zip(records, offsets, strict=True)}
    return Placement(mapping, capacity, 0, "search/fill")


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 60), shuffle=st.sampled_from([None, 0, 7]))
def test_the_fill_finds_every_tiling(seed, n, shuffle):
    # Every section of a tiling is full, so a valley's bottom-left byte can only be taken by a
    # record starting there and its bottom-right byte by one ending there: the fill is
    # complete at max-live and must find a plan there, whatever its order or tie-break. A
    # backjump over a choice that did not explain a failure must never lose the plan.
    records = tiling(n, seed)
    result = fill_within(build_problem(records), 64, 10**7, seed=shuffle)
    assert result.outcome is Outcome.FOUND
    assert check_placement(records, fill_placement(records, result.offsets, 64)) == []


@settings(max_examples=80, deadline=None)
@given(records=records_strategy, extra=st.integers(0, 40), shuffle=st.sampled_from([None, 3]))
def test_fill_plans_fit_and_the_fill_never_claims_infeasible(records, extra, shuffle):
    # Where bytes may be wasted the fill is a heuristic: whatever it finds must be a sound plan
    # under the capacity, it never claims that none exists (only the lower bound can), and
    # below the brute-force optimum it must come back empty-handed.
    problem = build_problem(records)
    capacity = problem.lower_bound + extra
    result = fill_within(problem, capacity, 20_000, seed=shuffle)
    assert result.outcome in (Outcome.FOUND, Outcome.BUDGET)
    if result.outcome is Outcome.FOUND:
        placement = fill_placement(records, result.offsets, capacity)
        assert check_placement(records, placement) == []
    if len(records) <= 6 and capacity < brute_force_optimum(records):
        assert result.outcome is Outcome.BUDGET
    if problem.lower_bound > 0:
        below = fill_within(problem, problem.lower_bound - 1, 20_000)
        assert below.outcome is Outcome.INFEASIBLE


@pytest.mark.parametrize("seed", range(4))
def test_one_of_the_fill_orders_packs_a_200_record_tiling_quickly(seed):
    # Branching on the most constrained valley corner packs these with few backtracks (1.0-2.8
    # placements a record); the two orders fail on different instances (heavy tails), so
    # solve runs both.
    records = tiling(200, seed)
    problem = build_problem(records)
    results = [fill_within(problem, 64, 1_000, seed=order) for order in exact.FILL_ORDERS]
    found = [r for r in results if r.outcome is Outcome.FOUND]
    assert found
    assert check_placement(records, fill_placement(records, found[0].offsets, 64)) == []


def test_the_fill_branches_on_the_corner_with_fewer_options():
    # Capacity 6, every section full. At the empty skyline the one valley is all three
    # sections at 0: its bottom-left byte could take x1, x2 or x3 (each leaves a full section
    # beside it that a record can start), its bottom-right byte only x1 or z (z leaves section
    # 1 full to its left, where x2 and y end). The node branches on the right corner, and the
    # failure of its branches would be read from the valley's sections alone.
    records = [
        Record("x1", 0, 3, 1),
        Record("x2", 0, 2, 2),
        Record("x3", 0, 1, 3),
        Record("y", 1, 2, 3),
        Record("z", 2, 3, 5),
    ]
    fill = fill_module._Fill(build_problem(records), 6, {}, None)
    options, _, _, _, spans = fill._options()
    assert sorted(i for i, _, _ in options) == [0, 4] and spans == ((0, 3),)
    assert [len(fill._corner(0, 3, 0, left)[0]) for left in (True, False)] == [3, 2]
    result = fill_within(build_problem(records), 6, 100)
    assert result.outcome is Outcome.FOUND
    assert check_placement(records, fill_placement(records, result.offsets, 6)) == []


def test_backjump_spans_merge_into_sorted_disjoint_ranges():
    assert fill_module._union(((5, 7),), ((0, 2), (6, 9))) == ((0, 2), (5, 9))
    assert fill_module._union(((0, 2),), ((2, 4),)) == ((0, 4),)
    assert fill_module._union((), ((3, 4),)) == ((3, 4),)


def test_the_fill_is_deterministic_and_keeps_its_nogoods():
    records = tiling(40, 5)
    problem = build_problem(records)
    first = fill_within(problem, 64, 10**6)
    again = fill_within(problem, 64, 10**6)
    assert first.nodes == again.nodes and np.array_equal(first.offsets, again.offsets)
    # At a capacity with no plan (the gap instance at its max-live, 5; its optimum is 6) the
    # exhausted search leaves its failed states behind, and a second run with them ends sooner.
    gap = [Record(f"g{k}", a, b, s) for k, (a, b, s) in enumerate(GAP_INSTANCE)]
    nogoods: dict[int, tuple[int, int]] = {}
    gap_problem = build_problem(gap)
    one = fill_within(gap_problem, 5, 10**6, nogoods=nogoods)
    two = fill_within(gap_problem, 5, 10**6, nogoods=nogoods)
    assert one.outcome is two.outcome is Outcome.BUDGET
    assert one.nodes < 10**6 and two.nodes < one.nodes and nogoods


def test_the_gap_instance_is_proven_above_max_live():
    records = [Record(f"g{k}", a, b, s) for k, (a, b, s) in enumerate(GAP_INSTANCE)]
    p = plan(records, method="exact", time_limit=60)
    assert max_live(records) == 5
    assert (p.height, p.lower_bound, p.proven) == (6, 6, True)  # infeasibility at 5 proved


@pytest.mark.parametrize("seed", range(4))
def test_small_tilings_reach_their_optimum_proven(seed):
    records = tiling(24, seed)
    p = plan(records, method="exact", budget=200_000, time_limit=120)
    assert check_placement(records, p) == []
    assert (p.height, p.lower_bound, p.proven) == (64, 64, True)


@pytest.mark.parametrize("first_from, first", [(1, "fill"), (10**9, "strategy")])
def test_the_fill_goes_first_from_fill_first_from_records(monkeypatch, first_from, first):
    """On many records a round of the strategies costs seconds, so the fill goes first there;
    below the threshold the strategies keep their turn (what the compiler's budget buys)."""
    calls: list[str] = []
    fill, fits = exact.fill_within, exact.fits_within

    def fill_logged(*args, **kwargs):
        calls.append("fill")
        return fill(*args, **kwargs)

    def fits_logged(*args, **kwargs):
        calls.append("strategy")
        return fits(*args, **kwargs)

    monkeypatch.setattr(exact, "FILL_FIRST_FROM", first_from)
    monkeypatch.setattr(exact, "fill_within", fill_logged)
    monkeypatch.setattr(exact, "fits_within", fits_logged)
    records = [Record(f"g{k}", a, b, 25 * s) for k, (a, b, s) in enumerate(GAP_INSTANCE)]
    p = plan(records, method="exact", budget=10_000, time_limit=60)
    assert check_placement(records, p) == []
    assert calls and calls[0] == first


@pytest.mark.parametrize("capacity, first", [(None, 64), (66, 66), (67, 64), (63, 64)])
def test_a_capacity_is_probed_first_while_the_plan_is_above_it(monkeypatch, capacity, first):
    """The question MiniMalloc answers — a plan within the pool? — comes first while the
    heuristics' plan (67) is above it; then the bound (64). A capacity the plan already
    meets, or one below the bound, changes nothing."""
    records = tiling(40, 3)
    assert plan(records, method="heuristic").height == 67
    probed: list[int] = []
    probe = exact._State.probe

    def logged(self, cap, *args):
        probed.append(cap)
        return probe(self, cap, *args)

    monkeypatch.setattr(exact._State, "probe", logged)
    monkeypatch.setattr(exact, "RULES", ())  # coalesced, the tiling would need no probe
    p = plan(records, method="best", budget=20_000, capacity=capacity)
    assert check_placement(records, p) == []
    assert probed[0] == first
    if capacity == 66:
        assert p.height <= 66 and probed[1] == 64  # it fits: then the bound


@pytest.mark.parametrize("bad", [0, -5, 1.5, "64", True, 2**62 + 1])
def test_bad_capacities_are_input_errors(bad):
    with pytest.raises(InputError, match="capacity"):
        plan(pisarchyk_lee_records(), method="best", capacity=bad)


def test_plan_memory_says_whether_the_plan_fits_the_capacity(tmp_path, capsys):
    """``--capacity``: ``fits`` in the JSON and the text, exit status 1 when it does not fit
    (the gap instance's optimum is 6, above its max-live 5)."""
    path = tmp_path / "gap.csv"
    rows = [f"g{k},{a},{b},{s}" for k, (a, b, s) in enumerate(GAP_INSTANCE)]
    path.write_text("id,lower,upper,size\n" + "\n".join(rows) + "\n")
    for capacity, status in ((6, 0), (5, 1)):
        argv = ["plan-memory", str(path), "--capacity", str(capacity), "--json"]
        assert main(argv) == status
        out = json.loads(capsys.readouterr().out)
        assert (out["height"], out["capacity"], out["fits"]) == (6, capacity, status == 0)
        assert main(["plan-memory", str(path), "--capacity", str(capacity)]) == status
        text = capsys.readouterr().out
        assert ("(fits)" in text) == (status == 0) and ("1 over" in text) == (status == 1)
    assert main(["plan-memory", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is None


def test_a_zero_time_limit_keeps_the_heuristics_plan():
    records = [Record(f"g{k}", a, b, 25 * s) for k, (a, b, s) in enumerate(GAP_INSTANCE)]
    heuristic = plan(records, method="heuristic")
    exact = plan(records, method="exact", time_limit=0)
    assert exact.height == heuristic.height and exact.time_to_best > 0.0  # the heuristics'
    assert exact.lower_bound == 125 and not exact.proven


def test_the_time_limit_counts_from_the_start_the_caller_gives():
    """A limit already spent before the search (by the heuristic start, in ``plan``) leaves
    none to search: the incumbent comes back at once, its time counted from that start."""
    records = [Record(f"g{k}", a, b, 25 * s) for k, (a, b, s) in enumerate(GAP_INSTANCE)]
    problem = build_problem(records, 1)
    offsets = greedy_by_size_offsets(problem)
    now = iter(itertools.count(100.0, 0.5))
    spent = solve(
        problem, offsets, "g", budget=10_000, time_limit=5, clock=lambda: next(now), started=90.0
    )
    assert spent.nodes == 0 and spent.time_to_best == 10.0 and not spent.proven
    assert np.array_equal(spent.offsets, offsets)
    fresh = solve(problem, offsets, "g", budget=10_000, time_limit=60, started=None)
    assert fresh.nodes > 0 and fresh.height < spent.height


def test_methods_keep_their_old_names_and_best_is_deterministic():
    records = pisarchyk_lee_records()
    assert plan(records, method="fast") == plan(records, method="heuristic")
    first = plan(records, method="best")
    assert first == plan(list(records), method="best")
    assert first.proven and first.height == 124


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "10", True])
def test_bad_time_limits_are_input_errors(bad):
    with pytest.raises(InputError, match="time limit"):
        plan(pisarchyk_lee_records(), method="exact", time_limit=bad)


def test_plan_memory_json_reports_proof_bound_gap_and_time(tmp_path, capsys):
    path = tmp_path / "gap.csv"
    rows = [f"g{k},{a},{b},{s}" for k, (a, b, s) in enumerate(GAP_INSTANCE)]
    path.write_text("id,lower,upper,size\n" + "\n".join(rows) + "\n")
    argv = ["plan-memory", str(path), "--method", "exact", "--time-limit", "30", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["height"], out["lower_bound"], out["proven"], out["gap"]) == (6, 6, True, 0.0)
    assert out["time_to_best"] >= 0.0 and set(out["offsets"]) == {r.split(",")[0] for r in rows}
    assert main(["plan-memory", str(path), "--method", "heuristic"]) == 0
    text = capsys.readouterr().out
    assert "lower bound" in text and ("proven optimal" in text or "not proven" in text)
