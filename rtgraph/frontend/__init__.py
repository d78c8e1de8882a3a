"""The front end: .rtg text → checked :class:`~rtgraph.ir.Program`.

``parse`` runs the whole front end on a string, ``load`` on a file. Both raise one
:class:`~rtgraph.errors.RtgError` (or :class:`~rtgraph.errors.RtgErrors` holding several, in
source order) for any bad input — never a bare Python exception.
"""

from __future__ import annotations

import gc
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from rtgraph.errors import CapacityError, RtgError, RtgErrors, RtgSyntaxError, Source, Span
from rtgraph.files import open_for_reading, read_at_most
from rtgraph.frontend import ast, limits
from rtgraph.frontend.checker import check_module, named_device
from rtgraph.frontend.parser import parse_module
from rtgraph.ir.graph import Program

__all__ = ["MAX_SOURCE_BYTES", "CapacityFor", "load", "parse", "parse_module"]

#: The memory (bytes) of the device a program runs on, given the device the program names
#: (None when it names none); raises :class:`~rtgraph.errors.RtgError` for a device that
#: cannot be loaded.
CapacityFor = Callable[[str | None], int]

#: Size of a program's source (bytes of a file, characters of a string): a 50,000-line program
#: is about 1.7 MB. A file is measured before it is read, and never read past the limit
#: (``RTGRAPH_MAX_SOURCE_BYTES`` overrides it; :mod:`~rtgraph.frontend.limits`).
MAX_SOURCE_BYTES = 4 * 2**20

_SPLIT_HINT = "split the program; for loops and functions write repetition once"


def parse(
    text: str,
    filename: str = "<string>",
    params: Mapping[str, int] | None = None,
    *,
    device_capacity: int | None = None,
    capacity_for: CapacityFor | None = None,
) -> Program:
    """Parse and check ``text``; ``params`` override the program's parameter defaults.

    ``device_capacity`` (bytes), when given, refuses tensors and buffers that do not fit in
    the device's memory; without it only sizes beyond any device (2**48 bytes) are refused.
    ``capacity_for`` instead asks for the capacity of the device the program names (its
    ``device "…"`` line), read from the parsed text before checking, so that the program is
    parsed and checked once (see :func:`check_for_device`).
    """
    if device_capacity is not None and capacity_for is not None:
        raise ValueError("give device_capacity or capacity_for, not both")
    most = limits.effective(limits.SOURCE_BYTES, MAX_SOURCE_BYTES)
    if len(text) > most:
        line = text.count("\n", 0, most) + 1
        col = most - (text.rfind("\n", 0, most) + 1) + 1
        raise RtgSyntaxError(
            f"the program is longer than {most:,} characters",
            Span(Source(filename, text), line, col, line, col + 1),
            hint=_SPLIT_HINT,
        )
    try:
        with _gc_paused():
            module, literal_errors = parse_module(text, filename)
            if capacity_for is not None:
                program = check_for_device(module, params, literal_errors, capacity_for)
            else:
                program = check_module(
                    module, params, device_capacity=device_capacity, errors=literal_errors
                )
            del module  # the syntax tree goes now, before the collector is back to scan it
        return program
    except RecursionError:
        raise RtgSyntaxError(
            "program nested too deeply",
            Span(Source(filename, text), 1, 1, 1, 2),
            hint="split deeply nested expressions into named steps",
        ) from None


def check_for_device(
    module: ast.Module,
    params: Mapping[str, int] | None,
    literal_errors: list[RtgError],
    capacity_for: CapacityFor,
) -> Program:
    """Check ``module`` once against the memory of its device (``capacity_for``).

    Reports exactly what checking without a device and then, if that passed, with the device
    would: a program's own mistakes come before whether it fits, and before a device that
    cannot be loaded. A check with the device that refuses nothing for size is the same check
    as one without, so only a failed check that refused something for size (or a device that
    failed to load) checks again without the device, to find the program's own mistakes.
    """
    try:
        capacity = capacity_for(named_device(module))
    except RtgError as unloaded:
        failed: RtgError = unloaded
    else:
        try:
            return check_module(module, params, device_capacity=capacity, errors=literal_errors)
        except RtgError as refused:
            failed = refused
        if not any(isinstance(error, CapacityError) for error in _members(failed)):
            raise failed
    check_module(module, params, errors=literal_errors)  # raises the program's own mistakes
    raise failed


def _members(error: RtgError) -> list[RtgError]:
    return error.errors if isinstance(error, RtgErrors) else [error]


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause Python's cycle collector while the front end builds its (acyclic) objects.

    Parsing and checking allocate millions of small objects that all stay alive to the end;
    the collector would rescan them again and again (about a third of the time for a
    10,000-line program) and find nothing to free. Once it is back on, its next pass scans
    every object made meanwhile, once: the syntax tree is freed before that.
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
    most = limits.effective(limits.SOURCE_BYTES, MAX_SOURCE_BYTES)
    try:
        fd, info = open_for_reading(path)
        try:
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError
            if not stat.S_ISREG(info.st_mode):
                raise RtgError(
                    f"cannot read {name}: it is not a regular file", hint="name a .rtg file"
                )
            if info.st_size > most:
                raise RtgError(
                    f"cannot read {name}: it is {info.st_size:,} bytes, more than a program may "
                    f"have ({most:,})",
                    hint=_SPLIT_HINT,
                )
            data = read_at_most(fd, most + 1)
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise RtgError(f"cannot read {name}: no such file", hint="check the path") from None
    except IsADirectoryError:
        raise RtgError(f"cannot read {name}: it is a directory", hint="name a .rtg file") from None
    except OSError as e:
        raise RtgError(f"cannot read {name}: {e.strerror or e}") from None
    if len(data) > most:  # it grew after it was measured
        raise RtgError(
            f"cannot read {name}: it grew past {most:,} bytes while it was read",
            hint=_SPLIT_HINT,
        )
    return data


def load(
    path: str | os.PathLike,
    params: Mapping[str, int] | None = None,
    *,
    device_capacity: int | None = None,
    capacity_for: CapacityFor | None = None,
) -> Program:
    """Read, parse and check the .rtg file at ``path`` (the keywords as for :func:`parse`)."""
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
    return parse(text, name, params, device_capacity=device_capacity, capacity_for=capacity_for)
