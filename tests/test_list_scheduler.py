"""The list scheduler: every schedule valid, known answers on small cases and on STG graphs."""

from __future__ import annotations

import itertools
import math
import random
import re

import numpy as np
import pytest
from conftest import DATA, MODELS
from hypothesis import given, settings
from hypothesis import strategies as st

import rtgraph
from rtgraph.compiler import CompileOptions
from rtgraph.compiler.passes.assign_streams import assign_streams
from rtgraph.compiler.passes.find_hazards import find_hazards
from rtgraph.compiler.passes.lower import lower
from rtgraph.compiler.passes.plan_memory import plan_memory
from rtgraph.compiler.scheduling import Job, list_schedule, lower_bound, read_stg
from rtgraph.compiler.scheduling.heft import heft, read_heft_csvs
from rtgraph.compiler.scheduling.order_search import Replay, unblock
from rtgraph.compiler.scheduling.policies import queued_levels
from rtgraph.compiler.scheduling.stg import parse_stg
from rtgraph.device import load_device
from rtgraph.errors import CheckError, InputError

STG = DATA / "stg"


# --- what a valid schedule is -----------------------------------------------------------------


def assert_valid(jobs, capacity, sched):
    """Precedence, capacity at every instant, sequential lanes, a consistent run order."""
    n = len(jobs)
    start = np.asarray(sched.start, dtype=float)
    finish = np.asarray(sched.finish, dtype=float)
    dur = np.asarray([j.duration for j in jobs], dtype=float)
    assert len(sched.start) == len(sched.finish) == len(sched.lane) == n
    assert np.all(start >= 0)
    assert np.array_equal(finish, start + dur)
    assert sched.makespan == (finish.max() if n else 0.0)
    for i, job in enumerate(jobs):
        for p in job.preds:
            assert start[i] >= finish[p], f"job {i} starts before its predecessor {p} ends"
    assert sorted(sched.order) == list(range(n))
    position = {job: k for k, job in enumerate(sched.order)}
    for i, job in enumerate(jobs):
        assert all(position[p] < position[i] for p in job.preds)
    assert [start[i] for i in sched.order] == sorted(start.tolist())

    for unit, cap in capacity.items():
        members = [i for i, job in enumerate(jobs) if job.unit == unit]
        s, f = start[members], finish[members]
        w = np.asarray([jobs[i].demand for i in members])
        timed = f > s
        for k in range(len(members)):  # usage is highest just after some start
            t = s[k]
            if timed[k]:
                used = w[timed & (s <= t) & (t < f)].sum()
            else:  # an instant: what runs across it, plus the job
                used = w[timed & (s < t) & (t < f)].sum() + w[k]
            assert used <= cap, f"class {unit} uses {used} > {cap} cores at time {t}"
        lanes: dict[int, list[int]] = {}
        for i in sorted(members, key=position.__getitem__):
            lanes.setdefault(sched.lane[i], []).append(i)
        assert set(lanes) <= set(range(cap)), f"class {unit} uses lanes {sorted(lanes)}"
        for queue in lanes.values():
            for a, b in itertools.pairwise(queue):
                assert start[b] >= finish[a], f"lane runs job {b} before job {a} ends"

    assert sched.makespan >= lower_bound(jobs, capacity) - 1e-9
    assert sched.lower_bound <= sched.makespan + 1e-9


