"""Limits on the memory planner's input, exact size arithmetic, and the numeric options of
``--streams by-unit:N`` and ``profile`` (issue 13): every limit is checked before the work or
memory it bounds, with the exact message docs/limits.md gives."""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import MODELS
from hypothesis import given, settings
from hypothesis import strategies as st

import rtgraph
import rtgraph.compiler.memplan.fill as fill
import rtgraph.compiler.memplan.planner as planner
import rtgraph.compiler.memplan.problem as problem_module
import rtgraph.compiler.memplan.search as search
from rtgraph.cli import main
from rtgraph.compiler.memplan import (
    MAX_PAIRS,
    MAX_POOL_BYTES,
    MAX_RECORD_FILE_BYTES,
    MAX_RECORDS,
    MAX_TIME,
    Placement,
    Record,
    build_problem,
    check_placement,
    greedy_by_size,
    parse_records_csv,
    plan,
    read_records_csv,
)
from rtgraph.compiler.memplan.greedy import PREORDERS, preorder_ranks
from rtgraph.compiler.options import CompileOptions, OptionError
from rtgraph.compiler.scheduling.policies import (
    MAX_STREAMS_PER_UNIT,
    STREAMS_HINT,
    ByUnit,
    policy_from_name,
    policy_problem,
)
from rtgraph.errors import InputError, UsageError
from rtgraph.reports.profiler import (
    MAX_PROFILE_ITERATIONS,
    MAX_PROFILE_TASK_RUNS,
    Schedule,
    check_profile_options,
    profile,
)

HOSTILE = Path(__file__).resolve().parent / "hostile" / "memplan"
MLP = str(MODELS / "mlp.rtg")
HEADER = "id,lower,upper,size\n"


def _first_line(text: str) -> str:
    return text.splitlines()[0]


# --- the record file: size, kind and rows, checked before and while reading -----------------


def test_the_limits_have_the_documented_values():
    assert MAX_RECORDS == 200_000
    assert MAX_RECORD_FILE_BYTES == 32 * 1024 * 1024
    assert MAX_TIME == MAX_POOL_BYTES == 2**62
    assert MAX_PAIRS == 4_000_000
    assert planner.MAX_SEARCH_WORK == 100_000_000
    assert (planner.DEFAULT_TIME_LIMIT, planner.DEFAULT_BUDGET) == (10.0, 30_000)
    assert (search.MAX_NOGOODS, search.MAX_COVER_CELLS) == (100_000, 8_000_000)
    assert fill.MAX_FILL_NOGOODS == 200_000
    assert MAX_STREAMS_PER_UNIT == 64
    assert (MAX_PROFILE_ITERATIONS, MAX_PROFILE_TASK_RUNS) == (1_000, 200_000)


def test_the_fill_remembers_at_most_its_limit_of_failed_states(monkeypatch):
    # The gap instance at its max-live (5; the optimum is 6) has no plan: the fill exhausts
    # its search and would remember every failed state; under a limit of 3 it keeps 3.
    rows = [(0, 3, 2), (1, 4, 1), (0, 1, 3), (2, 5, 1), (1, 2, 2), (2, 3, 1), (3, 4, 3), (4, 5, 4)]
    problem = build_problem([Record(f"g{k}", a, b, s) for k, (a, b, s) in enumerate(rows)])
    unlimited: dict[int, tuple[int, int]] = {}
    fill.fill_within(problem, 5, 10**6, nogoods=unlimited)
    assert len(unlimited) > 3
    monkeypatch.setattr(fill, "MAX_FILL_NOGOODS", 3)
    capped: dict[int, tuple[int, int]] = {}
    result = fill.fill_within(problem, 5, 10**6, nogoods=capped)
    assert result.offsets is None and len(capped) == 3


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path, capsys):
    big = tmp_path / "big.csv"
    with big.open("wb") as f:  # sparse: no disk, and nothing a reader could parse
        f.truncate(MAX_RECORD_FILE_BYTES + 1)
    start = time.process_time()
    with pytest.raises(InputError) as err:
        read_records_csv(big)
    assert time.process_time() - start < 0.5  # a guard against reading 32 MB, not a benchmark
    assert err.value.message == (
        f"record file '{big}' is 33,554,433 bytes; the limit is 33,554,432 bytes"
    )
    assert err.value.hint == "a plan takes at most 200,000 records; split the file"
    assert main(["plan-memory", str(big)]) == 1
    assert _first_line(capsys.readouterr().err) == f"error: {err.value.message}"


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_only_a_regular_file_is_read(tmp_path, kind, capsys):
    if kind == "fifo":
        path = tmp_path / "pipe.csv"
        os.mkfifo(path)  # opening it to read would block: it must not be opened that way
    elif kind == "device":
        path = Path("/dev/zero")  # endless: it must not be read at all
    else:
        path = tmp_path
    start = time.process_time()
    with pytest.raises(InputError) as err:
        read_records_csv(path)
    assert time.process_time() - start < 0.5  # a guard against a hang, not a benchmark
    assert err.value.message == f"record file '{path}' is not a regular file"
    assert main(["plan-memory", str(path)]) == 1
    assert _first_line(capsys.readouterr().err) == f"error: {err.value.message}"


