"""Run-time allocation (``--alloc``): every allocator serves every model correctly, and its
latency shows on the host lane."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import MODELS

import rtgraph
from rtgraph.stream_program import Alloc, Free, Launch
from rtgraph.stream_program.races import check_races

MODES = ("direct", "pool", "pytorch", "buddy", "mixed")
SMALL = {
    "attention": {"S": 64, "D": 128, "H": 4},
    "attention_naive": {"S": 64, "D": 128, "H": 4},
    "transformer_naive": {"S": 64, "D": 128, "H": 4, "F": 512},
    "bert_encoder": {"S": 64, "D": 128, "H": 4, "F": 512},
    "llm_decode_loop": {"L": 2, "D": 128, "H": 4, "T": 32, "F": 256, "V": 512, "STEPS": 4},
}


def _models():
    return sorted(p.stem for p in MODELS.glob("*.rtg"))


@pytest.mark.slow
@pytest.mark.parametrize("model", _models())
@pytest.mark.parametrize("mode", MODES)
def test_every_model_runs_under_every_alloc_mode(model, mode):
    program = rtgraph.load(MODELS / f"{model}.rtg", device="ascend-910b", **SMALL.get(model, {}))
    reference = rtgraph.evaluate(rtgraph.as_checked(program), seed=2)  # batchnorms folded
    assert not any(np.isnan(v).any() for v in reference.values())  # NaN == NaN hides nothing
    compiled = rtgraph.compile(program, alloc=mode, check=True)
    assert check_races(compiled).ok
    result = rtgraph.run(compiled, seed=2)
    assert not result.races
    for name, want in reference.items():
        assert np.array_equal(result.outputs[name], want, equal_nan=True), (model, mode, name)


def _mlp():
    return rtgraph.load(MODELS / "mlp.rtg", device="ascend-910b")


def test_allocs_come_before_the_producer_and_frees_after_the_last_use():
    compiled = rtgraph.compile(_mlp(), alloc="pool", streams="single")
    alive: set[str] = set()
    for c in compiled.commands:
        if isinstance(c, Alloc):
            alive.add(c.tensor)
        elif isinstance(c, Free):
            alive.discard(c.tensor)
        elif isinstance(c, Launch):
            task = compiled.tasks[c.task]
            for op in (*task.inputs, *([task.output] if task.output else [])):
                base = compiled.memory.regions.get(op.tensor)
                if base is not None and base.kind in ("input", "value"):
                    assert op.tensor in alive, f"{op.tensor} used while not allocated"


def test_direct_allocation_costs_the_host_about_fifty_times_the_pool():
    spec = rtgraph.device("ascend-910b")
    per = {}
    for mode in ("direct", "pool"):
        compiled = rtgraph.compile(_mlp(), alloc=mode, streams="single")
        result = rtgraph.run(compiled, numerics=False)
        allocs = [a for a in result.host_activities if a.kind == "alloc"]
        n = sum(isinstance(c, Alloc) for c in compiled.commands)
        assert len(allocs) == n > 0
        per[mode] = sum(a.end - a.start for a in allocs) / n
    assert per["direct"] == pytest.approx(spec.memory.direct_alloc_us)
    # Pool: ≈1 µs a hit; the few that grow a segment pay the driver's latency too.
    assert spec.memory.pool_alloc_us <= per["pool"] < per["direct"] / 4
    assert per["direct"] / per["pool"] > 4


def test_mixed_puts_params_on_direct_allocation_and_activations_on_the_pool():
    compiled = rtgraph.compile(_mlp(), alloc="mixed")
    by_kind = {c.tensor: c.allocator for c in compiled.commands if isinstance(c, Alloc)}
    program = _mlp()
    for name, tensor in program.tensors.items():
        if name in by_kind:
            want = "direct" if tensor.kind in ("param", "const") else "pool"
            assert by_kind[name] == want, name


def test_unknown_alloc_mode_is_a_usage_error():
    with pytest.raises(rtgraph.RtgError, match="unknown allocation mode"):
        rtgraph.compile(_mlp(), alloc="slab")
