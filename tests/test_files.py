"""Outputs are written whole or not at all (rtgraph.files): content, permissions, no litter."""

from __future__ import annotations

import csv
import io
import os
import signal
import stat
import subprocess
import sys

import pytest

from rtgraph.errors import UsageError
from rtgraph.files import atomic_output, write_atomic


def names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_text_is_written_as_utf8_with_newlines_as_given(tmp_path):
    path = write_atomic(tmp_path / "out.txt", "héllo\r\nµs\n")
    assert path == tmp_path / "out.txt"
    assert path.read_bytes() == "héllo\r\nµs\n".encode()
    assert names(tmp_path) == ["out.txt"]


def test_bytes_are_written_as_they_are(tmp_path):
    data = bytes(range(256)) * 3
    write_atomic(str(tmp_path / "b.bin"), data)
    assert (tmp_path / "b.bin").read_bytes() == data


def test_an_empty_output_is_an_empty_file(tmp_path):
    assert write_atomic(tmp_path / "e", "").read_bytes() == b""


def test_a_relative_path_is_written_in_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_atomic("here.json", "{}")
    assert (tmp_path / "here.json").read_text() == "{}"
    assert names(tmp_path) == ["here.json"]


def test_an_existing_file_is_replaced(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("a much longer previous content")
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert names(tmp_path) == ["out.json"]


def test_new_files_get_the_permissions_open_gives(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    written = write_atomic(tmp_path / "out.txt", "x")
    assert stat.S_IMODE(written.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)


@pytest.mark.parametrize(("umask", "expected"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_permissions_are_0666_less_the_umask(tmp_path, umask, expected):
    old = os.umask(umask)
    try:
        written = write_atomic(tmp_path / "out.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(written.stat().st_mode) == expected


def test_a_replaced_private_file_gets_new_file_permissions(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    target.chmod(0o600)
    old = os.umask(0o022)
    try:
        write_atomic(target, "new")
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_the_target_is_untouched_until_the_block_ends(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old")
    with atomic_output(target) as out:
        out.write(b"half")
        assert target.read_text() == "old"
        assert len(names(tmp_path)) == 2  # the target and one temporary file beside it
    assert target.read_text() == "half"
    assert names(tmp_path) == ["out.csv"]


def test_a_writer_that_needs_a_file_object(tmp_path):
    target = tmp_path / "table.csv"
    with atomic_output(target) as out:
        text = io.TextIOWrapper(out, encoding="utf-8", newline="")
        csv.writer(text).writerows([["op", "us"], ["matmul", "1.5"]])
        text.flush()
        text.detach()  # leave the binary file open for atomic_output to sync and close
    assert target.read_bytes() == b"op,us\r\nmatmul,1.5\r\n"


@pytest.mark.parametrize("error", [ValueError("bad figure"), KeyboardInterrupt()])
def test_a_failure_in_the_block_keeps_the_old_file_and_leaves_no_litter(tmp_path, error):
    target = tmp_path / "out.png"
    target.write_bytes(b"old")
    with pytest.raises(type(error)), atomic_output(target) as out:
        out.write(b"partial")
        raise error
    assert target.read_bytes() == b"old"
    assert names(tmp_path) == ["out.png"]


def test_a_failure_in_the_block_with_no_old_file_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), atomic_output(tmp_path / "out.png") as out:
        out.write(b"partial")
        raise RuntimeError
    assert names(tmp_path) == []


def test_a_failed_rename_is_a_usage_error_and_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    target.write_text("old")

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(UsageError, match=r"cannot write .*No space left on device"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert names(tmp_path) == ["out.json"]


def test_a_missing_folder_is_a_usage_error_and_creates_nothing(tmp_path):
    with pytest.raises(UsageError, match="cannot write") as err:
        write_atomic(tmp_path / "missing" / "x.json", "{}")
    assert "does not exist" in err.value.message
    assert "create the folder" in err.value.hint
    assert names(tmp_path) == []


def test_a_file_where_the_folder_should_be_is_a_usage_error(tmp_path):
    (tmp_path / "plain").write_text("")
    with pytest.raises(UsageError, match="is not a folder"):
        write_atomic(tmp_path / "plain" / "x.json", "{}")


def test_a_folder_as_the_target_is_a_usage_error_and_leaves_no_litter(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(UsageError, match="cannot write"):
        write_atomic(tmp_path / "out", "{}")
    assert names(tmp_path) == ["out"]
    assert list((tmp_path / "out").iterdir()) == []


def test_a_folder_that_refuses_new_files_is_a_usage_error(tmp_path, monkeypatch):
    # Simulated: the tests may run as root, whom a read-only folder does not stop.
    def refuse(path, flags, mode=0o777):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(UsageError, match=r"cannot write .*Permission denied") as err:
        write_atomic(tmp_path / "x.json", "{}")
    assert "writable" in err.value.hint
    assert names(tmp_path) == []


# --- killed mid-write ------------------------------------------------------------------------


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def test_a_later_write_removes_what_a_killed_writer_left(tmp_path):
    target = tmp_path / "out.json"
    stale = tmp_path / f".out.json.rtgraph-{_dead_pid()}-abc123.tmp"
    stale.write_bytes(b"half a file")
    busy = tmp_path / f".out.json.rtgraph-{os.getppid()}-def456.tmp"  # a live writer's
    busy.write_bytes(b"being written")
    other = tmp_path / f".other.json.rtgraph-{_dead_pid()}-abc123.tmp"  # another target's
    other.write_bytes(b"not ours to judge")
    write_atomic(target, "{}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out.json", busy.name, other.name])


def test_sigterm_mid_write_removes_the_temporary_and_keeps_the_old_file(tmp_path):
    """The command line turns SIGTERM into an orderly exit (status 143) that cleans up."""
    target = tmp_path / "out.json"
    target.write_text("old\n")
    script = (
        "import sys, time\n"
        "from rtgraph.files import atomic_output, exit_on_sigterm\n"
        "exit_on_sigterm()\n"
        "with atomic_output(sys.argv[1]) as out:\n"
        "    out.write(b'partial'); out.flush()\n"
        "    print('writing', flush=True)\n"
        "    time.sleep(60)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(target)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline() == "writing\n"
    assert len(list(tmp_path.iterdir())) == 2  # the target and its temporary
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == 143
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    assert target.read_text() == "old\n"
