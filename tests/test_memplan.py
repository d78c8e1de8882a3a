"""The static memory planner: records and their CSV form, placements, the search, the bounds."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from hypothesis import given, settings
from hypothesis import strategies as st

from rtgraph.compiler.memplan import (
    Placement,
    Record,
    build_problem,
    check_placement,
    greedy_by_size,
    parse_records_csv,
    plan,
    plan_lifetimes,
    read_records_csv,
    write_offsets_csv,
)
from rtgraph.compiler.memplan.greedy import PREORDERS, preorder_ranks, range_max, skyline_offsets
from rtgraph.compiler.memplan.search import Outcome, fits_within
from rtgraph.errors import InputError

#: Pisarchyk & Lee 2020, "Efficient Memory Management for Deep Neural Net Inference", the
#: 8-tensor example: (first task, last task inclusive, bytes). Optimum = max-live = 124.
PISARCHYK_LEE = [
    (0, 1, 32),
    (1, 4, 28),
    (2, 5, 36),
    (3, 5, 16),
    (4, 5, 8),
    (5, 7, 64),
    (6, 8, 10),
    (7, 8, 40),
]


def pisarchyk_lee_records() -> list[Record]:
    return [Record(str(k), a, b + 1, s) for k, (a, b, s) in enumerate(PISARCHYK_LEE)]


def overlapping_pairs(records: list[Record], placement: Placement, alignment: int = 1) -> list:
    """Every pair live together and sharing a byte, by brute force (the reference check)."""
    out = []
    for r, q in itertools.combinations(records, 2):
        if min(r.size, q.size, r.upper - r.lower, q.upper - q.lower) <= 0:
            continue  # an idle record conflicts with nothing
        if not (r.lower < q.upper and q.lower < r.upper):
            continue
        rs = -(-r.size // alignment) * alignment
        qs = -(-q.size // alignment) * alignment
        ro, qo = placement.offsets[r.id], placement.offsets[q.id]
        if ro < qo + qs and qo < ro + rs:
            out.append((r.id, q.id))
    return out


def max_live(records: list[Record], alignment: int = 1) -> int:
    times = sorted({r.lower for r in records})
    return max(
        (
            sum(-(-r.size // alignment) * alignment for r in records if r.lower <= t < r.upper)
            for t in times
        ),
        default=0,
    )


def brute_force_optimum(records: list[Record]) -> int:
    """The least height over every order of canonical placement (each record on top of the
    conflicting records placed before it) — which includes an optimal plan."""
    live = [r for r in records if r.size > 0 and r.upper > r.lower]
    best = None
    for order in itertools.permutations(live):
        tops: list[tuple[Record, int]] = []
        height = 0
        for r in order:
            off = max((t for q, t in tops if q.lower < r.upper and r.lower < q.upper), default=0)
            tops.append((r, off + r.size))
            height = max(height, off + r.size)
        best = height if best is None else min(best, height)
    return best or 0


records_strategy = st.lists(
    st.tuples(st.integers(0, 20), st.integers(0, 10), st.integers(0, 64)),
    max_size=14,
).map(lambda rows: [Record(f"t{k}", a, a + d, s) for k, (a, d, s) in enumerate(rows)])


# --- placements are sound and never worse than the baseline --------------------------------


@settings(max_examples=60)
@given(records=records_strategy, alignment=st.sampled_from([1, 4, 16]))
def test_every_method_gives_a_sound_placement(records, alignment):
    base = greedy_by_size(records, alignment)
    for method in ("greedy_by_size", "fast", "best"):
        p = plan(records, alignment=alignment, method=method, budget=2_000)
        assert set(p.offsets) == {r.id for r in records}
        assert overlapping_pairs(records, p, alignment) == []
        assert check_placement(records, p, alignment=alignment) == []
        assert all(o % alignment == 0 and o >= 0 for o in p.offsets.values())
        assert p.lower_bound == max_live(records, alignment)
        assert p.height >= p.lower_bound
        if method != "greedy_by_size":
            assert p.height <= base.height


@settings(max_examples=60)
@given(records=records_strategy, alignment=st.sampled_from([1, 4, 16]))
def test_dense_problems_are_placed_soundly_without_pair_lists(records, alignment):
    import rtgraph.compiler.memplan.problem as problem

    saved, problem.MAX_PAIRS = problem.MAX_PAIRS, 0
    try:
        p = plan(records, alignment=alignment)
        dense_check = check_placement(records, p, alignment=alignment)  # by the sweep
    finally:
        problem.MAX_PAIRS = saved
    pairs = build_problem(records, alignment).n_conflicts
    assert p.method == ("sweep/size-class" if pairs else p.method)
    assert overlapping_pairs(records, p, alignment) == []
    assert check_placement(records, p, alignment=alignment) == dense_check == []
    assert p.lower_bound == max_live(records, alignment) <= p.height


def test_a_dense_problem_of_a_hundred_thousand_records_needs_no_pair_list():
    # Everything lives to the end: 5·10⁹ pairs. The sweep places it in one pass, reusing the
    # early-dying tensors' blocks, and never builds the pairs.
    n = 100_000
    records = [Record(f"t{k}", k, n + 1, 4096) for k in range(n)]
    records += [Record(f"s{k}", n + 1 + k, n + 2 + k, 4096) for k in range(10)]
    p = plan(records, method="fast")
    assert p.method == "sweep/size-class"
    assert p.height == p.lower_bound == n * 4096
    assert len({p.offsets[f"s{k}"] for k in range(10)}) == 1  # one block, reused


@settings(max_examples=40)
@given(records=records_strategy.filter(lambda rs: len(rs) <= 6))
def test_best_is_optimal_on_small_problems(records):
    p = plan(records, method="best", budget=200_000)
    assert p.height == brute_force_optimum(records)


@settings(max_examples=40)
@given(records=records_strategy, data=st.data())
def test_search_answers_are_sound(records, data):
    problem = build_problem(records)
    ranks = preorder_ranks(problem, data.draw(st.sampled_from(PREORDERS)))
    capacity = data.draw(st.integers(0, 2 * max(problem.lower_bound, 1)))
    result = fits_within(problem, ranks, capacity, 100_000)
    if result.outcome is Outcome.FOUND:
        offsets = {r.id: int(o) for r, o in zip(records, result.offsets, strict=True)}
        height = max(
            (offsets[r.id] + r.size for r in records if r.size and r.upper > r.lower),
            default=0,
        )
        placement = Placement(offsets, height, problem.lower_bound, "search")
        assert overlapping_pairs(records, placement) == []
        assert height <= capacity
    elif result.outcome is Outcome.INFEASIBLE and len(records) <= 6:
        assert brute_force_optimum(records) > capacity
    assert result.nodes <= 100_000


@settings(max_examples=15)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(20, 80))
def test_search_on_larger_problems_is_sound_and_beats_greedy(seed, n):
    # Short lifetimes over a long horizon split into many independent pieces (exercising
    # decomposition and backjumping); long-lived records tie them together again.
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, 3 * n, n)
    widths = np.where(rng.random(n) < 0.8, rng.integers(1, 6, n), rng.integers(6, 40, n))
    sizes = rng.integers(1, 9, n) * 64
    records = [
        Record(f"r{k}", int(a), int(a + w), int(z))
        for k, (a, w, z) in enumerate(zip(starts, widths, sizes, strict=True))
    ]
    base = greedy_by_size(records)
    best = plan(records, method="best", budget=3_000)
    assert overlapping_pairs(records, best) == []
    assert best.lower_bound <= best.height <= base.height
    problem = build_problem(records)
    for capacity in (problem.lower_bound, (problem.lower_bound + base.height) // 2):
        result = fits_within(problem, preorder_ranks(problem, "TWA"), capacity, 3_000)
        if result.outcome is Outcome.FOUND:
            offsets = {r.id: int(o) for r, o in zip(records, result.offsets, strict=True)}
            placement = Placement(offsets, capacity, problem.lower_bound, "search")
            assert overlapping_pairs(records, placement) == []
            assert check_placement(records, placement) == []


#: Eight records whose max-live is 5 but which need 6: every section is at the bound, and no
#: arrangement keeps each record contiguous (found by search, confirmed by brute force below).
GAP_INSTANCE = [
    (0, 3, 2),
    (1, 4, 1),
    (0, 1, 3),
    (2, 5, 1),
    (1, 2, 2),
    (2, 3, 1),
    (3, 4, 3),
    (4, 5, 4),
]


@given(
    values=st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=70),
    data=st.data(),
)
def test_range_max_is_the_maximum_of_every_range(values, data):
    """The sparse table every search reads the skyline through, against Python's max."""
    n = len(values)
    ranges = data.draw(
        st.lists(
            st.integers(0, n - 1).flatmap(lambda a: st.tuples(st.just(a), st.integers(a + 1, n)))
        )
    )
    lo = np.array([a for a, _ in ranges], dtype=np.int64)
    hi = np.array([b for _, b in ranges], dtype=np.int64)
    got = range_max(np.array(values, dtype=np.int64), lo, hi)
    assert got.tolist() == [max(values[a:b]) for a, b in ranges]


