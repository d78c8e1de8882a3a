"""What a file may make rtgraph open: a program, a stream program and a spec's ``extends`` only
*name* a device (shipped, or on RTGRAPH_DEVICE_PATH); only the user gives paths, and every spec
file read is a regular ``.toml`` file under the size cap, checked before it is read.

Each vector is the issue's: ``device "/etc/shadow"`` used to print the file's first line in a
TOML error, ``device "/dev/zero"`` read until the OOM killer, a FIFO hung.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import rtgraph
from rtgraph.cli import main
from rtgraph.device import MAX_SPEC_BYTES, load_device, load_named_device
from rtgraph.errors import DeviceSpecError, RtgError
from rtgraph.stream_program import from_dict, to_dict

SECRET = "root:$6$very-secret-hash:19000:0:99999:7:::"
PROGRAM = 'device "{device}"\nprogram p() {{\n    input x : f32[4]\n    output y = relu(x)\n}}\n'


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file rtgraph must never read: its content must never reach an error message."""
    path = tmp_path / "shadow"
    path.write_text(SECRET + "\n", encoding="utf-8")
    return path


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    """A FIFO with no writer: opening it blocking, or reading it, hangs."""
    path = tmp_path / "pipe.toml"
    os.mkfifo(path)
    return path


def refusal(call, *args, **kwargs) -> str:
    """The rendered error of a call that must be refused fast, never a traceback or a hang."""
    start = time.process_time()
    with pytest.raises(RtgError) as info:
        call(*args, **kwargs)
    assert time.process_time() - start < 0.5
    return info.value.render()


# --- a program names its device --------------------------------------------------------------


@pytest.mark.parametrize("device", ["/etc/shadow", "/dev/zero", "../secrets.toml", "./x.toml"])
def test_a_program_cannot_point_at_a_file(device: str) -> None:
    text = refusal(rtgraph.parse, PROGRAM.format(device=device), "evil.rtg")
    assert f"evil.rtg:1:1: error: '{device}' is a path; a device is named here" in text
    assert "hint: name a shipped device (ascend-310p, ascend-910b, toy)" in text


def test_a_program_naming_a_secret_file_never_reads_it(secret: Path, fifo: Path) -> None:
    for target in (secret, fifo):
        text = refusal(rtgraph.parse, PROGRAM.format(device=target), "evil.rtg")
        assert "is a path" in text and SECRET not in text


def test_a_long_device_name_is_refused_shortly() -> None:
    text = refusal(rtgraph.parse, PROGRAM.format(device="n" * 100_000), "long.rtg")
    assert "is not a device name (letters, digits, '.', '_', '-'; at most 64)" in text
    assert len(text) < 1_000  # the message and the excerpt of the line are both cut short


def test_a_program_names_a_spec_on_the_search_path(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "my-npu.toml").write_text('extends = "toy"\n[device]\nname = "my-npu"\n')
    monkeypatch.setenv("RTGRAPH_DEVICE_PATH", f"{tmp_path / 'absent'}{os.pathsep}{tmp_path}")
    program = rtgraph.parse(PROGRAM.format(device="my-npu"), "mine.rtg")
    assert rtgraph.compile(program).device == "my-npu"
    monkeypatch.delenv("RTGRAPH_DEVICE_PATH")
    text = refusal(rtgraph.parse, PROGRAM.format(device="my-npu"), "mine.rtg")
    assert "unknown device 'my-npu' (shipped: ascend-310p, ascend-910b, toy)" in text
    assert "put NAME.toml in a folder on RTGRAPH_DEVICE_PATH" in text


# --- a stream program names its device -------------------------------------------------------


