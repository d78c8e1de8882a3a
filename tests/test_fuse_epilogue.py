"""Cube epilogue fusion (issue 16, item 3): a matmul or conv2d and the bias / scale / activation
the device's Cube output path applies become one Cube task — bit-equal to the unfused program,
Vector tasks gone and Cube tasks as many as before, only what ``[units.cube] epilogues`` lists,
and a Cube body read from JSON checked step by step.

The pass's IR in → IR out cases are in ``tests/optimizer/fuse_epilogue.txt``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import MODELS

import rtgraph
from rtgraph.compiler import CompileOptions
from rtgraph.compiler.optimizer.fuse_epilogue import fuse_epilogue
from rtgraph.compiler.optimizer.levels import LEVELS
from rtgraph.device import load_device
from rtgraph.errors import DeviceSpecError, StreamProgramError
from rtgraph.ir.graph import OpNode
from rtgraph.reports.explain import explain
from rtgraph.stream_program import StreamProgram

TOY = load_device("toy")
#: ``-O1`` with and without this pass.
WITH = LEVELS[1]
WITHOUT = tuple(p for p in WITH if p != "fuse_epilogue")

FFN = """program ffn(S = 8, D = 16) {
    input x : f16[S, D]
    param w : f16[D, D]
    param b : f16[D]
    output y = gelu(x @ w + b)
}"""


def _equal(result, reference) -> None:
    """Every output of the emulated ``result`` equals the reference's bit for bit."""
    for name, want in reference.items():
        got = result.outputs[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got, want, equal_nan=True), name


def _units(compiled) -> dict[str, int]:
    count: dict[str, int] = {}
    for t in compiled.tasks:
        count[t.unit] = count.get(t.unit, 0) + 1
    return count


@pytest.mark.parametrize(
    "model, params, device",
    [
        ("mlp", {"B": 64}, "toy"),  # bias and GELU fuse
        ("mlp", {"B": 64}, "ascend-910b"),  # bias and ReLU fuse, GELU stays on the Vector
        ("transformer_block", {"S": 128}, "toy"),
    ],
)
def test_models_at_o1_equal_the_reference_bit_for_bit(model, params, device):
    program = rtgraph.load(MODELS / f"{model}.rtg", params=params, device=device)
    options = CompileOptions(opt_level=1, streams="by-unit")
    compiled = rtgraph.compile(program, device=device, options=options)
    assert any(t.op == "fused" and t.unit == "cube" for t in compiled.tasks)
    _equal(rtgraph.run(compiled, device=device), rtgraph.evaluate(program))


@pytest.mark.parametrize("model, params", [("mlp", {"B": 64}), ("transformer_block", {"S": 128})])
def test_the_cube_keeps_its_task_count_and_the_vector_loses_tasks(model, params):
    program = rtgraph.load(MODELS / f"{model}.rtg", params=params, device="toy")
    fused, plain = (
        _units(rtgraph.compile(program, device=TOY, options=CompileOptions(passes=passes)))
        for passes in (WITH, WITHOUT)
    )
    assert fused["cube"] == plain["cube"]
    assert fused["vector"] < plain["vector"], (fused, plain)


def _spec(tmp_path, epilogues: str):
    path = tmp_path / "npu.toml"
    path.write_text(
        f'extends = "toy"\n[device]\nname = "npu"\n[units.cube]\nepilogues = {epilogues}\n'
    )
    return load_device(str(path))


def test_an_epilogue_outside_the_vocabulary_is_refused_where_it_is_written(tmp_path):
    with pytest.raises(DeviceSpecError) as e:
        _spec(tmp_path, '["bias", "quantize"]')
    assert "npu.toml:5:1: error: units.cube.epilogues: expected a list of epilogues from " in (
        str(e.value)
    )


def test_a_device_without_epilogues_fuses_nothing(tmp_path):
    program = rtgraph.parse(FFN)
    options = CompileOptions(passes=("fuse_epilogue",)).for_device(_spec(tmp_path, "[]"))
    assert fuse_epilogue(program, options) is program


def test_only_the_epilogues_the_device_lists_are_fused(tmp_path):
    program = rtgraph.parse(FFN)
    options = CompileOptions(passes=("fuse_epilogue",)).for_device(_spec(tmp_path, '["bias"]'))
    nodes = [n for n in fuse_epilogue(program, options).nodes if isinstance(n, OpNode)]
    assert [n.op for n in nodes] == ["fused", "gelu"]
    assert [step[0] for step in nodes[0].attrs["body"]] == ["matmul", "add"]