def test_an_instance_whose_optimum_exceeds_max_live():
    records = [Record(f"g{k}", a, b, s) for k, (a, b, s) in enumerate(GAP_INSTANCE)]
    assert max_live(records) == 5
    assert brute_force_optimum(records) == 6
    assert plan(records).height == 6


@pytest.mark.slow
def test_search_backjumps_over_an_independent_piece():
    # The gap instance (scaled ×25: bound 125, optimum 150), the Pisarchyk–Lee example later in
    # time, and one record spanning both. Once the spanning record is placed the two sides
    # are independent; the infeasible side must send the search straight back to it.
    hard = [Record(f"g{k}", a, b, 25 * s) for k, (a, b, s) in enumerate(GAP_INSTANCE)]
    easy = [Record(f"p{r.id}", r.lower + 10, r.upper + 10, r.size) for r in pisarchyk_lee_records()]
    records = [*hard, *easy, Record("span", 0, 20, 10)]
    problem = build_problem(records)
    assert problem.lower_bound == 135
    for heuristic in PREORDERS:
        ranks = preorder_ranks(problem, heuristic)
        assert fits_within(problem, ranks, 159, 20_000).outcome is Outcome.INFEASIBLE
        found = fits_within(problem, ranks, 160, 20_000)
        assert found.outcome is Outcome.FOUND
    best = plan(records, budget=5_000)
    assert best.height == 160  # removing the spanning record's band leaves a plan of the rest
    assert check_placement(records, best) == []


