"""Compiler invariants, property-tested over random programs and every stream policy.

* The compiled stream program has no race (the static checker agrees), under every policy and
  every memory plan, on an in-order device and on one with a reorder window.
* The ``stream-ordered`` plan never costs a wait: it needs exactly the waits of no reuse at all,
  in no more memory; on one stream it is the ``greedy`` plan.
* Minimality and a non-blind checker: deleting any single inserted wait (or barrier mark)
  makes the checker report a race.
* The stream program survives its JSON form unchanged.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import MODELS
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import programs

import rtgraph
from rtgraph.compiler import CompileOptions, compile_program
from rtgraph.device import load_device
from rtgraph.stream_program import Barrier, StreamProgram, Wait
from rtgraph.stream_program.listing import format_listing
from rtgraph.stream_program.races import check_races

POLICIES = ["single", "by-unit", "by-unit:2", "list"]
MEMORY = ["none", "greedy", "stream-ordered", "timed"]
TOY = load_device("toy")
REORDER = replace(TOY, scheduler=replace(TOY.scheduler, reorder_window=8))


def compiled_variants(program, device):
    for policy in POLICIES:
        for memory in MEMORY:
            yield (
                policy,
                memory,
                compile_program(
                    program, device, CompileOptions(streams=policy, memory=memory, check=True)
                ),
            )


@pytest.mark.slow
@given(programs())
@settings(max_examples=25)
def test_compiled_programs_are_race_free(program):
    for device, reorder in ((TOY, False), (REORDER, True)):
        for policy, memory, sp in compiled_variants(program, device):
            report = check_races(sp, reorder=reorder)
            assert report.ok, (policy, memory, report)


@pytest.mark.slow
@given(programs())
@settings(max_examples=25)
def test_stream_ordered_reuse_adds_no_dependency(program):
    for policy in POLICIES:
        ordered = compile_program(
            program, TOY, CompileOptions(streams=policy, memory="stream-ordered")
        )
        alone = compile_program(program, TOY, CompileOptions(streams=policy, memory="none"))
        assert ordered.meta["barriers"]["waits"] == alone.meta["barriers"]["waits"], policy
        assert ordered.memory.total_bytes <= alone.memory.total_bytes
    one = compile_program(program, TOY, CompileOptions(streams="single", memory="stream-ordered"))
    greedy = compile_program(program, TOY, CompileOptions(streams="single", memory="greedy"))
    assert one.memory.regions == greedy.memory.regions


def _without(sp: StreamProgram, index: int) -> StreamProgram:
    commands = sp.commands[:index] + sp.commands[index + 1 :]
    return replace(sp, commands=commands)


@pytest.mark.slow
@given(programs(), st.sampled_from(POLICIES), st.sampled_from(MEMORY))
@settings(max_examples=25)
def test_every_inserted_wait_is_needed(program, policy, memory):
    for device, reorder in ((TOY, False), (REORDER, True)):
        sp = compile_program(program, device, CompileOptions(streams=policy, memory=memory))
        for i, c in enumerate(sp.commands):
            if isinstance(c, Wait | Barrier):
                mutated = check_races(_without(sp, i), reorder=reorder)
                assert mutated.races, (
                    f"{policy}/{memory}: command {i} ({c}) was not needed\n" + format_listing(sp)
                )


@given(programs())
@settings(max_examples=10)
def test_json_round_trip(program):
    sp = compile_program(program, TOY, CompileOptions(streams="list", memory="greedy"))
    again = StreamProgram.from_json(sp.to_json())
    assert again == sp
    assert again.to_json() == sp.to_json()


def test_single_stream_needs_no_events():

    program = _chain_program()
    sp = compile_program(program, TOY, CompileOptions(streams="single"))
    assert sp.num_events == 0
    assert sp.meta["barriers"]["waits"] == 0


def test_by_unit_orders_cube_to_vector_handoffs_with_events():
    program = _chain_program()
    sp = compile_program(program, TOY, CompileOptions(streams="by-unit", opt_level=0))
    # h2d(dma) -> matmul(cube) -> relu(vector) -> matmul(cube) -> d2h(dma): 4 stream changes.
    assert sp.meta["barriers"]["waits"] == 4
    assert check_races(sp).ok


def _chain_program():
    from rtgraph.ir import OpNode, Program, Tensor, TensorType

    t = TensorType((16, 16), "f32")
    tensors = {
        "x": Tensor("x", t, "input"),
        "w": Tensor("w", t, "param"),
        "h": Tensor("h", t, "value"),
        "r": Tensor("r", t, "value"),
        "y": Tensor("y", t, "value"),
    }
    nodes = [
        OpNode("matmul", ("x", "w"), "h", {}),
        OpNode("relu", ("h",), "r", {}),
        OpNode("matmul", ("r", "w"), "y", {}),
    ]
    return Program("chain", {}, None, tensors, nodes, ["y"])


@pytest.mark.parametrize("policy", POLICIES)
def test_memory_reuse_false_dependencies_are_ordered(policy):
    """With greedy planning, later tensors reuse dead tensors' bytes: the WAR/WAW hazards this
    creates must be ordered like true dependencies."""
    program = _chain_program()
    sp = compile_program(program, TOY, CompileOptions(streams=policy, memory="greedy"))
    assert check_races(sp).ok
    none = compile_program(program, TOY, CompileOptions(streams=policy, memory="none"))
    assert sp.memory.total_bytes <= none.memory.total_bytes


@given(programs(), st.sampled_from(POLICIES), st.sampled_from(MEMORY))
@settings(max_examples=30)
def test_emulated_results_equal_the_reference_bit_for_bit(program, policy, memory):
    """The brief's end-to-end invariant: compile, run on the emulated device (in order and
    with a reorder window), and get exactly the reference interpreter's outputs, with the
    dynamic race detector silent."""
    from rtgraph.emulator import run

    reference = rtgraph.evaluate(program, seed=3)
    for device in (TOY, REORDER):
        sp = compile_program(program, device, CompileOptions(streams=policy, memory=memory))
        result = run(sp, device, seed=3)
        assert not result.races, result.races
        for name, want in reference.items():
            got = result.outputs[name]
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.array_equal(got, want, equal_nan=True), name


@pytest.mark.slow
def test_streams_that_never_meet_reuse_memory_in_pools_of_their_own():
    # Eight independent chains on eight streams: no stream ever waits for another, so no
    # tensor's bytes could pass to another stream without a new dependency — but each
    # stream reuses its own, as a stream-ordered allocator does per stream.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from compile_scaling import program_text

    import rtgraph

    program = rtgraph.parse(program_text(1000), "chains.rtg")
    device = rtgraph.device("ascend-910b")
    written = {"streams": "list", "opt_level": 0}  # the chains as written, not fused
    ordered = compile_program(program, device, CompileOptions(memory="stream-ordered", **written))
    alone = compile_program(program, device, CompileOptions(memory="none", **written))
    assert len(ordered.streams) == 8
    assert ordered.meta["barriers"]["waits"] == alone.meta["barriers"]["waits"]
    assert ordered.meta["memory"]["pool_bytes"] * 20 < alone.meta["memory"]["pool_bytes"]
    assert check_races(ordered).ok


@pytest.mark.slow
def test_timed_reuse_saves_what_stream_ordered_cannot_under_list():
    # Under list the Cube stream runs ahead of the Vector's, so happens-before frees little;
    # the replayed timeline frees a tensor once its last reader is done. At the model's shapes
    # the device is the bottleneck and the waits this adds cost no time (at S = 256 the host
    # is, and each wait's ioctl does).
    program = rtgraph.load(MODELS / "attention.rtg")
    device = load_device("ascend-910b")
    runs = {}
    for memory in ("stream-ordered", "timed"):
        sp = compile_program(
            program, device, CompileOptions(streams="list", memory=memory, check=True)
        )
        runs[memory] = (sp, rtgraph.run(sp, device=device, numerics=False))
    (ordered, ordered_run), (timed, timed_run) = runs["stream-ordered"], runs["timed"]
    assert timed.memory.total_bytes < 0.8 * ordered.memory.total_bytes
    assert timed_run.makespan_us <= 1.02 * ordered_run.makespan_us
    assert timed.meta["barriers"]["waits"] >= ordered.meta["barriers"]["waits"]