@st.composite
def problems(draw, *, max_jobs=14, integral=True, zero=True):
    """Random DAGs over 1-3 unit classes with capacities, demands and shuffled indices."""
    units = [f"u{k}" for k in range(draw(st.integers(1, 3)))]
    capacity = {u: draw(st.integers(1, 4)) for u in units}
    n = draw(st.integers(0, max_jobs))
    low = 0 if zero else 1
    if integral:
        durations = draw(st.lists(st.integers(low, 9), min_size=n, max_size=n))
    else:
        durations = draw(
            st.lists(st.floats(0.0 if zero else 0.1, 9.0, allow_nan=False), min_size=n, max_size=n)
        )
    density = draw(st.floats(0.0, 0.6))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    perm = list(range(n))
    rng.shuffle(perm)  # job k of the DAG becomes job perm[k]
    jobs: list[Job | None] = [None] * n
    for k in range(n):
        unit = rng.choice(units)
        preds = tuple(perm[j] for j in range(k) if rng.random() < density)
        demand = rng.randint(1, capacity[unit])
        jobs[perm[k]] = Job(float(durations[k]), unit, preds, demand)
    return jobs, capacity


# --- properties -------------------------------------------------------------------------------


@given(problems(integral=False))
def test_fast_schedules_are_valid(case):
    jobs, capacity = case
    assert_valid(jobs, capacity, list_schedule(jobs, capacity, method="fast"))


@given(problems())
@settings(max_examples=60)
def test_best_is_valid_and_no_worse_than_fast(case):
    jobs, capacity = case
    fast = list_schedule(jobs, capacity, method="fast")
    best = list_schedule(jobs, capacity, method="best", budget=3_000)
    assert_valid(jobs, capacity, best)
    assert best.makespan <= fast.makespan
    assert best.lower_bound >= lower_bound(jobs, capacity)


@given(problems(integral=False))
@settings(max_examples=30)
def test_best_is_valid_with_fractional_durations(case):
    jobs, capacity = case
    assert_valid(jobs, capacity, list_schedule(jobs, capacity, budget=2_000))


def brute_force_optimum(jobs, capacity):
    """The least makespan over every precedence-feasible list, each job placed at the earliest
    whole time that fits (every active schedule arises this way). Durations ≥ 1, whole."""
    n = len(jobs)
    horizon = int(sum(j.duration for j in jobs)) + 1
    best = math.inf
    for order in itertools.permutations(range(n)):
        position = {job: k for k, job in enumerate(order)}
        if any(position[p] > position[i] for i, j in enumerate(jobs) for p in j.preds):
            continue
        use = {u: np.zeros(horizon, dtype=int) for u in capacity}
        finish = [0] * n
        for i in order:
            job, d = jobs[i], int(jobs[i].duration)
            t = max([finish[p] for p in job.preds], default=0)
            while np.any(use[job.unit][t : t + d] + job.demand > capacity[job.unit]):
                t += 1
            use[job.unit][t : t + d] += job.demand
            finish[i] = t + d
        best = min(best, max(finish))
    return best


@given(problems(max_jobs=6, zero=False))
@settings(max_examples=25)
def test_bounds_bracket_the_brute_force_optimum(case):
    jobs, capacity = case
    sched = list_schedule(jobs, capacity)
    optimum = brute_force_optimum(jobs, capacity) if jobs else 0.0
    assert sched.lower_bound <= optimum <= sched.makespan


def test_best_finds_the_optimum_of_small_random_graphs():
    rng = random.Random(7)
    misses = []
    for case in range(25):
        n = rng.randint(4, 7)
        jobs = [
            Job(float(rng.randint(1, 6)), "u", tuple(j for j in range(i) if rng.random() < 0.3))
            for i in range(n)
        ]
        capacity = {"u": rng.randint(2, 3)}
        if list_schedule(jobs, capacity).makespan != brute_force_optimum(jobs, capacity):
            misses.append(case)
    assert misses == []


def test_same_input_same_schedule():
    rng = random.Random(3)
    jobs = [
        Job(
            float(rng.randint(1, 9)),
            rng.choice("ab"),
            tuple(j for j in range(i) if rng.random() < 0.2),
        )
        for i in range(40)
    ]
    capacity = {"a": 2, "b": 3}
    first = list_schedule(jobs, capacity, budget=20_000)
    assert list_schedule(jobs, capacity, budget=20_000) == first
    assert_valid(jobs, capacity, list_schedule(jobs, capacity, budget=20_000, seed=11))


