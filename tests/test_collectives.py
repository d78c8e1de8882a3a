"""Collective plans: every (kind, algorithm, group size) computes what the kind means, and
takes the time its closed form says.

Numerics: a plan run by :func:`execute` in float32 sums each element of n inputs in some order,
so (Higham, "Accuracy and Stability of Numerical Algorithms", §4.2) it is within
γ_{n−1}·Σ|x_i| of the exact sum, γ_k = k·u / (1 − k·u), u = 2⁻²⁴; the same holds for the
reference (rank order). The exact sum is taken in float64 (eight float32 values: its own error
is below 8·2⁻⁵³·Σ|x_i|, added to the bound). Integer sums wrap the same in any order, so int32
results are bit-exact, and moving data (allgather, broadcast, alltoall) is bit-exact always.

Time: a plan's no-contention time is its steps' sum, each step α plus the largest number of
bytes one link direction carries in it over B — computed here from the plan itself on the toy
cluster (a link per pair), and held equal to :func:`analytic_us`'s formula.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtgraph.cluster import load_cluster
from rtgraph.cluster.collectives import (
    ALGORITHMS,
    KINDS,
    CollectiveError,
    algorithms_for,
    analytic_us,
    chunk_bounds,
    default_algorithm,
    execute,
    plan,
    reference,
)

SUMS = ("allreduce", "reduce_scatter")
U32 = 2.0**-24


def gamma(k: int, u: float = U32) -> float:
    return k * u / (1 - k * u)


def cases():
    """Every (kind, algorithm, ranks) that applies, ranks 1 to 8."""
    return [(k, a, n) for k in KINDS for n in range(1, 9) for a in algorithms_for(k, n)]


def input_size(kind: str, n: int, k: int) -> int:
    """An input size ``kind`` accepts: any for allreduce and broadcast (chunks may be uneven or
    empty), a multiple of n where the kind cuts the input into n parts."""
    return n * k if kind in ("reduce_scatter", "alltoall") else k


@st.composite
def collective_inputs(draw, dtype):
    kind, algorithm, n = draw(st.sampled_from(cases()))
    root = draw(st.integers(0, n - 1))
    size = input_size(kind, n, draw(st.integers(0, 9)))
    if dtype == np.float32:
        values = st.floats(-1e6, 1e6, width=32, allow_subnormal=False)
    else:
        values = st.integers(-(2**31), 2**31 - 1)
    inputs = [
        np.array(draw(st.lists(values, min_size=size, max_size=size)), dtype) for _ in range(n)
    ]
    return kind, algorithm, n, root, inputs


@settings(max_examples=300, deadline=None)
@given(collective_inputs(np.float32))
def test_float32_results_are_within_the_derived_bound(case):
    kind, algorithm, n, root, inputs = case
    got = execute(plan(kind, algorithm, n, root), inputs)
    ref = reference(kind, inputs, root)
    assert len(got) == n
    for r in range(n):
        assert got[r].dtype == np.float32 and got[r].shape == ref[r].shape
        if kind not in SUMS:
            assert np.array_equal(got[r], ref[r])
            continue
        wide = [x.astype(np.float64) for x in inputs]
        exact = reference(kind, wide)[r]
        mass = reference(kind, [np.abs(x) for x in wide])[r]
        bound = (gamma(n - 1) + 8 * 2.0**-53) * mass
        assert np.all(np.abs(got[r] - exact) <= bound), (kind, algorithm, n, r)
        assert np.all(np.abs(ref[r] - exact) <= bound)


@settings(max_examples=200, deadline=None)
@given(collective_inputs(np.int32))
def test_int32_results_are_bit_exact(case):
    kind, algorithm, n, root, inputs = case
    got = execute(plan(kind, algorithm, n, root), inputs)
    for mine, want in zip(got, reference(kind, inputs, root), strict=True):
        assert mine.dtype == np.int32 and np.array_equal(mine, want)


def test_float32_sums_follow_the_algorithm_order():
    """Not the reference's order: ring chunk c is summed from rank c + 1, and it shows."""
    big, tiny = np.float32(2.0**24), np.float32(1.0)
    inputs = [np.array([v, v], np.float32) for v in (big, tiny, tiny, -big)]
    ring = execute(plan("allreduce", "ring", 4), inputs)[0]
    assert reference("allreduce", inputs)[0].tolist() == [0.0, 0.0]  # (2^24 + 1) rounds to 2^24
    assert ring.tolist() != [0.0, 0.0]  # chunk 1 starts at rank 2: 1 + (−2^24) + 2^24 + 1 = 2


@pytest.mark.parametrize(("kind", "algorithm", "n"), cases())
def test_plans_are_well_formed(kind, algorithm, n):
    p = plan(kind, algorithm, n)
    assert (p.kind, p.algorithm, p.ranks) == (kind, algorithm, n)
    for step in p.steps:
        assert step, "an empty step"
        writes = Counter((t.dst, t.to_chunk) for t in step)
        for t in step:
            assert 0 <= t.src < n and 0 <= t.dst < n and t.src != t.dst
            assert 0 <= t.chunk < p.chunks and 0 <= t.to_chunk < p.chunks
            if not t.reduce:
                assert writes[(t.dst, t.to_chunk)] == 1, "two writes of one chunk in a step"
        if algorithm == "ring":
            pairs = Counter((t.src, t.dst) for t in step)
            assert max(pairs.values()) == 1, "a ring step uses a link direction twice"
    if n == 1:
        assert p.steps == ()


