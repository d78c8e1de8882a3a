"""A padded run timed at its real shapes (issue 18, item 1): every value's real extent is worked
out on the optimized program a gear is lowered from (``rtgraph.compiler.real_dims``), kept in
the stream program, and evaluated at the run's real host shapes, so each task is charged the
flops and bytes of the real work its kernel does — not the gear's."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtgraph import api
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.real_dims import META, Extent, op_dims
from rtgraph.dtypes import TensorType
from rtgraph.errors import InputError, StreamProgramError
from rtgraph.stream_program.gears import geared_from_dict

ATTENTION = Path("models/attention_naive.rtg").read_text()
SHIPPED = "program attention_naive(S = 1024, D = 768, H = 12)"

#: One sequence's attention over a range whose top gear is tiled (a Cube busy enough at 4,096
#: rows and width 1,024 that row tiles pay) and whose padded runs are faster untiled at
#: ``UNTILED_AT`` real rows and tiled at ``TILED_AT``.
WIDTH = "D = 1024, H = 16"
GEARS = (2048, 4096)
TILED_RANGE = f"S: dyn {GEARS[0]}..{GEARS[1]} = {GEARS[1]}, {WIDTH}"
UNTILED_AT, TILED_AT = 2600, 3500


def _attention(params: str) -> str:
    return ATTENTION.replace(SHIPPED, f"program attention_naive({params})")


def _timed(program) -> list[tuple]:
    """What the emulator times each task by."""
    return [
        (t.op, t.unit, t.flops, t.bytes_read, t.bytes_written, t.block_dim) for t in program.tasks
    ]


def _bound(geared, values: dict[str, int]):
    """The program a run at ``values`` runs, bound (the gear's own at a gear)."""
    compiled, plan = api.choose_gear(geared, values)
    if plan is None:
        return compiled, plan
    return plan.bind(compiled, api.device_for(None, compiled.device)), plan


def T(*shape: int) -> TensorType:
    return TensorType(shape, "f16")


X = Extent("x", 0, 1, 0, 1024)  # the rows of input x: 1,024 at the gear


@pytest.mark.parametrize(
    ("op", "attrs", "types", "out", "given", "want"),
    [
        # rows 256..512 of x: the real rows past 256, at most 256 of them
        (
            "slice",
            {"axis": 0, "start": 256, "stop": 512},
            [T(1024, 64)],
            T(256, 64),
            [(X, 64)],
            (Extent("x", 0, 1, -256, 256), 64),
        ),
        # the two halves joined again are x's rows
        (
            "concat",
            {"axis": 0},
            [T(512, 64), T(512, 64)],
            T(1024, 64),
            [(X._replace(cap=512), 64), (Extent("x", 0, 1, -512, 512), 64)],
            (X, 64),
        ),
        # halves out of order are not a leading block: taken whole
        (
            "concat",
            {"axis": 0},
            [T(512, 64), T(512, 64)],
            T(1024, 64),
            [(Extent("x", 0, 1, -512, 512), 64), (X._replace(cap=512), 64)],
            None,
        ),
        # [S, H, E] -> [S, H·E]: rows kept; [S, E] -> [S·E]: scaled; [S·4] -> [S, 4]: divided
        (
            "reshape",
            {"shape": (1024, 768)},
            [T(1024, 12, 64)],
            T(1024, 768),
            [(X, 12, 64)],
            (X, 768),
        ),
        (
            "reshape",
            {"shape": (65536,)},
            [T(1024, 64)],
            T(
                65536,
            ),
            [(X, 64)],
            (Extent("x", 0, 64, 0, 65536),),
        ),
        (
            "reshape",
            {"shape": (256, 4)},
            [T(1024)],
            T(256, 4),
            [(Extent("x", 0, 4, 0, 1024),)],
            (Extent("x", 0, 1, 0, 256), 4),
        ),
        ("transpose", {"perm": (1, 0)}, [T(1024, 64)], T(64, 1024), [(X, 64)], (64, X)),
        # a matmul's rows from its left operand, its columns from its right one
        ("matmul", {}, [T(1024, 64), T(64, 1024)], T(1024, 1024), [(X, 64), (64, X)], (X, X)),
        # a softmax along the padded axis keeps it; a reduction over it drops it
        ("softmax", {"axis": -1}, [T(8, 1024)], T(8, 1024), [(8, X)], (8, X)),
        ("reduce_sum", {"axis": 1}, [T(8, 1024)], T(8), [(8, X)], None),
        ("add", {}, [T(1024, 64), T(64)], T(1024, 64), [(X, 64), None], (X, 64)),
    ],
)
def test_each_rule_carries_the_real_extent_of_an_axis(op, attrs, types, out, given, want):
    assert op_dims(op, attrs, types, out, given) == want


def test_an_extent_is_the_real_part_of_its_axis_clamped_to_the_gears():
    tile = Extent("x", 0, 1, -256, 256)
    assert [tile.at({"x": (n, 64)}) for n in (100, 256, 300, 777, 1024)] == [0, 0, 44, 256, 256]


def test_untiled_a_padded_run_is_timed_task_for_task_as_the_static_compile():
    """Without tiling (-O1) a gear's program has the static compile's tasks, and each is charged
    the static compile's flops, bytes and block dim at every run size; under one stream the
    timelines are then the same to the nanosecond."""
    options = CompileOptions(opt_level=1, streams="single")
    text = _attention("S: dyn 16..128 = 100, D = 64, H = 4")
    geared = api.compile_gears(api.parse(text, "a.rtg"), options=options)
    for s in (17, 40, 77, 100):
        bound, plan = _bound(geared, {"S": s})
        static = api.compile(api.parse(text, "a.rtg", {"S": s}), options=options)
        assert _timed(bound) == _timed(static)
        padded = api.run(bound, numerics=False).makespan_us
        assert padded == pytest.approx(api.run(static, numerics=False).makespan_us, rel=1e-12)
        gear = api.run(geared.select(plan.gear), numerics=False).makespan_us
        assert padded < gear


@settings(max_examples=12, deadline=None)
@given(s=st.integers(GEARS[0] + 1, GEARS[1] - 1))
def test_tiled_the_padded_runs_flops_are_the_real_programs(s):
    """With tiling (-O2: one sequence's attention at D = 1,024 is cut into row tiles at the
    4,096 gear, and not at most sizes below) the tiled gear's tasks, timed at a run's real
    shapes, do the static compile's flops at that size, whatever the tiling of either."""
    geared = _tiled_gears()
    tiled = geared.select({"S": GEARS[1]})
    assert len(tiled.tasks) > len(geared.untiled_for({"S": GEARS[1]}).tasks)
    _, plan = api.choose_gear(geared, {"S": s})
    bound = plan.bind(tiled, api.device_for(None, tiled.device))
    static = api.compile(api.parse(_one_sequence(f"S = {s}, {WIDTH}"), "a.rtg"))
    assert sum(t.flops for t in bound.tasks) == sum(t.flops for t in static.tasks)


@functools.cache
def _tiled_gears():
    text = _one_sequence(TILED_RANGE)
    return api.compile_gears(api.parse(text, "a.rtg"))


_GEARED: list = []


def _ranged_attention():
    if not _GEARED:
        text = _attention("S: dyn 128..1024 = 512, D = 64, H = 4")
        _GEARED.append(api.compile_gears(api.parse(text, "a.rtg")))
    return _GEARED[0]


def test_the_real_extents_survive_the_json_form():
    geared = _ranged_attention()
    again = geared_from_dict(json.loads(json.dumps(geared.to_dict())))
    compiled, plan = api.choose_gear(geared, {"S": 300})
    loaded, _ = api.choose_gear(again, {"S": 300})
    assert loaded.meta[META] == compiled.meta[META]
    spec = api.device_for(None, compiled.device)
    assert _timed(plan.bind(loaded, spec)) == _timed(plan.bind(compiled, spec))


@pytest.mark.parametrize(
    ("junk", "message"),
    [
        ([], "must list the"),
        ([1.5, 64], "an axis is an int"),
        ([["x0", 0, 1, 0], 64], "is not \\[padded tensor"),
        ([["nope", 0, 1, 0, 512], 64], "is not \\[padded tensor"),
        ([["x0", 5, 1, 0, 512], 64], "is not \\[padded tensor"),
        ([["x0", 0, 1, 0, 99], 64], "is not \\[padded tensor"),
        ([["x0", 0, 2**50, 0, 512], 64], "is not \\[padded tensor"),
        ([512, 65], "a whole axis of 65"),
        ([True, 64], "an axis is an int"),
        ("x", "must list the"),
    ],
)
def test_a_tampered_entry_is_refused_before_the_run(junk, message):
    """A file's extents are checked against the operand they describe: a wrong one is a
    located refusal, never a traceback or a task timed at a shape it does not have."""
    geared = _ranged_attention()
    compiled, plan = api.choose_gear(geared, {"S": 300})
    table = dict(compiled.meta[META])
    assert table["x0"][1] == 64
    table["x0"] = junk
    tampered = replace(compiled, meta={**compiled.meta, META: table})
    with pytest.raises(StreamProgramError, match=message):
        api.run(tampered, numerics=False, padding=plan)
    with pytest.raises(StreamProgramError, match="must map value names"):
        api.run(replace(compiled, meta={META: [1]}), numerics=False, padding=plan)


def test_a_program_without_real_extents_is_timed_at_the_gears_shapes_and_says_so():
    """A gear compiled before real extents (its file has none) still runs padded; the report
    says its tasks were timed as the gear's."""
    geared = _ranged_attention()
    compiled, plan = api.choose_gear(geared, {"S": 300})
    bare = replace(compiled, meta={k: v for k, v in compiled.meta.items() if k != META})
    run = api.run(bare, numerics=False, padding=plan)
    gear = api.run(compiled, numerics=False)
    assert run.makespan_us == gear.makespan_us and not run.padding.timed
    assert run.padding.describe().endswith(
        "tasks timed at the gear's shapes (the program holds no real extents)"
    )
    timed = api.run(compiled, numerics=False, padding=plan)
    assert timed.padding.timed and timed.makespan_us < gear.makespan_us


_JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=6),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(junk=_JUNK, at=st.integers(0, 10**6), axis=st.integers(0, 3))
def test_junk_in_a_files_extents_is_refused_or_bounded_never_a_traceback(junk, at, axis):
    """Whatever a file holds for a value's axes, a run either refuses it (a
    StreamProgramError naming the entry) or times every task at no more than the gear's
    shapes."""
    geared = _ranged_attention()
    compiled, plan = api.choose_gear(geared, {"S": 300})
    table = dict(compiled.meta[META])
    name = sorted(table)[at % len(table)]
    entry = list(table[name])
    if isinstance(junk, list) and len(junk) == 5:
        entry[axis % len(entry)] = junk  # a five-field axis: what an extent looks like
    else:
        entry = junk
    tampered = replace(compiled, meta={**compiled.meta, META: {**table, name: entry}})
    spec = api.device_for(None, compiled.device)
    try:
        bound = plan.bind(tampered, spec)
    except StreamProgramError:
        return
    gear = {t.id: t for t in compiled.tasks}
    assert all(t.flops <= gear[t.id].flops for t in bound.tasks)
    assert api.run(bound, numerics=False).makespan_us > 0