# --- known small cases ------------------------------------------------------------------------


def test_a_chain_runs_in_order_on_one_lane():
    jobs = [Job(float(d), "cube", (i - 1,) if i else ()) for i, d in enumerate([1, 2, 3, 4, 5])]
    for method in ("fast", "best"):
        sched = list_schedule(jobs, {"cube": 3}, method=method)
        assert sched.start == (0.0, 1.0, 3.0, 6.0, 10.0)
        assert sched.makespan == sched.lower_bound == 15.0
        assert sched.order == (0, 1, 2, 3, 4)
        assert set(sched.lane) == {0}


def test_independent_jobs_fill_the_machines():
    jobs = [Job(2.0, "vec") for _ in range(6)]
    sched = list_schedule(jobs, {"vec": 3}, method="fast")
    assert sched.makespan == 4.0
    assert sorted(sched.lane) == [0, 0, 1, 1, 2, 2]


def test_best_beats_the_list_rule_on_the_lpt_trap():
    # Largest first puts 3+2+2 on one machine (7); the optimum pairs 3+3 and 2+2+2 (6).
    jobs = [Job(float(d), "cpu") for d in (3, 3, 2, 2, 2)]
    assert list_schedule(jobs, {"cpu": 2}, method="fast").makespan == 7.0
    best = list_schedule(jobs, {"cpu": 2})
    assert best.makespan == best.lower_bound == 6.0


def test_bottom_level_puts_the_long_path_first():
    # Jobs 0-2 are short and first by index; the chain 3 -> 4 must start at once to end by 5
    # (taking jobs in index order would start it at 1 and end at 6).
    jobs = [Job(1.0, "cpu") for _ in range(4)] + [Job(4.0, "cpu", (3,))]
    sched = list_schedule(jobs, {"cpu": 2}, method="fast")
    assert sched.start[3] == 0.0
    assert sched.makespan == 5.0


def test_queued_levels_feed_the_copies_back_in_time():
    # Three results go back over one link (d2h): a and b are quick to compute but long to send,
    # c slow to compute and quick to send. Bottom levels start c first (13 > 12), so a's and
    # b's copies queue one after the other at the end (34); chaining the copies in release
    # order gives a and b the priority of the copies behind them: a, b, then c, and the link
    # never waits (23, its work from the first copy's release on).
    jobs = [
        Job(2.0, "cube"), Job(10.0, "d2h", (0,)),  # a
        Job(2.0, "cube"), Job(10.0, "d2h", (2,)),  # b
        Job(12.0, "cube"), Job(1.0, "d2h", (4,)),  # c
    ]  # fmt: skip
    capacity = {"cube": 1, "d2h": 1}
    assert list_schedule(jobs, capacity, method="fast").makespan == 34.0
    levels = queued_levels(jobs, ("h2d", "d2h"))
    assert levels == [23.0, 21.0, 13.0, 11.0, 13.0, 1.0]
    for method in ("fast", "serial"):
        sched = list_schedule(jobs, capacity, method=method, levels=levels)
        assert_valid(jobs, capacity, sched)
        assert (sched.makespan, sched.method) == (23.0, method)
    # no queue: a class with one job, or none
    assert queued_levels(jobs[:2], ("d2h",)) is None
    assert queued_levels(jobs, ("h2d",)) is None


@given(problems(integral=False))
def test_serial_and_given_levels_give_valid_schedules(case):
    jobs, capacity = case
    levels = [float(k % 5) for k in range(len(jobs))]
    for method in ("fast", "serial"):
        assert_valid(jobs, capacity, list_schedule(jobs, capacity, method=method, levels=levels))
        assert_valid(jobs, capacity, list_schedule(jobs, capacity, method=method))


