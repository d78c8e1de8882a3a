"""Files written whole or not at all: the one way rtgraph puts an output on disk.

Every output (a compiled program, a trace, a CSV, a picture) goes through
:func:`atomic_output` or its shorthand :func:`write_atomic`. The bytes go to a temporary file
in the target's own folder (so the rename stays on one file system), are flushed and
``fsync``-ed, and only then ``os.replace``-d onto the target. A reader sees the old file or the
new one, never half of one; if anything fails — an error in the code producing the bytes, a
full disk, Ctrl-C — the temporary file is removed and the old target is left as it was.

Permissions: the new file gets those of any file ``open(path, "w")`` would create, that is
``0o666`` less the process umask — ``0644`` under the usual umask ``022``. The umask is
honoured rather than overridden so that a user who asked for private files (umask ``077``)
gets them; it is applied by the kernel when the temporary file is created, so it is never read
or changed here (``os.umask`` is process-wide and would race with other threads). Replacing a
file gives the target these new-file permissions, not the old file's; replacing a symbolic
link replaces the link itself.

What is not done: the folder is not ``fsync``-ed after the rename, so after a power cut the
target may still be the old file — but never a torn one.

Killed mid-write: on SIGTERM the command line (:func:`exit_on_sigterm`) unwinds like Ctrl-C, so
the temporary file is removed. SIGKILL cannot be caught; the temporary left behind is named
after its target and its writer's process id (``.out.json.rtgraph-4242-1a2b3c.tmp``), and the
next write of the same target removes every such file whose writer is gone.

Problems with the output path (its folder missing, no permission, a full disk) are reported
as :class:`~rtgraph.errors.UsageError` ("cannot write 'out.json': …"), which the command line
shows as a message with exit status 2, not as a traceback.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

from rtgraph.errors import UsageError

__all__ = ["atomic_output", "exit_on_sigterm", "open_for_reading", "read_at_most", "write_atomic"]

#: The exit status of a process ended by SIGTERM, as a shell reports it (128 + 15).
SIGTERM_STATUS = 128 + signal.SIGTERM


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` to ``path`` whole or not at all; text is written as UTF-8, newlines as given.

    Returns ``path`` as a :class:`~pathlib.Path`. Raises :class:`UsageError` when the file
    cannot be written (see the module docstring).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    with atomic_output(path) as out:
        out.write(payload)
    return Path(path)


@contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file object whose contents replace ``path`` when the ``with`` block ends.

    For writers that produce into a file object (``Figure.savefig``, ``csv.writer`` over a
    text wrapper)::

        with atomic_output("t.png") as out:
            fig.savefig(out, format="png")

    If the block raises (any exception, KeyboardInterrupt included), the temporary file is
    removed, ``path`` is left untouched and the exception propagates — except ``OSError``
    (creating, writing, syncing or renaming the file failed), which becomes
    :class:`UsageError`.
    """
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise UsageError(
            f"cannot write '{target}': folder '{folder}' {what}",
            hint="create the folder first or choose another path",
        )
    fd, tmp = _create_temporary(target)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except OSError as e:
        _remove_quietly(tmp)
        raise UsageError(f"cannot write '{target}': {e.strerror or e}") from None
    except BaseException:
        _remove_quietly(tmp)
        raise


def exit_on_sigterm() -> None:
    """Make SIGTERM end the process the way Ctrl-C does — unwinding, so that every write under
    way removes its temporary file — with exit status 143. For programs (the command line), not
    libraries: only the main thread may set a handler, and one the program set is kept."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(SIGTERM_STATUS)


def _temporary_name(target: Path, pid: int, tag: str) -> Path:
    return target.parent / f".{target.name}.rtgraph-{pid}-{tag}.tmp"


def _remove_stale_temporaries(target: Path) -> None:
    """Remove the temporaries of ``target`` that a killed writer left (its process is gone)."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.rtgraph-(\d+)-[0-9a-f]+\.tmp")
    with suppress(OSError):
        for entry in os.scandir(target.parent):
            found = pattern.fullmatch(entry.name)
            if found and not _alive(int(found.group(1))):
                _remove_quietly(Path(entry.path))


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists but belongs to someone else
        return True
    return True


def _create_temporary(target: Path) -> tuple[int, Path]:
    """Open a new, empty temporary file beside ``target`` with new-file permissions.

    Not ``tempfile.mkstemp``: its files are private (``0600``), and that mode would survive
    the rename. ``O_EXCL`` with a random name means no other file is ever overwritten.
    """
    _remove_stale_temporaries(target)
    for _ in range(8):
        tmp = _temporary_name(target, os.getpid(), secrets.token_hex(6))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        except OSError as e:
            raise UsageError(
                f"cannot write '{target}': {e.strerror or e}",
                hint="check that the folder is writable",
            ) from None
        return fd, tmp
    raise UsageError(f"cannot write '{target}': no free temporary name in its folder")


def _remove_quietly(tmp: Path) -> None:
    """Remove the temporary file if it is still there; a failure here must not hide the first."""
    with suppress(OSError):
        os.unlink(tmp)


# --- reading what a user names ---------------------------------------------------------------


def open_for_reading(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """A read-only descriptor of ``path`` and its status, so that the caller can refuse a file
    that is not regular, or too large, before reading a byte of it. Opened without blocking: a
    FIFO cannot hang the open. Raises ``OSError`` as :func:`os.open` does; the caller closes
    the descriptor."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        return fd, os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def read_at_most(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fd`` (fewer at its end): a file that grew, or lied about its
    size, after it was looked at is still never read past the limit."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(1 << 20, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
