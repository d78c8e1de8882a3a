"""ONNX import: models built with onnx.helper become .rtg programs that compute what ONNX does."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import rtgraph  # noqa: E402
from rtgraph.errors import InputError  # noqa: E402
from rtgraph.frontend.onnx_import import import_onnx, rtg_name  # noqa: E402


def save(tmp_path: Path, nodes, inputs, outputs, inits=(), opset: int = 13, name="m") -> Path:
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


def evaluate(path: Path, inputs: dict[str, np.ndarray], device: str = "toy") -> dict:
    """The imported model's outputs by ONNX name: the reference interpreter's, and the
    emulated device's (by-unit streams), which must agree bit for bit."""
    imported = import_onnx(path, device=device)
    program = rtgraph.parse(imported.text, filename=f"{imported.name}.rtg")
    by_rtg = {r: inputs[o] for r, o in imported.inputs.items()}
    reference = rtgraph.evaluate(program, inputs=by_rtg, params=imported.params)
    compiled = rtgraph.compile(program, streams="by-unit")
    ran = rtgraph.run(compiled, inputs=by_rtg, params=imported.params).outputs
    for name in imported.outputs:
        np.testing.assert_array_equal(ran[name], reference[name])
    return {o: reference[r] for r, o in imported.outputs.items()}


RNG = np.random.default_rng(0)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_a_small_cnn_computes_what_numpy_does(tmp_path):
    w, b, g, c = normal(8, 3, 3, 3), normal(8), normal(10, 128), normal(10)
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "G", "C"], ["g"], transB=1, alpha=0.5, beta=2.0),
        helper.make_node("Dropout", ["g"], ["d"]),
        helper.make_node("Softmax", ["d"], ["y"], axis=1),
    ]
    path = save(
        tmp_path,
        nodes,
        [("x", [1, 3, 8, 8])],
        [("y", [1, 10])],
        [("W", w), ("B", b), ("G", g), ("C", c)],
        opset=9,
    )
    x = normal(1, 3, 8, 8)
    # the same network in NumPy, in float64
    cols = np.lib.stride_tricks.sliding_window_view(
        np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64), (3, 3), axis=(2, 3)
    )
    conv = np.einsum("nchwij,ocij->nohw", cols, w) + b.reshape(1, 8, 1, 1)
    pooled = np.maximum(conv, 0).reshape(1, 8, 4, 2, 4, 2).max(axis=(3, 5))
    logits = 0.5 * pooled.reshape(1, 128) @ g.T + 2.0 * c
    got = evaluate(path, {"x": x})["y"]
    np.testing.assert_allclose(got, softmax(logits, 1), rtol=1e-5, atol=1e-7)


def test_the_emitted_program_is_readable_and_keeps_the_node_names(tmp_path):
    nodes = [helper.make_node("Relu", ["gpu_0/data_0"], ["in"], name="first relu")]
    path = save(tmp_path, nodes, [("gpu_0/data_0", [2, 3])], [("in", [2, 3])], name="7up")
    imported = import_onnx(path)
    assert imported.name == "v7up"
    assert imported.inputs == {"gpu_0_data_0": "gpu_0/data_0"}
    assert imported.outputs == {"in_": "in"}  # `in` is a keyword
    assert "    in_ = relu(gpu_0_data_0)  # Relu 'first relu'" in imported.text.splitlines()
    assert "    input  gpu_0_data_0 : f32[2, 3]" in imported.text.splitlines()


def test_names_are_made_legal_and_unique():
    taken: set[str] = set()
    assert [rtg_name(n, taken) for n in ("a.b", "a-b", "1x", "fn", "a_b")] == [
        "a_b",
        "a_b_2",
        "v1x",
        "fn_",
        "a_b_3",
    ]


@pytest.mark.parametrize("opset", [9, 13])
def test_softmax_follows_the_opset(tmp_path, opset):
    """Before opset 13 Softmax normalises the input flattened from its axis on; from 13, the
    axis alone."""
    nodes = [helper.make_node("Softmax", ["x"], ["y"], axis=1)]
    path = save(tmp_path, nodes, [("x", [2, 3, 4])], [("y", [2, 3, 4])], opset=opset)
    x = normal(2, 3, 4)
    expected = softmax(x.reshape(2, 12), 1).reshape(2, 3, 4) if opset < 13 else softmax(x, 1)
    np.testing.assert_allclose(evaluate(path, {"x": x})["y"], expected, rtol=1e-6)