def test_wide_jobs_wait_for_enough_cores():
    jobs = [Job(2.0, "cube", demand=3), Job(2.0, "cube", demand=2), Job(1.0, "cube", demand=4)]
    sched = list_schedule(jobs, {"cube": 4})
    assert_valid(jobs, {"cube": 4}, sched)
    assert sched.makespan == 5.0  # no two of them fit together


def test_classes_are_scheduled_and_laned_separately():
    # A copy, then compute on two cores, then a copy back, for three tiles.
    jobs = []
    for _ in range(3):
        jobs.append(Job(1.0, "dma"))
        jobs.append(Job(3.0, "cube", (len(jobs) - 1,)))
        jobs.append(Job(1.0, "dma", (len(jobs) - 1,)))
    capacity = {"dma": 1, "cube": 2}
    sched = list_schedule(jobs, capacity)
    assert_valid(jobs, capacity, sched)
    assert {sched.lane[i] for i in range(0, 9, 3)} == {0}
    # Copies in at 0-1, 1-2, 2-3; cubes 1-4 and 2-5 on the two cores, the third 4-7; its copy
    # out ends at 8, which the lower bound proves optimal.
    assert sched.makespan == sched.lower_bound == 8.0


def test_zero_duration_jobs_take_an_instant_between_others():
    # The marker (job 2) sits at time 2 where job 0 ends and job 1 begins on the only core.
    jobs = [Job(2.0, "cpu"), Job(2.0, "cpu", (2,)), Job(0.0, "cpu", (0,))]
    sched = list_schedule(jobs, {"cpu": 1})
    assert_valid(jobs, {"cpu": 1}, sched)
    assert sched.start == (0.0, 2.0, 2.0)
    assert sched.order == (0, 2, 1)
    assert set(sched.lane) == {0}


def test_empty_and_single_job():
    assert list_schedule([], {"cpu": 1}).makespan == 0.0
    sched = list_schedule([Job(3.0, "cpu")], {"cpu": 2})
    assert (sched.start, sched.lane, sched.makespan) == ((0.0,), (0,), 3.0)


def test_lower_bound_is_path_or_work():
    jobs = [Job(3.0, "a"), Job(3.0, "a", (0,)), Job(1.0, "b"), Job(1.0, "b"), Job(1.0, "b")]
    assert lower_bound(jobs, {"a": 1, "b": 2}) == 6.0  # the chain
    assert lower_bound(jobs, {"a": 1, "b": 1}) == 6.0
    wide = [Job(1.0, "b", demand=2) for _ in range(5)]
    assert lower_bound(wide, {"b": 3}) == 4.0  # ceil(10 / 3)
    assert lower_bound([Job(0.5, "b") for _ in range(3)], {"b": 2}) == 0.75  # not rounded


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jobs", "capacity", "message"),
    [
        ([Job(1.0, "a", (1,)), Job(1.0, "a", (0,))], {"a": 1}, "cycle"),
        ([Job(1.0, "cueb")], {"cube": 1}, "no capacity given"),
        ([Job(1.0, "a", demand=3)], {"a": 2}, "demands 3"),
        ([Job(-1.0, "a")], {"a": 1}, "duration"),
        ([Job(math.nan, "a")], {"a": 1}, "duration"),
        ([Job(1.0, "a", (5,))], {"a": 1}, "predecessor 5"),
        ([Job(1.0, "a", (0,))], {"a": 1}, "predecessor 0"),
        ([Job(1.0, "a")], {"a": 0}, "capacity"),
    ],
)
def test_bad_jobs_are_reported(jobs, capacity, message):
    with pytest.raises(CheckError, match=message) as info:
        list_schedule(jobs, capacity)
    assert info.value.hint


def test_unknown_unit_hint_names_the_close_one():
    with pytest.raises(CheckError) as info:
        list_schedule([Job(1.0, "cueb")], {"cube": 1, "vector": 1})
    assert "cube" in info.value.hint


