"""Lifetime records — the memory planner's input — and the MiniMalloc CSV form they travel in.

A record is one tensor as the planner sees it: a name, a half-open lifetime ``[lower, upper)``
in task order and a size in bytes. The CSV form (``id,lower,upper,size``, one record a line)
is the one Google's MiniMalloc and its benchmark instances use, so the planner can be judged
on published instances and its answers compared with other planners'. A solution file is the
same table with an ``offset`` column added.

A record file is untrusted input: it must be a regular file of at most
:data:`MAX_RECORD_FILE_BYTES` (checked before a byte is read) and is read a line at a time,
never whole; it may hold at most :data:`MAX_RECORDS` records (the reader stops at the first row
past the limit), each time at most :data:`MAX_TIME` and the sizes together at most
:data:`MAX_POOL_BYTES` — so that every offset, height and sum of sizes the planner computes fits
in 64-bit integers with room to spare (see :mod:`rtgraph.compiler.memplan.problem`).
"""

from __future__ import annotations

import csv
import io
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

from rtgraph.errors import InputError, Source, Span
from rtgraph.files import open_for_reading, write_atomic

#: The columns every record file has, in the order this module writes them.
COLUMNS = ("id", "lower", "upper", "size")
#: A column a solution file adds; the reader accepts and ignores it.
OPTIONAL_COLUMNS = ("offset",)

#: The most records one plan may have (a file's rows, or the records passed to the planner).
#: The planner's memory grows linearly with them (plus at most ``MAX_PAIRS`` conflict pairs)
#: and its time a little faster: at this limit ``rtgraph plan-memory`` measured at most 350 MB
#: and 30 s of CPU (docs/limits.md). MiniMalloc's published instances have a few hundred.
MAX_RECORDS = 200_000
#: The largest record file read, in bytes, checked (``fstat``) before reading and again while
#: streaming it: room for :data:`MAX_RECORDS` rows of long ids and 19-digit numbers.
MAX_RECORD_FILE_BYTES = 32 * 1024 * 1024
#: The largest ``lower`` or ``upper`` (a task position): 2**62, so lifetimes and their widths
#: are exact in 64-bit integers.
MAX_TIME = 2**62
#: The most bytes a plan may span: each size, and all of them (aligned) added up, at most 2**62.
#: No plan is higher than the sum of its sizes, so every offset, top, live total and height the
#: planner computes is at most this, and a sum of two of them still fits in a signed 64-bit
#: integer: NumPy's int64 arithmetic provably cannot overflow.
MAX_POOL_BYTES = 2**62

#: An integer field: optional sign, ASCII digits.
_INTEGER = re.compile(r"[+-]?[0-9]+")
#: Characters of an offending field an error quotes.
_SHOWN = 24


@dataclass(frozen=True, slots=True)
class Record:
    """One buffer to place: live over the half-open interval ``[lower, upper)``.

    Two records conflict — must not share bytes — iff their lifetimes intersect and both
    sizes are positive. A record with ``lower == upper`` or ``size == 0`` conflicts with
    nothing.
    """

    id: str
    lower: int
    upper: int
    size: int

    @property
    def area(self) -> int:
        """Bytes × time: how much of the pool's time-space the record uses."""
        return self.size * (self.upper - self.lower)


@dataclass(frozen=True, eq=False)
class _LineOfFile(Source):
    """One line of a record file, the only one an error about it shows: the file is streamed,
    so its text is never held whole."""

    lineno: int = 1

    def line(self, lineno: int) -> str:
        return self.text if lineno == self.lineno else ""


def read_records_csv(path: str | Path) -> list[Record]:
    """The records of a MiniMalloc-format CSV file, in file order.

    Raises :class:`~rtgraph.errors.InputError` (located at ``file:line:col`` where there is a
    line) for a missing, unreadable, non-regular or oversized file, text that is not UTF-8, a
    bad header, a row of the wrong length, a non-integer, negative or too large field,
    ``upper < lower``, a repeated id, or more than :data:`MAX_RECORDS` rows.
    """
    path = Path(path)
    with _open_record_file(path) as stream:
        return _parse(_file_lines(stream, path), str(path))


def parse_records_csv(text: str, *, name: str = "<records>") -> list[Record]:
    """The records in CSV ``text``, reported as ``name`` in errors; see read_records_csv."""
    return _parse(enumerate(text.splitlines(), start=1), name)