def test_a_tampered_file_is_refused_by_the_cli_with_status_1(tmp_path: Path):
    data = _ranged_attention().to_dict()
    for entry in data["programs"]:
        table = entry["program"]["meta"].get(META)
        if table:
            table["x0"] = [["x0", 0, 1, 0, 3], 64]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(data))
    run = subprocess.run(
        [sys.executable, "-m", "rtgraph", "run", str(path), "-D", "S=300", "--timing-only"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "meta 'real_dims' entry 'x0'" in run.stderr and "recompile" in run.stderr


def _rtgraph(*args: str) -> str:
    """``rtgraph ARGS`` in a fresh process: its output, the command having succeeded."""
    done = subprocess.run([sys.executable, "-m", "rtgraph", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _one_sequence(params: str) -> str:
    """The naive attention over its first sequence alone."""
    text = re.sub(r"\n    input  x[123] : f16\[S, D\]", "", ATTENTION)
    text = re.sub(r"\n    output y[123] = .*", "", text)
    return text.replace(SHIPPED, f"program attention_naive({params})")


def test_a_gear_compiled_both_ways_runs_whichever_its_real_shapes_time_faster():
    """The 4,096 gear of one sequence's attention (under ``list``) cuts its rows into tiles,
    chosen at 4,096 rows: at 2,600 real rows the gear compiled without tiling is faster, at
    3,500 the tiled one — each run takes the faster at its real shapes and the report says
    which."""
    text = _one_sequence(TILED_RANGE)
    options = CompileOptions(streams="list")
    geared = api.compile_gears(api.parse(text, "a.rtg"), options=options)
    assert [v for v, _ in geared.untiled] == [{"S": GEARS[1]}]
    untiled = geared.untiled_for({"S": GEARS[1]})
    tiled = geared.select({"S": GEARS[1]})
    assert len(untiled.tasks) < len(tiled.tasks)
    ran = {}
    for s in (UNTILED_AT, TILED_AT):
        compiled, plan = api.choose_gear(geared, {"S": s})
        assert set(plan.weighed) == {"tiled", "untiled"}
        faster = min(plan.weighed, key=plan.weighed.get)
        assert compiled is (untiled if faster == "untiled" else tiled)
        result = api.run(compiled, numerics=False, padding=plan)
        assert result.makespan_us == plan.weighed[faster]
        assert f"ran the gear's {faster} program" in result.padding.describe()
        ran[s] = faster
    assert ran == {UNTILED_AT: "untiled", TILED_AT: "tiled"}
    assert api.choose_gear(geared, {"S": GEARS[1]}) == (tiled, None)  # a gear runs its own
    again = geared_from_dict(json.loads(json.dumps(geared.to_dict())))
    assert again.untiled_for({"S": GEARS[1]}) == untiled


def test_a_gears_untiled_program_pads_bit_for_bit():
    """What a gear's untiled program is: the gear compiled without the tiling passes, its
    kernels told the real extents as the tiled one's are."""
    from rtgraph.api import _untiled_options

    options = _untiled_options(CompileOptions())
    assert options is not None and "tile_and_pipeline" not in options.passes
    text = _attention("S: dyn 16..128 = 100, D = 64, H = 4")
    geared = api.compile_gears(api.parse(text, "a.rtg"), options=options)
    assert geared.untiled == ()  # the passes that would differ do not run
    for s in (40, 100):
        compiled, plan = api.choose_gear(geared, {"S": s})
        result = api.run(compiled, seed=s, padding=plan)
        expected = api.reference(api.bind_gear(geared, {"S": s}), seed=s)
        for name, value in expected.items():
            np.testing.assert_array_equal(result.outputs[name], value)


@pytest.mark.parametrize(
    ("junk", "message"),
    [
        ({"untiled": 3}, "untiled: must be a list"),
        ({"untiled": [{"values": {"S": 7}, "program": {}}]}, r"untiled\[0\].values"),
        ({"untiled": [{"values": {"S": 128}, "program": 1}]}, r"untiled\[0\].program"),
    ],
)
def test_a_files_untiled_programs_are_checked_as_its_programs_are(junk, message):
    data = json.loads(json.dumps(_ranged_attention().to_dict()))
    with pytest.raises(StreamProgramError, match=message):
        geared_from_dict({**data, **junk})


def test_a_ranges_listing_shows_each_gears_untiled_program(tmp_path: Path):
    path = tmp_path / "a.rtg"
    path.write_text(_one_sequence(TILED_RANGE))
    listing = _rtgraph("compile", str(path), "--emit", "listing")
    headings = [line for line in listing.splitlines() if line.startswith("## gear")]
    assert headings == [
        "## gear S=2048",
        "## gear S=4096 (runs S = 2049..4096; 2049..4095 padded)",
        "## gear S=4096 (runs S = 2049..4096; 2049..4095 padded), compiled again without tiling "
        "(a padded run takes whichever program its real shapes time faster)",
    ]


def test_an_untiled_program_for_other_tensors_is_refused():
    """A geared program whose untiled program does not take the gear's inputs and give its
    outputs (here the lower gear's program, well formed on its own) is refused before
    anything runs; a file's is checked the same way once read."""
    geared = _tiled_gears()
    low, high = ({"S": g} for g in GEARS)
    wrong = replace(geared, untiled=((high, geared.select(low)),))
    with pytest.raises(InputError, match="untiled program's inputs and outputs"):
        api.choose_gear(wrong, {"S": UNTILED_AT})
    again = geared_from_dict(json.loads(json.dumps(wrong.to_dict())))
    with pytest.raises(InputError, match="untiled program's inputs and outputs"):
        api.choose_gear(again, {"S": UNTILED_AT})


def test_the_compile_says_which_optimizer_passes_changed_the_program():
    """What lets a range skip the second compile of a gear its tiling passes left alone."""
    from rtgraph.compiler import compile_program

    spec = api.device_for(None, "ascend-910b")
    for s, tiled in ((GEARS[1], True), (128, False)):
        changed: set[str] = set()
        program = api.parse(_one_sequence(f"S = {s}, {WIDTH}"), "a.rtg")
        compile_program(program, spec, CompileOptions(streams="list"), changed=changed)
        assert ("tile_and_pipeline" in changed) is tiled
        assert "fuse_elementwise" in changed and "fold_batchnorm" not in changed


def test_explain_says_which_gears_are_also_compiled_without_tiling(tmp_path: Path):
    path = tmp_path / "a.rtg"
    path.write_text(_one_sequence(TILED_RANGE))
    explained = _rtgraph("explain", str(path), "--streams", "list")
    line = "also compiled without tiling: a padded run takes whichever program its real shapes"
    low, high = explained.split("## gear ")[1:]
    assert low.startswith("S=2048") and line not in low  # nothing pads to it
    assert high.startswith("S=4096") and line in high


def test_the_cli_says_which_program_a_padded_run_took(tmp_path: Path):
    source, compiled = tmp_path / "a.rtg", tmp_path / "a.json"
    source.write_text(_one_sequence(TILED_RANGE))

    _rtgraph("compile", str(source), "-o", str(compiled), "--streams", "list")
    shapes = f"S={UNTILED_AT},{TILED_AT}"
    table = _rtgraph("run", str(compiled), "--shapes", shapes, "--timing-only")
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert "4096 (" in rows[f"{UNTILED_AT:,}"] and "%), untiled" in rows[f"{UNTILED_AT:,}"]
    assert "untiled" not in rows[f"{TILED_AT:,}"]
    run_at = f"S={UNTILED_AT}"
    data = json.loads(_rtgraph("run", str(compiled), "-D", run_at, "--timing-only", "--json"))
    weighed = data["padding"]["programs_weighed_us"]
    assert set(weighed) == {"tiled", "untiled"} and weighed["untiled"] < weighed["tiled"]
    assert data["makespan_us"] == pytest.approx(weighed["untiled"])