def test_search_proves_a_capacity_below_max_live_infeasible():
    problem = build_problem(pisarchyk_lee_records())
    ranks = preorder_ranks(problem, "WAT")
    assert fits_within(problem, ranks, 123, 10_000).outcome is Outcome.INFEASIBLE
    found = fits_within(problem, ranks, 124, 10_000)
    assert found.outcome is Outcome.FOUND


def test_search_stops_at_its_budget():
    # Nine records of size 2 all live together plus odd sizes: the search must work for it.
    records = [Record(f"r{k}", k % 3, 6 + k % 4, 3 + 2 * k) for k in range(12)]
    problem = build_problem(records)
    result = fits_within(problem, preorder_ranks(problem, "TWA"), problem.lower_bound, 5)
    assert result.nodes <= 5
    assert result.outcome in (Outcome.BUDGET, Outcome.FOUND, Outcome.INFEASIBLE)


def test_skyline_places_every_record_on_its_conflicts():
    problem = build_problem(pisarchyk_lee_records())
    offsets = skyline_offsets(problem, preorder_ranks(problem, "TWA"))
    for i in range(problem.n):
        below = [j for j in problem.conflicts(i).tolist() if offsets[j] < offsets[i]]
        expected = max((offsets[j] + problem.size[j] for j in below), default=0)
        assert offsets[i] == expected


