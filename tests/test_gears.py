"""Dynamic parameters with gears (issue 18, item 1's set form): ``B: dyn {1, 4, 16}`` compiles
once into one program per gear, and a run picks its gear without compiling."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rtgraph
from rtgraph import api
from rtgraph.compiler.options import CompileOptions
from rtgraph.errors import CheckError, InputError, RtgSyntaxError, StreamProgramError, UsageError
from rtgraph.frontend.gears import MAX_GEARS
from rtgraph.stream_program.gears import GearedProgram, geared_from_dict
from rtgraph.stream_program.loading import read_compiled, read_stream_program

MLP = """\
program mlp(B: dyn {16, 1, 4} = 4, D = 64) {
    input  x : f16[B, D]
    param  w1 : f16[D, 4 * D]
    param  w2 : f16[4 * D, D]
    output y = softmax(relu(x @ w1) @ w2, axis = -1)
}
"""


def _error(cls, text: str, params: dict | None = None):
    with pytest.raises(cls) as info:
        api.parse(text, "g.rtg", params)
    return info.value


def test_gears_are_recorded_sorted_and_the_default_is_bound():
    program = api.parse(MLP, "g.rtg")
    assert program.gears == {"B": (1, 4, 16)}
    assert program.params == {"B": 4, "D": 64}
    assert program.tensors["x"].type.shape == (4, 64)


def test_without_a_default_the_smallest_gear_is_bound():
    program = api.parse(MLP.replace("} = 4,", "},"), "g.rtg")
    assert program.params["B"] == 1


def test_a_value_that_is_not_a_gear_is_a_located_error():
    e = _error(CheckError, MLP, {"B": 3})
    assert "parameter 'B' = 3 (-D) is not one of its gears {1, 4, 16}" in e.message
    assert (e.span.line, e.span.col) == (1, 13)
    text = MLP.replace("} = 4,", "} = 5,")
    e = _error(CheckError, text)
    assert "(its default)" in e.message and e.span.col == text.index("= 5") + 3


@pytest.mark.parametrize(
    ("gears", "message"),
    [
        ("{1, 4, 4}", "gear 4 of parameter 'B' is listed twice"),
        ("{0, 4}", "gear 0 of parameter 'B' is not a size"),
        ("{1, 2.5}", "a gear of parameter 'B'"),
    ],
)
def test_bad_gears_are_located_errors(gears, message):
    e = _error(CheckError, MLP.replace("{16, 1, 4} = 4", gears + " = 4"))
    assert message in e.message
    assert e.span.line == 1


def test_too_many_gear_combinations_are_refused_before_compiling():
    many = ", ".join(str(i) for i in range(1, 10))  # 9 × 9 = 81 > MAX_GEARS
    text = (
        f"program p(A: dyn {{{many}}}, B: dyn {{{many}}}) {{ input x: f32[A, B]\n output y = x }}"
    )
    e = _error(CheckError, text)
    assert "81 programs" in e.message and f"at most {MAX_GEARS}" in e.message


def test_dyn_is_a_keyword_and_gears_without_braces_get_a_hint():
    e = _error(RtgSyntaxError, "program p() { input dyn: f32[2]\n output y = dyn }")
    assert "'dyn' is a keyword" in e.hint
    for params in ("S: dyn 1, 4", "S: dyn", "S: dyn [1, 4]"):
        e = _error(RtgSyntaxError, f"program p({params}) {{ input x: f32[S]\n output y = x }}")
        assert "gears in braces" in e.hint and "dyn 1..64" in e.hint, params


def test_each_gear_is_exactly_the_static_compile_and_runs_to_the_reference():
    geared = api.compile_gears(api.parse(MLP, "g.rtg"))
    assert [v for v, _ in geared.programs] == [{"B": 1}, {"B": 4}, {"B": 16}]
    for values, compiled in geared.programs:
        static = api.parse(MLP, "g.rtg", values)
        assert compiled.to_json() == api.compile(static).to_json()
        result = api.run(compiled, seed=3)
        expected = api.reference(static, seed=3)
        np.testing.assert_array_equal(result.outputs["y"], expected["y"])
        assert result.outputs["y"].shape == (values["B"], 64)


def test_select_refuses_what_is_not_a_gear():
    geared = api.compile_gears(api.parse(MLP, "g.rtg"))
    assert geared.select({"B": 16}) is geared.programs[2][1]
    with pytest.raises(InputError, match=r"-D B=3: not a gear of 'mlp' \(gears: 1, 4, 16\)"):
        geared.select({"B": 3})
    with pytest.raises(InputError, match="choose one"):
        geared.select({})
    with pytest.raises(InputError, match="no dynamic parameter 'D'"):
        geared.select({"B": 1, "D": 64})


def test_compile_gears_needs_a_dynamic_parameter():
    with pytest.raises(UsageError, match="no dynamic parameters"):
        api.compile_gears(api.parse(MLP.replace(": dyn {16, 1, 4}", ""), "g.rtg"))


def test_the_json_form_round_trips_and_is_checked(tmp_path: Path):
    geared = api.compile_gears(api.parse(MLP, "g.rtg"))
    path = tmp_path / "g.json"
    path.write_text(json.dumps(geared.to_dict()))
    back = read_compiled(path)
    assert isinstance(back, GearedProgram) and back.to_dict() == geared.to_dict()
    with pytest.raises(StreamProgramError, match="missing schema marker"):
        read_stream_program(path)  # a reader of single programs does not take it silently
    doc = geared.to_dict()
    broken = [
        {**doc, "programs": doc["programs"][:2]},  # a gear's program missing
        {**doc, "programs": [doc["programs"][0]] * 3},  # one gear three times
        {**doc, "gears": {"B": [0, 4]}},
        {**doc, "programs": [{**doc["programs"][0], "values": {"B": 2}}, *doc["programs"][1:]]},
    ]
    for bad in broken:
        with pytest.raises(StreamProgramError):
            geared_from_dict(bad)
    bad = json.loads(json.dumps(doc))
    bad["programs"][1]["program"]["tasks"][0]["unit"] = "warp"
    path.write_text(json.dumps(bad))
    with pytest.raises(StreamProgramError, match=r"g\.json: programs\[1\]\.program: "):
        read_compiled(path)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtgraph", *args], capture_output=True, text=True, timeout=120
    )


def test_compile_once_then_run_each_gear_from_the_cli(tmp_path: Path):
    source, out = tmp_path / "mlp.rtg", tmp_path / "mlp.json"
    source.write_text(MLP)
    assert _cli("compile", str(source), "-o", str(out)).returncode == 0
    assert json.loads(out.read_text())["gears"] == {"B": [1, 4, 16]}
    for gear in (1, 16):
        done = _cli("run", str(out), "-D", f"B={gear}", "--timing-only")
        assert done.returncode == 0, done.stderr
        static = api.compile(api.parse(MLP, "g.rtg", {"B": gear}))
        assert f"tasks {len(static.tasks)}" in done.stdout
    done = _cli("run", str(out), "-D", "B=3")
    assert done.returncode == 1 and "not a gear of 'mlp'" in done.stderr
    assert "Traceback" not in done.stderr
    listing = _cli("compile", str(source), "--emit", "listing")
    assert [line for line in listing.stdout.splitlines() if line.startswith("## gear")] == [
        "## gear B=1",
        "## gear B=4",
        "## gear B=16",
    ]
    fixed = _cli("compile", str(source), "-D", "B=4")  # one gear fixed: a plain compile
    assert fixed.returncode == 0 and '"schema": "rtgraph.stream-program"' in fixed.stdout


def test_the_package_exports_the_gear_calls():
    assert rtgraph.compile_gears is api.compile_gears
    assert rtgraph.choose_gear is api.choose_gear and rtgraph.bind_gear is api.bind_gear
    assert rtgraph.check_ranges is api.check_ranges


def test_shapes_runs_each_gear_of_a_geared_program_and_checks_a_source(tmp_path: Path):
    source, out = tmp_path / "mlp.rtg", tmp_path / "mlp.json"
    source.write_text(MLP)
    assert _cli("compile", str(source), "-o", str(out)).returncode == 0
    done = _cli("run", str(out), "--shapes", "B=1,16", "--timing-only")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert rows[0][:2] == ["B", "tasks"] and [r[0] for r in rows[1:]] == ["1", "16"]
    for row in rows[1:]:
        static = api.compile(api.parse(MLP, "g.rtg", {"B": int(row[0])}))
        expected = api.run(static, numerics=False).makespan_us
        assert float(row[2].replace(",", "")) == pytest.approx(expected, abs=5e-4)
    checked = _cli("run", str(source), "--shapes", "B=4")
    assert checked.returncode == 0 and checked.stdout.splitlines()[1].split()[-1] == "0.000"
    bad = _cli("run", str(out), "--shapes", "B=2")
    assert bad.returncode == 1 and "not a gear" in bad.stderr
    usage = _cli("run", str(out), "--shapes", "B=1,x")
    assert usage.returncode == 2 and "expected NAME=V1,V2" in usage.stderr


def test_explain_shows_each_gears_choices(tmp_path: Path):
    source = tmp_path / "mlp.rtg"
    source.write_text(MLP)
    done = _cli("explain", str(source))
    assert done.returncode == 0, done.stderr
    headings = [line for line in done.stdout.splitlines() if line.startswith("## gear")]
    assert headings == ["## gear B=1", "## gear B=4", "## gear B=16"]
    one = _cli("explain", str(source), "-D", "B=16")
    assert one.returncode == 0 and "## gear" not in one.stdout
    assert one.stdout.strip() in done.stdout  # the B=16 section is that gear's explanation


@settings(max_examples=8, deadline=None)
@given(
    gears=st.lists(st.integers(1, 48), min_size=1, max_size=4, unique=True),
    width=st.sampled_from([16, 32]),
    streams=st.sampled_from(["single", "by-unit", "list"]),
)
def test_any_gear_set_compiles_to_its_static_programs_and_round_trips(gears, width, streams):
    text = MLP.replace("{16, 1, 4} = 4", "{" + ", ".join(map(str, gears)) + "}")
    text = text.replace("D = 64", f"D = {width}")
    options = CompileOptions(streams=streams)
    geared = api.compile_gears(api.parse(text, "g.rtg"), options=options)
    assert list(geared.gears["B"]) == sorted(gears)
    back = geared_from_dict(json.loads(json.dumps(geared.to_dict())))
    for gear in gears:
        static = api.compile(api.parse(text, "g.rtg", {"B": gear}), options=options)
        assert back.select({"B": gear}).to_json() == static.to_json()