@pytest.mark.parametrize(
    ("trans_a", "trans_b", "alpha", "beta"), [(0, 0, 1.0, 1.0), (1, 0, 2.0, 0.5), (1, 1, 1.0, 0.0)]
)
def test_gemm_attributes(tmp_path, trans_a, trans_b, alpha, beta):
    a = normal(4, 3) if trans_a else normal(3, 4)
    b = normal(5, 4) if trans_b else normal(4, 5)
    c = normal(5)
    nodes = [
        helper.make_node(
            "Gemm", ["a", "B", "C"], ["y"], transA=trans_a, transB=trans_b, alpha=alpha, beta=beta
        )
    ]
    path = save(tmp_path, nodes, [("a", list(a.shape))], [("y", [3, 5])], [("B", b), ("C", c)])
    expected = alpha * (a.T if trans_a else a) @ (b.T if trans_b else b) + beta * c
    np.testing.assert_allclose(evaluate(path, {"a": a})["y"], expected, rtol=1e-5, atol=1e-6)


def test_shape_computations_are_folded_into_constants(tmp_path):
    """The Shape → Gather → Unsqueeze → Concat → Reshape chain a PyTorch export writes for
    ``x.view(x.size(0), -1)`` becomes one reshape with static dims."""
    i64 = TensorProto.INT64
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", i64, [], [0])),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("a", i64, [1], [0])),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Constant", [], ["m1"], value=helper.make_tensor("m", i64, [1], [-1])),
        helper.make_node("Concat", ["n1", "m1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    path = save(tmp_path, nodes, [("x", [2, 3, 4])], [("y", [2, 12])])
    imported = import_onnx(path)
    body = [line for line in imported.text.splitlines() if " = " in line and "#" in line]
    assert body == ["    y = reshape(x, [2, -1])  # Reshape"]
    x = normal(2, 3, 4)
    np.testing.assert_array_equal(evaluate(path, {"x": x})["y"], x.reshape(2, 12))


def test_batchnorm_concat_pooling_and_sum(tmp_path):
    gamma, beta, mean, var = normal(4), normal(4), normal(4), np.abs(normal(4)) + 0.5
    nodes = [
        helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["n"], epsilon=1e-3),
        helper.make_node("Concat", ["n", "x"], ["c"], axis=1),
        helper.make_node(
            "AveragePool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0]
        ),
        helper.make_node("GlobalAveragePool", ["p"], ["q"]),
        helper.make_node("Sum", ["q", "q", "q"], ["y"]),
    ]
    inits = [("g", gamma), ("b", beta), ("m", mean), ("v", var)]
    path = save(tmp_path, nodes, [("x", [1, 4, 4, 4])], [("y", [1, 8, 1, 1])], inits)
    x = normal(1, 4, 4, 4)
    per_channel = (slice(None), None, None)
    n = (x - mean[per_channel]) / np.sqrt(var[per_channel] + 1e-3) * gamma[per_channel]
    c = np.concatenate([n + beta[per_channel], x], axis=1)
    q = c.reshape(1, 8, 2, 2, 2, 2).mean(axis=(3, 5)).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(evaluate(path, {"x": x})["y"], 3 * q, rtol=1e-5, atol=1e-6)


# --- what the importer refuses, located in the model --------------------------------------


def test_an_unsupported_op_names_itself_its_node_and_opset(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("LpNormalization", ["r"], ["y"], name="norm"),
    ]
    path = save(tmp_path, nodes, [("x", [2, 3])], [("y", [2, 3])], opset=13)
    with pytest.raises(InputError) as caught:
        import_onnx(path)
    err = caught.value
    assert "op 'LpNormalization' (opset 13)" in err.message
    assert (err.span.line, err.span.text_line()) == (2, "%y = LpNormalization(%r)  # node 'norm'")
    shown = err.render()
    assert f"{path} (nodes):2:6: error:" in shown
    assert "     ^^^^^^^^^^^^^^^" in shown  # under the op's name
    assert err.hint


def test_an_attribute_rtgraph_cannot_honour_is_refused_not_ignored(tmp_path):
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], ceil_mode=1)]
    path = save(tmp_path, nodes, [("x", [1, 1, 8, 8])], [("y", [1, 1, 6, 6])])
    with pytest.raises(InputError, match="ceil_mode"):
        import_onnx(path)