@pytest.mark.parametrize("device", ["/etc/shadow", "/dev/zero"])
def test_a_stream_program_cannot_point_at_a_file(tmp_path: Path, device: str, capsys) -> None:
    program = rtgraph.parse(PROGRAM.format(device="toy"), "ok.rtg")
    data = to_dict(rtgraph.compile(program))
    data["device"] = device
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(data), encoding="utf-8")
    assert main(["check", "--races", str(tampered)]) == 1
    err = capsys.readouterr().err
    assert f"error: '{device}' is a path; a device is named here, not opened from a file" in err
    loaded = from_dict(data)
    assert "is a path" in refusal(rtgraph.run, loaded, numerics=False)


# --- extends names a device ------------------------------------------------------------------


@pytest.mark.parametrize("base", ["/etc/shadow", "../up.toml", "/tmp/x.toml"])
def test_extends_stays_in_its_folder(tmp_path: Path, base: str) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(f'extends = "{base}"\n', encoding="utf-8")
    text = refusal(load_device, spec)
    assert f"{spec}:1:1: error: extends: '{base}' is outside this spec's folder" in text


def test_extends_never_reads_a_non_toml_file_beside_it(tmp_path: Path, secret: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text('extends = "shadow"\n', encoding="utf-8")
    text = refusal(load_device, spec)
    assert "extends: unknown device 'shadow'" in text and SECRET not in text


# --- paths the user gives --------------------------------------------------------------------


def test_a_user_path_must_be_a_toml_file(secret: Path, capsys) -> None:
    text = refusal(load_device, secret)
    assert f"'{secret}' is not a device spec: spec files end in .toml" in text
    assert SECRET not in text
    model = Path(__file__).resolve().parent.parent / "models" / "mlp.rtg"
    assert main(["check", str(model), "--device", "/etc/shadow"]) == 1
    assert "'/etc/shadow' is not a device spec: spec files end in .toml" in capsys.readouterr().err


def test_a_fifo_or_a_folder_is_refused_without_blocking(fifo: Path, tmp_path: Path) -> None:
    assert f"'{fifo}' is not a regular file" in refusal(load_device, fifo)
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    assert "dir.toml" in refusal(load_device, folder)


def test_an_oversized_spec_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    with big.open("wb") as f:
        f.truncate(50 * 1024**3)  # sparse: 50 GiB that would take minutes and all memory to read
    text = refusal(load_device, big)
    assert f"is {50 * 1024**3:,} bytes; the limit is {MAX_SPEC_BYTES:,}" in text


def test_the_runtime_api_reads_a_user_spec_safely(secret: Path) -> None:
    from rtgraph import runtime

    text = refusal(runtime.set_device, str(secret))
    assert "spec files end in .toml" in text and SECRET not in text


def test_a_named_device_is_never_a_path() -> None:
    for name in ("/dev/zero", "a/b", ".hidden"):
        with pytest.raises(DeviceSpecError, match="is a path"):
            load_named_device(name)
    assert load_named_device("toy").name == "toy"


def test_a_toml_file_that_is_no_spec_is_never_quoted(tmp_path: Path) -> None:
    """A user may name the wrong .toml file: its values are not echoed back, valid or not."""
    tokens = tmp_path / "auth.toml"
    tokens.write_text(f'[http-basic.pypi]\npassword = "{SECRET}"\n', encoding="utf-8")
    text = refusal(load_device, tokens)
    assert text == (
        f"error: {tokens}: not a device spec: it has no [device] table and no extends\n"
        '    hint: a spec starts with extends = "NAME" or the tables of docs/devices.md'
    )
    broken = tmp_path / "broken.toml"
    broken.write_text(f"token = {SECRET}\n", encoding="utf-8")
    text = refusal(load_device, broken)
    assert text == f"error: {broken}:1:9: invalid TOML (not shown: the file is not a device spec)"


def test_a_spec_with_a_typo_is_still_quoted(tmp_path: Path) -> None:
    spec = tmp_path / "mine.toml"
    spec.write_text('extends = "toy"\n[units.cube]\ncores = = 2\n', encoding="utf-8")
    text = refusal(load_device, spec)
    assert f"{spec}:3:9: error: invalid TOML" in text and "    cores = = 2" in text