def write_offsets_csv(
    path: str | Path, records: Iterable[Record], offsets: Mapping[str, int]
) -> None:
    """Write ``records`` with their ``offsets`` as a MiniMalloc solution file.

    The columns are ``id,lower,upper,size,offset``; the file reads back with
    :func:`read_records_csv` (which ignores the offsets).
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow((*COLUMNS, "offset"))
    for r in records:
        if r.id not in offsets:
            raise InputError(
                f"no offset for record '{r.id}'",
                hint="pass the offsets of a placement of these same records",
            )
        writer.writerow((r.id, r.lower, r.upper, r.size, offsets[r.id]))
    write_atomic(path, buffer.getvalue())


# --- reading a file -----------------------------------------------------------------------------


def _open_record_file(path: Path) -> BinaryIO:
    """``path`` opened for reading once it is known to be a regular file within the size limit
    (opened without blocking, so a FIFO cannot hang the check)."""
    try:
        fd, info = open_for_reading(path)
    except OSError as exc:
        raise InputError(
            f"cannot read record file '{path}': {exc.strerror or exc}",
            hint="pass the path of a CSV file with the header id,lower,upper,size",
        ) from None
    try:
        if not stat.S_ISREG(info.st_mode):
            raise InputError(
                f"record file '{path}' is not a regular file",
                hint="pass the path of a CSV file with the header id,lower,upper,size",
            )
        if info.st_size > MAX_RECORD_FILE_BYTES:
            raise _too_big(path, f"is {info.st_size:,} bytes; the limit is")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _file_lines(stream: BinaryIO, path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for each line of ``stream``, read a line at a time and never
    past :data:`MAX_RECORD_FILE_BYTES` (a file can grow, or lie about its size, after fstat).

    Lines are numbered as ``str.splitlines`` numbers them, so ``\\r`` ends a line too.
    """
    consumed = 0
    lineno = 0
    while True:
        chunk = stream.readline(MAX_RECORD_FILE_BYTES - consumed + 1)
        if not chunk:
            return
        consumed += len(chunk)
        if consumed > MAX_RECORD_FILE_BYTES:
            raise _too_big(path, "is over")
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as exc:
            shown = chunk.decode("utf-8", errors="replace").rstrip("\r\n")
            col = len(chunk[: exc.start].decode("utf-8", errors="replace")) + 1
            raise InputError(
                f"record file '{path}' is not UTF-8 text",
                Span(
                    _LineOfFile(str(path), shown, lineno + 1), lineno + 1, col, lineno + 1, col + 1
                ),
                hint="a record file is a CSV table with the header id,lower,upper,size",
            ) from None
        for line in text.splitlines() or [""]:  # a blank line is a line too
            lineno += 1
            yield lineno, line


def _too_big(path: Path, what: str) -> InputError:
    return InputError(
        f"record file '{path}' {what} {MAX_RECORD_FILE_BYTES:,} bytes",
        hint=f"a plan takes at most {MAX_RECORDS:,} records; split the file",
    )


# --- parsing --------------------------------------------------------------------------------------


class _Row(NamedTuple):
    """Where a line is: its file's name, its number and its text (errors are located by it)."""

    name: str
    lineno: int
    line: str


def _parse(lines: Iterable[tuple[int, str]], name: str) -> list[Record]:
    """The records of numbered CSV ``lines`` (blank and ``#`` lines skipped), checked row by row
    and stopped at the first row past :data:`MAX_RECORDS`."""
    rows = ((n, line) for n, line in lines if line.strip() and not line.lstrip().startswith("#"))
    first = next(rows, None)
    if first is None:
        raise InputError(
            f"record file '{name}' has no header",
            _line_span(_Row(name, 1, "")),
            hint="the first line must be: id,lower,upper,size",
        )
    head = _Row(name, *first)
    header = [h.strip().lower() for h in _split(head)]
    column = _column_indices(header, head)

    records: list[Record] = []
    first_seen: dict[str, int] = {}
    total = 0
    for lineno, line in rows:
        row = _Row(name, lineno, line)
        if len(records) == MAX_RECORDS:
            raise InputError(
                f"more than {MAX_RECORDS:,} records",
                _line_span(row),
                hint=f"a plan takes at most {MAX_RECORDS:,} records; split the file",
            )
        fields = _split(row)
        record = _record(fields, header, column, row, first_seen)
        total += record.size
        if total > MAX_POOL_BYTES:
            raise InputError(
                f"the sizes add up to {total} bytes by this record, more than the "
                f"{MAX_POOL_BYTES} (2**62) a plan can hold",
                _field_span(row, fields, column["size"]),
                hint="no plan is higher than the sum of its sizes; keep it at most 2**62",
            )
        first_seen[record.id] = lineno
        records.append(record)
    return records