def test_a_row_past_the_row_limit_is_refused_where_it_is(tmp_path, capsys):
    rows = "".join(f"b{k},{k},{k + 1},1\n" for k in range(MAX_RECORDS))
    at_limit = tmp_path / "at_limit.csv"
    at_limit.write_text(HEADER + rows)
    assert len(read_records_csv(at_limit)) == MAX_RECORDS
    over = tmp_path / "over.csv"
    over.write_text(HEADER + rows + "extra,0,1,1\nmore,0,1,1\n")
    assert main(["plan-memory", str(over)]) == 1
    assert capsys.readouterr().err == (
        f"{over}:200002:1: error: more than 200,000 records\n"
        "    extra,0,1,1\n"
        "    ^^^^^^^^^^^\n"
        "    hint: a plan takes at most 200,000 records; split the file\n"
    )


def test_the_planner_takes_no_more_records_than_a_file_may_hold():
    records = [Record(f"r{k}", k, k + 1, 1) for k in range(MAX_RECORDS + 1)]
    with pytest.raises(InputError) as err:
        plan(records)
    assert err.value.message == "200,001 records, more than the 200,000 a plan may have"


# --- values in range, located -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "where", "message"),
    [
        (
            "overflow_6e18.csv",
            "2:7",
            "size must be at most 4611686018427387904 (2**62), not 6000000000000000000",
        ),
        (
            "sum_over_2_62.csv",
            "3:7",
            "the sizes add up to 6000000000000000000 bytes by this record, more than the "
            "4611686018427387904 (2**62) a plan can hold",
        ),
        (
            "huge_time.csv",
            "3:3",
            "lower must be at most 4611686018427387904 (2**62), not 100000000000000000000",
        ),
        (
            "five_thousand_digits.csv",
            "2:7",
            "size must be at most 4611686018427387904 (2**62), not 999999999999999999999999… "
            "(5,000 characters)",
        ),
        ("unicode_digit.csv", "2:7", "size must be an integer, not '٣'"),
        ("not_utf8.csv", "3:2", "record file '{path}' is not UTF-8 text"),
    ],
)
def test_hostile_record_files_get_located_errors(name, where, message, capsys):
    path = HOSTILE / name
    message = message.format(path=path)
    with pytest.raises(InputError) as err:
        read_records_csv(path)
    assert err.value.message == message
    assert str(err.value.span) == f"{path}:{where}"
    assert err.value.hint
    assert main(["plan-memory", str(path)]) == 1
    assert _first_line(capsys.readouterr().err) == f"{path}:{where}: error: {message}"


def test_a_quoted_field_past_csvs_limit_is_a_located_error(tmp_path):
    path = tmp_path / "quoted.csv"
    path.write_text(HEADER + '"' + "x" * 200_000 + '",0,1,1\n')
    with pytest.raises(InputError) as err:
        read_records_csv(path)
    assert err.value.message == (
        "cannot split the line into fields: field larger than field limit (131072)"
    )
    assert str(err.value.span) == f"{path}:2:1"


def test_the_values_at_the_limits_are_taken():
    records = parse_records_csv(HEADER + f"a,0,{MAX_TIME},{MAX_POOL_BYTES}\n")
    assert records == [Record("a", 0, MAX_TIME, MAX_POOL_BYTES)]
    p = plan(records)
    assert p.height == p.lower_bound == 2**62 and type(p.height) is int


