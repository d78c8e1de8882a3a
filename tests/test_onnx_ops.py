"""ONNX ops of CNN layers and transformer graphs, each in a model built with onnx.helper: the
imported program computes what ONNX's own reference evaluator (onnx.reference) does, and the
emulated device agrees with rtgraph's reference interpreter bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import rtgraph  # noqa: E402
from rtgraph.errors import InputError  # noqa: E402
from rtgraph.frontend.onnx_import import import_onnx  # noqa: E402

RNG = np.random.default_rng(22)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def model(tmp_path: Path, node, inputs, inits=(), opset: int = 17, outputs=("y",)) -> Path:
    graph = helper.make_graph(
        [node] if not isinstance(node, list) else node,
        "m",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits],
    )
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / "m.onnx"
    onnx.save(made, path)
    return path


def ours(path: Path, inputs: dict[str, np.ndarray]) -> list:
    """rtgraph's outputs (reference interpreter, checked against the emulator under by-unit
    streams), in the graph's output order."""
    imported = import_onnx(path, device="toy")
    program = rtgraph.parse(imported.text, filename="m.rtg")
    by_rtg = {r: inputs[o] for r, o in imported.inputs.items()}
    ours = rtgraph.evaluate(program, inputs=by_rtg, params=imported.params)
    compiled = rtgraph.compile(program, streams="by-unit")
    ran = rtgraph.run(compiled, inputs=by_rtg, params=imported.params).outputs
    for name in imported.outputs:
        np.testing.assert_array_equal(ran[name], ours[name])
    return [ours[r] for r in imported.outputs]


def run_both(path: Path, inputs: dict[str, np.ndarray]) -> tuple[list, list]:
    """:func:`ours` and onnx.reference's outputs."""
    return ours(path, inputs), ReferenceEvaluator(str(path)).run(None, inputs)


def close(path: Path, inputs: dict[str, np.ndarray], tol: float = 1e-5) -> None:
    got, theirs = run_both(path, inputs)
    assert len(got) == len(theirs)
    for a, b in zip(got, theirs, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# --- CNN layers ----------------------------------------------------------------------------


def test_lrn_follows_onnx_s_formula(tmp_path):
    x = normal(2, 7, 3, 3)
    node = helper.make_node("LRN", ["x"], ["y"], size=4, alpha=1e-2, beta=0.75, bias=2.0)
    (got,) = ours(model(tmp_path, node, {"x": x}), {"x": x})
    # the operator's definition, in float64: channels c - 1 .. c + 2 for size 4
    x64, sq = x.astype(np.float64), np.zeros(x.shape)
    for c in range(7):
        sq[:, c] = (x64[:, max(0, c - 1) : min(7, c + 3)] ** 2).sum(axis=1)
    np.testing.assert_allclose(got, x64 / (2.0 + 1e-2 / 4 * sq) ** 0.75, rtol=1e-6)


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]}),
        ("MaxPool", {"kernel_shape": [2, 2], "pads": [1, 0, 0, 1], "dilations": [2, 1]}),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [0, 1, 2, 0]}),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        ("AveragePool", {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"}),
        ("MaxPool", {"kernel_shape": [3, 2], "auto_pad": "SAME_LOWER"}),
    ],
)
def test_pools_with_asymmetric_padding_and_its_count(tmp_path, op, attrs):
    x = normal(1, 2, 7, 6)
    close(model(tmp_path, helper.make_node(op, ["x"], ["y"], **attrs), {"x": x}), {"x": x})


@pytest.mark.parametrize(
    "attrs",
    [
        {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
        {"dilations": [1, 3], "strides": [2, 1], "pads": [0, 1, 1, 0]},
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
        {"auto_pad": "VALID", "group": 2},
    ],
)
def test_conv_with_dilations_and_asymmetric_padding(tmp_path, attrs):
    x, w = normal(1, 4, 9, 8), normal(6, 4 // attrs.get("group", 1), 3, 3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    close(model(tmp_path, node, {"x": x}, [("w", w)]), {"x": x})


# --- transformer ops -----------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_normalization(tmp_path, axis):
    x, scale, bias = normal(2, 3, 4), normal(3, 4), normal(3, 4)
    if axis == -1:
        scale, bias = scale[0], bias[0]
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=axis)
    close(model(tmp_path, node, {"x": x}, [("s", scale), ("b", bias)]), {"x": x})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_exact_and_tanh(tmp_path, approximate):
    x = normal(4, 16) * 3
    node = helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)
    close(model(tmp_path, node, {"x": x}, opset=20), {"x": x})