# --- known answers -------------------------------------------------------------------------


def test_pisarchyk_lee_example_reaches_its_optimum():
    records = pisarchyk_lee_records()
    for method in ("greedy_by_size", "fast", "best"):
        p = plan(records, method=method)
        assert (p.height, p.lower_bound) == (124, 124)
        assert check_placement(records, p) == []


def test_plan_is_deterministic():
    records = [
        Record(f"r{k}", (7 * k) % 11, (7 * k) % 11 + 1 + k % 5, 8 + (13 * k) % 40)
        for k in range(40)
    ]
    first = plan(records, alignment=8)
    again = plan(list(records), alignment=8)
    assert first == again


MEMPLAN_CASES = {
    "pisarchyk_lee_2020_example.csv": 124,
    "tflite_gpu_chain_records.csv": 96,
    "tflite_gpu_complex_records.csv": 96,
    "armnn_fsrcnn_720p.csv": 28_569_600,
}


@pytest.mark.parametrize("name", sorted(MEMPLAN_CASES))
def test_classic_cases_reach_their_lower_bound(name):
    records = read_records_csv(DATA / "memplan" / name)
    p = plan(records)
    assert p.lower_bound == MEMPLAN_CASES[name]
    assert p.height == MEMPLAN_CASES[name]
    assert check_placement(records, p) == []


def test_fast_beats_greedy_by_size_on_minimalloc_instances():
    for instance in "ABCDEFGHIJK":
        path = DATA / "minimalloc" / f"{instance}.1048576.csv"
        records = read_records_csv(path)
        fast = plan(records, method="fast")
        assert fast.height < greedy_by_size(records).height, path.name
        assert check_placement(records, fast) == []


# --- the convenience form, alignment, idle records -----------------------------------------


def test_plan_lifetimes_treats_last_use_as_inclusive():
    offsets, total = plan_lifetimes([(10, 0, 1), (10, 1, 2)])
    assert total == 20 and sorted(offsets) == [0, 10]
    offsets, total = plan_lifetimes([(10, 0, 0), (10, 1, 1)])
    assert total == 10 and offsets == [0, 0]
    assert plan_lifetimes([]) == ([], 0)


def test_plan_lifetimes_rejects_bad_triples():
    with pytest.raises(InputError, match="before first_use"):
        plan_lifetimes([(4, 3, 2)])
    with pytest.raises(InputError, match=r"\(size, first_use, last_use\)"):
        plan_lifetimes([(4, 3)])
    with pytest.raises(InputError, match="non-negative"):
        plan_lifetimes([(-4, 0, 1)])


def test_alignment_rounds_sizes_and_offsets():
    records = [Record("a", 0, 2, 100), Record("b", 1, 3, 1), Record("c", 0, 3, 513)]
    p = plan(records, alignment=512)
    assert all(o % 512 == 0 for o in p.offsets.values())
    assert p.lower_bound == 512 + 512 + 1024
    assert p.height == p.lower_bound
    assert check_placement(records, p, alignment=512) == []


def test_records_that_use_no_memory_sit_at_zero_and_cost_nothing():
    records = [Record("a", 0, 4, 64), Record("empty", 2, 2, 64), Record("zero", 0, 4, 0)]
    p = plan(records)
    assert p.offsets["empty"] == 0 and p.offsets["zero"] == 0
    assert p.height == p.lower_bound == 64
    assert plan([]) == Placement({}, 0, 0, "greedy_by_size", proven=True)


# --- checking placements -------------------------------------------------------------------


def test_check_placement_reports_each_kind_of_violation():
    records = [Record("a", 0, 4, 16), Record("b", 2, 6, 16), Record("c", 5, 8, 16)]
    bad = Placement({"a": 0, "b": 8, "c": 34}, 20, 32, "hand")
    found = check_placement(records, bad, alignment=4)
    assert sorted(v.kind for v in found) == ["height", "misaligned", "overlap"]
    kinds = {v.kind: v for v in found}
    assert kinds["overlap"].ids == ("a", "b")
    assert "overlap in memory" in str(kinds["overlap"])
    missing = check_placement(records, Placement({"a": 0, "b": 16}, 32, 32, "hand"))
    assert [v.kind for v in missing] == ["missing"]
    # c does not live with a: sharing bytes is fine.
    assert check_placement(records, Placement({"a": 0, "b": 16, "c": 0}, 32, 32, "h")) == []


