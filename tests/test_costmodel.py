"""The cost model: hand-computed durations on the ``toy`` device (rates of 1e9/s, 1 µs
launch, 1 µs link latency), the roofline's invariants, and core-count selection."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtgraph.device import DeviceSpec, load_device
from rtgraph.errors import DeviceSpecError
from rtgraph.timing.costmodel import (
    MIN_CORE_WORK_US,
    block_dim_for,
    compute_us,
    dma_us,
    estimate_us,
    memory_us,
)

TOY = load_device("toy")
A2 = load_device("ascend-910b")
EDGE = load_device("ascend-310p")


def with_unit(spec: DeviceSpec, kind: str, **changes) -> DeviceSpec:
    units = dict(spec.units)
    units[kind] = dataclasses.replace(units[kind], **changes)
    return dataclasses.replace(spec, units=units)


# --- toy arithmetic, by hand ---------------------------------------------------------------


def test_compute_time_on_toy():
    # 2,000 flop / (1e9 flop/s × 1 core) = 2e-6 s = 2 µs
    assert compute_us("cube", "f16", 2_000, 1, TOY) == 2.0
    # 125 flop / 1e9 flop/s = 0.125 µs, exact in binary
    assert compute_us("vector", "i8", 125, 1, TOY) == 0.125


def test_compute_time_divides_by_cores():
    # a toy variant with 4 Cube cores: 8,000 flop / (1e9 × 4) flop/s = 2 µs
    four = with_unit(TOY, "cube", cores=4)
    assert compute_us("cube", "f32", 8_000, 4, four) == 2.0
    assert compute_us("cube", "f32", 8_000, 2, four) == 4.0


def test_memory_time_on_toy_and_its_bandwidth_share():
    # 3,000 B / 1e9 B/s = 3 µs alone; half the bandwidth: 6 µs; a quarter: 12 µs
    assert memory_us(3_000, 1.0, TOY) == 3.0
    assert memory_us(3_000, 0.5, TOY) == 6.0
    assert memory_us(3_000, 0.25, TOY) == 12.0


def test_dma_time_on_toy():
    # host copies: latency 1 µs + 4,000 B / 1e9 B/s = 1 + 4 = 5 µs
    assert dma_us(4_000, "h2d", TOY) == 5.0
    assert dma_us(4_000, "d2h", TOY) == 5.0
    # pageable: 1 + 4,000 B / 5e8 B/s = 1 + 8 = 9 µs
    assert dma_us(4_000, "h2d", TOY, pinned=False) == 9.0
    # device to device on the one SDMA engine: 4,000 B / 1e9 B/s = 4 µs, no link latency
    assert dma_us(4_000, "d2d", TOY) == 4.0
    assert dma_us(4_000, "d2d", TOY, pinned=False) == 4.0


def test_estimates_on_toy_match_the_worked_example_in_the_docs():
    # h2d x: f32[25,50] = 5,000 B: launch 1 + latency 1 + 5 = 7 µs
    assert estimate_us("dma", "f32", 0, 5_000, 1, TOY, kind="h2d") == 7.0
    # matmul f32[25,50] @ f32[50,10]: 2·25·10·50 = 25,000 flop → 25 µs; 8,000 B → 8 µs;
    # compute-bound: 1 + max(25, 8) = 26 µs
    assert estimate_us("cube", "f32", 25_000, 8_000, 1, TOY) == 26.0
    # relu f32[25,10]: 250 flop → 0.25 µs; 2,000 B → 2 µs; memory-bound: 1 + 2 = 3 µs
    assert estimate_us("vector", "f32", 250, 2_000, 1, TOY) == 3.0
    # the same relu at half the HBM bandwidth: 1 + max(0.25, 4) = 5 µs
    assert estimate_us("vector", "f32", 250, 2_000, 1, TOY, bandwidth_share=0.5) == 5.0
    # d2h z: 1,000 B: 1 + 1 + 1 = 3 µs; back to back 7 + 26 + 3 + 3 = 39 µs
    assert estimate_us("dma", "f32", 0, 1_000, 1, TOY, kind="d2h") == 3.0
    # the h2d from pageable memory: 1 + 1 + 5,000 / 5e8 s = 1 + 1 + 10 = 12 µs
    assert estimate_us("dma", "f32", 0, 5_000, 1, TOY, kind="h2d", pinned=False) == 12.0
    # d2d is the default copy kind: 1 + 5 = 6 µs
    assert estimate_us("dma", "f32", 0, 5_000, 1, TOY) == 6.0


def test_estimate_on_910b_is_the_roofline():
    # 1024³ f16 matmul on 24 Cube cores: 2·1024³ flop / (1.47456e13 × 24) flop/s ≈ 6.07 µs;
    # 3 · 1024² · 2 B = 6 MiB at 1.6e12 B/s ≈ 3.93 µs; compute-bound, plus the 3 µs launch
    flops, moved = 2 * 1024**3, 3 * 1024**2 * 2
    expected = 3.0 + flops / (1.47456e13 * 24) * 1e6
    assert estimate_us("cube", "f16", flops, moved, 24, A2) == pytest.approx(expected, rel=1e-12)
    assert compute_us("cube", "f16", flops, 24, A2) > memory_us(moved, 1.0, A2)


# --- exactness and invariants --------------------------------------------------------------


@given(st.integers(0, 9_000_000_000))
def test_toy_durations_are_the_correctly_rounded_decimal(amount):
    # amount × 1e6 is exact below 2**53, and one division rounds correctly: the result is the
    # double nearest amount / 1000 µs — what a person writing the decimal by hand would get.
    exact = float(Fraction(amount, 1000))
    assert compute_us("cube", "f16", amount, 1, TOY) == exact
    assert memory_us(amount, 1.0, TOY) == exact
    assert dma_us(amount, "d2d", TOY) == exact


@given(
    flops=st.integers(0, 10**12),
    moved=st.integers(0, 10**10),
    cores=st.integers(1, 24),
    share=st.sampled_from([1.0, 0.5, 0.25, 1 / 3, 0.1]),
    unit=st.sampled_from(["cube", "vector"]),
    dtype=st.sampled_from(["f16", "bf16", "f32", "i8", "i32"]),
)
def test_the_estimate_is_launch_plus_the_larger_of_compute_and_memory(
    flops, moved, cores, share, unit, dtype
):
    cores = min(cores, A2.unit(unit).cores)
    launch = A2.unit(unit).launch_us
    compute = compute_us(unit, dtype, flops, cores, A2)
    memory = memory_us(moved, share, A2)
    estimate = estimate_us(unit, dtype, flops, moved, cores, A2, bandwidth_share=share)
    assert estimate == launch + max(compute, memory)
    assert estimate >= launch + compute and estimate >= launch + memory
    # less bandwidth or more work never makes a task faster; more cores never make it slower
    assert estimate_us(unit, dtype, flops, moved, cores, A2, bandwidth_share=share / 2) >= estimate
    assert estimate_us(unit, dtype, flops + 1000, moved + 1000, cores, A2, share) >= estimate
    if cores > 1:
        assert estimate_us(unit, dtype, flops, moved, cores - 1, A2, share) >= estimate


# --- block_dim_for -------------------------------------------------------------------------


def test_a_request_is_taken_but_clamped_to_the_unit():
    assert block_dim_for("cube", 10**12, 10**9, A2, requested=8) == 8
    assert block_dim_for("cube", 10**12, 10**9, A2, requested=30) == 24  # caller reports > 24
    assert block_dim_for("cube", 10**12, 10**9, A2, requested=0) == 1
    assert block_dim_for("cube", 10**12, 10**9, TOY, requested=4) == 1
    assert block_dim_for("dma", 0, 10**6, A2, requested=3) == 3


def test_the_units_default_block_dim_comes_next():
    spec = with_unit(A2, "vector", default_block_dim=16)
    assert block_dim_for("vector", 1, 1, spec, requested=None) == 16
    assert block_dim_for("vector", 1, 1, spec, requested=2) == 2


def test_a_copy_takes_one_engine():
    assert block_dim_for("dma", 0, 10**9, A2, requested=None) == 1


def test_otherwise_each_core_gets_at_least_a_microsecond_of_work():
    # toy with 8 Vector cores: per core at least 1e9 flop/s × 1 µs = 1,000 flop, or
    # (1e9 B/s / 8 cores) × 1 µs = 125 B
    spec = with_unit(TOY, "vector", cores=8)
    assert MIN_CORE_WORK_US == 1.0
    assert block_dim_for("vector", 0, 0, spec, requested=None) == 1
    assert block_dim_for("vector", 1_000, 0, spec, requested=None) == 1
    assert block_dim_for("vector", 3_500, 0, spec, requested=None) == 4  # ceil(3.5)
    assert block_dim_for("vector", 0, 300, spec, requested=None) == 3  # ceil(2.4)
    assert block_dim_for("vector", 3_500, 300, spec, requested=None) == 4  # the larger need
    assert block_dim_for("vector", 0, 5_000, spec, requested=None) == 8  # 40, capped at 8


def test_block_dim_on_910b_for_big_and_small_matmuls():
    assert block_dim_for("cube", 2 * 1024**3, 3 * 1024**2 * 2, A2, requested=None) == 24
    assert block_dim_for("cube", 2 * 64**3, 3 * 64**2 * 2, A2, requested=None) == 1


@given(
    flops=st.integers(0, 10**13),
    moved=st.integers(0, 10**11),
    requested=st.none() | st.integers(-5, 100),
    unit=st.sampled_from(["cube", "vector", "dma"]),
)
def test_block_dim_is_always_a_valid_core_count(flops, moved, requested, unit):
    dim = block_dim_for(unit, flops, moved, A2, requested)
    assert 1 <= dim <= A2.unit(unit).cores


# --- errors --------------------------------------------------------------------------------


def test_an_unknown_unit_is_a_spec_error_with_a_suggestion():
    with pytest.raises(DeviceSpecError) as info:
        compute_us("cueb", "f16", 1, 1, TOY)
    assert "device 'toy' has no 'cueb' unit (it has cube, dma, vector)" in str(info.value)
    assert info.value.hint == "did you mean 'cube'?"


def test_a_dtype_the_device_cannot_compute_is_a_spec_error():
    with pytest.raises(DeviceSpecError) as info:
        estimate_us("cube", "bf16", 10**9, 10**6, 8, EDGE)
    assert "device 'ascend-310p' cannot compute bf16 on its cube unit" in str(info.value)
    assert "cast" in info.value.hint


@pytest.mark.parametrize(
    "call",
    [
        lambda: compute_us("cube", "f16", -1, 1, TOY),
        lambda: compute_us("cube", "f16", 1, 0, TOY),
        lambda: memory_us(1, 0.0, TOY),
        lambda: memory_us(1, 1.5, TOY),
        lambda: memory_us(-1, 1.0, TOY),
        lambda: dma_us(1, "h2h", TOY),  # type: ignore[arg-type]
        lambda: dma_us(-1, "h2d", TOY),
        lambda: block_dim_for("cube", -1, 0, TOY, None),
    ],
    ids=["neg-flops", "no-cores", "share-0", "share>1", "neg-bytes", "kind", "neg-copy", "bd"],
)
def test_caller_bugs_raise_value_error(call):
    with pytest.raises(ValueError):
        call()
