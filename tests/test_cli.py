"""The command line: exit statuses, error format, JSON for scripts, whole-or-nothing outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import MODELS

from rtgraph.cli import main
from rtgraph.ops import language_ops, op_table
from rtgraph.stream_program import StreamProgram

ATTENTION = str(MODELS / "attention.rtg")
SMALL = ["-D", "S=64", "-D", "D=128", "-D", "H=4"]


def test_run_json_has_the_documented_keys(capsys):
    assert main(["run", ATTENTION, *SMALL, "--json", "--device", "toy"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in (
        "makespan_us",
        "utilization",
        "events",
        "barriers",
        "memory_peak_bytes",
        "races",
        "reference",
    ):
        assert key in data
    assert data["races"] == 0
    assert set(data["utilization"]) >= {"cube", "vector", "dma"}
    assert all(v == 0.0 for v in data["reference"].values())
    assert all(data["reference_equal"].values())


def test_run_prints_a_summary_and_the_reference_check(capsys):
    assert main(["run", ATTENTION, *SMALL, "--streams", "single"]) == 0
    out = capsys.readouterr().out
    assert "makespan" in out and "utilization" in out and "bit-equal" in out


def test_syntax_error_exit_1_with_location(tmp_path, capsys):
    bad = tmp_path / "bad.rtg"
    bad.write_text("program p() {\n    x = relu(\n}\n")
    assert main(["check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}:")
    assert "error:" in err and "^" in err


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run"])
    assert e.value.code == 2
    assert main(["run", ATTENTION, "-D", "S"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err
    assert main(["run", ATTENTION, "--streams", "by-unitt"]) == 2
    assert "did you mean 'by-unit'" in capsys.readouterr().err


def test_undeclared_parameter_is_a_user_error(capsys):
    assert main(["check", ATTENTION, "-D", "SS=4"]) == 1
    assert "SS" in capsys.readouterr().err


def test_missing_file_is_a_clear_error(capsys):
    assert main(["check", "no/such/file.rtg"]) == 1
    assert "no/such/file.rtg" in capsys.readouterr().err


def test_compile_json_round_trips(tmp_path):
    out = tmp_path / "attention.json"
    assert main(["compile", ATTENTION, *SMALL, "-o", str(out)]) == 0
    program = StreamProgram.from_json(out.read_text())
    assert program.name == "attention"
    assert StreamProgram.from_json(program.to_json()) == program


def test_outputs_are_written_whole_or_not_at_all(tmp_path, capsys):
    target = tmp_path / "out.json"
    target.write_text("previous")
    # A compile that fails (unknown policy) must leave the old file untouched and no temp files.
    assert main(["compile", ATTENTION, "--streams", "nope", "-o", str(target)]) == 2
    assert target.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    # A folder that does not exist: a usage error, nothing written.
    assert main(["compile", ATTENTION, "-o", str(tmp_path / "missing" / "x.json")]) == 2


def test_eval_with_npz_inputs(tmp_path, capsys):
    x = np.ones((64, 128), dtype=np.float16)
    np.savez(tmp_path / "in.npz", x0=x, x1=x, x2=x, x3=x)
    assert main(["eval", ATTENTION, *SMALL, "--inputs", str(tmp_path / "in.npz")]) == 0
    assert "y0:" in capsys.readouterr().out
    bad = np.ones((3, 3), dtype=np.float16)
    np.savez(tmp_path / "bad.npz", x0=bad, x1=x, x2=x, x3=x)
    assert main(["eval", ATTENTION, *SMALL, "--inputs", str(tmp_path / "bad.npz")]) == 1
    assert "shape" in capsys.readouterr().err


def test_npz_with_objects_is_refused_not_unpickled(tmp_path, capsys):
    np.savez(tmp_path / "evil.npz", x0=np.array([{"a": 1}], dtype=object))
    assert main(["eval", ATTENTION, *SMALL, "--inputs", str(tmp_path / "evil.npz")]) == 1
    assert "error" in capsys.readouterr().err


def test_plan_memory_json(tmp_path, capsys):
    records = tmp_path / "r.csv"
    records.write_text("id,lower,upper,size\na,0,2,100\nb,1,3,50\nc,2,4,100\n")
    assert main(["plan-memory", str(records), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lower_bound"] == 150 and data["height"] == 150
    assert set(data["offsets"]) == {"a", "b", "c"}


def test_devices_lists_the_shipped_specs(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    for name in ("ascend-910b", "ascend-310p", "toy"):
        assert name in out


def test_ops_prints_the_registry_table(capsys):
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    assert out == op_table()
    for name in language_ops():
        assert f"`{name}`" in out


def test_python_dash_m_entry_point():
    done = subprocess.run(
        [sys.executable, "-m", "rtgraph", "check", ATTENTION],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "error::DeprecationWarning"},
    )
    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout


def test_batch_size_overrides_the_device_spec_for_compile_and_run(capsys):
    mlp = str(MODELS / "mlp.rtg")
    ioctls = {}
    for batch in (1, 16):
        assert main(["run", mlp, "--timing-only", "--json", "--batch-size", str(batch)]) == 0
        ioctls[batch] = json.loads(capsys.readouterr().out)["host"]["ioctls"]
    assert ioctls[1] > ioctls[16]
    assert main(["run", mlp, "--batch-size", "0"]) == 2
    assert "--batch-size 0" in capsys.readouterr().err


# --- outputs never overwrite inputs ----------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        ("compile", "-o"),
        ("run", "--trace"),
        ("run", "--timeline"),
        ("run", "--memory-map"),
        ("viz", "--dag"),
    ],
)
def test_an_output_never_overwrites_the_program(tmp_path, capsys, command, flag):
    program = tmp_path / "x.rtg"
    program.write_text(Path(ATTENTION).read_text())
    before = program.read_bytes()
    assert main([command, str(program), flag, str(program), "-D", "S=64"]) == 2
    assert capsys.readouterr().err == (
        f"error: {flag} {program} would overwrite the input '{program}'\n"
        "    hint: choose another output path\n"
    )
    assert program.read_bytes() == before


def test_an_output_through_a_link_or_another_spelling_is_caught(tmp_path, capsys):
    program = tmp_path / "x.rtg"
    program.write_text(Path(ATTENTION).read_text())
    link = tmp_path / "link.json"
    link.symlink_to(program)
    assert main(["compile", str(program), "-o", str(link)]) == 2
    assert main(["compile", str(program), "-o", f"{tmp_path}/./sub/../x.rtg"]) == 2
    inputs = tmp_path / "in.npz"
    inputs.write_bytes(b"")
    assert main(["run", str(program), "--inputs", str(inputs), "--trace", str(inputs)]) == 2
    assert "would overwrite the input" in capsys.readouterr().err


def test_bench_never_writes_over_a_model_of_its_folder(tmp_path, capsys):
    program = tmp_path / "m.rtg"
    program.write_text(Path(ATTENTION).read_text())
    assert main(["bench", str(tmp_path), "-o", str(program), "-q"]) == 2
    assert "would overwrite the input" in capsys.readouterr().err


def test_an_inf_output_is_reported_in_the_check_not_warned(tmp_path, capsys):
    program = tmp_path / "inf.rtg"
    program.write_text(
        'device "toy"\nprogram p() {\n    input x : f16[4, 4]\n'
        "    output y = exp(x * 0.0 + 100.0)\n}\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NumPy RuntimeWarning would fail the run
        assert main(["run", str(program)]) == 0
    out = capsys.readouterr().out
    assert "  y                max abs 0  max rel 0  bit-equal  (16 of 16 values inf/NaN)" in out
