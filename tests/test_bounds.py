"""The makespan lower bound: valid (never above an emulated makespan) and as tight as claimed."""

from __future__ import annotations

import itertools

import pytest
from conftest import MODELS
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import programs

import rtgraph
from rtgraph.compiler import CompileOptions, compile_program
from rtgraph.compiler.bounds import makespan_lower_bound, preemptive_one_machine
from rtgraph.device import load_device
from rtgraph.emulator import run

TOY = load_device("toy")
NPU = load_device("ascend-910b")


@given(
    programs(),
    st.sampled_from(["single", "by-unit", "by-unit:2", "list"]),
    st.sampled_from(["none", "greedy", "stream-ordered", "timed"]),
    st.sampled_from([TOY, NPU]),
)
@settings(max_examples=40, deadline=None)
def test_no_schedule_beats_the_bound(program, policy, memory, device):
    bound = makespan_lower_bound(program, device)
    compiled = compile_program(program, device, CompileOptions(streams=policy, memory=memory))
    makespan = run(compiled, device, numerics=False).makespan_us
    assert bound.classic <= bound.value <= makespan * (1 + 1e-9)


def test_true_buffer_conflicts_are_on_the_critical_path():
    # a → c (write after write on X) → d (read after write) → e (after=): one chain.
    program = rtgraph.load(MODELS / "address_conflict.rtg")
    bound = makespan_lower_bound(program, NPU)
    launch = {u: NPU.unit(u).launch_us for u in ("cube", "vector", "dma")}
    chain = (launch["cube"] + 12.5) + (launch["vector"] + 4) + (launch["cube"] + 6)
    chain += launch["dma"] + 2
    first = NPU.host.ioctl_us + NPU.host.submit_us
    assert bound.critical_path == pytest.approx(first + chain)
    assert bound.binding == "cp"


def test_a_serial_chain_is_bound_by_its_length_and_one_stream_meets_it():
    program = rtgraph.parse(
        """program chain() {
            buffer X : bytes[4096] at 0x0
            a = kernel(unit = cube, us = 40, writes = [X])
            b = kernel(unit = vector, us = 40, reads = [X], writes = [X])
            c = kernel(unit = cube, us = 40, reads = [X])
        }"""
    )
    bound = makespan_lower_bound(program, NPU)
    single = run(
        compile_program(program, NPU, CompileOptions(streams="single")), NPU, numerics=False
    )
    # Only the first ioctl differs: it carries all three tasks, the bound assumes one.
    assert single.makespan_us == pytest.approx(bound.value + 2 * NPU.host.submit_us)


def test_tasks_wider_than_half_a_unit_are_bound_as_serial():
    # Two independent vector kernels of 30 of the 48 cores: work ÷ cores would let them share
    # the unit, but 30 + 30 > 48, so they can only run one after the other.
    program = rtgraph.parse(
        """program wide() {
            a = kernel(unit = vector, us = 20, block_dim = 30)
            b = kernel(unit = vector, us = 20, block_dim = 30)
        }"""
    )
    bound = makespan_lower_bound(program, NPU)
    each = NPU.unit("vector").launch_us + 20
    first = NPU.host.ioctl_us + NPU.host.submit_us
    assert bound.units["vector"] == pytest.approx(first + 2 * each)
    assert bound.classic < 2 * each  # the textbook bound lets them overlap
    for policy in ("single", "by-unit:2", "list"):
        compiled = compile_program(program, NPU, CompileOptions(streams=policy))
        assert run(compiled, NPU, numerics=False).makespan_us >= bound.value


def _copies_program(rows: list[int]) -> rtgraph.Program:
    lines = [f"input x{i} : f16[{r * 64}, 1024]" for i, r in enumerate(rows)]
    lines += [f"output y{i} = exp(x{i})" for i in range(len(rows))]
    return rtgraph.parse("program copies() {\n" + "\n".join(lines) + "\n}")


@given(
    st.lists(st.integers(1, 48), min_size=2, max_size=4),
    st.sampled_from(["single", "by-unit", "by-unit:2", "list"]),
)
@settings(max_examples=25, deadline=None)
def test_no_schedule_beats_the_bound_when_copies_share_the_link(rows, policy):
    program = _copies_program(rows)
    bound = makespan_lower_bound(program, NPU)
    makespan = run(
        compile_program(program, NPU, CompileOptions(streams=policy)), NPU, numerics=False
    ).makespan_us
    assert bound.value <= makespan * (1 + 1e-9)


def test_inputs_on_one_link_arrive_one_after_another(monkeypatch):
    # Two equal inputs: whatever the order (or sharing), the second is in only after both
    # have crossed the link, and its exp and its own copy back still follow.
    program = _copies_program([32, 32])
    bound = makespan_lower_bound(program, NPU)
    copy = 32 * 64 * 1024 * 2 * 1e6 / NPU.host.link_bandwidth
    first = NPU.host.ioctl_us + NPU.host.submit_us
    delay = NPU.unit("dma").launch_us + NPU.host.link_latency_us
    assert bound.critical_path >= first + delay + 2 * copy + delay + copy
    monkeypatch.setattr("rtgraph.compiler.bounds.MAX_ORDERS", 1)  # no orders: each copy alone
    assert makespan_lower_bound(program, NPU).critical_path < bound.critical_path - copy / 2


@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 12), st.integers(0, 30)),
        min_size=1,
        max_size=7,
    )
)
@settings(max_examples=200, deadline=None)
def test_jacksons_preemptive_schedule_finds_the_binding_subset(jobs):
    # Carlier: the preemptive one-machine value is the largest min head + Σ work + min tail.
    best = max(
        min(h for h, _, _ in s) + sum(w for _, w, _ in s) + min(t for *_, t in s)
        for k in range(1, len(jobs) + 1)
        for s in itertools.combinations(jobs, k)
    )
    assert preemptive_one_machine([tuple(map(float, j)) for j in jobs]) == pytest.approx(best)