def test_erf_sqrt_pow(tmp_path):
    x = np.abs(normal(3, 5)) + 0.1
    nodes = [
        helper.make_node("Erf", ["x"], ["e"]),
        helper.make_node("Sqrt", ["x"], ["s"]),
        helper.make_node("Pow", ["x", "two"], ["p"]),
        helper.make_node("Pow", ["x", "e"], ["q"]),
        helper.make_node("Pow", ["x", "k"], ["r"]),
    ]
    two, k = np.array(2.0, np.float32), np.array([1.5, -0.5, 3, 0.25, 1], np.float32)
    path = model(
        tmp_path, nodes, {"x": x}, [("two", two), ("k", k)], outputs=("e", "s", "p", "q", "r")
    )
    close(path, {"x": x})


def test_where_with_a_constant_mask(tmp_path):
    x, y = normal(2, 4, 4), normal(4, 4)
    mask = np.tril(np.ones((4, 4), bool))
    node = helper.make_node("Where", ["m", "x", "z"], ["y"])
    close(model(tmp_path, node, {"x": x, "z": y}, [("m", mask)]), {"x": x, "z": y})


@pytest.mark.parametrize(
    ("indices", "axis"),
    [(np.array([2, 0, 1, 2], np.int64), 1), (np.array(3, np.int64), 0), (np.array([[0, -1]]), 2)],
)
def test_gather_with_constant_indices(tmp_path, indices, axis):
    x = normal(4, 3, 5)
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)
    close(model(tmp_path, node, {"x": x}, [("i", indices)]), {"x": x})


def test_split_gives_every_output(tmp_path):
    x = normal(2, 7)
    node = helper.make_node("Split", ["x", "s"], ["a", "b", "c"], axis=1)
    path = model(tmp_path, node, {"x": x}, [("s", np.array([2, 4, 1]))], outputs=("a", "b", "c"))
    close(path, {"x": x})


def test_slice_over_several_axes(tmp_path):
    x = normal(4, 6, 5)
    inits = [
        ("st", np.array([1, -4, 0])),
        ("en", np.array([3, 100, 5])),
        ("ax", np.array([0, 1, 2])),
    ]
    node = helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"])
    close(model(tmp_path, node, {"x": x}, inits), {"x": x})


def test_cast_and_reductions(tmp_path):
    x = normal(2, 3, 4) * 10
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[1, 2], keepdims=1),
        helper.make_node("ReduceSum", ["x", "ax"], ["s"], keepdims=0),
        helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT32),
        helper.make_node("Cast", ["i"], ["c"], to=TensorProto.FLOAT),
        helper.make_node("Max", ["x", "c"], ["y"]),
    ]
    path = model(
        tmp_path, nodes, {"x": x}, [("ax", np.array([0]))], outputs=("m", "s", "y"), opset=13
    )
    close(path, {"x": x})


def test_a_computed_index_is_a_located_error(tmp_path):
    x = normal(4, 3)
    nodes = [
        helper.make_node("ArgMax", ["x"], ["i"], axis=0, keepdims=0),
        helper.make_node("Gather", ["x", "i"], ["y"]),
    ]
    with pytest.raises(InputError, match="ArgMax"):
        import_onnx(model(tmp_path, nodes, {"x": x}))


# --- activations, padding and the older opsets' forms ------------------------------------


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("LeakyRelu", {"alpha": 0.2}),
        ("Elu", {"alpha": 0.7}),
        ("Selu", {}),
        ("Softplus", {}),
        ("Abs", {}),
        ("Clip", {"min": -0.5, "max": 0.25}),
        ("LogSoftmax", {"axis": 2}),
    ],
)
def test_activations_and_log_softmax(tmp_path, op, attrs):
    x = normal(2, 3, 4) * 3
    opset = 6 if op in ("Clip", "LogSoftmax") else 13
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    close(model(tmp_path, node, {"x": x}, opset=opset), {"x": x})


