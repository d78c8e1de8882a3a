"""Kernels writing straight into device memory: only where no task could tell (issue 14).

A numeric run stages each kernel's result and writes it when the task finishes, so a racing
reader sees the old bytes, as on hardware. A program the static race checker proves race-free
cannot observe when the bytes land, so its kernels write at start, with no staging copy; a
racy program, an injected fault or a non-finite check keeps the staging.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import MODELS

import rtgraph
from rtgraph.emulator import numerics as numerics_module
from rtgraph.emulator import simulate
from rtgraph.errors import KernelFault
from rtgraph.stream_program import Wait

DEVICE = "ascend-910b"


def _compiled(model: str = "overlap.rtg", streams: str = "by-unit"):
    program = rtgraph.load(MODELS / model, device=DEVICE)
    return program, rtgraph.compile(program, device=DEVICE, streams=streams)


def _recording(monkeypatch) -> list[numerics_module.Numerics]:
    """The Numerics objects the runs make, kept to look at their plans."""
    made: list[numerics_module.Numerics] = []

    class Recorded(numerics_module.Numerics):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(simulate, "Numerics", Recorded)
    return made


def _direct_tasks(nums: numerics_module.Numerics) -> int:
    return sum(1 for p in nums._plans if p is not None and p[0] == numerics_module._DIRECT)


@pytest.mark.parametrize("model", ["overlap.rtg", "transformer_block.rtg", "mlp_train.rtg"])
def test_a_race_free_program_writes_direct_and_gets_the_same_bits(monkeypatch, model):
    program, compiled = _compiled(model)
    assert simulate.race_free(compiled, rtgraph.device(DEVICE))
    made = _recording(monkeypatch)
    direct = rtgraph.run(compiled, seed=3)
    assert _direct_tasks(made[-1]) > 0
    monkeypatch.setattr(simulate, "race_free", lambda p, d: False)  # force the staging
    staged = rtgraph.run(compiled, seed=3)
    assert _direct_tasks(made[-1]) == 0
    assert direct.outputs.keys() == staged.outputs.keys() == set(program.outputs)
    for name, value in direct.outputs.items():
        assert np.array_equal(value, staged.outputs[name], equal_nan=True)
    assert direct.makespan_us == staged.makespan_us  # the numbers never move the clock


def test_direct_writes_reproduce_the_interpreter_bit_for_bit():
    program, compiled = _compiled("overlap.rtg")
    result = rtgraph.run(compiled, seed=5)
    reference = rtgraph.reference(program, check="full", seed=5)
    for name, value in reference.items():
        assert np.array_equal(result.outputs[name], value, equal_nan=True)


def test_a_racy_program_keeps_the_staging_and_its_wrong_answer(monkeypatch):
    program, compiled = _compiled()
    reference = rtgraph.reference(program, seed=1)
    made = _recording(monkeypatch)
    wrong = 0
    waits = [i for i, c in enumerate(compiled.commands) if isinstance(c, Wait)]
    assert waits
    for i in waits:
        broken = replace(compiled, commands=compiled.commands[:i] + compiled.commands[i + 1 :])
        assert not simulate.race_free(broken, rtgraph.device(DEVICE))
        result = rtgraph.run(broken, seed=1)
        assert _direct_tasks(made[-1]) == 0
        wrong += any(
            not np.array_equal(result.outputs[n], v, equal_nan=True) for n, v in reference.items()
        )
    assert wrong, "some deleted wait must corrupt an output, as it would on hardware"


@pytest.mark.parametrize(
    "options", [{"faults": [0]}, {"check_finite": True}], ids=["fault", "check_finite"]
)
def test_faults_and_finite_checks_keep_the_staging(monkeypatch, options):
    _, compiled = _compiled()
    made = _recording(monkeypatch)
    if "faults" in options:
        with pytest.raises(KernelFault):  # reported after the run, which kept going
            rtgraph.run(compiled, seed=0, **options)
    else:
        rtgraph.run(compiled, seed=0, **options)
    assert made and _direct_tasks(made[-1]) == 0


def test_the_overlap_that_keeps_a_task_staged_is_byte_exact():
    overlap = numerics_module._overlap
    assert overlap(((0, 64),), ((32, 96),))
    assert overlap(((0, 8), (100, 200)), ((150, 160),))
    assert not overlap(((0, 64),), ((64, 128),))
    assert not overlap((), ((0, 8),))