def test_bad_method_and_budget():
    with pytest.raises(CheckError, match="method"):
        list_schedule([], {"a": 1}, method="optimal")
    with pytest.raises(CheckError, match="budget"):
        list_schedule([], {"a": 1}, budget=-1)
    with pytest.raises(CheckError, match="1 levels for 2 jobs"):
        list_schedule([Job(1.0, "a"), Job(1.0, "a")], {"a": 1}, levels=[1.0])


# --- the STG reader ---------------------------------------------------------------------------

SAMPLE = """\
          3
          0          0          0
          1          5          1          0
          2          7          1          0
          3          2          2          1          2
          4          0          1          3
# a comment
#   CP Length : 9
"""


def test_read_stg_sample(tmp_path):
    path = tmp_path / "tiny.stg"
    path.write_text(SAMPLE)
    jobs = read_stg(path)
    assert [j.duration for j in jobs] == [0.0, 5.0, 7.0, 2.0, 0.0]
    assert [j.preds for j in jobs] == [(), (0,), (0,), (1, 2), (3,)]
    assert {j.unit for j in jobs} == {"cpu"} and {j.demand for j in jobs} == {1}
    sched = list_schedule(jobs, {"cpu": 2})
    assert sched.makespan == 9.0 == sched.lower_bound


def test_read_stg_ignores_a_wrong_count_line():
    assert len(parse_stg("99\n" + SAMPLE.split("\n", 1)[1])) == 5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("1\n0 0 0\n2 3 1 0\n", "expected task id 1"),
        ("1\n0 0 0\n1 3 2 0\n", "lists 1"),
        ("1\n0 0 0\n1 x 1 0\n", "non-integer"),
        ("1\n0 0 0\n1 3 1 7\n", "predecessor 7"),
        ("1\n0 0 0\n", "at least the two dummy"),
    ],
)
def test_bad_stg_text_is_reported(text, message):
    with pytest.raises(InputError, match=message):
        parse_stg(text)


def test_read_stg_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        read_stg(tmp_path / "nope.stg")


@pytest.mark.parametrize(
    "name", ["50/rand0000.stg", "100/rand0000.stg", "app/sparse.stg", "app/fpppp.stg"]
)
def test_read_stg_public_graphs_match_their_critical_path(name):
    path = STG / name
    jobs = read_stg(path)
    assert jobs[0].duration == jobs[-1].duration == 0.0
    cp = float(re.search(r"CP Length\s*:\s*(\d+)", path.read_text()).group(1))
    assert lower_bound(jobs, {"cpu": len(jobs)}) == cp


def known_optimum(graph: str, procs: int) -> float | None:
    """The optimum from the STG optimal CSVs; None for lines that give a (lower, upper) pair."""
    size = graph.split("/")[0]
    path = STG / "optimal" / f"Case{size}_{procs}_OPT.csv"
    for line in path.read_text().split():
        fields = line.split(",")
        if fields[0] == graph and int(fields[1]) == procs:
            return float(fields[2]) if len(fields) == 3 else None
    return None


@pytest.mark.parametrize(
    ("graph", "procs"),
    [
        ("50/rand0001.stg", 4),  # optimum above the trivial bound
        ("50/rand0133.stg", 2),  # likewise
        ("100/rand0085.stg", 2),  # likewise
        ("50/rand0003.stg", 8),
        ("100/rand0002.stg", 4),
    ],
)
def test_best_reaches_the_known_stg_optimum(graph, procs):
    jobs = read_stg(STG / graph)
    optimum = known_optimum(graph, procs)
    sched = list_schedule(jobs, {"cpu": procs})
    assert_valid(jobs, {"cpu": procs}, sched)
    assert sched.makespan == optimum
    assert sched.lower_bound == optimum  # and the bound proves it
    assert list_schedule(jobs, {"cpu": procs}, method="fast").makespan >= optimum


# --- HEFT -------------------------------------------------------------------------------------