def _record(
    fields: list[str],
    header: list[str],
    column: dict[str, int],
    row: _Row,
    first_seen: dict[str, int],
) -> Record:
    """The record on one row, its fields checked in column order."""
    if len(fields) != len(header):
        raise InputError(
            f"expected {len(header)} fields ({','.join(header)}), found {len(fields)}",
            _line_span(row),
            hint="every row needs one value per header column",
        )
    lower = _integer(fields, column["lower"], "lower", row)
    upper = _integer(fields, column["upper"], "upper", row)
    size = _integer(fields, column["size"], "size", row)
    rid = fields[column["id"]].strip()
    if not rid:
        raise InputError(
            "empty id",
            _field_span(row, fields, column["id"]),
            hint="give every record a unique name",
        )
    if rid in first_seen:
        raise InputError(
            f"duplicate id '{_shown(rid)}' (first on line {first_seen[rid]})",
            _field_span(row, fields, column["id"]),
            hint="ids name buffers and must be unique",
        )
    if upper < lower:
        raise InputError(
            f"lifetime ends before it starts: upper {upper} < lower {lower}",
            _field_span(row, fields, column["upper"]),
            hint="lifetimes are half-open [lower, upper), so upper >= lower",
        )
    return Record(rid, lower, upper, size)


def _split(row: _Row) -> list[str]:
    """The comma-separated fields of the row, quotes as in ``csv``."""
    if '"' not in row.line:
        return row.line.split(",")  # what csv.reader gives for a line without quotes, faster
    try:
        return next(csv.reader([row.line]))
    except csv.Error as exc:  # e.g. a quoted field over csv's field size limit
        raise InputError(
            f"cannot split the line into fields: {exc}",
            _line_span(row),
            hint="fields are plain numbers and names; quote an id only if it holds a comma",
        ) from None


def _column_indices(header: list[str], row: _Row) -> dict[str, int]:
    allowed = set(COLUMNS) | set(OPTIONAL_COLUMNS)
    for i, name in enumerate(header):
        if name not in allowed:
            raise InputError(
                f"unknown column '{_shown(name)}' in the header",
                _field_span(row, _split(row), i),
                hint="the header is id,lower,upper,size (a solution file may add offset)",
            )
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"header lacks column{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
            _line_span(row),
            hint="the header is id,lower,upper,size",
        )
    if len(set(header)) != len(header):
        raise InputError(
            "a column is named twice in the header",
            _line_span(row),
            hint="the header is id,lower,upper,size",
        )
    return {name: header.index(name) for name in COLUMNS}


def _integer(fields: list[str], index: int, column: str, row: _Row) -> int:
    """Field ``index`` as an integer in ``0..`` its column's bound (2**62), or a located error.

    The bound is checked on the digits before any conversion, so a field of a million digits
    costs no more than a short one.
    """
    text = fields[index].strip()
    if len(text) <= 18 and text.isascii() and text.isdigit():
        return int(text)  # the common case: below 10**18 < 2**62
    if not _INTEGER.fullmatch(text):
        raise InputError(
            f"{column} must be an integer, not '{_shown(text)}'",
            _field_span(row, fields, index),
            hint="lower, upper and size are whole numbers (task positions and bytes)",
        )
    if text.startswith("-") and text.strip("-0"):
        raise InputError(
            f"{column} must be >= 0, not {_shown(text)}",
            _field_span(row, fields, index),
            hint="task positions and sizes are never negative",
        )
    bound = MAX_POOL_BYTES if column == "size" else MAX_TIME
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > len(str(bound)) or int(digits or "0") > bound:
        what = "bytes" if column == "size" else "task positions"
        raise InputError(
            f"{column} must be at most {bound} (2**62), not {_shown(digits)}",
            _field_span(row, fields, index),
            hint=f"a plan keeps {what} exact in 64-bit integers, so values stop at 2**62",
        )
    return int(digits or "0")


def _shown(text: str) -> str:
    """``text`` as an error quotes it: cut to a few dozen characters."""
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}… ({len(text):,} characters)"


def _line_span(row: _Row) -> Span:
    """The whole of the row's line."""
    source = _LineOfFile(row.name, row.line, row.lineno)
    return Span(source, row.lineno, 1, row.lineno, len(row.line) + 1)


def _field_span(row: _Row, fields: list[str], index: int) -> Span:
    """The span of field ``index`` on the row's line (fields found by position, quotes aside)."""
    col = 1
    for f in fields[:index]:
        col += len(f) + 1
    width = max(1, len(fields[index])) if index < len(fields) else 1
    col = min(col, len(row.line) + 1)
    source = _LineOfFile(row.name, row.line, row.lineno)
    return Span(source, row.lineno, col, row.lineno, col + width)
