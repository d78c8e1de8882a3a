"""Ranges of dynamic parameters and padded runs (issue 18, item 1): ``B: dyn 1..64`` compiles at
a ladder of gears, a run between two gears runs the one above on zero-padded inputs and keeps
the outputs' leading part — where the compile has shown every kept element is computed from
real elements alone — with the padding's share of the work in the report."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rtgraph import api
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.padding import pad_plan
from rtgraph.errors import CheckError, InputError, StreamProgramError
from rtgraph.frontend.gears import range_gears
from rtgraph.ir.reference import program_flops
from rtgraph.ops.cube import ROW_BLOCK, matmul_block, row_block
from rtgraph.stream_program.gears import geared_from_dict
from rtgraph.stream_program.listing import format_listing

MLP = """\
program mlp(B: dyn 1..16 = 3, D = 64) {
    input  x  : f16[B, D]
    param  w1 : f16[D, 4 * D]
    param  b1 : f16[4 * D]
    param  w2 : f16[4 * D, D]
    output y = softmax(gelu(x @ w1 + b1) @ w2, axis = -1)
}
"""


def _geared(text: str = MLP, **params: int):
    return api.compile_gears(api.parse(text, "r.rtg", params or None))


def _assert_timed_as_static(geared, values: dict[str, int], plan) -> None:
    """A padded run's tasks, timed at its real shapes (``rtgraph.compiler.real_dims``), do the
    static compile's flops at ``values``, whatever either tiled."""
    compiled, _ = api.choose_gear(geared, values)
    timed = plan.bind(compiled, api.device_for(None, compiled.device))
    static = api.compile(api.bind_gear(geared, values))
    assert sum(t.flops for t in timed.tasks) == sum(t.flops for t in static.tasks)


def _run_padded(geared, values: dict[str, int], seed: int = 1):
    compiled, plan = api.choose_gear(geared, values)
    result = api.run(compiled, seed=seed, padding=plan)
    expected = api.reference(api.bind_gear(geared, values), seed=seed)
    return result, expected, plan