# --- exact arithmetic ----------------------------------------------------------------------------


def test_two_overlapping_6e18_records_get_a_limit_error_not_a_wrong_height():
    records = [Record("a", 0, 2, 6 * 10**18), Record("b", 0, 2, 6 * 10**18)]
    with pytest.raises(InputError) as err:
        plan(records)
    assert err.value.message == (
        "record 'a': size must be at most 4611686018427387904 (2**62), not 6000000000000000000"
    )
    halves = [Record("a", 0, 2, 3 * 10**18), Record("b", 1, 3, 3 * 10**18)]
    with pytest.raises(InputError) as err:
        greedy_by_size(halves)
    assert err.value.message == (
        "record 'b' brings the sizes (aligned to 1) to 6000000000000000000 bytes, more than "
        "the 4611686018427387904 (2**62) a plan can hold"
    )


@pytest.mark.parametrize("method", ["fast", "best", "greedy_by_size"])
def test_heights_near_the_bound_are_exact(method):
    # Two records of 2·10¹⁸ live together: the height is 4·10¹⁸ exactly (int64 would do, but
    # the sum of the two, plus alignment, is where an unchecked plan used to wrap).
    records = [Record("a", 0, 2, 2 * 10**18), Record("b", 1, 3, 2 * 10**18 + 1)]
    p = plan(records, method=method, alignment=512)
    aligned_b = -(-(2 * 10**18 + 1) // 512) * 512
    assert p.lower_bound == p.height == 2 * 10**18 + aligned_b == 4_000_000_000_000_000_512
    assert type(p.height) is type(p.lower_bound) is int
    assert min(p.offsets.values()) == 0
    assert check_placement(records, p, alignment=512) == []


def test_the_area_preorder_is_exact_when_size_times_width_overflows_int64():
    records = [
        Record("wide", 0, 2**62, 3),
        Record("big", 0, 2**40, 2**61),
        Record("both", 5, 2**61, 2**60),
        Record("small", 1, 3, 1),
    ]
    problem = build_problem(records)
    area = {r.id: r.area for r in records}  # Python integers: exact
    for heuristic in ("WAT", "TWA"):
        ranks = preorder_ranks(problem, heuristic)
        assert sorted(ranks.tolist()) == list(range(len(records)))
    # "A" alone: by decreasing exact area (3·2**62 < 2**101 < 2**121).
    ranks = preorder_ranks(problem, "A")
    order = [records[i].id for i in np.argsort(ranks)]
    assert order == sorted(area, key=lambda k: -area[k])
    for method in ("fast", "best"):
        p = plan(records, method=method)
        assert check_placement(records, p) == []


def test_check_placement_reports_offsets_out_of_range_without_overflow():
    records = [Record("a", 0, 2, 8), Record("b", 1, 3, 8)]
    placement = Placement({"a": 2**62, "b": 10**30}, 16, 16, "hand")
    found = check_placement(records, placement)
    assert [(v.kind, str(v)) for v in found] == [
        ("range", "record 'a' at offset 4611686018427387904 ends past 2**62 bytes"),
        ("range", f"record 'b' at offset {10**30} ends past 2**62 bytes"),
    ]
    odd = check_placement(records, Placement({"a": 0, "b": 2.5}, 16, 16, "hand"))
    assert [str(v) for v in odd] == ["record 'b' has offset 2.5"]


def test_a_huge_alignment_is_refused_by_its_size():
    with pytest.raises(InputError) as err:
        plan([Record("a", 0, 1, 1)], alignment=10**5000)
    assert err.value.message == (
        "alignment must be at most 4611686018427387904 (2**62), not an integer of 16,610 bits"
    )


# --- bounded memory and work ----------------------------------------------------------------


def _dense(n: int) -> list[Record]:
    """Every record lives with every other: n²/2 pairs, far over MAX_PAIRS."""
    return [Record(f"t{k}", k % 1000, 2000 + k % 7, 64 * (1 + k % 5)) for k in range(n)]


def test_a_big_dense_problem_is_planned_and_checked_in_bounded_memory():
    records = _dense(20_000)  # 2·10⁸ pairs: 3 GB as pair lists
    tracemalloc.start()
    try:
        placement = plan(records)
        baseline = greedy_by_size(records)
        found = check_placement(records, placement)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20  # about 12 MB measured; pair lists would take gigabytes
    assert placement.method == baseline.method == "sweep/size-class"
    assert found == []
    assert placement.lower_bound <= placement.height


def test_the_sweep_check_finds_an_overlap_in_a_dense_problem():
    records = _dense(5_000)
    placement = plan(records)
    moved = Placement(
        {**placement.offsets, "t5": placement.offsets["t6"]}, placement.height, 0, "hand"
    )
    found = check_placement(records, moved)
    assert [v.kind for v in found] == ["overlap"]
    assert set(found[0].ids) == {"t5", "t6"}


@settings(max_examples=60)
@given(
    spans=st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 6), st.integers(0, 4), st.integers(0, 40)),
        min_size=1,
        max_size=25,
    )
)
def test_the_sweep_finds_an_overlap_exactly_when_the_pair_lists_do(spans):
    records = [Record(f"r{k}", a, a + w, s) for k, (a, w, s, _) in enumerate(spans)]
    placement = Placement({f"r{k}": o for k, (*_, o) in enumerate(spans)}, 10**6, 0, "random")
    by_pairs = [v for v in check_placement(records, placement) if v.kind == "overlap"]
    saved, problem_module.MAX_PAIRS = problem_module.MAX_PAIRS, 0
    try:
        by_sweep = [v for v in check_placement(records, placement) if v.kind == "overlap"]
    finally:
        problem_module.MAX_PAIRS = saved
    assert bool(by_sweep) == bool(by_pairs)
    assert {v.ids for v in by_sweep} <= {v.ids for v in by_pairs}