@pytest.mark.parametrize(
    ("kind", "algorithm", "n", "steps"),
    [
        ("allreduce", "ring", 8, 14),
        ("allreduce", "halving_doubling", 8, 6),
        ("allreduce", "tree", 5, 6),
        ("reduce_scatter", "ring", 3, 2),
        ("allgather", "halving_doubling", 4, 2),
        ("broadcast", "ring", 4, 6),
        ("broadcast", "tree", 8, 3),
        ("broadcast", "halving_doubling", 8, 6),
        ("alltoall", "ring", 6, 5),
    ],
)
def test_step_counts(kind, algorithm, n, steps):
    assert len(plan(kind, algorithm, n).steps) == steps


# --- time ------------------------------------------------------------------------------------


def plan_time_us(kind: str, algorithm: str, n: int, nbytes: int, alpha: float, b: float) -> float:
    """Σ over steps of α + (the most bytes one link direction carries in the step) / B, for a
    working buffer of ``nbytes`` cut into equal chunks."""
    p = plan(kind, algorithm, n)
    work = 2 * nbytes if kind == "alltoall" else nbytes
    chunk = work / p.chunks
    total = 0.0
    for step in p.steps:
        per_direction = Counter((t.src, t.dst) for t in step)
        total += alpha + max(per_direction.values()) * chunk * 1e6 / b
    return total


def test_analytic_time_is_each_plan_s_own_time_on_the_toy_cluster():
    toy = load_cluster("toy")
    alpha, b = toy.latency_us(0, 1), toy.bandwidth(0, 1)
    for kind, algorithm, n in cases():
        nbytes = 840 * 8 * n  # divides into every chunk count of n ≤ 8
        want = plan_time_us(kind, algorithm, n, nbytes, alpha, b)
        assert analytic_us(kind, algorithm, n, nbytes, alpha, b) == pytest.approx(want, rel=1e-12)


def test_ring_allreduce_by_hand_on_the_toy_cluster():
    """S = 8000 bytes on n = 8: 2(n − 1)(α + S/(nB)) = 14 × (1 + 1) µs."""
    toy = load_cluster("toy")
    alpha, b = toy.latency_us(0, 1), toy.bandwidth(0, 1)
    assert (alpha, b) == (1.0, 1e9)
    assert analytic_us("allreduce", "ring", 8, 8000, alpha, b) == 28.0
    assert analytic_us("allreduce", "halving_doubling", 8, 8000, alpha, b) == 6 + 14.0
    assert analytic_us("allreduce", "tree", 8, 8000, alpha, b) == 6 * 9.0
    assert analytic_us("allgather", "ring", 4, 4000, alpha, b) == 3 * 2.0
    assert analytic_us("broadcast", "tree", 5, 1000, alpha, b) == 3 * 2.0
    assert analytic_us("allreduce", "ring", 1, 8000, alpha, b) == 0.0


# --- errors ----------------------------------------------------------------------------------


def test_halving_doubling_needs_a_power_of_two():
    with pytest.raises(CollectiveError) as info:
        plan("allreduce", "halving_doubling", 6)
    assert "power-of-two" in info.value.message and "6 ranks" in info.value.message
    assert info.value.hint == "on 6 ranks allreduce runs as ring, tree"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("allsum", "ring", 4), "unknown collective 'allsum'"),
        (("alltoall", "tree", 4), "alltoall has no 'tree' algorithm"),
        (("allreduce", "bogus", 4), "no 'bogus' algorithm"),
        (("broadcast", "tree", 4, 4), "root 4 is not a rank of the group of 4"),
        (("allreduce", "ring", 0), "a group of 0 ranks"),
        (("allreduce", "ring", 2000), "a group of 2000 ranks"),
    ],
)
def test_bad_plans_are_errors_with_hints(args, message):
    with pytest.raises(CollectiveError) as info:
        plan(*args)
    assert message in info.value.message and info.value.hint


def test_participants_must_agree():
    p = plan("allreduce", "ring", 2)
    with pytest.raises(CollectiveError, match="participants disagree"):
        execute(p, [np.zeros(4, np.float32), np.zeros(5, np.float32)])
    with pytest.raises(CollectiveError, match="participants disagree"):
        execute(p, [np.zeros(4, np.float32), np.zeros(4, np.float16)])
    with pytest.raises(CollectiveError, match="given 3 inputs"):
        execute(p, [np.zeros(4, np.float32)] * 3)
    with pytest.raises(CollectiveError, match="does not cut into 3 equal parts"):
        execute(plan("reduce_scatter", "ring", 3), [np.zeros(4, np.float32)] * 3)


def test_defaults_apply_to_every_group_size():
    for kind in KINDS:
        for n in range(1, 9):
            assert default_algorithm(kind, n) in algorithms_for(kind, n)
    assert set(ALGORITHMS) == {a for k in KINDS for a in algorithms_for(k, 8)}


def test_chunk_bounds_cover_the_buffer():
    assert chunk_bounds(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert chunk_bounds(2, 4) == [(0, 0), (0, 1), (1, 1), (1, 2)]
