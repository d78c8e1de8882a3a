"""Packaging: the grammar and device specs ship inside the wheel, and an installed rtgraph
works from another directory without the source tree."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        done = subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
            capture_output=True,
            text=True,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = out.glob("rtgraph-*.whl")
    return path


@pytest.mark.slow
def test_wheel_contains_the_grammar_and_device_specs(wheel):
    """The grammar's source is the repository's top-level grammars/rtg.lark; the wheel installs
    it as the package rtgraph.grammars."""
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert (
        archive.read("rtgraph/grammars/rtg.lark") == (ROOT / "grammars" / "rtg.lark").read_bytes()
    )
    for device in ("ascend-910b", "ascend-310p", "toy"):
        assert f"rtgraph/device/specs/{device}.toml" in names


@pytest.mark.slow
def test_installed_wheel_runs_from_another_directory(wheel, tmp_path):
    """Install the wheel (without deps: they are in this environment) into a fresh target
    folder and run it from a directory that has no source tree."""
    target = tmp_path / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    model = ROOT / "models" / "mlp.rtg"
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import rtgraph; "
        "assert rtgraph.__file__.startswith(sys.argv[1]), rtgraph.__file__; "
        "from rtgraph.cli import main; sys.exit(main(['check', sys.argv[2]]))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(target), str(model)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "ok" in run.stdout
