"""The submission-order pass: fewer ioctls, the same program.

Its contract is a re-linearisation that keeps each stream's order, each event id's order of
records and waits, and every host-blocking command in place — so the device computes the same
thing — and that batches each stream's commands into runs the host can submit whole.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np
import pytest
from conftest import MODELS
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import programs

import rtgraph
from rtgraph.compiler import CompileOptions, compile_program
from rtgraph.compiler.passes.order_submissions import order_submissions
from rtgraph.device import load_device
from rtgraph.emulator import run
from rtgraph.stream_program import Alloc, Free, Record, Sync, Wait
from rtgraph.stream_program.races import check_races

TOY = load_device("toy")
UNBATCHED = replace(TOY, host=replace(TOY.host, batch_size=1))  # the pass leaves order alone


def _per_stream(commands):
    out = defaultdict(list)
    for c in commands:
        if not isinstance(c, Sync):
            out[c.stream].append(c)
    return dict(out)


def _captures(commands):
    """Each wait (as stream, place in its stream) → the record it captures (the same)."""
    place: dict[int, int] = defaultdict(int)
    latest: dict[int, tuple[int, int]] = {}
    out = {}
    for c in commands:
        if isinstance(c, Sync):
            continue
        here = (c.stream, place[c.stream])
        place[c.stream] += 1
        if isinstance(c, Record):
            latest[c.event] = here
        elif isinstance(c, Wait):
            out[here] = latest.get(c.event)
    return out


def _shape(c):
    return (type(c).__name__, getattr(c, "stream", None), getattr(c, "task", None))


def _blocking_positions(commands):
    return [(k, c) for k, c in enumerate(commands) if isinstance(c, Sync | Alloc | Free)]


def assert_same_program(before, after):
    assert sorted(map(_shape, before.commands)) == sorted(map(_shape, after.commands))
    assert {s: list(map(_shape, cs)) for s, cs in _per_stream(before.commands).items()} == {
        s: list(map(_shape, cs)) for s, cs in _per_stream(after.commands).items()
    }
    assert _captures(before.commands) == _captures(after.commands)
    assert _blocking_positions(before.commands) == _blocking_positions(after.commands)


@given(programs(), st.sampled_from(["by-unit", "by-unit:2", "list"]), st.sampled_from([2, 8]))
@settings(max_examples=30)
def test_reordering_keeps_stream_event_and_host_order_and_the_results(program, policy, batch):
    plain = compile_program(program, UNBATCHED, CompileOptions(streams=policy))
    ordered = order_submissions(plain, CompileOptions(batch_size=batch).for_device(TOY))
    assert_same_program(plain, ordered)
    assert check_races(ordered).ok
    reference = rtgraph.evaluate(program, seed=1)
    result = run(ordered, TOY, seed=1)
    assert not result.races
    for name, want in reference.items():
        assert np.array_equal(result.outputs[name], want, equal_nan=True), name


@pytest.mark.parametrize("model", ["overlap", "address_conflict", "llm_decode"])
def test_explicit_streams_syncs_and_runtime_allocation_keep_their_places(model):
    device = rtgraph.device()
    program = rtgraph.load(MODELS / f"{model}.rtg", **({"L": 1} if model == "llm_decode" else {}))
    for alloc in ("static", "pool"):
        plain = compile_program(
            program,
            replace(device, host=replace(device.host, batch_size=1)),
            CompileOptions(alloc=alloc),
        )
        ordered = order_submissions(plain, CompileOptions().for_device(device))
        assert_same_program(plain, ordered)
        assert check_races(ordered).ok


def test_runs_of_one_stream_cut_the_ioctls_of_a_list_schedule():
    # The list scheduler orders tasks by start time, interleaving the streams command by
    # command; the pass gathers them into runs.
    device = rtgraph.device()
    program = rtgraph.load(MODELS / "transformer_block.rtg", S=256)
    unbatched = replace(device, host=replace(device.host, batch_size=1))
    plain = compile_program(program, unbatched, CompileOptions(streams="list"))
    ordered = order_submissions(plain, CompileOptions().for_device(device))
    interleaved = run(plain, device, numerics=False)
    batched = run(ordered, device, numerics=False)
    assert batched.host.ioctls < interleaved.host.ioctls
    assert batched.host.busy_us < interleaved.host.busy_us
    assert batched.makespan_us <= interleaved.makespan_us


def test_one_stream_or_batch_one_is_left_alone():
    program = rtgraph.load(MODELS / "mlp.rtg")
    single = compile_program(program, TOY, CompileOptions(streams="single"))
    assert order_submissions(single, CompileOptions(batch_size=8).for_device(TOY)) is single
    by_unit = compile_program(program, UNBATCHED, CompileOptions(streams="by-unit"))
    assert order_submissions(by_unit, CompileOptions(batch_size=1).for_device(TOY)) is by_unit
