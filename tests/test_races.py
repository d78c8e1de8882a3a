"""The race checker on real programs, and what a forgotten barrier does on a reordering device."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import MODELS

import rtgraph
from rtgraph.cli import main
from rtgraph.compiler import CompileOptions, compile_program
from rtgraph.device import load_device
from rtgraph.emulator import run
from rtgraph.stream_program import Barrier, Wait
from rtgraph.stream_program.races import check_races


def test_overlap_model_is_race_free(capsys):
    assert main(["check", "--races", str(MODELS / "overlap.rtg")]) == 0
    assert "no races" in capsys.readouterr().out


def test_overlap_without_one_wait_reports_exactly_that_race(tmp_path, capsys):
    source = (MODELS / "overlap.rtg").read_text()
    lines = source.splitlines()
    (wait_line,) = [i for i, line in enumerate(lines) if line.strip().startswith("wait copied")]
    use_line = next(i for i in range(wait_line, len(lines)) if "a2 @ w" in lines[i])
    copy_line = next(i for i, line in enumerate(lines) if "copy(a)" in line)
    broken = tmp_path / "overlap_missing_wait.rtg"
    broken.write_text("\n".join(lines[:wait_line] + lines[wait_line + 1 :]) + "\n")

    assert main(["check", "--races", str(broken)]) == 1
    err = capsys.readouterr().err
    # Line numbers in the broken file: everything after the deleted wait moved up by one.
    use, copy = use_line, copy_line + 1
    assert err.count("race on bytes") == 1
    assert f"{broken}:{use}:" in err
    assert "RAW race" in err
    assert f"stream s_mm, line {use}" in err and f"stream s_copy, line {copy}" in err
    assert "`record` an event on stream s_copy" in err and "`wait` for it on stream s_mm" in err


def test_address_conflict_orders_only_the_conflicting_pair():
    program = rtgraph.load(MODELS / "address_conflict.rtg", device="toy")
    sp = rtgraph.compile(program, device="toy", streams="by-unit")
    assert check_races(sp).ok
    # Hazards come from byte ranges: exactly the writer and the reader of 0x1000 are ordered
    # across streams, the independent pair (0x1000 written, 0x2000 read) is not.
    ranges = {t.name: (t.reads, t.writes) for t in sp.tasks}
    writers = [n for n, (_, w) in ranges.items() if any(a <= 0x1000 < b for a, b in w)]
    assert len(writers) >= 2


@pytest.fixture
def reorder_device():
    toy = load_device("toy")
    return replace(toy, scheduler=replace(toy.scheduler, reorder_window=16))


def _same_stream_chain():
    """On one stream: y = relu(x); z = y * y — a RAW hazard on one stream."""
    return rtgraph.parse(
        """
        program chain(N = 64) {
            input x : f32[N, N]
            y = relu(x)
            z = exp(y)
            output w = z * y
        }
        """,
        device="toy",
    )


def test_reorder_window_needs_barriers_and_a_missing_one_corrupts_results(reorder_device):
    program = _same_stream_chain()
    sp = compile_program(program, reorder_device, CompileOptions(streams="single"))
    barriers = [i for i, c in enumerate(sp.commands) if isinstance(c, Barrier)]
    assert barriers, "same-stream hazards on a reordering device need barrier marks"
    assert check_races(sp, reorder=True).ok
    reference = rtgraph.evaluate(program, seed=1)
    good = run(sp, reorder_device, seed=1)
    assert not good.races
    assert np.array_equal(good.outputs["w"], reference["w"])

    # Remove one barrier mark: the static checker, the dynamic detector and the numbers all
    # see the race.
    broken = replace(sp, commands=sp.commands[: barriers[0]] + sp.commands[barriers[0] + 1 :])
    assert check_races(broken, reorder=True).races
    bad = run(broken, reorder_device, seed=1)
    assert bad.races
    assert not np.array_equal(bad.outputs["w"], reference["w"])


def test_in_order_device_needs_no_barriers():
    program = _same_stream_chain()
    sp = compile_program(program, load_device("toy"), CompileOptions(streams="single"))
    assert not [c for c in sp.commands if isinstance(c, Barrier | Wait)]


def test_check_races_reads_stream_program_json(tmp_path, capsys):
    """A stream program from anywhere (here: compiled, then a wait deleted by hand) is checked."""
    import json

    program = rtgraph.load(MODELS / "mlp.rtg", device="toy")
    sp = rtgraph.compile(program, device="toy", streams="by-unit")
    good = tmp_path / "good.json"
    good.write_text(sp.to_json())
    assert main(["check", str(good)]) == 0
    data = json.loads(sp.to_json())
    data["commands"] = [c for c in data["commands"] if c["cmd"] != "wait"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["check", str(bad)]) == 1
    assert "race on bytes" in capsys.readouterr().err
    (tmp_path / "junk.json").write_text("{not json")
    assert main(["check", str(tmp_path / "junk.json")]) == 1


DOUBLE_BUFFER = """\
device "ascend-910b"
program db() {
    buffer B : bytes[4096]
    stream s_load, s_comp
    event loaded%(events)s
%(before)s    for i in 0..3 {
        on s_load {
%(wait)s            x = kernel(unit = dma, us = 5, writes = [B])
            record loaded
        }
        on s_comp {
            wait loaded
            y = kernel(unit = vector, us = 8, reads = [B])
%(record)s        }
    }
}
"""


def test_a_read_the_program_puts_first_is_a_war_even_when_the_write_was_submitted_first(
    tmp_path, capsys
):
    # One buffer reused by every iteration, the load of batch i + 1 not waiting for the
    # compute of batch i. The compiler submits iteration 1's load before iteration 0's compute
    # (stream order allows it), so in submission order the write comes first — but the program
    # reads batch 0 first: the race is a WAR, and the fix makes the load wait for the compute.
    path = tmp_path / "db.rtg"
    path.write_text(DOUBLE_BUFFER % {"events": "", "before": "", "wait": "", "record": ""})
    program = rtgraph.load(str(path))
    compiled = compile_program(program, load_device("ascend-910b"), CompileOptions(memory="none"))
    launches = [c.task for c in compiled.commands if hasattr(c, "task")]
    assert launches.index(2) < launches.index(1)  # iteration 1's load submitted first

    assert main(["check", "--races", str(path)]) == 1
    err = capsys.readouterr().err
    assert "RAW" not in err
    assert err.count("error: WAR race on bytes [0x0, 0x1000)") == 3
    assert (
        f"{path}:8:17: error: WAR race on bytes [0x0, 0x1000): task 2 'x' (kernel, stream "
        "s_load, line 8) overwrites what task 1 'y' (kernel, stream s_comp, line 13) reads, "
        "with nothing ordering them"
    ) in err
    assert (
        "hint: `record` an event on stream s_comp after 'y' (line 13) and `wait` for it on "
        "stream s_load before 'x' (line 8); 'x' comes after 'y' only in a later iteration, so "
        "also record the event once on stream s_comp before the loop, for the first "
        "iteration's wait"
    ) in err


def test_following_the_hint_where_it_stands_is_race_free(tmp_path, capsys):
    path = tmp_path / "db_fixed.rtg"
    path.write_text(
        DOUBLE_BUFFER
        % {
            "events": ", consumed",
            "before": "    on s_comp {\n        record consumed\n    }\n",
            "wait": "            wait consumed\n",
            "record": "            record consumed\n",
        }
    )
    assert main(["check", "--races", str(path)]) == 0
    assert "ok (6 tasks, no races)" in capsys.readouterr().out
    result = rtgraph.run(rtgraph.compile(rtgraph.load(str(path))))
    # Each load starts only after the previous batch's compute has ended.
    loads = sorted((t for t in result.tasks if t.name == "x"), key=lambda t: t.start)
    computes = sorted((t for t in result.tasks if t.name == "y"), key=lambda t: t.start)
    assert all(load.start >= c.end for load, c in zip(loads[1:], computes, strict=False))
    assert not result.races
