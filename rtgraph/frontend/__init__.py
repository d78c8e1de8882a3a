"""The front end: .rtg text → checked :class:`~rtgraph.ir.Program`.

``parse`` runs the whole front end on a string, ``load`` on a file. Both raise one
:class:`~rtgraph.errors.RtgError` (or :class:`~rtgraph.errors.RtgErrors` holding several, in
source order) for any bad input — never a bare Python exception.
"""

from __future__ import annotations

import gc
import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from rtgraph.errors import RtgError, RtgSyntaxError, Source, Span
from rtgraph.files import open_for_reading, read_at_most
from rtgraph.frontend.checker import check_module
from rtgraph.frontend.parser import parse_module
from rtgraph.ir.graph import Program

__all__ = ["MAX_SOURCE_BYTES", "load", "parse", "parse_module"]

#: Size of a program's source (bytes of a file, characters of a string): a 50,000-line program
#: is about 1.7 MB. A file is measured before it is read, and never read past the limit.
MAX_SOURCE_BYTES = 4 * 2**20

_SPLIT_HINT = "split the program; for loops and functions write repetition once"


def parse(
    text: str,
    filename: str = "<string>",
    params: Mapping[str, int] | None = None,
    *,
    device_capacity: int | None = None,
) -> Program:
    """Parse and check ``text``; ``params`` override the program's parameter defaults.

    ``device_capacity`` (bytes), when given, refuses tensors and buffers that do not fit in
    the device's memory; without it only sizes beyond any device (2**48 bytes) are refused.
    """
    if len(text) > MAX_SOURCE_BYTES:
        line = text.count("\n", 0, MAX_SOURCE_BYTES) + 1
        col = MAX_SOURCE_BYTES - (text.rfind("\n", 0, MAX_SOURCE_BYTES) + 1) + 1
        raise RtgSyntaxError(
            f"the program is longer than {MAX_SOURCE_BYTES:,} characters",
            Span(Source(filename, text), line, col, line, col + 1),
            hint=_SPLIT_HINT,
        )
    try:
        module, literal_errors = parse_module(text, filename)
        return check_module(module, params, device_capacity=device_capacity, errors=literal_errors)
    except RecursionError:
        raise RtgSyntaxError(
            "program nested too deeply",
            Span(Source(filename, text), 1, 1, 1, 2),
            hint="split deeply nested expressions into named steps",
        ) from None


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause Python's cycle collector while the front end builds its (acyclic) objects.

    Parsing and checking allocate hundreds of thousands of small objects that all stay alive
    to the end; the collector would rescan them again and again (about a third of the time
    for a 10,000-line program) and find nothing to free.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_source(path: str | os.PathLike) -> bytes:
    """The bytes of a regular file of at most :data:`MAX_SOURCE_BYTES`, checked before reading
    (a FIFO would block, ``/dev/zero`` never end) and never read past the limit."""
    name = str(path)
    try:
        fd, info = open_for_reading(path)
        try:
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError
            if not stat.S_ISREG(info.st_mode):
                raise RtgError(
                    f"cannot read {name}: it is not a regular file", hint="name a .rtg file"
                )
            if info.st_size > MAX_SOURCE_BYTES:
                raise RtgError(
                    f"cannot read {name}: it is {info.st_size:,} bytes, more than a program may "
                    f"have ({MAX_SOURCE_BYTES:,})",
                    hint=_SPLIT_HINT,
                )
            data = read_at_most(fd, MAX_SOURCE_BYTES + 1)
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise RtgError(f"cannot read {name}: no such file", hint="check the path") from None
    except IsADirectoryError:
        raise RtgError(f"cannot read {name}: it is a directory", hint="name a .rtg file") from None
    except OSError as e:
        raise RtgError(f"cannot read {name}: {e.strerror or e}") from None
    if len(data) > MAX_SOURCE_BYTES:  # it grew after it was measured
        raise RtgError(
            f"cannot read {name}: it grew past {MAX_SOURCE_BYTES:,} bytes while it was read",
            hint=_SPLIT_HINT,
        )
    return data


def load(
    path: str | os.PathLike,
    params: Mapping[str, int] | None = None,
    *,
    device_capacity: int | None = None,
) -> Program:
    """Read, parse and check the .rtg file at ``path``."""
    data = _read_source(path)
    name = str(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        shown = Source(name, data.decode("utf-8", errors="replace"))
        raise RtgSyntaxError(
            f"{name} is not UTF-8 text (byte {data[e.start]:#04x})",
            Span(shown, line, col, line, col + 1),
            hint="save the file as UTF-8",
        ) from None
    return parse(text, name, params, device_capacity=device_capacity)