def _search_instance() -> list[Record]:
    """30 records on which the heuristics stop at 2112 and the search reaches 2048."""
    rng = np.random.default_rng(13)
    n = 30
    starts = rng.integers(0, 3 * n, n)
    widths = np.where(rng.random(n) < 0.8, rng.integers(1, 6, n), rng.integers(6, 40, n))
    sizes = rng.integers(1, 9, n) * 64
    return [
        Record(f"r{k}", int(a), int(a + w), int(z))
        for k, (a, w, z) in enumerate(zip(starts, widths, sizes, strict=True))
    ]


def test_the_search_is_skipped_when_its_work_cap_cannot_place_every_record(monkeypatch):
    records = _search_instance()
    assert plan(records, method="fast").height == 2112
    assert plan(records, method="best").height == 2048
    # 30 records: a cap below 30 placements × 30 records leaves too few to place them all.
    monkeypatch.setattr(planner, "MAX_SEARCH_WORK", 30 * 30 - 1)
    skipped = plan(records, method="best", budget=10**9)
    assert (skipped.height, skipped.method) == (2112, "skyline/TWA")


def test_every_preorder_is_a_permutation_on_a_large_problem():
    records = [Record(f"r{k}", k % 97, k % 97 + 1 + k % 5, 1 + k % 13) for k in range(3000)]
    problem = build_problem(records)
    for heuristic in PREORDERS:
        assert sorted(preorder_ranks(problem, heuristic).tolist()) == list(range(3000))


# --- --streams by-unit:N --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("by-unit:0", "the number of streams must be at least 1"),
        ("by-unit:65", "the number of streams must be at most 64"),
        ("by-unit:100000000000000000000", "the number of streams must be at most 64"),
        ("by-unit:" + "9" * 5000, "the number of streams must be at most 64"),
        ("by-unit:1e20", "expected by-unit:N with N an integer from 1 to 64"),
        ("by-unit:x", "expected by-unit:N with N an integer from 1 to 64"),
        ("by-unit:-1", "expected by-unit:N with N an integer from 1 to 64"),
        ("by-unit:٣", "expected by-unit:N with N an integer from 1 to 64"),
    ],
)
def test_by_unit_n_is_an_integer_from_1_to_the_limit(value, problem, capsys):
    assert policy_problem(value) == (problem, STREAMS_HINT)
    with pytest.raises(OptionError) as err:
        CompileOptions(streams=value)
    assert err.value.problem == problem and err.value.hint == STREAMS_HINT
    with pytest.raises(UsageError) as err:
        policy_from_name(value)
    assert err.value.message == f"stream policy '{value}': {problem}"
    if len(value) < 100:  # the CLI echoes the value it was given
        assert main(["compile", MLP, "--device", "toy", "--streams", value]) == 2
        err_text = capsys.readouterr().err
        assert _first_line(err_text) == f"error: --streams {value}: {problem}"
        assert f"hint: {STREAMS_HINT}" in err_text


