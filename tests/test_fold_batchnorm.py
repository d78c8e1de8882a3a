"""BatchNorm folding (rtgraph/compiler/optimizer/fold_batchnorm.py): random conv+BN and
matmul+BN programs, optimized and run on the emulator, stay within the derived error bound of
the reference interpreter on the unoptimized program; folds sharing weights merge; the ResNet
block that uses it computes a ResNet block; ``rtgraph explain`` reports the numeric effect.
(What the pass rewrites and what it leaves alone: tests/optimizer/fold_batchnorm.txt.)"""

from __future__ import annotations

import numpy as np
from conftest import MODELS
from hypothesis import given, settings
from hypothesis import strategies as st

import rtgraph
from rtgraph.cli import main
from rtgraph.compiler import CompileOptions, compile_program
from rtgraph.compiler.optimizer.fold_batchnorm import fold_error_bound, fold_numerics
from rtgraph.compiler.optimizer.levels import LEVELS
from rtgraph.compiler.optimizer.pipeline import optimized_ir
from rtgraph.device import load_device
from rtgraph.emulator import run
from rtgraph.ir.interpreter import host_values

TOY = load_device("toy")
STATS = ("g", "b", "m", "v")


@st.composite
def folds(draw):
    """A conv2d or matmul on a param weight, then a batchnorm: (source, op, attrs, seed)."""
    op = draw(st.sampled_from(["conv2d", "matmul"]))
    dtype = draw(st.sampled_from(["f16", "bf16", "f32"]))
    eps = draw(st.sampled_from([1e-5, 1e-3, 0.0]))
    if op == "matmul":
        rows, k, c = draw(st.integers(1, 6)), draw(st.integers(1, 40)), draw(st.integers(1, 6))
        x, w, attrs, call = [rows, k], [k, c], {}, "x @ w"
    else:
        groups = draw(st.integers(1, 2))
        cin, c = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
        kh, kw, stride = (draw(st.integers(1, 3)) for _ in range(3))
        pad = draw(st.integers(0, 2))
        h = draw(st.integers(max(1, kh - 2 * pad), 6))
        wd = draw(st.integers(max(1, kw - 2 * pad), 6))
        x, w = [draw(st.integers(1, 2)), cin, h, wd], [c, cin // groups, kh, kw]
        attrs = {"stride": stride, "padding": pad, "groups": groups}
        call = f"conv2d(x, w, stride = {stride}, padding = {pad}, groups = {groups})"
    stats = "\n".join(f"    param {p} : {dtype}[{c}]" for p in STATS)
    source = f"""program fold() {{
    input x : {dtype}{x}
    param w : {dtype}{w}
{stats}
    output y = batchnorm({call}, g, b, m, v, eps = {eps})
}}"""
    return source, op, attrs, draw(st.integers(0, 2**32 - 1))


def data(program, op: str, seed: int):
    """Inputs and params of one conv/matmul + batchnorm program, with positive variances and
    magnitudes that keep every f16 value finite."""
    rng = np.random.default_rng(seed)
    shape = {n: t.type.shape for n, t in program.tensors.items() if t.kind in ("input", "param")}
    fan_in = shape["w"][0] if op == "matmul" else np.prod(shape["w"][1:])
    scale = 10.0 ** rng.uniform(-2, 0)
    values = {
        "x": rng.standard_normal(shape["x"]) * scale,
        "w": rng.standard_normal(shape["w"]) / np.sqrt(fan_in),
        "g": rng.uniform(-3, 3, shape["g"]),
        "b": rng.standard_normal(shape["b"]),
        "m": rng.standard_normal(shape["m"]) * scale,
        "v": 10.0 ** rng.uniform(-3, 1, shape["v"]),
    }
    return {"x": values.pop("x")}, values


@given(folds(), st.sampled_from([("fold_batchnorm",), LEVELS[1]]))
@settings(max_examples=40, deadline=None)
def test_folded_programs_stay_within_the_derived_bound_of_the_unfolded_reference(case, passes):
    source, op, attrs, seed = case
    program = rtgraph.parse(source)
    inputs, params = data(program, op, seed)
    compiled = compile_program(program, TOY, CompileOptions(passes=passes, check=True))
    assert "batchnorm" not in {t.op for t in compiled.tasks}
    got = run(compiled, TOY, inputs=inputs, params=params).outputs["y"].astype(np.float64)
    want = rtgraph.evaluate(program, inputs, params=params)["y"].astype(np.float64)
    held = host_values(program, inputs, params, 0)  # as the program holds them (rounded)
    dtype = program.tensors["y"].type.dtype
    bound = fold_error_bound(
        held["x"],
        held["w"],
        tuple(held[p] for p in STATS),
        op=op,
        attrs=attrs,
        eps=program.op_nodes()[-1].attrs["eps"],
        dtype=dtype,
    )
    error = np.abs(got - want)
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert np.all(error <= bound), (worst, error[worst], bound[worst], want[worst])


def test_folds_sharing_a_weight_and_statistics_share_their_preparation():
    source = """program twice(N = 1, C = 4, HW = 4) {
        input x0 : f16[N, C, HW, HW]
        input x1 : f16[N, C, HW, HW]
        param w : f16[C, C, 3, 3]
        param g : f16[C]
        param b : f16[C]
        param m : f16[C]
        param v : f16[C]
        output y0 = relu(batchnorm(conv2d(x0, w, padding = 1), g, b, m, v))
        output y1 = relu(batchnorm(conv2d(x1, w, padding = 1), g, b, m, v))
    }"""
    program = rtgraph.parse(source)
    passes = ("fold_batchnorm", "eliminate_common_subexpressions", "eliminate_dead_code")
    optimized = optimized_ir(program, CompileOptions(passes=passes).for_device(TOY))
    convs = [n for n in optimized.op_nodes() if n.op == "conv2d"]
    assert [n.inputs[1] for n in convs] == ["w/bn_weight"] * 2
    assert [n.op for n in optimized.op_nodes()].count("rsqrt") == 1
    assert "batchnorm" not in {n.op for n in optimized.op_nodes()}


def _positive_variances(program, seed: int) -> dict[str, np.ndarray]:
    values = host_values(program, None, None, seed)
    params = {t.name: values[t.name] for t in program.params_()}
    return {n: np.abs(a) + 0.1 if n.endswith("_v") else a for n, a in params.items()}


def test_resnet_bn_is_a_basic_block_with_a_projection_shortcut():
    program = rtgraph.load(MODELS / "resnet_bn.rtg", N=1, C=8, HW=8)
    params = _positive_variances(program, 3)
    x = host_values(program, None, None, 3)["x"]
    (y,) = rtgraph.evaluate(program, {"x": x}, params=params).values()
    p = {n: a.astype(np.float64) for n, a in params.items()}

    def conv_bn(h, w, bn, stride, pad):
        hp = np.pad(h, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        kh, kw = w.shape[2:]
        rows, cols = hp.shape[2] - kh + 1, hp.shape[3] - kw + 1
        taps = [
            np.einsum("nchw,oc->nohw", hp[:, :, i : i + rows, j : j + cols], w[:, :, i, j])
            for i in range(kh)
            for j in range(kw)
        ]
        d = np.sum(taps, axis=0)[:, :, ::stride, ::stride]
        g, b, m, v = (p[f"{bn}_{s}"][None, :, None, None] for s in "gbmv")
        return (d - m) / np.sqrt(v + 1e-5) * g + b

    x64 = x.astype(np.float64)
    a = np.maximum(conv_bn(x64, p["w1"], "bn1", 2, 1), 0)
    want = np.maximum(conv_bn(a, p["w2"], "bn2", 1, 1) + conv_bn(x64, p["wd"], "bnd", 2, 0), 0)
    assert y.shape == want.shape == (1, 16, 4, 4)
    assert np.abs(y - want).max() <= 3e-2 * np.abs(want).max()


def test_resnet_bn_folds_every_batchnorm_and_explain_reports_the_numeric_effect(capsys):
    program = rtgraph.load(MODELS / "resnet_bn.rtg")
    options = CompileOptions(opt_level=1).for_device(load_device("ascend-910b"))
    folded = optimized_ir(program, CompileOptions(passes=("fold_batchnorm",)).for_device(TOY))
    assert not any(n.op == "batchnorm" for n in optimized_ir(program, options).op_nodes())
    numerics = fold_numerics(program, folded)
    assert numerics is not None and 0 < numerics.worst_share <= 1
    assert 0 < numerics.max_rel < 2.0**-8  # f16: a few ulps of the output's scale
    assert main(["explain", str(MODELS / "resnet_bn.rtg"), "-O1"]) == 0
    out = capsys.readouterr().out
    for call in ("conv2d(x, w1)", "conv2d(a, w2)", "conv2d(x, wd)"):
        assert f"folded the batchnorm after {call} (line" in out
    assert f"max abs {numerics.max_abs:.3g}, max rel {numerics.max_rel:.3g}" in out
    assert "within the derived bound" in out and "NOT within" not in out