@pytest.mark.parametrize(
    ("lo", "hi", "ladder"),
    [
        (1, 16, (1, 2, 4, 8, 16)),
        (100, 1000, (100, 128, 256, 512, 1000)),
        (128, 4096, (128, 256, 512, 1024, 2048, 4096)),
        (5, 5, (5,)),
        (3, 4, (3, 4)),
    ],
)
def test_a_range_is_compiled_at_its_ends_and_the_powers_of_two_between(lo, hi, ladder):
    assert range_gears(lo, hi) == ladder
    for v in range(lo, hi + 1, max(1, (hi - lo) // 97)):
        gear = min(g for g in ladder if g >= v)
        assert gear < 2 * v  # a run never pads to twice its size or more


def test_a_gear_the_text_does_not_show_is_named_in_its_errors():
    text = "program p(B: dyn 1..4611686018427387904) { input x: f32[B, 4]\n output y = relu(x) }"
    with pytest.raises(CheckError) as info:
        api.compile_gears(api.parse(text, "r.rtg"))
    assert info.value.message.startswith("at the gear B=8589934592: tensor 'x'")
    assert "larger than the device's memory" in info.value.message


def test_a_range_is_bound_at_any_value_in_it_and_records_its_ladder():
    program = api.parse(MLP, "r.rtg")
    assert program.params["B"] == 3  # a value between gears: checking binds it as given
    assert program.gears == {"B": (1, 2, 4, 8, 16)} and program.ranges == {"B": (1, 16)}
    assert api.parse(MLP, "r.rtg", {"B": 11}).tensors["x"].type.shape == (11, 64)


@pytest.mark.parametrize(
    ("params", "values", "message"),
    [
        ("B: dyn 8..2", {}, "range 8..2 of parameter 'B' is not a range of sizes"),
        ("B: dyn 0..4", {}, "range 0..4 of parameter 'B' is not a range of sizes"),
        ("B: dyn 1..4 = 9", {}, "parameter 'B' = 9 (its default) is outside its range 1..4"),
        ("B: dyn 1..4", {"B": 5}, "parameter 'B' = 5 (-D) is outside its range 1..4"),
    ],
)
def test_bad_ranges_are_located_errors(params, values, message):
    text = f"program p({params}) {{ input x: f32[B]\n output y = x }}"
    with pytest.raises(CheckError) as info:
        api.parse(text, "r.rtg", values)
    assert message in info.value.message
    assert info.value.span is not None and info.value.span.line == 1


def test_every_value_of_the_range_runs_bit_equal_to_the_reference_at_its_own_size():
    geared = _geared()
    assert [v for v, _ in geared.programs] == [{"B": g} for g in (1, 2, 4, 8, 16)]
    for b in range(1, 17):
        result, expected, plan = _run_padded(geared, {"B": b})
        assert result.outputs["y"].shape == (b, 64)
        np.testing.assert_array_equal(result.outputs["y"], expected["y"])
        if b in (1, 2, 4, 8, 16):
            assert plan is None and result.padding is None
            continue
        gear = 1 << (b - 1).bit_length()
        assert plan.gear == {"B": gear} and result.padding == replace(plan, timed=True)
        # every op's work is linear in B here, so the wasted share is the padded rows'
        assert plan.wasted == pytest.approx(1 - b / gear, rel=1e-9)
        assert f"B {b} → {gear}" in plan.describe()
        assert result.padding.describe().endswith("; each task timed at its real shapes")
        _assert_timed_as_static(geared, {"B": b}, plan)


CNN = """\
program cnn(N: dyn 1..4 = 3) {
    input  x : f16[N, 4, 8, 8]
    param  w : f16[8, 4, 3, 3]
    param  g : f16[8]
    param  b : f16[8]
    h = silu(groupnorm(conv2d(x, w, padding = 1), g, b, groups = 2, eps = 1e-5))
    output y = pool2d(lrn(h, size = 3), kind = max, kernel = 2, stride = 2)
}
"""


def test_a_batch_of_samples_through_convolutions_and_norms_pads_bit_for_bit():
    geared = _geared(CNN)
    for n in (1, 2, 3, 4):
        result, expected, plan = _run_padded(geared, {"N": n})
        assert (plan is not None) == (n == 3)
        np.testing.assert_array_equal(result.outputs["y"], expected["y"])
        if plan is not None:
            _assert_timed_as_static(geared, {"N": n}, plan)


@pytest.mark.parametrize("streams", ["single", "by-unit", "list"])
def test_padded_runs_are_bit_equal_and_race_free_under_every_stream_policy(streams):
    text = Path("models/transformer_stack.rtg").read_text()
    text = text.replace(
        "program transformer_stack(B = 4", "program transformer_stack(B: dyn 1..4 = 4"
    )
    program = api.parse(text, "transformer_stack.rtg", {"S": 16, "L": 1})
    geared = api.compile_gears(program, options=CompileOptions(streams=streams))
    result, expected, plan = _run_padded(geared, {"B": 3})
    assert plan.gear == {"B": 4} and not result.races
    for name, value in expected.items():
        np.testing.assert_array_equal(result.outputs[name], value)
    # the sequence length too: kernels told the real key count, at every optimization level
    for level in (0, 1, 2):
        options = CompileOptions(streams=streams, opt_level=level)
        attention = api.compile_gears(api.parse(_attention(), "a.rtg"), options=options)
        result, expected, plan = _run_padded(attention, {"S": 45}, seed=level)
        assert plan.gear == {"S": 64} and not result.races
        for name, value in expected.items():
            np.testing.assert_array_equal(result.outputs[name], value)
    # and a slice a run moves: its task reads the whole operand, so its waits cover every row
    _, shipped, ranged, _ = next(m for m in MODEL_RANGES if m[0] == "llm_prefill" and "S:" in m[2])
    text = _ranged("llm_prefill", shipped, ranged)
    prefill = api.compile_gears(api.parse(text, "p.rtg"), options=CompileOptions(streams=streams))
    for s in (9, 17, 30):
        result, expected, _ = _run_padded(prefill, {"S": s}, seed=s)
        assert not result.races
        np.testing.assert_array_equal(result.outputs["logits"], expected["logits"])


def test_a_reshape_that_keeps_the_batch_outermost_pads_and_one_that_moves_it_is_refused():
    text = """\
program flat(B: dyn 1..8 = 3) {
    input  x : f16[B, 4, 8]
    param  w : f16[8, 16]
    h = reshape(x, [B * 4, 8]) @ w
    output y = softmax(reshape(h, [B, 4, 16]), axis = -1)
}
"""
    geared = _geared(text)
    for b in range(1, 9):
        result, expected, _ = _run_padded(geared, {"B": b})
        np.testing.assert_array_equal(result.outputs["y"], expected["y"])
    moved = text.replace("reshape(x, [B * 4, 8])", "reshape(transpose(x, [1, 0, 2]), [4 * B, 8])")
    with pytest.raises(CheckError, match="reshape"):
        api.compile_gears(api.parse(moved, "r.rtg"))


def test_a_param_sized_by_the_range_is_padded_as_the_inputs_are():
    text = """\
program cache(B: dyn 1..8 = 3) {
    input  q : f16[B, 4, 16]
    param  k : f16[B, 32, 16]
    param  v : f16[B, 32, 16]
    param  w : f16[16, 16]
    output y = softmax(q @ transpose(k, [0, 2, 1]), axis = -1) @ v @ w
}
"""
    geared = _geared(text)
    for b in range(1, 9):
        result, expected, plan = _run_padded(geared, {"B": b})
        np.testing.assert_array_equal(result.outputs["y"], expected["y"])
        if plan is not None:
            assert plan.params == {"k": (b, 32, 16), "v": (b, 32, 16)}
    compiled, plan = api.choose_gear(geared, {"B": 5})
    rng = np.random.default_rng(4)
    given = {n: rng.standard_normal(s).astype(np.float16) for n, s in plan.params.items()}
    given["w"] = rng.standard_normal((16, 16)).astype(np.float16)
    result = api.run(compiled, params=given, seed=9, padding=plan)
    expected = api.reference(api.bind_gear(geared, {"B": 5}), params=given, seed=9)
    np.testing.assert_array_equal(result.outputs["y"], expected["y"])


def test_a_padded_run_takes_supplied_inputs_at_their_real_shape():
    geared = _geared()
    x = np.random.default_rng(5).standard_normal((5, 64)).astype(np.float16)
    compiled, plan = api.choose_gear(geared, {"B": 5})
    result = api.run(compiled, inputs={"x": x}, seed=2, padding=plan)
    expected = api.reference(api.bind_gear(geared, {"B": 5}), inputs={"x": x}, seed=2)
    np.testing.assert_array_equal(result.outputs["y"], expected["y"])


def test_a_timing_only_padded_run_is_timed_at_its_real_shapes_not_the_gears():
    geared = _geared()
    compiled, plan = api.choose_gear(geared, {"B": 5})
    padded = api.run(compiled, numerics=False, padding=plan)
    gear = api.run(geared.select({"B": 8}), numerics=False)
    assert padded.makespan_us < gear.makespan_us and padded.padding == replace(plan, timed=True)
    untimed = api.run(compiled, numerics=False, padding=replace(plan, hosts={"x": (8, 64)}))
    assert untimed.makespan_us == gear.makespan_us  # told the gear's rows: the gear's timeline


REFUSED = [
    # a softmax over an axis of 2·S: a run could tell its kernel S, not where the real part ends
    (
        "program p(S: dyn 2..8 = 4) { input x: f32[4, 2 * S]\n output y = softmax(x, axis = -1) }",
        "softmax (line 2) computes along axis 1 of operand 0, whose extent S sets (16 at the "
        "gear, 4 at the run) but is not the value of a dynamic parameter",
    ),
    # a groupnorm's groups along the padded axis: its kernel takes no run-time extent
    (
        "program p(S: dyn 2..8 = 4) { input x: f32[2, 4, S]\n"
        " output y = groupnorm(x, groups = 2, eps = 1e-5) }",
        "groupnorm (line 2) does not compute its result's elements along axis 2 independently",
    ),
    # a slice along the padded axis whose length changes with it
    (
        "program p(S: dyn 2..8 = 4) { input x: f32[4, S]\n"
        " output y = slice(x, start = 1, axis = 1) }",
        "slice (line 2) does not compute its result's elements along axis 1",
    ),
    # a concatenation along the padded axis: the second part starts after the padding
    (
        "program p(B: dyn 2..8 = 4) { input x: f32[B, 4]\n output y = concat(x, x, axis = 0) }",
        "concat (line 2) does not compute its result's elements along axis 0",
    ),
    # a reduction over the padded axis and another at once: a kernel is told one axis's extent
    (
        "program p(B: dyn 2..8 = 4) { input x: f32[B, 4]\n"
        " output y = reduce_sum(x, axis = [0, 1]) }",
        "reduce_sum (line 2) reduces or mixes along axis 0",
    ),
]


@pytest.mark.parametrize(("text", "message"), REFUSED)
def test_a_range_padding_would_corrupt_is_refused_at_the_op_that_forbids_it(text, message):
    program = api.parse(text, "r.rtg")
    with pytest.raises(CheckError) as info:
        api.compile_gears(program)
    assert message in info.value.message
    assert info.value.span is not None and "as gears instead" in info.value.hint


#: Padded along the axis a softmax normalises or a reduction reduces, a matmul's columns and
#: its inner dimension — each kernel told the real extent at run time — and a slice of it,
#: fixed inside the real part or moving with it (rtgraph.ops.extents).
EXTENTS = [
    "input x: f32[4, S]\n output y = softmax(x, axis = -1)",
    "input x: f32[4, S]\n output y = reduce_sum(x, axis = 1)",
    "input x: f16[S, 4]\n output y = reduce_mean(x, axis = 0, keepdims = true)",
    "input x: f32[4, S]\n output y = reduce_max(neg(x) - 1.0, axis = [-1])",
    "input x: f32[4, S]\n output y = slice(x, start = S - 1, axis = 1)",
    "input x: f32[4, S]\n param g: f32[S]\n param b: f32[S]\n"
    " output y = layernorm(x, g, b, axis = -1, eps = 1e-5)",
    "input x: f16[S, 4]\n param g: f16[S]\n output y = rmsnorm(x, g, axis = 0, eps = 1e-6)",
    "input x: f16[S, 4]\n output y = relu(slice(x, start = -2, axis = 0))",
    "input x: f32[4, S]\n output y = slice(x, start = 0, stop = 2, axis = 1)",
    "input a: f16[4, S]\n input b: f16[S, 4]\n output y = a @ b",
    "input a: f16[4, 4]\n input b: f16[4, S]\n output y = a @ b",
]


@pytest.mark.parametrize("body", EXTENTS)
def test_a_kernel_told_the_real_extent_pads_along_a_reduced_axis(body):
    geared = api.compile_gears(api.parse(f"program p(S: dyn 2..8 = 4) {{ {body} }}", "r.rtg"))
    for s in range(2, 9):
        result, expected, _ = _run_padded(geared, {"S": s}, seed=s)
        assert result.outputs["y"].shape == expected["y"].shape
        np.testing.assert_array_equal(result.outputs["y"], expected["y"])


def _marks(program) -> set[tuple[str, str, str]]:
    """Every (op, mark, parameter) on a compiled program's tasks and their fused steps."""
    steps = [(t.op, t.attrs) for t in program.tasks]
    steps += [(s[0], dict(s[2])) for t in program.tasks for s in t.attrs.get("body", ())]
    return {(op, k, v) for op, attrs in steps for k, v in attrs.items() if k.endswith("_of")}


def _attention() -> str:
    """models/attention_naive.rtg with its sequence length a range, at a test's width."""
    text = Path("models/attention_naive.rtg").read_text()
    return text.replace(
        "program attention_naive(S = 1024, D = 768, H = 12)",
        "program attention_naive(S: dyn 16..128 = 100, D = 64, H = 4)",
    )


def test_the_naive_attentions_sequence_length_pads_bit_for_bit(tmp_path: Path):
    """Issue 18's example: the scores' columns, the softmax over the keys and the sum over them
    in p @ v each compute on the real keys alone, so a run at any length equals the reference
    at that length; the same gear run with its kernels not told (computing on the padded keys
    as well) does not."""
    program = api.parse(_attention(), "attention_naive.rtg")
    api.check_ranges(program)
    geared = api.compile_gears(program)
    gear = geared.select({"S": 128})
    assert _marks(gear) == {
        ("matmul", "cols_of", "S"),
        ("softmax", "length_of", "S"),  # fused with the scale or not
        ("matmul", "inner_of", "S"),
    }
    assert "[cols=S]" in format_listing(gear) and "[inner=S]" in format_listing(gear)
    for s in (16, 77, 100, 128):
        result, expected, plan = _run_padded(geared, {"S": s}, seed=s)
        for name, value in expected.items():
            np.testing.assert_array_equal(result.outputs[name], value)
        assert (plan is None) == (s in (16, 128))
    compiled, plan = api.choose_gear(geared, {"S": 77})
    untold = replace(plan, values=dict(plan.gear))  # the kernels told the gear's whole axes
    untold_run = api.run(compiled, seed=77, padding=untold)
    expected = api.reference(api.bind_gear(geared, {"S": 77}), seed=77)
    assert not np.array_equal(untold_run.outputs["y0"], expected["y0"])
    src = tmp_path / "a.rtg"
    src.write_text(_attention())
    cli = subprocess.run(
        [sys.executable, "-m", "rtgraph", "check", str(src)], capture_output=True, text=True
    )
    assert cli.returncode == 0, cli.stderr
    explained = subprocess.run(
        [sys.executable, "-m", "rtgraph", "explain", str(src)], capture_output=True, text=True
    )
    assert explained.returncode == 0, explained.stderr
    told = (
        "told at run time: matmul (line 30) cols=S ×4, softmax "
        "(line 30) length=S ×4, matmul (line 31) inner=S ×4"
    )
    gears = explained.stdout.split("## gear ")[1:]
    assert [g.split()[0] for g in gears] == ["S=16", "S=32", "S=64", "S=128"]
    assert told not in gears[0] and all(told in g for g in gears[1:])  # 16: nothing pads to it


def test_a_gear_set_is_not_padded_and_select_names_the_padding_choose_does():
    geared = api.compile_gears(api.parse(MLP.replace("1..16 = 3", "{1, 4, 16} = 4"), "g.rtg"))
    with pytest.raises(InputError, match="not a gear") as info:
        geared.choose({"B": 3})
    assert "declare a range" in info.value.hint
    ranged = _geared()
    with pytest.raises(InputError, match="runs it padded to 8"):
        ranged.select({"B": 5})
    with pytest.raises(InputError, match=r"outside the range 1\.\.16"):
        ranged.choose({"B": 17})
    with pytest.raises(InputError, match="several values of B") as info:
        ranged.choose({})
    assert info.value.hint == "-D B=… with a value from 1 to 16 (its range)"


def test_the_json_form_keeps_the_ranges_and_params_and_is_checked():
    geared = _geared(D=32)
    data = json.loads(json.dumps(geared.to_dict()))
    assert data["ranges"] == {"B": [1, 16]} and data["params"] == {"D": 32}
    back = geared_from_dict(data)
    assert back.ranges == {"B": (1, 16)} and back.params == {"D": 32}
    _, plan = api.choose_gear(back, {"B": 7})
    assert plan.inputs == {"x": (7, 32)} and plan.outputs == {"y": (7, 32)}
    for key, bad in [
        ("ranges", {"B": [2, 16]}),  # not the ends of its gears
        ("ranges", {"C": [1, 16]}),
        ("ranges", {"B": [1]}),
        ("params", {"B": 3}),  # a dynamic parameter
        ("params", {"D": "32"}),
    ]:
        with pytest.raises(StreamProgramError, match=key):
            geared_from_dict({**data, key: bad})
    old = {k: v for k, v in data.items() if k not in ("ranges", "params")}
    assert geared_from_dict(old).ranges == {}  # a file from before ranges: gears only
    # without its params the source binds at D = 64, not the D = 32 it was compiled at
    unbound = geared_from_dict({k: v for k, v in data.items() if k != "params"})
    with pytest.raises(InputError, match="does not match its source"):
        api.choose_gear(unbound, {"B": 7})
    assert api.choose_gear(unbound, {"B": 8})[1] is None  # a gear runs without its source
    with pytest.raises(InputError, match="does not match its source"):  # what checks it
        api.bind_gear(unbound, {"B": 8})


def test_the_plan_says_what_runs_where():
    real = api.parse(MLP, "r.rtg", {"B": 3})
    gear = api.parse(MLP, "r.rtg", {"B": 4})
    plan = pad_plan(real, gear, {"B": 3}, {"B": 4})
    x = np.ones((3, 64), np.float16)
    padded = plan.pad({"x": x}, {"x": (4, 64)})
    assert padded["x"].shape == (4, 64) and not padded["x"][3].any()
    cut = plan.cut({"y": np.zeros((4, 64))})
    assert cut["y"].shape == (3, 64)
    assert (plan.flops, plan.padded_flops) == (program_flops(real), program_flops(gear))
    assert 0 < plan.flops < plan.padded_flops


def test_compile_and_run_a_range_from_the_cli(tmp_path: Path):
    src = tmp_path / "r.rtg"
    src.write_text(MLP)
    out = tmp_path / "r.json"
    rtgraph = [sys.executable, "-m", "rtgraph"]
    subprocess.run([*rtgraph, "compile", str(src), "-o", str(out)], check=True)
    run = subprocess.run(
        [*rtgraph, "run", str(out), "-D", "B=5"], capture_output=True, text=True, check=True
    )
    assert "padded to the gear above: B 5 → 8" in run.stdout
    assert "bit-equal" in run.stdout and "DIFFERS" not in run.stdout
    data = json.loads(
        subprocess.run(
            [*rtgraph, "run", str(out), "-D", "B=6", "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert data["padding"]["gear"] == {"B": 8} and data["reference_equal"] == {"y": True}
    assert data["padding"]["wasted"] == pytest.approx(0.25)
    table = subprocess.run(
        [*rtgraph, "run", str(out), "--shapes", "B=3,4"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert "padded to" in table[0]
    assert "4 (25%)" in table[1] and table[2].split()[4] == "—"
    page = tmp_path / "page.html"
    subprocess.run([*rtgraph, "report", str(out), "-D", "B=5", "-o", str(page)], check=True)
    assert "padded to the gear above: B 5 → 8" in page.read_text()
    explained = subprocess.run(
        [*rtgraph, "explain", str(src)], capture_output=True, text=True, check=True
    ).stdout
    headings = [line for line in explained.splitlines() if line.startswith("## gear")]
    assert headings == [
        "## gear B=1",
        "## gear B=2",
        "## gear B=4 (runs B = 3..4; 3 padded)",
        "## gear B=8 (runs B = 5..8; 5..7 padded)",
        "## gear B=16 (runs B = 9..16; 9..15 padded)",
    ]
    bad = subprocess.run([*rtgraph, "run", str(out), "-D", "B=40"], capture_output=True, text=True)
    assert bad.returncode == 1 and "outside the range 1..16" in bad.stderr
    assert "Traceback" not in bad.stderr


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 300),
    inner=st.integers(1, 40),
    cols=st.integers(1, 40),
    seed=st.integers(0, 2**16),
)
def test_a_matmul_row_does_not_depend_on_how_many_rows_share_the_call(rows, inner, cols, seed):
    """Each row is computed in a call of row_block(rows) rows, so the rows of a product padded
    to the gear above (range_gears) are bit for bit the rows of the unpadded product."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, inner)).astype(np.float32)
    b = rng.standard_normal((inner, cols)).astype(np.float32)
    gear = min(g for g in range_gears(1, 512) if g >= rows)
    padded = np.zeros((gear, inner), np.float32)
    padded[:rows] = a

    def product(m: np.ndarray) -> np.ndarray:
        if m.shape[0] <= ROW_BLOCK:
            return matmul_block(m, b, None)
        return np.concatenate(
            [matmul_block(m, b, i) for i in range(0, m.shape[0], ROW_BLOCK)], axis=0
        )

    assert row_block(rows) == row_block(gear) or rows > ROW_BLOCK
    np.testing.assert_array_equal(product(a), product(padded)[:rows])


UNARY = ["relu", "gelu", "exp", "neg", "sigmoid"]


@st.composite
def _chains(draw):
    """A random program over [B, D] rows: elementwise steps, matmuls with params, and
    normalisations along the last axis — every one computing rows independently."""
    d = draw(st.sampled_from([8, 16, 24]))
    lines, params, value, width = [], [], "x", d
    for i in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["unary", "matmul", "softmax", "layernorm", "bias", "self"]))
        name = f"h{i}"
        if kind == "unary":
            lines.append(f"{name} = {draw(st.sampled_from(UNARY))}({value})")
        elif kind == "matmul":
            out = draw(st.sampled_from([8, 16, 32]))
            params.append(f"param w{i} : f16[{width}, {out}]")
            lines.append(f"{name} = {value} @ w{i}")
            width = out
        elif kind == "softmax":
            lines.append(f"{name} = softmax({value}, axis = -1)")
        elif kind == "layernorm":
            params += [f"param g{i} : f16[{width}]", f"param c{i} : f16[{width}]"]
            lines.append(f"{name} = layernorm({value}, g{i}, c{i}, axis = -1, eps = 1e-5)")
        elif kind == "bias":
            params.append(f"param c{i} : f16[{width}]")
            lines.append(f"{name} = {value} + c{i}")
        else:
            lines.append(f"{name} = {value} * {value}")
        value = name
    body = "\n    ".join([f"input x : f16[B, {d}]", *params, *lines, f"output y = {value}"])
    hi = draw(st.sampled_from([8, 70, 130]))
    return f"program p(B: dyn 1..{hi} = 1) {{\n    {body}\n}}\n", hi


@settings(max_examples=25, deadline=None)
@given(case=_chains(), data=st.data())
def test_random_row_programs_run_padded_bit_equal_to_the_reference(case, data):
    text, hi = case
    geared = api.compile_gears(api.parse(text, "p.rtg"))
    b = data.draw(st.integers(1, hi))
    result, expected, plan = _run_padded(geared, {"B": b}, seed=b)
    assert (plan is None) == (b in geared.gears["B"])
    assert set(result.outputs) == set(expected) and len(expected) == 1
    for name, value in expected.items():
        assert result.outputs[name].shape[0] == b
        np.testing.assert_array_equal(result.outputs[name], value)
    assert not result.races
    if plan is not None:
        _assert_timed_as_static(geared, {"B": b}, plan)


def test_shapes_takes_a_range_of_values_and_counts_the_runs_before_listing_them():
    from rtgraph.cli.gears import MAX_SHAPE_RUNS, parse_shapes
    from rtgraph.errors import UsageError

    assert parse_shapes(["B=3..6", "D=1,2"]) == {"B": [3, 4, 5, 6], "D": [1, 2]}
    with pytest.raises(UsageError, match="1,000,000,000,000 runs"):
        parse_shapes(["B=1..1_000_000_000_000"])
    with pytest.raises(UsageError, match=f"at most {MAX_SHAPE_RUNS}"):
        parse_shapes(["B=1..20", "D=1..20"])
    for bad in ("B=6..3", "B=1..2..3", "B=x", "B=", "=1,2"):
        with pytest.raises(UsageError, match="expected NAME=V1"):
            parse_shapes([bad])


@st.composite
def _mixed(draw):
    """A random program over x[B, 8] whose ops may run along B or across it: transposes,
    matmuls from either side or summing over B, softmaxes, norms and reductions along either
    axis."""
    lines, params, value, shape = [], [], "x", ["B", "8"]
    for i in range(draw(st.integers(1, 5))):
        kind = draw(
            st.sampled_from(
                [
                    "unary",
                    "right",
                    "left",
                    "inner",
                    "softmax",
                    "norm",
                    "reduce",
                    "transpose",
                    "reshape",
                    "slice",
                ]
            )
        )
        axis = draw(st.sampled_from([0, 1]))
        name = f"h{i}"
        if kind == "unary":
            lines.append(f"{name} = {draw(st.sampled_from(UNARY))}({value})")
        elif kind == "right" and shape[1] == "8":  # [·, 8] @ [8, 8]
            params.append(f"param w{i} : f16[8, 8]")
            lines.append(f"{name} = {value} @ w{i}")
        elif kind == "left" and shape[0] == "8":  # [8, 8] @ [8, ·]
            params.append(f"param w{i} : f16[8, 8]")
            lines.append(f"{name} = w{i} @ {value}")
        elif kind == "inner" and shape[1] == "B":  # [·, B] @ [B, 8]: a sum over the batch
            params.append(f"param v{i} : f16[B, 8]")
            lines.append(f"{name} = {value} @ v{i}")
            shape[1] = "8"
        elif kind == "softmax":
            lines.append(f"{name} = softmax({value}, axis = {axis})")
        elif kind == "norm":
            params += [f"param g{i} : f16[{shape[1]}]", f"param c{i} : f16[{shape[1]}]"]
            lines.append(f"{name} = layernorm({value}, g{i}, c{i}, axis = -1, eps = 1e-5)")
        elif kind == "reduce":
            op = draw(st.sampled_from(["reduce_sum", "reduce_max", "reduce_mean"]))
            lines.append(f"{name} = {op}({value}, axis = {axis}, keepdims = true)")
            shape[axis] = "1"
        elif kind == "reshape" and shape == ["B", "8"]:  # the batch stays outermost
            lines.append(f"{name} = reshape(relu(reshape({value}, [B * 2, 4])), [B, 8])")
        elif kind == "reshape" and shape == ["8", "B"]:  # reinterprets: the batch moves in
            lines.append(f"{name} = reshape({value}, [B, 8])")
            shape = ["B", "8"]
        elif kind == "slice" and shape[axis] == "8":  # a static axis: 8 → 7
            lines.append(f"{name} = slice({value}, start = 1, axis = {axis})")
            shape[axis] = "7"
        elif kind == "slice" and shape[axis] == "B":  # the padded axis itself
            start, stop = draw(
                st.sampled_from(
                    [
                        ("0", "1"),  # fixed, inside every run's real part
                        ("B - 1", "B"),  # the last real row: moves with B
                        ("-1", "B"),  # the same, counted from the end
                        ("1", "B"),  # a length that changes with B: refused
                    ]
                )
            )
            lines.append(f"{name} = slice({value}, start = {start}, stop = {stop}, axis = {axis})")
            shape[axis] = "1" if start != "1" else "B - 1"
        elif kind == "transpose":
            lines.append(f"{name} = transpose({value}, [1, 0])")
            shape.reverse()
        if len(lines) == i:  # the op did not apply to this shape
            lines.append(f"{name} = relu({value})")
        value = name
    body = "\n    ".join(["input x : f16[B, 8]", *params, *lines, f"output y = {value}"])
    # from 2: a slice from row 1 to B (drawn above, to be refused) is empty at B = 1
    return f"program p(B: dyn 2..20 = 2) {{\n    {body}\n}}\n"


@settings(max_examples=40, deadline=None)
@given(text=_mixed(), data=st.data())
def test_a_range_is_refused_or_every_padded_run_is_bit_equal(text, data):
    """Never wrong: a program the padding analysis accepts runs padded to the reference's
    bits at its own size; one it refuses is refused before any gear is compiled."""
    program = api.parse(text, "p.rtg")
    try:
        geared = api.compile_gears(program)
    except CheckError as e:
        assert e.span is not None and "as gears instead" in e.hint
        event("refused")
        return
    event("accepted")
    if any(_marks(compiled) for _, compiled in geared.programs):
        event("accepted, some kernel told the real extent")
    for b in data.draw(st.lists(st.integers(2, 20), min_size=1, max_size=3, unique=True)):
        result, expected, plan = _run_padded(geared, {"B": b}, seed=b)
        for name, value in expected.items():
            np.testing.assert_array_equal(result.outputs[name], value)
        if plan is not None:
            _assert_timed_as_static(geared, {"B": b}, plan)


_JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=80, deadline=None)
@given(key=st.sampled_from(["ranges", "params", "gears"]), junk=_JUNK, b=st.integers(-5, 40))
def test_a_tampered_geared_file_is_refused_or_runs_never_a_traceback(key, junk, b):
    data = json.loads(json.dumps(_geared_mlp().to_dict()))
    data[key] = junk if not isinstance(junk, dict) else {**data[key], **junk}
    try:
        geared = geared_from_dict(data)
        compiled, plan = api.choose_gear(geared, {"B": b})
    except (StreamProgramError, InputError, CheckError):
        return
    result = api.run(compiled, numerics=False, padding=plan)
    assert result.makespan_us > 0


@functools.cache
def _geared_mlp():
    return _geared()


#: Bundled models with a range where their batch or sequence length is, at a test's sizes: the
#: model, its program line's parameters as shipped, the same with the range, and a value between
#: gears to run at.
MODEL_RANGES = [
    (
        "mlp",
        "B = 256, D = 512, F = 1024, L = 2, C = 16",
        "B: dyn 2..8 = 8, D = 32, F = 64, L = 2, C = 16",
        5,
    ),
    (
        "layer_stack",
        "B = 256, D = 256, F = 1024, L = 4",
        "B: dyn 2..8 = 8, D = 32, F = 64, L = 2",
        5,
    ),
    ("mlp_train", "B = 256, D = 256, H = 512", "B: dyn 2..8 = 8, D = 32, H = 64", 5),
    (
        "transformer_stack",
        "B = 4, S = 64, D = 256, H = 4, F = 1024, L = 4",
        "B: dyn 1..4 = 4, S = 8, D = 32, H = 2, F = 64, L = 2",
        3,
    ),
    (
        "resnet_bottleneck",
        "N = 2, C = 512, M = 128, HW = 28",
        "N: dyn 1..4 = 4, C = 32, M = 8, HW = 8",
        3,
    ),
    (
        "unet_block",
        "N = 2, C = 640, HW = 16, T = 1280, groups = 32, heads = 8",
        "N: dyn 1..4 = 4, C = 32, HW = 4, T = 16, groups = 4, heads = 2",
        3,
    ),
    (
        "transformer_naive",
        "S = 1024, D = 768, H = 12, F = 3072",
        "S: dyn 8..32 = 32, D = 32, H = 2, F = 64",
        21,
    ),
    (
        "bert_encoder",
        "S = 512, D = 768, H = 12, F = 3072",
        "S: dyn 8..32 = 32, D = 32, H = 2, F = 64",
        21,
    ),
    (
        "llm_prefill",
        "B = 1, S = 128, T = 0, L = 4, D = 768, H = 12, F = 2048, V = 8192",
        "B: dyn 1..4 = 4, S = 8, T = 0, L = 2, D = 32, H = 2, F = 64, V = 64",
        3,
    ),
    (  # a prompt of any length: the last position's logits, sliced where the run says
        "llm_prefill",
        "B = 1, S = 128, T = 0, L = 4, D = 768, H = 12, F = 2048, V = 8192",
        "B = 1, S: dyn 8..32 = 32, T = 0, L = 2, D = 32, H = 2, F = 64, V = 64",
        21,
    ),
]


def _ranged(model: str, shipped: str, ranged: str) -> str:
    text = Path(f"models/{model}.rtg").read_text()
    head = f"program {model}({shipped})"
    assert head in text, head
    return text.replace(head, f"program {model}({ranged})")


@pytest.mark.parametrize(("model", "shipped", "ranged", "value"), MODEL_RANGES)
def test_bundled_models_with_a_batch_or_sequence_range_pad_bit_for_bit(
    model, shipped, ranged, value
):
    """What docs/dynamic-shapes.md lists: each model compiles with the range and a run between
    two gears equals the reference at its own size."""
    geared = api.compile_gears(api.parse(_ranged(model, shipped, ranged), f"{model}.rtg"))
    name = ranged.split(":")[0].split(", ")[-1]
    result, expected, plan = _run_padded(geared, {name: value}, seed=value)
    assert plan is not None and plan.values == {name: value}
    for out, array in expected.items():
        np.testing.assert_array_equal(result.outputs[out], array)
    _assert_timed_as_static(geared, {name: value}, plan)


@pytest.mark.parametrize(
    ("model", "shipped"),
    [
        ("attention", "S = 1024, D = 768, H = 12"),
        ("transformer_block", "S = 1024, D = 768, H = 12, F = 3072"),
    ],
)
def test_hand_pipelined_models_fold_heads_into_the_sequence_and_are_refused(model, shipped):
    ranged = shipped.replace("S = 1024", "S: dyn 128..1024 = 1024")
    with pytest.raises(CheckError, match=r"reshape \(line \d+\) does not compute") as info:
        api.check_ranges(api.parse(_ranged(model, shipped, ranged), f"{model}.rtg"))
    assert "as gears instead" in info.value.hint


TWO_RANGES = """\
program p(S: dyn 2..8 = 8, T: dyn 2..8 = 8) {
    input q : f16[S, 4]
    input k : f16[4, T]
    output y = softmax(q @ k, axis = -1)
}
"""


def test_two_ranges_with_the_same_ends_tell_each_kernel_its_own_extent():
    """The keys are T's, the queries S's: bound at the same ends the two cannot be told apart
    by their extents, so each range's axes are found against its own lower end."""
    geared = api.compile_gears(api.parse(TWO_RANGES, "t.rtg"))
    marks = _marks(geared.select({"S": 8, "T": 8}))
    assert marks == {("matmul", "cols_of", "T"), ("softmax", "length_of", "T")}
    for s, t in [(5, 3), (3, 5), (7, 7), (2, 8), (8, 5)]:
        result, expected, _ = _run_padded(geared, {"S": s, "T": t}, seed=10 * s + t)
        assert result.outputs["y"].shape == (s, t)
        np.testing.assert_array_equal(result.outputs["y"], expected["y"])


def test_a_range_fixed_with_define_compiles_the_other_range_alone(tmp_path: Path):
    """`-D T=5` fixes one of two ranges: the compile pads only S (it once looked for T's range
    ends among the gears and failed with a KeyError)."""
    src, out = tmp_path / "t.rtg", tmp_path / "t.json"
    src.write_text(TWO_RANGES)
    rtgraph = [sys.executable, "-m", "rtgraph"]
    made = subprocess.run(
        [*rtgraph, "compile", str(src), "-D", "T=5", "-o", str(out)], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    data = json.loads(out.read_text())
    assert data["ranges"] == {"S": [2, 8]} and data["params"] == {"T": 5}
    ran = subprocess.run([*rtgraph, "run", str(out), "-D", "S=3"], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert "padded to the gear above: S 3 → 4" in ran.stdout and "bit-equal" in ran.stdout