def test_a_dynamic_dimension_must_be_bound(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    path = save(tmp_path, nodes, [("x", ["batch", 3])], [("y", ["batch", 3])])
    with pytest.raises(InputError, match="dynamic dimension 'batch'") as caught:
        import_onnx(path)
    assert "NAME=SIZE" in caught.value.hint
    imported = import_onnx(path, dims={"batch": 5})
    assert "    input  x : f32[5, 3]" in imported.text.splitlines()


def test_a_file_that_is_no_model_is_an_input_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage\xff\xff\xff")
    with pytest.raises(InputError, match="not an ONNX model"):
        import_onnx(bad)
    with pytest.raises(InputError, match="cannot read"):
        import_onnx(tmp_path / "missing.onnx")


def test_custom_domains_and_external_data_are_refused(tmp_path):
    nodes = [helper.make_node("MyOp", ["x"], ["y"], domain="com.example")]
    graph = helper.make_graph(
        nodes,
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)],
    )
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)
    with pytest.raises(InputError, match=r"domain 'com\.example'"):
        import_onnx(path)

    weights = normal(1024)
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    path = save(tmp_path, nodes, [("x", [1024])], [("y", [1024])], [("w", weights)], name="ext")
    model = onnx.load(path)
    onnx.save(model, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    with pytest.raises(InputError, match="external file"):
        import_onnx(path)


LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend/test/data/light"


@pytest.mark.skipif(not (LIGHT / "light_resnet50.onnx").exists(), reason="onnx test data absent")
def test_resnet50_matches_the_output_onnx_ships():
    """ONNX's backend test data: the input is arange(n) / n, the expected output ships beside
    the model."""
    imported = import_onnx(LIGHT / "light_resnet50.onnx")
    program = rtgraph.parse(imported.text, filename="resnet50.rtg")
    (name,) = imported.inputs
    n = 1 * 3 * 224 * 224
    x = (np.arange(n, dtype=np.float32) / n).reshape(1, 3, 224, 224)
    got = rtgraph.evaluate(program, inputs={name: x}, params=imported.params)
    expected = numpy_helper.to_array(onnx.load_tensor(LIGHT / "light_resnet50_output_0.pb"))
    (out,) = imported.outputs
    np.testing.assert_allclose(got[out], expected, rtol=1e-3)


@pytest.mark.parametrize("size", [0, -1, 2**40, 1.5, True])
def test_a_dimension_is_bound_to_a_whole_positive_size(tmp_path, size):
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    path = save(tmp_path, nodes, [("x", ["batch", 3])], [("y", ["batch", 3])])
    with pytest.raises(InputError, match="dimension 'batch' bound to"):
        import_onnx(path, dims={"batch": size})


def test_the_cli_writes_the_program_and_its_weights_and_they_run(tmp_path, capsys):
    from rtgraph.cli import main

    w = normal(4, 3)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
    model = save(tmp_path, nodes, [("x", [2, 4])], [("y", [2, 3])], [("W", w)], name="mm")
    out = tmp_path / "mm.rtg"
    assert main(["import", str(model), "-o", str(out), "--device", "toy"]) == 0
    weights = tmp_path / "mm.params.npz"
    assert f"rtgraph run {out} --params {weights}" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(weights)["W"], w)
    program = rtgraph.load(out)
    assert [t.name for t in program.params_()] == ["W"]
    assert main(["run", str(out), "--params", str(weights), "--check", "full"]) == 0
    assert "bit-equal" in capsys.readouterr().out


def test_the_cli_refuses_a_bad_dim_and_a_missing_model(tmp_path, capsys):
    from rtgraph.cli import main

    assert main(["import", str(tmp_path / "none.onnx")]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "none.onnx"), "--dim", "batch"]) == 2
    assert "expected NAME=SIZE" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_batchnorm_after_a_conv_is_folded_into_its_weights_at_import(tmp_path):
    """As ATC converts it: one conv with weights W·s and bias (b − mean)·s + beta."""
    w, b = normal(4, 2, 3, 3), normal(4)
    gamma, beta, mean, var = normal(4), normal(4), normal(4), np.abs(normal(4)) + 0.5
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["y"], epsilon=1e-3),
    ]
    inits = [("W", w), ("B", b), ("g", gamma), ("be", beta), ("m", mean), ("v", var)]
    path = save(tmp_path, nodes, [("x", [1, 2, 5, 5])], [("y", [1, 4, 5, 5])], inits)
    imported = import_onnx(path)
    statements = [line.split("#")[0].strip() for line in imported.text.splitlines() if "# " in line]
    assert statements[-1] == "c = conv2d(x, y_w, stride = [1, 1], padding = [1, 1]) + y_b"
    assert "batchnorm" not in imported.text
    x = normal(1, 2, 5, 5)
    cols = np.lib.stride_tricks.sliding_window_view(
        np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64), (3, 3), axis=(2, 3)
    )
    conv = np.einsum("nchwij,ocij->nohw", cols, w) + b.reshape(1, 4, 1, 1)
    per = (slice(None), None, None)
    expected = (conv - mean[per]) / np.sqrt(var[per] + 1e-3) * gamma[per] + beta[per]
    np.testing.assert_allclose(evaluate(path, {"x": x})["y"], expected, rtol=1e-5, atol=1e-5)


def test_a_conv_read_twice_keeps_its_batchnorm(tmp_path):
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["n"]),
        helper.make_node("Add", ["n", "c"], ["y"]),
    ]
    ones = np.ones(2, np.float32)
    inits = [("W", normal(2, 2, 1, 1)), ("g", ones), ("be", ones), ("m", ones), ("v", ones)]
    path = save(tmp_path, nodes, [("x", [1, 2, 3, 3])], [("y", [1, 2, 3, 3])], inits)
    assert "batchnorm(c, g, be, m, v" in import_onnx(path).text