def test_by_unit_at_the_limit_compiles():
    assert policy_problem("by-unit:64") is None
    assert policy_problem("by-unit:007") is None
    program = rtgraph.load(MLP, device="toy")
    compiled = rtgraph.compile(program, streams="by-unit:64")
    assert 1 <= len(compiled.streams) <= 64 * 3


@pytest.mark.parametrize(
    ("count", "message"),
    [
        (0, "by-unit:0: the number of streams must be at least 1"),
        (65, "by-unit:65: the number of streams must be at most 64"),
        (10**20, "by-unit:N: the number of streams must be at most 64"),
        (2.0, "by-unit:N: the number of streams must be an integer, not a float"),
    ],
)
def test_by_unit_from_python_checks_its_count(count, message):
    with pytest.raises(UsageError) as err:
        ByUnit(count)
    assert err.value.message == message


# --- profile --iterations and --schedule ----------------------------------------------------------


@pytest.mark.parametrize(
    ("iterations", "message"),
    [
        (0, "iterations must be a positive integer, got 0"),
        (1001, "iterations must be at most 1,000, got 1001"),
        (10**8, "iterations must be at most 1,000, got 100000000"),
        pytest.param(
            10**5000, "iterations must be at most 1,000, got an integer of 16,610 bits", id="huge"
        ),
        (1.5, "iterations must be a positive integer, got 1.5"),
    ],
)
def test_profile_iterations_are_bounded_before_any_run(iterations, message):
    with pytest.raises(UsageError) as err:
        check_profile_options(iterations=iterations)
    assert err.value.message == message
    with pytest.raises(UsageError) as err:
        profile("not a program", "no-such-device", iterations=iterations)  # never reached
    assert err.value.message == message


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("0,0,1001", "profiler schedule: active must be at most 1,000, got 1001"),
        ((1, 10**30, 1), f"profiler schedule: warmup must be at most 1,000, got {10**30}"),
        (
            (1, 10**50, 1),
            "profiler schedule: warmup must be at most 1,000, got an integer of 167 bits",
        ),
        (
            "1,1," + "9" * 5000,
            f"profiler schedule '1,1,{'9' * 35}… (5,006 characters) "
            "is not wait,warmup,active[,repeat]",
        ),
        (
            "1" + "," * 10**6,
            "profiler schedule '1,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,… (1,000,003 characters) "
            "is not wait,warmup,active[,repeat]",
        ),
    ],
)
def test_profile_schedules_are_bounded(schedule, message):
    with pytest.raises(UsageError) as err:
        Schedule.of(schedule, 8)
    assert err.value.message == message


def test_profile_refuses_too_many_task_runs_before_the_first(tmp_path):
    program = rtgraph.load(MODELS / "attention.rtg", S=16, D=128, H=32, device="toy")
    compiled = rtgraph.compile(program)
    tasks = len(compiled.tasks)  # 292
    iterations = MAX_PROFILE_TASK_RUNS // tasks + 1
    assert iterations <= MAX_PROFILE_ITERATIONS  # the task-run limit is the one that bites
    with pytest.raises(UsageError) as err:
        profile(compiled, "toy", iterations=iterations)
    runs = iterations * tasks
    assert err.value.message == (
        f"{iterations:,} iterations of {tasks:,} tasks are {runs:,} task runs, more than the "
        "200,000 a profile may emulate"
    )
    assert (
        err.value.hint
        == f"profile at most {MAX_PROFILE_TASK_RUNS // tasks:,} iterations of this program"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--iterations", "100000000"], "error: iterations must be at most 1,000, got 100000000"),
        (["--iterations", "0"], "error: iterations must be a positive integer, got 0"),
        (
            ["--schedule", "0,0,5000"],
            "error: profiler schedule: active must be at most 1,000, got 5000",
        ),
    ],
)
def test_profile_cli_bounds_are_usage_errors(tmp_path, argv, message, capsys):
    out = tmp_path / "prof"
    assert main(["profile", MLP, "--device", "toy", "-o", str(out), *argv]) == 2
    assert _first_line(capsys.readouterr().err) == message
    assert not out.exists()
