"""The graph optimizer: each pass's fixtures (IR in → IR out), the optimized program against the
reference interpreter on the unoptimized one over random programs at every level and stream
policy, and what `explain`, `--emit ir --after` and the options say."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from conftest import MODELS
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from strategies import OPTIMIZER_KINDS, programs

import rtgraph
from rtgraph.cli import main
from rtgraph.compiler import CompileOptions, compile_program
from rtgraph.compiler.optimizer.levels import LEVELS, PASSES
from rtgraph.compiler.optimizer.pipeline import optimized_ir
from rtgraph.compiler.optimizer.rewrite import movable
from rtgraph.compiler.optimizer.stream_host_copies import plan_inputs, streamed
from rtgraph.compiler.optimizer.tile_and_pipeline import chains, plan_region, plan_tiling
from rtgraph.device import load_device
from rtgraph.emulator import run
from rtgraph.errors import StreamProgramError
from rtgraph.ir.printing import format_program
from rtgraph.reports.explain import traffic
from rtgraph.stream_program import StreamProgram, Wait
from rtgraph.stream_program.races import check_races

FIXTURES = Path(__file__).parent / "optimizer"
TOY = load_device("toy")
ASCEND = load_device("ascend-910b")  # fixtures: a device whose timing makes tiling pay
POLICIES = ["single", "by-unit", "list"]


def _cases():
    for path in sorted(FIXTURES.glob("*.txt")):
        for k, case in enumerate(path.read_text().split("\n===\n")):
            lines = case.strip("\n").split("\n")
            cut = lines.index("---")
            title, source = lines[0], "\n".join(lines[1:cut]) + "\n"
            expected = "\n".join(lines[cut + 1 :])
            yield pytest.param(path, k, title, source, expected, id=f"{path.stem}-{k}")


def _after(source: str, name: str, title: str = "") -> str:
    """The fixture's program after pass ``name``; a title ending ``[precision=MODE]`` sets that
    option (the precision pass changes nothing under the default, ``keep``)."""
    program = rtgraph.parse(source, "fixture.rtg")
    extra = {}
    if title.rstrip().endswith("]") and "[precision=" in title:
        extra["precision"] = title.rsplit("[precision=", 1)[1].rstrip().rstrip("]")
    options = CompileOptions(passes=(name,), **extra).for_device(ASCEND)
    return format_program(optimized_ir(program, options)) + "\n"


@pytest.mark.parametrize("path, index, title, source, expected", list(_cases()))
def test_fixture(path, index, title, source, expected):
    got = _after(source, path.stem, title)
    if os.environ.get("RTGRAPH_UPDATE_FIXTURES"):
        cases = path.read_text().split("\n===\n")
        cases[index] = f"{title}\n{source}---\n{got}".rstrip("\n")
        path.write_text("\n===\n".join(cases) + "\n")
        return
    assert got.strip() == expected.strip(), f"{title}\n{got}"


def test_every_pass_has_fixtures_and_changes_something_in_them():
    assert {p.stem for p in FIXTURES.glob("*.txt")} == set(PASSES)
    changed = set()
    for param in _cases():
        path, _, title, source, _ = param.values
        before = format_program(rtgraph.parse(source, "fixture.rtg")) + "\n"
        if _after(source, path.stem, title) != before:
            changed.add(path.stem)
    assert changed == set(PASSES)


# --- numerics: the optimized program against the reference on the unoptimized one ----------


def _equal(result, reference):
    for name, want in reference.items():
        got = result.outputs[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got, want, equal_nan=True), name


@pytest.mark.slow
@given(
    programs(max_ops=16, kinds=OPTIMIZER_KINDS),
    st.sampled_from(POLICIES),
    st.sampled_from(sorted(LEVELS)),
)
@settings(max_examples=80, deadline=None)
def test_optimized_programs_equal_the_reference_bit_for_bit(program, policy, level):
    reference = rtgraph.evaluate(program, seed=5)
    options = CompileOptions(streams=policy, opt_level=level, check=True)
    compiled = compile_program(program, TOY, options)
    assert check_races(compiled).ok
    result = run(compiled, TOY, seed=5)
    assert not result.races
    _equal(result, reference)


@pytest.mark.slow
@given(
    programs(max_ops=16, kinds=OPTIMIZER_KINDS),
    st.sampled_from(POLICIES),
    st.sampled_from([2, 4]),
)
@settings(max_examples=60, deadline=None)
def test_copies_in_parts_equal_the_reference_bit_for_bit(program, policy, parts):
    """stream_host_copies' rewrite forced on every input and output (small programs never pay
    for it): copies of row parts, row tiles that read parts and tiles of tiles, windows written
    and read in place — race-free and bit-equal, under every stream policy."""
    assume(all(movable(n) for n in program.nodes))
    inputs = {n: parts for n, t in program.tensors.items() if t.kind == "input" and t.type.rank}
    changed = streamed(program, inputs, lambda nbytes, dtype: True)
    options = CompileOptions(streams=policy, opt_level=0, check=True)
    compiled = compile_program(changed, TOY, options)
    assert check_races(compiled).ok
    result = run(compiled, TOY, seed=5)
    assert not result.races
    _equal(result, rtgraph.evaluate(program, seed=5))


@pytest.mark.parametrize("policy", POLICIES)
def test_two_inputs_in_parts_into_one_op_cut_it_once(policy):
    """t = x0 + x1 with both inputs copied in parts: the first input's parts cut the add into
    row tiles that read both by rows; the second's copies in parts feed the same tiles (it
    used to cut the already-tiled add again and fail with a ValueError)."""
    program = rtgraph.parse(
        "program p() { input x0 : f32[4, 2]\n input x1 : f32[4, 2]\n output t = x0 + x1 }", "p.rtg"
    )
    changed = streamed(program, {"x0": 4, "x1": 4}, lambda nbytes, dtype: True)
    assert sum(1 for n in changed.op_nodes() if n.op == "add") == 4  # one tile per part
    assert sum(1 for n in changed.nodes if getattr(n, "rows", None)) == 8  # both in parts
    compiled = compile_program(changed, TOY, CompileOptions(streams=policy, opt_level=0))
    assert check_races(compiled).ok
    result = run(compiled, TOY, seed=5)
    assert not result.races
    _equal(result, rtgraph.evaluate(program, seed=5))


@pytest.mark.slow
@given(programs(max_ops=16, kinds=OPTIMIZER_KINDS), st.sampled_from(POLICIES))
@settings(max_examples=30, deadline=None)
def test_every_wait_an_optimized_program_needs_is_found_missing_when_deleted(program, policy):
    """The mutation test at -O2: delete any one inserted wait and the race checker reports a
    race (tiles, fused kernels and the reordered program leave no redundant wait)."""
    compiled = compile_program(program, ASCEND, CompileOptions(streams=policy, opt_level=2))
    for i, c in enumerate(compiled.commands):
        if isinstance(c, Wait):
            mutated = replace(compiled, commands=compiled.commands[:i] + compiled.commands[i + 1 :])
            assert check_races(mutated).races, f"{policy}: command {i} ({c}) was not needed"


@pytest.mark.parametrize(
    "model, params",
    [("transformer_block", {"S": 128}), ("attention", {"S": 128}), ("mlp", {}), ("llm_decode", {})],
)
def test_models_optimized_equal_the_reference_bit_for_bit(model, params):
    program = rtgraph.load(MODELS / f"{model}.rtg", params=params)
    compiled = rtgraph.compile(program, options=CompileOptions(opt_level=1, streams="by-unit"))
    assert any(t.op == "fused" for t in compiled.tasks)
    _equal(rtgraph.run(compiled), rtgraph.evaluate(program))


def test_fast_math_keeps_f32_intermediates_and_stays_within_the_derived_bound():
    source = """program p(N = 64) {
        input x : f16[N, N]
        output y = softmax(exp(x * 0.3) * 0.7 + x, axis = -1)
    }"""
    program = rtgraph.parse(source)
    xs = np.random.default_rng(1).normal(0, 2, (64, 64)).astype(np.float16)
    reference = rtgraph.evaluate(program, inputs={"x": xs})["y"]
    exact = rtgraph.compile(program, options=CompileOptions(opt_level=1))
    fast = rtgraph.compile(program, options=CompileOptions(opt_level=1, fast_math=True))
    (fused,) = [t for t in fast.tasks if t.op == "fused"]
    assert fused.attrs["fast_math"] is True
    assert np.array_equal(rtgraph.run(exact, inputs={"x": xs}).outputs["y"], reference)
    got = rtgraph.run(fast, inputs={"x": xs}).outputs["y"].astype(np.float64)
    error = np.abs(got - reference.astype(np.float64))
    assert error.max() > 0  # fewer roundings: a different answer …
    # … within the rounding the unfused chain adds. With u = 2**-11 (f16), each rounded
    # intermediate v carries |v|·u, propagated through the chain a = 0.3x, e = exp(a),
    # m = 0.7e, z = m + x: δ ≤ u(|z| + |m| + 0.7e(1 + |a|)). Softmax turns input errors δ
    # into a relative output error of at most 2·max δ over the row; both outputs are rounded.
    u = 2.0**-11
    a = 0.3 * xs.astype(np.float64)
    e = np.exp(a)
    m = 0.7 * e
    z = m + xs
    delta = u * (np.abs(z) + np.abs(m) + 0.7 * e * (1 + np.abs(a)))
    bound = np.abs(reference) * (2 * delta.max(axis=-1, keepdims=True) * 1.01 + 2 * u)
    bound += 2.0**-24  # below 2**-14 f16 is subnormal: each rounding is absolute, 2**-25
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert np.all(error <= bound), (worst, error[worst], bound[worst], reference[worst])


def test_fusion_cuts_transformer_block_hbm_traffic_by_a_quarter():
    program = rtgraph.load(MODELS / "transformer_block.rtg")
    before = traffic(program, CompileOptions().for_device(load_device("ascend-910b")))
    options = CompileOptions(opt_level=1).for_device(load_device("ascend-910b"))
    after = traffic(optimized_ir(program, options), options)
    assert after.tasks < before.tasks
    assert after.bytes_moved <= 0.75 * before.bytes_moved, (before, after)


def test_explicit_stream_programs_are_left_as_written():
    program = rtgraph.load(MODELS / "overlap.rtg")
    options = CompileOptions(opt_level=2).for_device(load_device("ascend-910b"))
    assert optimized_ir(program, options) is program


# --- the fused op as untrusted input ------------------------------------------------------


def test_a_tampered_fused_body_is_refused_with_its_json_path(tmp_path):
    program = rtgraph.load(MODELS / "mlp.rtg")
    data = json.loads(rtgraph.compile(program, options=CompileOptions(opt_level=1)).to_json())
    k = next(
        i
        for i, t in enumerate(data["tasks"])
        if t["op"] == "fused" and t["attrs"].get("unit", "vector") == "vector"
    )
    data["tasks"][k]["attrs"]["body"][0][0] = "matmul"
    with pytest.raises(StreamProgramError) as e:
        StreamProgram.from_json(json.dumps(data))
    assert f"tasks[{k}]" in str(e.value)
    assert "fused: body step 0: 'matmul' is not a fusible op" in str(e.value)


def test_a_program_cannot_call_the_internal_fused_op():
    with pytest.raises(rtgraph.errors.RtgError) as e:
        rtgraph.parse("program p() {\n input x : f32[4]\n output y = fused(x)\n}")
    assert "fused" in str(e.value)


# --- the command line ------------------------------------------------------------------------


def test_explain_names_each_pass_and_the_fused_kernels(capsys):
    assert main(["explain", str(MODELS / "mlp.rtg"), "-O1", "-D", "B=64"]) == 0
    out = capsys.readouterr().out
    for name in LEVELS[1]:
        assert f"\n{name}: tasks " in out
    assert "tile_and_pipeline" not in out  # -O2 only
    assert (
        "fused 2 ops into the Cube task 'h @ w + b' (line 7): matmul(x, w_in) → add(·, b_in)" in out
    )
    assert "fused 2 ops into 'h' (line 23): gelu(%3) → add(h, ·)" in out
    assert "in all: tasks 18 → 10, HBM bytes moved 8,908,802 → 7,327,746 (-17.7%)" in out


@pytest.mark.parametrize("model", sorted(p.name for p in MODELS.glob("*.rtg")))
def test_explain_runs_on_every_bundled_model(model, capsys):
    """Every bundled program explains: llm_decode_loop (a captured graph, left as written)
    once stopped the CLI with a traceback, and mlp_train (allreduces, the identity on one
    device) with an error that the device has no link unit, while both compiled."""
    assert main(["explain", str(MODELS / model)]) == 0
    out = capsys.readouterr().out
    if "\nexplicit streams: the program is its own schedule" not in out:
        assert out.count("\nin all: tasks ") == 1
        assert "\nstream_host_copies: " in out and "\ntile_and_pipeline: " in out


def test_explain_says_how_each_input_crosses_the_link_and_why(tmp_path, capsys):
    """The streaming plan as explain prints it: each input's predicted µs per part count (the
    chosen one the least, and at least 2 % under the whole copy) and the outputs sent in parts."""
    source = FIXTURES / "stream_host_copies.txt"
    program = source.read_text().split("\n===\n")[0].split("\n---\n")[0]
    path = tmp_path / "stream_in.rtg"
    path.write_text(program + "\n")
    assert main(["explain", str(path), "--device", "ascend-910b"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("  input 'x' copied in "))
    chosen = int(line.split("copied in ")[1].split()[0])
    predicted = dict(
        (1 if k == "whole" else int(k[2:]), float(v))
        for k, v in (item.split(": ") for item in line.split("done: ")[1].split(", "))
    )
    assert predicted[chosen] == min(predicted.values()) <= 0.98 * predicted[1]
    assert "  output 'y' sent back in 2 parts, each as it is computed" in out


def test_emit_ir_after_a_pass_and_its_errors(capsys):
    model = str(MODELS / "mlp.rtg")
    assert main(["compile", model, "-O1", "--emit", "ir", "--after", "fold_layout"]) == 0
    assert "fused[" not in capsys.readouterr().out
    assert main(["compile", model, "-O1", "--emit", "ir"]) == 0
    assert "%1 = fused[matmul(x, w_in) → add(·, b_in)](x, w_in, b_in)" in capsys.readouterr().out
    assert main(["compile", model, "-O0", "--emit", "ir", "--after", "fuse_elementwise"]) == 2
    assert "--after fuse_elementwise: no such pass runs here" in capsys.readouterr().err
    assert main(["compile", model, "-O1", "--emit", "ir", "--after", "order_for_overlap"]) == 2
    assert "--after order_for_overlap: no such pass runs here" in capsys.readouterr().err
    assert main(["compile", model, "--after", "fuse_elementwise"]) == 2
    assert "--after needs --emit ir" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-O", "7"], "-O 7: not an optimization level (0, 1, 2)"),
        (
            ["--passes", "fuse,eliminate_dead_code"],
            "--passes fuse,eliminate_dead_code: unknown pass 'fuse'",
        ),
    ],
)
def test_bad_optimizer_options_are_usage_errors(argv, message, capsys):
    assert main(["compile", str(MODELS / "mlp.rtg"), *argv]) == 2
    assert message in capsys.readouterr().err


HEADS = """program heads(H = 12, S = 1024, E = 64) {
    input q : f16[H, S, E]
    input k : f16[H, E, S]
    input v : f16[H, S, E]
    output o = softmax(q @ k, axis = -1) @ v
}"""


def test_tiles_write_their_slices_of_the_result_in_place():
    program = rtgraph.parse(HEADS)
    options = CompileOptions(opt_level=2, streams="by-unit")
    compiled = rtgraph.compile(program, device="ascend-910b", options=options)
    assert "concat" not in [t.op for t in compiled.tasks]  # no copy joins the tiles
    tiles = [t for t in compiled.tasks if t.name.startswith("o[") and t.op != "d2h"]
    windows = sorted(w for t in tiles for w in t.writes)
    (plan,) = plan_tiling(program, CompileOptions(opt_level=2).for_device(ASCEND))
    assert len(tiles) == plan.chosen.tiles > 1
    assert all(a[1] == b[0] for a, b in pairwise(windows))  # adjacent
    region = compiled.memory.regions["o"]
    assert (windows[0][0], windows[-1][1]) == (region.offset, region.offset + region.size)
    assert check_races(compiled).ok
    _equal(rtgraph.run(compiled), rtgraph.evaluate(program))


FFN = """program ffn(S = 1024, D = 768, F = 3072) {
    input  x  : f16[S, D]
    param  wo : f16[D, D]
    param  g  : f16[D]
    param  b  : f16[D]
    param  w1 : f16[D, F]
    param  w2 : f16[F, D]
    r = x + x @ wo
    output y = r + gelu(layernorm(r, g, b, axis = -1, eps = 1e-5) @ w1) @ w2
}"""


def test_a_chain_takes_in_the_layernorm_its_first_matmul_waits_for():
    """A pre-norm feed-forward layer is one chain from its layernorm to its residual add: the
    layernorm is cut into the same row tiles, so the first tile's matmul starts after one tile
    of it (and the rows the chain before it cut flow on row by row), bit for bit. A layernorm
    of a host input is left to stream_host_copies (its tiles follow the input's parts)."""
    program = rtgraph.parse(FFN)
    plans = plan_tiling(program, CompileOptions(opt_level=2).for_device(ASCEND))
    assert [[n.op for n in p.chain] for p in plans] == [
        ["matmul", "add"],
        ["layernorm", "matmul", "gelu", "matmul", "add"],
    ]
    plan = plans[1]
    assert plan.chosen.length == len(plan.chain) and plan.chosen.tiles > 1
    direct = rtgraph.parse(FFN.replace("layernorm(r,", "layernorm(x,"))
    options = CompileOptions(opt_level=2).for_device(ASCEND)
    assert all(p.chain[0].op == "matmul" for p in plan_tiling(direct, options))
    options = CompileOptions(opt_level=2, streams="by-unit")
    compiled = rtgraph.compile(program, device="ascend-910b", options=options)
    norms = [t.id for t in compiled.tasks if t.op == "layernorm"]
    assert len(norms) == plan.chosen.tiles
    first_matmul = next(t.id for t in compiled.tasks if "@ w1" in t.name)
    assert check_races(compiled).ok
    result = rtgraph.run(compiled)
    records = {r.id: r for r in result.tasks}
    assert records[first_matmul].start < records[norms[-1]].end  # not after the whole norm
    _equal(result, rtgraph.evaluate(program))


SEQUENCES = """program seqs(S = 1024, D = 768, F = 3072) {
    input  x0 : f16[S, D]
    input  x1 : f16[S, D]
    input  x2 : f16[512, D]
    input  x3 : f16[S, D]
    param  w1 : f16[D, F]
    param  w2 : f16[F, D]
    param  w3 : f16[D, F]
    output y0 = gelu(x0 @ w1) @ w2
    output y1 = gelu(x1 @ w1) @ w2
    output y2 = gelu(x2 @ w1) @ w2
    h3 = gelu(x3 @ w3) @ w2
    output y3 = h3 + h3
}"""


def test_chains_of_one_shape_are_planned_once_and_as_each_alone():
    """Planning is most of an -O2 compile, and a layer applied to several sequences gives
    chains of one shape: they share one plan, which is the plan each would get alone; a chain
    of other shapes (fewer rows), or whose result is not an output, gets its own."""
    program = rtgraph.parse(SEQUENCES)
    options = CompileOptions(opt_level=2).for_device(ASCEND)
    plans = plan_tiling(program, options)
    found = chains(program)
    assert [p.chain for p in plans] == found and len(found) == 4
    resident = sum(t.type.nbytes for t in program.tensors.values() if t.kind in ("param", "input"))
    room = ASCEND.memory.capacity - resident
    for plan in plans:
        alone = plan_region(program, plan.chain, options, room)
        assert (plan.candidates, plan.chosen) == (alone.candidates, alone.chosen)
    assert plans[0].candidates is plans[1].candidates  # planned once
    assert plans[2].candidates != plans[0].candidates  # 512 rows
    assert plans[3].candidates is not plans[0].candidates  # not an output: its own plan
    assert plans[0].chosen.tiles > 1  # so the shared plan is a tiling, applied to both
    compiled = rtgraph.compile(program, device="ascend-910b", streams="by-unit")
    assert check_races(compiled).ok
    _equal(rtgraph.run(compiled), rtgraph.evaluate(program))


def test_inputs_whose_work_has_one_shape_get_the_predictions_each_gets_alone():
    """stream_host_copies predicts each input's parts once per shape of the work that follows
    it: two sequences through the same layer get the plan a one-sequence program gets; a
    shorter sequence, or a layer whose result feeds a second op, its own."""
    text = """program p(S = 1024, D = 768) {
    input  x0 : f16[S, D]
    input  x1 : f16[S, D]
    input  x2 : f16[512, D]
    input  x3 : f16[S, D]
    param  w  : f16[D, D]
    output y0 = relu(layernorm(x0, axis = -1) @ w)
    output y1 = relu(layernorm(x1, axis = -1) @ w)
    output y2 = relu(layernorm(x2, axis = -1) @ w)
    h3 = relu(layernorm(x3, axis = -1) @ w)
    output y3 = h3 @ w
}"""
    alone = text.split("    input  x1")[0] + "    param  w  : f16[D, D]\n"
    alone += "    output y0 = relu(layernorm(x0, axis = -1) @ w)\n}"
    options = CompileOptions(opt_level=2).for_device(ASCEND)
    plans = plan_inputs(rtgraph.parse(text), options)
    (single,) = plan_inputs(rtgraph.parse(alone), options)
    assert [p.name for p in plans] == ["x0", "x1", "x2", "x3"]
    assert plans[0].predicted_us == plans[1].predicted_us == single.predicted_us
    assert len(single.predicted_us) > 1  # parts were weighed
    assert plans[2].predicted_us != plans[0].predicted_us
    assert plans[3].predicted_us != plans[0].predicted_us


@pytest.mark.parametrize("bounds", ["start = 1", "start = -3", "start = 1, stop = -1", "stop = 2"])
@pytest.mark.parametrize("streams", ["single", "by-unit", "list"])
def test_a_slice_with_python_style_bounds_compiles_and_runs_bit_equal(bounds, streams):
    """A slice's bounds as written (a missing stop, negative from the end) are resolved as
    Python's are where the optimizer reads the rows it keeps (the host copies' windows): a
    missing stop once crashed the compile."""
    text = f"""\
program p() {{
    input x : f16[64, 32]
    param w : f16[32, 32]
    h = slice(x, {bounds})
    output y = relu(h @ w)
}}
"""
    program = rtgraph.parse(text, "s.rtg")
    compiled = rtgraph.compile(program, streams=streams)
    result = rtgraph.run(compiled, seed=2)
    np.testing.assert_array_equal(result.outputs["y"], rtgraph.reference(program, seed=2)["y"])