def test_the_cube_task_costs_its_matmul_and_reads_each_input_once():
    program = rtgraph.parse(FFN)
    compiled = rtgraph.compile(program, device=TOY, options=CompileOptions(opt_level=1))
    (task,) = [t for t in compiled.tasks if t.unit == "cube"]
    assert task.op == "fused" and task.attrs["unit"] == "cube"
    assert task.flops == 2 * 8 * 16 * 16  # the head's; the epilogue is free
    assert task.bytes_read == (8 * 16 + 16 * 16 + 16) * 2  # x, w, b once
    assert task.bytes_written == 8 * 16 * 2
    assert not [t for t in compiled.tasks if t.unit == "vector"]


def test_the_fused_op_stands_where_its_last_input_is_ready():
    """A bias computed after the matmul: the fused op moves to the chain's end, and is exact."""
    source = FFN.replace("x @ w + b", "x @ w + b * 2.0")
    program = rtgraph.parse(source)
    optimized = fuse_epilogue(program, CompileOptions().for_device(TOY))
    ops = [n.op for n in optimized.nodes if isinstance(n, OpNode)]
    assert ops == ["mul", "fused"]
    compiled = rtgraph.compile(program, device=TOY, options=CompileOptions(opt_level=1))
    _equal(rtgraph.run(compiled, device=TOY), rtgraph.evaluate(program))


def test_explain_names_the_cube_task():
    program = rtgraph.parse(FFN)
    report = explain(program, CompileOptions(passes=("fuse_epilogue",)).for_device(TOY))
    assert "fused 3 ops into the Cube task 'y' (line 5): matmul(x, w) → add(·, b) → gelu(·)" in (
        report
    )


# --- a Cube body read from JSON is untrusted ---------------------------------------------------


def _cube_task(program_text: str = FFN) -> tuple[dict, int]:
    program = rtgraph.parse(program_text)
    compiled = rtgraph.compile(program, device=TOY, options=CompileOptions(opt_level=1))
    data = json.loads(compiled.to_json())
    k = next(i for i, t in enumerate(data["tasks"]) if t["attrs"].get("unit") == "cube")
    return data, k


def _refusal(data: dict) -> str:
    with pytest.raises(StreamProgramError) as e:
        StreamProgram.from_json(json.dumps(data))
    return str(e.value)


@pytest.mark.parametrize(
    "where, value, message",
    [
        (("body", 1, 0), "exp", "fused: body step 1: exp is not an epilogue of the step before"),
        (("body", 0, 0), "add", "fused: body step 0: a Cube body starts with matmul or conv2d"),
        (("body", 2, 0), "matmul", "fused: body step 2: 'matmul' is not an epilogue"),
        (("body", 2, 1), [0], "fused: body step 2: gelu is not an epilogue of the step before"),
        (("unit",), "dma", "fused: unit must be 'vector' or 'cube', got 'dma'"),
    ],
)
def test_a_tampered_cube_body_is_refused_with_its_json_path(where, value, message):
    data, k = _cube_task()
    attrs = data["tasks"][k]["attrs"]
    if where == ("unit",):
        data["tasks"][k]["unit"] = value  # the task's unit agrees, the body does not fit
    target = attrs
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    text = _refusal(data)
    assert f"tasks[{k}]" in text and message in text, text


def test_a_cube_body_off_the_cube_is_refused():
    data, k = _cube_task()
    data["tasks"][k]["unit"] = "vector"
    assert f"tasks[{k}].unit: op 'fused' runs on 'cube', got 'vector'" in _refusal(data)
    data["tasks"][k]["attrs"]["unit"] = "vector"
    assert "fused: body step 0: 'matmul' is not a fusible op" in _refusal(data)


def test_an_epilogue_applied_twice_or_after_the_activation_is_refused():
    data, k = _cube_task()
    body = data["tasks"][k]["attrs"]["body"]
    body.append(["relu", [len(data["tasks"][k]["inputs"]) + 2], [], "f16", [8, 16]])
    assert "fused: body step 3: relu after bias, gelu: each epilogue once, an activation last" in (
        _refusal(data)
    )
