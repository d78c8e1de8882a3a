"""The makespan lower bound: valid (never above an emulated makespan) and as tight as claimed."""

from __future__ import annotations

import pytest
from conftest import MODELS
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import programs

import rtgraph
from rtgraph.bounds import makespan_lower_bound
from rtgraph.compiler import compile_program
from rtgraph.devspec import load_device
from rtgraph.emulator import run

TOY = load_device("toy")
NPU = load_device("ascend-910b")


@given(
    programs(),
    st.sampled_from(["single", "by-unit", "by-unit:2", "list"]),
    st.sampled_from(["none", "greedy", "stream-ordered"]),
    st.sampled_from([TOY, NPU]),
)
@settings(max_examples=40, deadline=None)
def test_no_schedule_beats_the_bound(program, policy, memory, device):
    bound = makespan_lower_bound(program, device)
    compiled = compile_program(program, device, streams=policy, memory=memory)
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
    single = run(compile_program(program, NPU, streams="single"), NPU, numerics=False)
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
        compiled = compile_program(program, NPU, streams=policy)
        assert run(compiled, NPU, numerics=False).makespan_us >= bound.value