def test_log_softmax_before_opset_13_flattens_from_its_axis(tmp_path):
    x = normal(2, 3, 4) * 3
    node = helper.make_node("LogSoftmax", ["x"], ["y"], axis=1)
    (got,) = ours(model(tmp_path, node, {"x": x}, opset=6), {"x": x})
    rows = x.reshape(2, 12).astype(np.float64)
    want = rows - rows.max(axis=1, keepdims=True)
    want -= np.log(np.exp(want).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(got, want.reshape(x.shape), rtol=1e-5, atol=1e-6)


def test_clip_with_bound_operands_and_prelu_per_channel(tmp_path):
    x = normal(2, 3, 4, 5)
    nodes = [
        helper.make_node("Clip", ["x", "", "hi"], ["c"]),
        helper.make_node("PRelu", ["c", "slope"], ["y"]),
    ]
    inits = [("hi", np.array(0.5, np.float32)), ("slope", normal(3, 1, 1))]
    close(model(tmp_path, nodes, {"x": x}, inits, opset=13), {"x": x})


def test_prelu_before_opset_7_is_per_channel(tmp_path):
    x, slope = normal(2, 3, 4), normal(3)
    node = helper.make_node("PRelu", ["x", "s"], ["y"])
    (got,) = ours(model(tmp_path, node, {"x": x}, [("s", slope)], opset=6), {"x": x})
    np.testing.assert_allclose(got, np.where(x > 0, x, x * slope[None, :, None]), rtol=1e-6)


def test_a_legacy_broadcast_lines_b_up_at_axis(tmp_path):
    x, b = normal(2, 3, 4), normal(3)
    node = helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=1)
    (got,) = ours(model(tmp_path, node, {"x": x}, [("b", b)], opset=6), {"x": x})
    np.testing.assert_array_equal(got, x + b[None, :, None])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_modes(tmp_path, mode):
    x = normal(1, 2, 5, 4)
    pads = np.array([0, 0, 2, 1, 0, 0, 1, 3])
    inputs = ["x", "p", "v"] if mode == "constant" else ["x", "p"]
    inits = [("p", pads)] + ([("v", np.array(1.5, np.float32))] if mode == "constant" else [])
    node = helper.make_node("Pad", inputs, ["y"], mode=mode)
    close(model(tmp_path, node, {"x": x}, inits, opset=13), {"x": x})


def test_a_negative_pad_crops(tmp_path):
    x = normal(1, 2, 5, 4)
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode="edge")
    path = model(tmp_path, node, {"x": x}, [("p", np.array([0, 0, -1, 2, 0, 0, 1, -1]))])
    (got,) = ours(path, {"x": x})
    want = np.pad(x[:, :, 1:, :3], ((0, 0), (0, 0), (0, 1), (2, 0)), mode="edge")
    np.testing.assert_array_equal(got, want)


def test_tile_and_instance_normalization(tmp_path):
    x = normal(2, 3, 4, 5)
    nodes = [
        helper.make_node("InstanceNormalization", ["x", "s", "b"], ["n"], epsilon=1e-3),
        helper.make_node("Tile", ["n", "r"], ["y"]),
    ]
    inits = [("s", normal(3)), ("b", normal(3)), ("r", np.array([1, 2, 1, 3]))]
    close(model(tmp_path, nodes, {"x": x}, inits, opset=13), {"x": x}, tol=1e-4)


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("Conv", {"dilations": [2], "pads": [1, 2], "strides": [2]}),
        ("MaxPool", {"kernel_shape": [3], "strides": [2], "pads": [1, 0]}),
        ("AveragePool", {"kernel_shape": [2], "pads": [1, 1]}),
    ],
)
def test_one_dimensional_windows(tmp_path, op, attrs):
    x = normal(2, 4, 11)
    inputs, inits = (
        (["x", "w", "b"], [("w", normal(6, 4, 3)), ("b", normal(6))])
        if op == "Conv"
        else (["x"], [])
    )
    node = helper.make_node(op, inputs, ["y"], **attrs)
    close(model(tmp_path, node, {"x": x}, inits), {"x": x})
