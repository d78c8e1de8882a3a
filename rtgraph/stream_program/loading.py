"""Reading a stream program's JSON file: bounded before it is read, every error naming the file.

:func:`read_stream_program` opens the file without blocking (a FIFO cannot hang it), refuses
anything but a regular file, and refuses a file over
:data:`~rtgraph.stream_program.schema.MAX_PROGRAM_JSON_BYTES` before reading a byte of it; what
it reads is then checked field by field (:meth:`StreamProgram.from_json`). Every error starts
with the file's name: ``out.json: tasks[3].duration_us: must be finite and ≥ 0, got NaN``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from rtgraph.errors import RtgError, StreamProgramError
from rtgraph.files import open_for_reading, read_at_most
from rtgraph.stream_program.gears import SCHEMA as _GEARED_SCHEMA
from rtgraph.stream_program.gears import GearedProgram, geared_from_dict, is_geared
from rtgraph.stream_program.program import StreamProgram
from rtgraph.stream_program.schema import MAX_PROGRAM_JSON_BYTES, check_depth

_GEARED_MARK = f'"{_GEARED_SCHEMA}"'


def in_file(path: str | os.PathLike[str], error: RtgError) -> RtgError:
    """``error`` (of the same kind) with its message prefixed by the file it is about."""
    located = type(error)(f"{os.fspath(path)}: {error.message}", error.span, error.hint)
    return located


def read_stream_program(path: str | os.PathLike[str]) -> StreamProgram:
    """The stream program in the JSON file at ``path``, refused with a located error when the
    file is unreadable, too large, not JSON or not a valid stream program."""
    return _read(path, geared=False)


def read_compiled(path: str | os.PathLike[str]) -> StreamProgram | GearedProgram:
    """The stream program, or the geared program (:mod:`.gears`), in the JSON file at
    ``path``: read and checked as :func:`read_stream_program` reads one."""
    return _read(path, geared=True)


def _read(path: str | os.PathLike[str], *, geared: bool) -> Any:
    shown = os.fspath(path)
    try:
        fd, info = open_for_reading(shown)
    except OSError as e:
        raise StreamProgramError(f"cannot read {shown}: {e.strerror}") from None
    try:
        if not stat.S_ISREG(info.st_mode):
            raise StreamProgramError(f"{shown}: not a regular file")
        if info.st_size > MAX_PROGRAM_JSON_BYTES:
            raise _too_large(shown, info.st_size)
        data = read_at_most(fd, MAX_PROGRAM_JSON_BYTES + 1)
    except OSError as e:
        raise StreamProgramError(f"cannot read {shown}: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_PROGRAM_JSON_BYTES:  # it grew after the size was looked at
        raise _too_large(shown, len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise StreamProgramError(f"{shown}: not UTF-8 text, so not a stream program") from None
    try:
        if geared and _GEARED_MARK in text:  # a cheap test before parsing the JSON twice
            document = json.loads(text)
            if is_geared(document):
                check_depth(document)
                return geared_from_dict(document)
        return StreamProgram.from_json(text)
    except (StreamProgramError, ValueError, RecursionError) as e:
        if not isinstance(e, StreamProgramError):
            e = StreamProgramError(f"not JSON: {e}")
        raise in_file(Path(shown), e) from None


def _too_large(shown: str, size: int) -> StreamProgramError:
    return StreamProgramError(
        f"{shown}: {size:,} bytes is over the limit of {MAX_PROGRAM_JSON_BYTES:,} bytes for a "
        "stream program's JSON",
        hint="a compiled program is far smaller; this is not one rtgraph wrote",
    )
