"""Seeded data where an op needs it at or above zero (rtgraph/ir/data.py): a param passed as it is
to batchnorm's variance is generated as |x| — by the reference interpreter, the emulator and a
loaded stream program alike — so a seeded BatchNorm model computes numbers, not NaN; a run of a
program whose batchnorms were folded is checked against the folded program and says how far the
outputs moved from the program as written (`rtgraph.as_checked`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import MODELS

import rtgraph
from rtgraph.cli import main
from rtgraph.compiler import CompileOptions
from rtgraph.errors import CheckError, StreamProgramError
from rtgraph.ir.data import generate
from rtgraph.ir.interpreter import host_values
from rtgraph.ops import lookup
from rtgraph.stream_program.program import StreamProgram

SOURCE = """program bn() {
    input x : f16[2, 4, 3, 3]
    param g : f16[4]
    param b : f16[4]
    param m : f16[4]
    param v : f16[4]
    param u : f16[4]
    output y = batchnorm(x, g, b, m, v)
    output z = batchnorm(x, g, b, m, u + g)
    output w = v * g
}"""


def test_the_registry_marks_batchnorms_variance_and_nothing_else():
    assert lookup("batchnorm").nonnegative_args == (4,)
    assert lookup("layernorm").nonnegative_args == ()


def test_a_param_passed_as_it_is_to_the_variance_is_marked():
    program = rtgraph.parse(SOURCE)
    marked = {t.name for t in program.tensors.values() if t.nonnegative}
    # v: the variance of y (and read by w: one value, so |x| there too); u reaches z's
    # variance through an add, so nothing about u itself needs it nonnegative
    assert marked == {"v"}


def test_a_marked_param_is_the_absolute_value_of_what_it_would_be():
    plain = generate("v", (64,), "f16", 7, param=True)
    made = generate("v", (64,), "f16", 7, param=True, nonnegative=True)
    assert (plain < 0).any()
    assert np.array_equal(made, np.abs(plain))
    ints = generate("v", (64,), "i8", 7, param=True, nonnegative=True)
    plain_ints = generate("v", (64,), "i8", 7, param=True)
    assert (plain_ints < 0).any() and np.array_equal(ints, np.abs(plain_ints))


def test_seeded_resnet_bn_runs_to_finite_numbers_bit_equal_to_the_reference():
    program = rtgraph.load(MODELS / "resnet_bn.rtg", N=1, C=8, HW=8)
    values = host_values(program, None, None, 0)
    assert {t.name for t in program.params_() if t.nonnegative} == {"bn1_v", "bn2_v", "bnd_v"}
    assert all((values[n] >= 0).all() for n in ("bn1_v", "bn2_v", "bnd_v"))
    compiled = rtgraph.compile(program, opt_level=0)
    result = rtgraph.run(compiled)
    assert np.isfinite(result.outputs["y"]).all()
    report = rtgraph.compare(result.outputs, rtgraph.reference(program, check="full"))
    assert report["y"]["equal"]


def test_a_saved_stream_program_keeps_the_mark_and_the_emulator_generates_the_same_values():
    program = rtgraph.parse(SOURCE)
    compiled = rtgraph.compile(program, opt_level=0)
    hosts = {h.name: h for h in compiled.host_tensors}
    assert hosts["v"].nonnegative and not hosts["u"].nonnegative
    text = compiled.to_json()
    saved = {h["name"]: h for h in json.loads(text)["host_tensors"]}
    assert saved["v"]["nonnegative"] is True
    assert "nonnegative" not in saved["u"]  # written only when true: other programs as before
    loaded = StreamProgram.from_json(text)
    assert loaded == compiled
    result = rtgraph.run(loaded)
    assert np.isfinite(result.outputs["y"]).all()
    report = rtgraph.compare(result.outputs, rtgraph.reference(program, check="full"))
    assert all(r["equal"] for r in report.values())


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_nonnegative_mark_that_is_not_a_boolean_is_refused_on_load(value):
    compiled = rtgraph.compile(rtgraph.parse(SOURCE), opt_level=0)
    doc = json.loads(compiled.to_json())
    for h in doc["host_tensors"]:
        if h["name"] == "u":
            h["nonnegative"] = value
    with pytest.raises(StreamProgramError, match="nonnegative"):
        StreamProgram.from_json(json.dumps(doc))


def test_a_folded_run_is_checked_against_the_folded_program_and_says_how_far_it_moved(capsys):
    model = str(MODELS / "resnet_bn.rtg")
    assert main(["run", model, "-D", "C=8", "-D", "HW=8"]) == 0
    out = capsys.readouterr().out
    assert "bit-equal" in out and "DIFFERS" not in out
    assert "batchnorm folded into the conv/matmul before it" in out
    moved = out.split("the program as written differs by\n")[1].splitlines()[0].split()
    assert moved[0] == "y" and float(moved[3]) > 0  # folding rounds differently: it moved
    assert main(["run", model, "-D", "C=8", "-D", "HW=8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["reference_equal"] == {"y": True}
    assert 0 < data["batchnorm_folded"]["y"]["max_rel_top"] < 2.0**-6
    assert main(["run", model, "-D", "C=8", "-D", "HW=8", "-O0"]) == 0
    out = capsys.readouterr().out
    assert "bit-equal" in out and "batchnorm folded" not in out


def test_a_param_declared_nonnegative_is_marked_and_its_hints_are_checked():
    program = rtgraph.parse(
        "program p() {\n    input x : f16[4]\n    param s : f16[4] @direct @nonnegative\n"
        "    output y = sqrt(s) * x\n}"
    )
    s = program.tensors["s"]
    assert s.nonnegative and s.alloc == "direct"
    y = rtgraph.evaluate(program)["y"]
    assert np.isfinite(y).all()  # sqrt of a seeded |x|
    for hints, message, column in (
        ("@nonegative", "unknown hint '@nonegative' for a param", 22),
        ("@direct @cached", "param 's' has two allocation hints, @direct and @cached", 30),
        ("@nonnegative @nonnegative", "param 's' has @nonnegative twice", 35),
    ):
        text = f"program p() {{\n    param s : f16[4] {hints}\n    output y = s * s\n}}"
        with pytest.raises(CheckError) as e:
            rtgraph.parse(text)
        assert message in str(e.value) and f"<string>:2:{column}:" in str(e.value), str(e.value)


def test_as_checked_is_the_program_as_the_passes_that_change_arithmetic_leave_it():
    program = rtgraph.load(MODELS / "resnet_bn.rtg", N=1, C=8, HW=8)
    folded = rtgraph.as_checked(program)  # the default level folds every batchnorm
    assert "batchnorm" in {n.op for n in program.op_nodes()}
    assert "batchnorm" not in {n.op for n in folded.op_nodes()}
    assert rtgraph.as_checked(program, options=CompileOptions(opt_level=0)) is program
    mlp = rtgraph.load(MODELS / "mlp.rtg")
    assert rtgraph.as_checked(mlp) is mlp  # nothing to fold, precisions kept
    bf16 = rtgraph.as_checked(mlp, options=CompileOptions(precision="bf16"))
    assert "bf16" in {t.type.dtype for t in bf16.tensors.values()}
    result = rtgraph.run(rtgraph.compile(program))
    for name, r in rtgraph.compare(result.outputs, rtgraph.reference(folded)).items():
        assert r["equal"], name


@pytest.mark.parametrize("level", ["-O0", "-O2"])
def test_a_compiled_program_is_checked_as_its_own_compile_folded(tmp_path, capsys, level):
    """A .json takes no compile options at run time: whether its batchnorms were folded is
    recorded in it (meta ``batchnorms_folded``), and the check follows that, not the defaults."""
    source = (MODELS / "resnet_bn.rtg").read_text()
    source = source.replace("program resnet_bn(N = 1,", "program resnet_bn(N: dyn {1, 2} = 1,")
    (tmp_path / "rbn.rtg").write_text(source)
    out = tmp_path / "rbn.json"
    args = ["compile", str(tmp_path / "rbn.rtg"), level, "-D", "C=8", "-D", "HW=8"]
    assert main([*args, "-o", str(out)]) == 0
    saved = json.loads(out.read_text())
    folded = [g["program"]["meta"].get("batchnorms_folded") for g in saved["programs"]]
    assert folded == ([True, True] if level == "-O2" else [None, None])
    capsys.readouterr()
    assert main(["run", str(out), "-D", "N=2"]) == 0
    text = capsys.readouterr().out
    assert "bit-equal" in text and "DIFFERS" not in text
    assert ("batchnorm folded into" in text) == (level == "-O2")


def test_a_folded_mark_that_is_not_a_boolean_is_refused_on_load():
    compiled = rtgraph.compile(rtgraph.load(MODELS / "resnet_bn.rtg", N=1, C=8, HW=8))
    doc = json.loads(compiled.to_json())
    assert doc["meta"]["batchnorms_folded"] is True
    doc["meta"]["batchnorms_folded"] = "yes"
    with pytest.raises(StreamProgramError, match="batchnorms_folded"):
        StreamProgram.from_json(json.dumps(doc))


def test_shapes_reports_the_error_against_the_program_as_checked(capsys):
    """`--shapes` runs each size and reports the largest error against the reference of the
    program as a run checks it (folded): 0 for a folded model, not the fold's own effect."""
    model = str(MODELS / "resnet_bn.rtg")
    assert main(["run", model, "--shapes", "N=1,2", "-D", "C=8", "-D", "HW=8"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()[-2:]
    assert [row.split()[0] for row in rows] == ["1", "2"]
    assert [float(row.split()[-1]) for row in rows] == [0.0, 0.0]
