"""The reference interpreter: whole random programs equal the same NumPy calls written out,
and run-time data is checked, never unpickled."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import programs

import rtgraph
from rtgraph.errors import CapacityError, InputError
from rtgraph.ir import OpNode, Program, Tensor, TensorType
from rtgraph.ir.data import generate

# The same computations as plain NumPy, written independently of the op catalogue.
NUMPY = {
    "relu": lambda x: np.maximum(x, np.float32(0)),
    "neg": np.negative,
    "exp": np.exp,
    "tanh": np.tanh,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "maximum": np.maximum,
    # f32 products are summed in f64 and rounded once (the Cube kernel's rule for f32)
    "matmul": lambda a, b: np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype),
    "copy": np.copy,
}


def numpy_reference(program: Program, seed: int) -> dict[str, np.ndarray]:
    env = {}
    for t in program.tensors.values():
        if t.kind in ("input", "param"):
            env[t.name] = generate(
                t.name, t.type.shape, t.type.dtype, seed, param=t.kind == "param"
            )
    for node in program.nodes:
        a = [env[n] for n in node.inputs]
        attrs = node.attrs
        if node.op in NUMPY:
            out = NUMPY[node.op](*a)
        elif node.op == "reduce_sum":
            out = np.sum(a[0], axis=attrs["axis"], keepdims=attrs["keepdims"])
        elif node.op == "reduce_max":
            out = np.max(a[0], axis=attrs["axis"], keepdims=attrs["keepdims"])
        elif node.op == "softmax":
            x = a[0]
            e = np.exp(x - np.max(x, axis=attrs["axis"], keepdims=True))
            out = e / np.sum(e, axis=attrs["axis"], keepdims=True)
        elif node.op == "transpose":
            out = np.transpose(a[0], attrs["perm"])
        elif node.op == "reshape":
            out = np.reshape(a[0], attrs["shape"])
        else:
            raise AssertionError(f"no NumPy reference for {node.op}")
        env[node.output] = np.asarray(out)
    return {name: env[name] for name in program.outputs}


@given(programs(max_ops=10))
@settings(max_examples=60)
def test_random_programs_equal_direct_numpy(program):
    got = rtgraph.evaluate(program, seed=5)
    want = numpy_reference(program, seed=5)
    for name in program.outputs:
        assert got[name].dtype == want[name].dtype == np.float32
        assert got[name].shape == want[name].shape == program.tensors[name].type.shape
        assert np.array_equal(got[name], want[name], equal_nan=True), name


def _tiny():
    t = TensorType((2, 3), "f32")
    tensors = {"x": Tensor("x", t, "input"), "y": Tensor("y", t, "value")}
    return Program("tiny", {}, None, tensors, [OpNode("relu", ("x",), "y", {})], ["y"])


def test_supplied_inputs_are_used_and_checked():
    program = _tiny()
    x = np.array([[-1, 2, -3], [4, -5, 6]], dtype=np.float32)
    assert np.array_equal(rtgraph.evaluate(program, inputs={"x": x})["y"], np.maximum(x, 0))
    with pytest.raises(InputError, match="shape"):
        rtgraph.evaluate(program, inputs={"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(InputError, match="declares no such input"):
        rtgraph.evaluate(program, inputs={"z": x})
    with pytest.raises(InputError, match="not numeric"):
        rtgraph.evaluate(program, inputs={"x": np.array([["a"] * 3] * 2)})


def test_generated_data_depends_only_on_seed_and_name():
    a = generate("w", (4, 4), "f16", 7, param=True)
    assert np.array_equal(a, generate("w", (4, 4), "f16", 7, param=True))
    assert not np.array_equal(a, generate("w", (4, 4), "f16", 8, param=True))
    assert not np.array_equal(a, generate("v", (4, 4), "f16", 7, param=True))
    assert a.dtype == np.float16


def test_programs_too_large_for_host_memory_are_refused_before_allocating(monkeypatch):
    monkeypatch.setenv("RTGRAPH_HOST_MEMORY", "16")
    with pytest.raises(CapacityError, match="host memory"):
        rtgraph.evaluate(_tiny())
