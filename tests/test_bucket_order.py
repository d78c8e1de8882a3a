"""A ranged gear compiled again in the op order chosen inside its bucket
(rtgraph/compiler/bucket_order.py): which gears get one, what it is (the gear's tasks and
real extents, another order), that a padded run takes the faster at its real shapes — and comes
within 2 % of a static compile where the gear's own order does not — with the outputs bit for
bit; its JSON form, a tampered file, the CLI's listing, explain and --shapes."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rtgraph import api
from rtgraph.compiler.bucket_order import ORDERED_AT, inside, ordered_at
from rtgraph.compiler.options import CompileOptions
from rtgraph.errors import InputError, StreamProgramError
from rtgraph.stream_program.gears import geared_from_dict

ROOT = Path(__file__).resolve().parent.parent
ATTENTION = (ROOT / "models" / "attention_naive.rtg").read_text()
SHIPPED = "program attention_naive(S = 1024, D = 768, H = 12)"
#: The issue's range at the shipped width, and a narrow one whose runs are cheap with numbers.
RANGE = "S: dyn 128..4096 = 1024, D = 768, H = 12"
NARROW = "S: dyn 64..1024 = 256, D = 256, H = 4"


def _text(params: str) -> str:
    return ATTENTION.replace(SHIPPED, f"program attention_naive({params})")


@functools.cache
def _geared(params: str):
    return api.compile_gears(api.parse(_text(params), "a.rtg"))


def _static_us(params: str, s: int) -> float:
    text = _text(params).replace("S: dyn 128..4096 = 1024", f"S = {s}")
    text = text.replace("S: dyn 64..1024 = 256", f"S = {s}")
    return api.run(api.compile(api.parse(text, "a.rtg")), numerics=False).makespan_us


def test_a_size_inside_each_bucket_is_halfway_between_the_gear_below_and_the_gear():
    gears = {"S": (128, 256, 512, 1024)}
    assert inside({"S": 1024}, gears, {"S": (128, 1024)}) == {"S": 768}
    assert inside({"S": 256}, gears, {"S": (128, 1024)}) == {"S": 192}
    assert inside({"S": 128}, gears, {"S": (128, 1024)}) is None  # nothing pads to it
    assert inside({"S": 128}, gears, {"S": (100, 1024)}) == {"S": 114}  # 100..127 pad to it
    both = {"S": (128, 256), "B": (1, 2, 4)}
    assert inside({"S": 256, "B": 4}, both, {"S": (128, 256)}) == {"S": 192, "B": 4}


def test_a_gears_reordered_program_has_its_tasks_in_another_order():
    geared = _geared(RANGE)
    assert {"S": 1024} in [v for v, _ in geared.reordered]
    own, again = geared.select({"S": 1024}), geared.reordered_for({"S": 1024})
    assert again is not None and ordered_at(again) == {"S": 768}
    names = [t.name for t in own.tasks]
    assert Counter(t.name for t in again.tasks) == Counter(names)
    assert [t.name for t in again.tasks] != names
    assert sum(t.flops for t in again.tasks) == sum(t.flops for t in own.tasks)
    assert {h.name: h.shape for h in again.host_tensors} == {
        h.name: h.shape for h in own.host_tensors
    }
    assert again.meta["real_dims"] == own.meta["real_dims"]  # a padded run times it alike
    assert geared.reordered_for({"S": 128}) is None  # the lowest gear runs nothing padded


@pytest.mark.parametrize("s", [600, 777, 1000])
def test_a_padded_run_takes_the_faster_order_and_comes_within_two_percent(s):
    """The issue's case (777 under S: dyn 128..4096): the 1,024 gear's own order runs 777
    rows 6 % slower than a static compile; the order chosen at 768 within 1 %."""
    geared = _geared(RANGE)
    compiled, plan = api.choose_gear(geared, {"S": s})
    assert set(plan.weighed) == {"own", "reordered"}
    faster = min(plan.weighed, key=plan.weighed.get)
    again = geared.reordered_for(plan.gear)
    assert compiled is (again if faster == "reordered" else geared.select(plan.gear))
    result = api.run(compiled, numerics=False, padding=plan)
    assert result.makespan_us == plan.weighed[faster]
    assert result.makespan_us <= 1.02 * _static_us(RANGE, s)
    if faster == "reordered":
        assert "ran the gear's program in the order chosen for S = 768" in plan.describe()
    if s == 777:
        assert faster == "reordered"
        assert plan.weighed["own"] > 1.03 * _static_us(RANGE, s)  # what it mends


def test_a_reordered_run_computes_the_reference_bit_for_bit():
    geared = _geared(NARROW)
    compiled, plan = api.choose_gear(geared, {"S": 777})
    assert compiled is geared.reordered_for({"S": 1024})
    result = api.run(compiled, seed=7, padding=plan)
    expected = api.reference(api.bind_gear(geared, {"S": 777}), seed=7, check="full")
    own = api.run(geared.select({"S": 1024}), seed=7, padding=plan)
    for name, value in expected.items():
        np.testing.assert_array_equal(result.outputs[name], value)
        np.testing.assert_array_equal(result.outputs[name], own.outputs[name])
    assert not result.races


def test_the_reordered_programs_survive_the_json_form_and_a_bad_one_is_refused():
    geared = _geared(NARROW)
    again = geared_from_dict(json.loads(json.dumps(geared.to_dict())))
    assert again.reordered_for({"S": 1024}) == geared.reordered_for({"S": 1024})
    assert ordered_at(again.reordered_for({"S": 1024})) == {"S": 768}
    data = geared.to_dict()
    for junk, message in (
        (3, "reordered: must be a list"),
        ([{"values": {"S": 7}, "program": {}}], r"reordered\[0\]\.values"),
        ([{"values": {"S": 1024}, "program": 1}], r"reordered\[0\]\.program"),
    ):
        with pytest.raises(StreamProgramError, match=message):
            geared_from_dict({**data, "reordered": junk})
    # a file's meta that does not name sizes: the run still weighs it, the report says less
    odd = replace(geared.reordered_for({"S": 1024}), meta={ORDERED_AT: ["x"]})
    assert ordered_at(odd) is None


def test_a_reordered_program_for_other_tensors_is_refused_before_it_runs():
    geared = _geared(NARROW)
    wrong = replace(geared, reordered=(({"S": 1024}, geared.select({"S": 512})),))
    with pytest.raises(InputError, match="reordered program's inputs and outputs"):
        api.choose_gear(wrong, {"S": 777})


def _rtgraph(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "rtgraph", *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_cli_lists_explains_and_marks_the_reordered_runs(tmp_path: Path):
    source, compiled = tmp_path / "a.rtg", tmp_path / "a.json"
    source.write_text(_text(NARROW))
    listing = _rtgraph("compile", str(source), "--emit", "listing")
    assert (
        "## gear S=1024 (runs S = 513..1024; 513..1023 padded), compiled again in the order "
        "chosen for S = 768 (a padded run takes whichever program its real shapes time faster)"
    ) in listing
    explained = _rtgraph("explain", str(source))
    assert (
        "also compiled in the op order chosen for S = 768, where that order differs"
        in (explained.split("## gear S=1024")[1])
    )
    _rtgraph("compile", str(source), "-o", str(compiled))
    table = _rtgraph("run", str(compiled), "--shapes", "S=600,777", "--timing-only")
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert rows["777"].split("1024 (")[1].split(")")[1].startswith(", reordered")
    assert "reordered" not in rows["600"]  # the gear's own order is faster there
    data = json.loads(_rtgraph("run", str(compiled), "-D", "S=777", "--timing-only", "--json"))
    weighed = data["padding"]["programs_weighed_us"]
    assert weighed["reordered"] < weighed["own"]
    assert data["padding"]["reordered_for"] == {"S": 768}
    assert data["makespan_us"] == pytest.approx(weighed["reordered"])


def test_a_range_compiled_at_another_precision_keeps_its_bucket_orders():
    """The reordered program is compiled from the gear's optimized program as it stands:
    its precision already chosen (the options' --precision is not asked for twice)."""
    text = _text(NARROW)
    geared = api.compile_gears(api.parse(text, "a.rtg"), options=CompileOptions(precision="f32"))
    again = geared.reordered_for({"S": 1024})
    assert again is not None
    assert {t.output.dtype for t in again.tasks if t.output is not None} == {
        t.output.dtype for t in geared.select({"S": 1024}).tasks if t.output is not None
    }
    compiled, plan = api.choose_gear(geared, {"S": 777})
    assert set(plan.weighed) == {"own", "reordered"}
    assert compiled in (again, geared.select({"S": 1024}))