# --- bad input ------------------------------------------------------------------------------


def test_plan_rejects_bad_arguments():
    records = pisarchyk_lee_records()
    with pytest.raises(InputError) as err:
        plan(records, method="bset")
    assert "did you mean 'best'" in err.value.render()
    with pytest.raises(InputError, match="alignment"):
        plan(records, alignment=0)
    with pytest.raises(InputError, match="budget"):
        plan(records, budget=-1)
    with pytest.raises(InputError, match="duplicate"):
        plan([Record("x", 0, 1, 1), Record("x", 1, 2, 1)])
    with pytest.raises(InputError, match="ends before it starts"):
        plan([Record("x", 3, 1, 1)])
    with pytest.raises(InputError, match="non-negative"):
        plan([Record("x", 0, 1, -5)])


# --- the CSV form ---------------------------------------------------------------------------


def test_csv_round_trip(tmp_path: Path):
    records = pisarchyk_lee_records()
    p = plan(records)
    out = tmp_path / "solution.csv"
    write_offsets_csv(out, records, p.offsets)
    assert out.read_text().splitlines()[0] == "id,lower,upper,size,offset"
    assert read_records_csv(out) == records
    src = tmp_path / "in.csv"
    src.write_text("# a comment\nid,lower,upper,size\nb1,0,3,4\n\nb2,3,9,4\n")
    assert read_records_csv(src) == [Record("b1", 0, 3, 4), Record("b2", 3, 9, 4)]


@pytest.mark.parametrize(
    ("text", "message", "where"),
    [
        ("", "no header", "1:1"),
        ("id,lower,upper\n", "lacks column size", "1:1"),
        ("id,lower,upper,size,colour\n", "unknown column 'colour'", "1:21"),
        ("id,lower,upper,size\na,0,3\n", "expected 4 fields", "2:1"),
        ("id,lower,upper,size\na,0,x3,4\n", "upper must be an integer, not 'x3'", "2:5"),
        ("id,lower,upper,size\na,0,3,-4\n", "size must be >= 0", "2:7"),
        ("id,lower,upper,size\na,5,3,4\n", "ends before it starts", "2:5"),
        ("id,lower,upper,size\na,0,3,4\na,1,2,4\n", "duplicate id 'a' (first on line 2)", "3:1"),
        ("id,lower,upper,size\n,0,3,4\n", "empty id", "2:1"),
    ],
)
def test_csv_errors_are_located(text, message, where):
    with pytest.raises(InputError) as err:
        parse_records_csv(text, name="bad.csv")
    assert message in err.value.message
    assert err.value.hint
    assert str(err.value.span) == f"bad.csv:{where}"
    assert err.value.render().startswith(f"bad.csv:{where}: error:")


def test_csv_reader_reports_a_missing_file(tmp_path: Path):
    with pytest.raises(InputError, match="cannot read record file"):
        read_records_csv(tmp_path / "nope.csv")


def test_problem_conflicts_match_the_definition():
    rng = np.random.default_rng(7)
    lower = rng.integers(0, 30, 60)
    records = [
        Record(f"r{k}", int(a), int(a + rng.integers(0, 8)), int(rng.integers(0, 3) * 8))
        for k, a in enumerate(lower)
    ]
    problem = build_problem(records)
    for i, r in enumerate(records):
        expected = [
            j
            for j, q in enumerate(records)
            if j != i
            and min(r.size, q.size, r.upper - r.lower, q.upper - q.lower) > 0
            and r.lower < q.upper
            and q.lower < r.upper
        ]
        assert problem.conflicts(i).tolist() == expected
