"""An ONNX model loaded and run directly — ``rtgraph.load("model.onnx")`` and
``rtgraph run model.onnx`` — with the model's weights travelling with the program."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import rtgraph  # noqa: E402
from rtgraph.cli import main  # noqa: E402
from rtgraph.errors import InputError  # noqa: E402
from rtgraph.frontend.onnx_import import OnnxProgram  # noqa: E402

RNG = np.random.default_rng(3)
W = RNG.standard_normal((4, 3)).astype(np.float32)
B = RNG.standard_normal(3).astype(np.float32)


def linear(tmp_path: Path, batch: int | str = 2) -> Path:
    """y = relu(x @ W + B) with x of shape [batch, 4]."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x:0", "W"], ["h"]),
            helper.make_node("Add", ["h", "B"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"]),
        ],
        "linear",
        [helper.make_tensor_value_info("x:0", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        initializer=[numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "linear.onnx"
    onnx.save(model, path)
    return path


def expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ W + B, 0)


def test_load_gives_a_program_with_the_model_s_weights(tmp_path):
    program = rtgraph.load(linear(tmp_path), device="toy")
    assert isinstance(program, OnnxProgram) and isinstance(program, rtgraph.Program)
    assert sorted(program.weights) == ["B", "W"]
    np.testing.assert_array_equal(program.weights["W"], W)
    assert program.onnx_inputs == {"x_0": "x:0"} and program.onnx_outputs == {"y": "y"}
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    compiled = rtgraph.compile(program, streams="by-unit")
    ran = rtgraph.run(compiled, inputs={"x_0": x}, params=program.weights)
    np.testing.assert_allclose(ran.outputs["y"], expected(x), rtol=1e-6, atol=1e-6)


def test_load_binds_a_named_dimension_and_refuses_an_unbound_one(tmp_path):
    path = linear(tmp_path, batch="batch")
    assert rtgraph.load(path, batch=5).tensors["x_0"].type.shape == (5, 4)
    with pytest.raises(InputError, match="dynamic dimension 'batch'"):
        rtgraph.load(path)


def test_the_cli_runs_a_model_with_its_own_weights(tmp_path, capsys, monkeypatch):
    given = {}
    run = rtgraph.api.run

    def spy(compiled, **kwargs):
        given.update(kwargs["params"])
        return run(compiled, **kwargs)

    monkeypatch.setattr(rtgraph.api, "run", spy)
    path = linear(tmp_path, batch="batch")
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x_0=x)
    args = ["run", str(path), "-D", "batch=3", "--inputs", str(tmp_path / "x.npz")]
    status = main([*args, "--json", "--check", "full", "--device", "toy"])
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    assert report["reference_equal"] == {"y": True}
    assert sorted(given) == ["B", "W"]
    np.testing.assert_array_equal(given["W"], W)


def test_the_cli_refuses_a_malformed_model_with_a_located_error(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07not a protobuf at all")
    assert main(["run", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "is not an ONNX model" in err and "Traceback" not in err


LIGHT = Path(onnx.__file__).parent / "backend/test/data/light"


@pytest.mark.skipif(not (LIGHT / "light_squeezenet.onnx").exists(), reason="onnx test data absent")
@pytest.mark.parametrize("streams", ["single", "by-unit", "by-unit:2", "list"])
def test_squeezenet_matches_onnx_s_output_under_every_stream_policy(streams):
    """Its 1,000 logits are equal in exact arithmetic: conv2d's f64 sums keep them equal, so the
    softmax is ONNX's 0.001 everywhere, on the emulated device under each policy."""
    program = rtgraph.load(LIGHT / "light_squeezenet.onnx")
    n = 3 * 224 * 224
    x = (np.arange(n, dtype=np.float32) / n).reshape(1, 3, 224, 224)
    compiled = rtgraph.compile(program, streams=streams)
    got = rtgraph.run(compiled, inputs={"data_0": x}, params=program.weights).outputs
    expected = numpy_helper.to_array(onnx.load_tensor(LIGHT / "light_squeezenet_output_0.pb"))
    np.testing.assert_allclose(got["softmaxout_1"], expected, rtol=1e-3)
