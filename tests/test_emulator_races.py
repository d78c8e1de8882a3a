"""The dynamic race detector: interval sweep versus the obvious all-pairs definition."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import rtgraph
from rtgraph.emulator.races import KINDS, detect_races, inversions


def brute_force(start, end, rank, stream, reads, writes):
    found = {}
    n = len(start)
    for i in range(n):
        for j in range(n):
            if i == j or start[i] is None or start[j] is None:
                continue
            if rank[i] >= rank[j]:
                continue  # i must come first in program order
            if not (start[i] < end[j] and start[j] < end[i]):
                continue
            acc_i = [(a, b, False) for a, b in reads[i]] + [(a, b, True) for a, b in writes[i]]
            acc_j = [(a, b, False) for a, b in reads[j]] + [(a, b, True) for a, b in writes[j]]
            for a1, b1, w1 in acc_i:
                for a2, b2, w2 in acc_j:
                    if a1 >= b1 or a2 >= b2 or not (w1 or w2):
                        continue
                    lo, hi = max(a1, a2), min(b1, b2)
                    if lo >= hi:
                        continue
                    kind = "WAW" if w1 and w2 else ("RAW" if w1 else "WAR")
                    key = (i, j, kind)
                    old = found.get(key, (lo, hi))
                    found[key] = (min(old[0], lo), max(old[1], hi))
    return {(i, j, k, lo, hi) for (i, j, k), (lo, hi) in found.items()}


def test_kinds_follow_program_order_not_start_order():
    # Task 0 (first in the program) reads [0, 8) from t=5; task 1 overwrites it from t=0. The
    # write started first, but the program puts the read first: a WAR, named 0 then 1.
    races = detect_races([5, 0], [15, 10], [0, 1], [0, 1], [((0, 8),), ()], [(), ((0, 8),)])
    assert [(r.first, r.second, r.kind, r.lo, r.hi) for r in races] == [(0, 1, "WAR", 0, 8)]
    assert races[0].overlap_start == 5 and races[0].overlap_end == 10


def test_kinds_follow_rank_order():
    # 0 writes [0,8) during [0,10); 1 reads [4,12) during [5,15) → RAW on [4,8).
    # 2 writes [6,7) during [12,20), overlapping 1 (reads) → WAR on [6,7).
    # 3 writes [0,2) during [0,3) like 0 → WAW on [0,2) (0 issued first: rank 0).
    races = detect_races(
        start=[0, 5, 12, 0],
        end=[10, 15, 20, 3],
        program_rank=[0, 2, 3, 1],
        stream=[0, 1, 2, 3],
        reads=[(), ((4, 12),), (), ()],
        writes=[((0, 8),), (), ((6, 7),), ((0, 2),)],
    )
    got = [(r.first, r.second, r.kind, r.lo, r.hi) for r in races]
    assert got == [(0, 3, "WAW", 0, 2), (0, 1, "RAW", 4, 8), (1, 2, "WAR", 6, 7)]
    assert races[1].overlap_start == 5 and races[1].overlap_end == 10
    assert "RAW: task 0 'a' (stream 0) and task 1 'b' (stream 1) touch bytes [4, 8)" in (
        races[1].describe(["a", "b", "c", "d"])
    )


def test_no_race_when_touching_in_time_reading_only_or_disjoint():
    assert detect_races([0, 10], [10, 20], [0, 1], [0, 1], [(), ()], [((0, 8),), ((0, 8),)]) == []
    assert detect_races([0, 5], [10, 20], [0, 1], [0, 1], [((0, 8),), ((0, 8),)], [(), ()]) == []
    assert detect_races([0, 5], [10, 20], [0, 1], [0, 1], [(), ()], [((0, 8),), ((8, 9),)]) == []
    # A task that never ran overlaps nothing.
    writes = [((0, 8),), ((0, 8),)]
    assert detect_races([0, None], [10, None], [0, 1], [0, 1], [(), ()], writes) == []


ranges = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 12)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=3,
)


@st.composite
def runs(draw):
    n = draw(st.integers(0, 14))
    start, end = [], []
    for _ in range(n):
        if draw(st.integers(0, 9)) == 0:
            start.append(None)
            end.append(None)
        else:
            s = draw(st.integers(0, 30))
            start.append(s)
            end.append(s + draw(st.integers(0, 10)))
    rank = draw(st.permutations(list(range(n))))
    reads = [tuple(draw(ranges)) for _ in range(n)]
    writes = [tuple(draw(ranges)) for _ in range(n)]
    stream = [draw(st.integers(0, 3)) for _ in range(n)]
    return start, end, rank, stream, reads, writes


@given(runs())
def test_sweep_equals_all_pairs(args):
    # Program order (rank) need not agree with start order: a later task may start first.
    start, end, rank, stream, reads, writes = args
    races = detect_races(start, end, rank, stream, reads, writes)
    got = {(r.first, r.second, r.kind, r.lo, r.hi) for r in races}
    assert got == brute_force(start, end, rank, stream, reads, writes)
    assert len(got) == len(races)
    assert all(r.kind in KINDS and r.first_stream == stream[r.first] for r in races)


OVERLAP = Path(__file__).resolve().parent.parent / "models" / "overlap.rtg"
WAIT = "        wait multiplied              # the ReLU reads m, written on s_mm\n"


def test_a_reader_that_ran_wholly_before_its_writer_is_an_inverted_race():
    """Without the wait, the bias add runs before the matmul and reads stale bytes: the two
    never overlap in time, yet the answer is wrong — the run reports the pair, inverted."""
    text = OVERLAP.read_text()
    assert WAIT in text
    program = rtgraph.parse(text.replace(WAIT, ""), filename="overlap_nowait.rtg")
    compiled = rtgraph.compile(program, memory="none")
    result = rtgraph.run(compiled)
    names = [t.name for t in compiled.tasks]
    (race,) = result.races
    assert (race.kind, names[race.first], names[race.second]) == ("RAW", "m", "m + bias")
    assert race.inverted
    first, second = result.tasks[race.first], result.tasks[race.second]
    assert second.end <= first.start
    assert "ran before task" in race.describe(names)
    reference = rtgraph.evaluate(program)
    assert not rtgraph.compare(result.outputs, reference)["y"]["equal"]
    # with the wait, nothing races and the answer is right
    kept = rtgraph.run(rtgraph.compile(rtgraph.load(OVERLAP), memory="none"))
    assert kept.races == []


def test_inversions_need_both_tasks_to_have_run_in_the_wrong_order():
    conflicts = np.array([[0, 1, 0, 0, 8]], np.int64)  # task 0 writes what task 1 reads
    stream = [0, 1]
    nan = np.nan
    cases = {  # (start, end) of tasks 0 and 1 → inverted?
        ((0.0, 1.0), (1.0, 2.0)): False,  # in order
        ((2.0, 3.0), (0.0, 1.0)): True,  # the reader ran first
        ((1.0, 3.0), (0.0, 1.0)): True,  # ... ending as the writer starts
        ((1.0, 3.0), (0.0, 2.0)): False,  # overlapping: the overlap sweep's to report
        ((nan, nan), (0.0, 1.0)): False,  # the writer never ran
    }
    for ((s0, e0), (s1, e1)), inverted in cases.items():
        found = inversions(np.array([s0, s1]), np.array([e0, e1]), stream, conflicts)
        assert bool(found) == inverted, ((s0, e0), (s1, e1))