HEFT_DATA = DATA / "heft_canonical"


def test_heft_canonical_makespan_is_80():
    cost, edges, bandwidth = read_heft_csvs(HEFT_DATA)
    sched = heft(cost, edges, bandwidth)
    assert sched.makespan == 80.0
    # The paper's figure: n1 on P3 at 0-9, n10 on P2 at 73-80.
    assert (sched.proc[0], sched.start[0], sched.finish[0]) == (2, 0.0, 9.0)
    assert (sched.proc[9], sched.start[9], sched.finish[9]) == (1, 73.0, 80.0)
    for (i, j), data in edges.items():
        delay = 0.0 if sched.proc[i] == sched.proc[j] else data
        assert sched.start[j] >= sched.finish[i] + delay


def test_heft_picks_the_faster_processor_and_saves_the_transfer():
    cost = np.array([[2.0, 4.0], [3.0, 1.0]])
    assert heft(cost, {(0, 1): 10.0}).proc == (0, 0)  # moving costs more than it saves
    assert heft(cost, {(0, 1): 0.5}).proc == (0, 1)


def test_heft_rejects_a_cycle():
    with pytest.raises(CheckError, match="cycle"):
        heft(np.ones((2, 1)), {(0, 1): 1.0, (1, 0): 1.0})


# --- the order search's head-of-line pass (policy `list`) -------------------------------------


def test_unblock_moves_a_ready_task_ahead_of_one_waiting_at_the_head_of_its_stream():
    """On a stream per unit, v1 waits 50 µs for the Cube while v2, queued behind it, could run
    at once: the pass submits v2 first, and the replay (the emulator's timing) gets shorter."""
    npu = load_device("ascend-910b")
    program = rtgraph.parse(
        """program blocked() {
            buffer A : bytes[4096] at 0x0
            buffer B : bytes[4096] at 0x1000
            buffer C : bytes[4096] at 0x2000
            c = kernel(unit = cube, us = 50, writes = [A])
            v1 = kernel(unit = vector, us = 5, reads = [A], writes = [B])
            v2 = kernel(unit = vector, us = 30, writes = [C])
        }"""
    )
    options = CompileOptions(streams="by-unit", memory="none").for_device(npu)
    graph = assign_streams(
        find_hazards(plan_memory(lower(program, options), options), options), options
    )
    names = {t.name: t.id for t in graph.tasks}
    assert list(graph.order) == [names["c"], names["v1"], names["v2"]]
    replay = Replay(graph, dict(graph.stream_of))
    before = replay.makespan(graph.order)
    order, span, spent = unblock(replay, graph.order, 10)
    assert order == [names["c"], names["v2"], names["v1"]]
    assert span == replay.makespan(order) < before
    # v2 now hides under c: what is left is c, then v1 (each with its launch)
    cube, vector = npu.unit("cube").launch_us, npu.unit("vector").launch_us
    assert span == pytest.approx(cube + 50 + vector + 5)
    assert spent == 2  # the first replay, then the one move
    assert unblock(replay, order, 10)[0] == order  # nothing left to undo


# --- the list policy on the naive models (issue 16) --------------------------------------------


@pytest.mark.slow
def test_list_runs_the_naive_attention_sooner_than_a_stream_per_unit():
    # The emulated clock, not a wall clock: the same figure on every machine. The list
    # schedule's levels see the host link's queue, so the work feeding the last output parts
    # does not run last with its parts queued behind (509.6 µs before they did; 477.8 µs now,
    # by-unit 529.1 µs).
    program = rtgraph.load(MODELS / "attention_naive.rtg")
    listed = rtgraph.run(rtgraph.compile(program, streams="list"), numerics=False)
    by_unit = rtgraph.run(rtgraph.compile(program, streams="by-unit"), numerics=False)
    assert listed.makespan_us < 0.95 * by_unit.makespan_us
