"""Lifetime records — the memory planner's input — and the MiniMalloc CSV form they travel in.

A record is one tensor as the planner sees it: a name, a half-open lifetime ``[lower, upper)``
in task order and a size in bytes. The CSV form (``id,lower,upper,size``, one record a line)
is the one Google's MiniMalloc and its benchmark instances use, so the planner can be judged
on published instances and its answers compared with other planners'. A solution file is the
same table with an ``offset`` column added.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rtgraph.errors import InputError, Source, Span
from rtgraph.files import write_atomic

#: The columns every record file has, in the order this module writes them.
COLUMNS = ("id", "lower", "upper", "size")
#: A column a solution file adds; the reader accepts and ignores it.
OPTIONAL_COLUMNS = ("offset",)


@dataclass(frozen=True)
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


def read_records_csv(path: str | Path) -> list[Record]:
    """The records of a MiniMalloc-format CSV file, in file order.

    Raises :class:`~rtgraph.errors.InputError` located at ``file:line:col`` for a missing or
    unreadable file, a bad header, a row of the wrong length, a non-integer or negative
    field, ``upper < lower`` or a repeated id.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(
            f"cannot read record file '{path}': {exc.strerror or exc}",
            hint="pass the path of a CSV file with the header id,lower,upper,size",
        ) from None
    except UnicodeDecodeError:
        raise InputError(
            f"record file '{path}' is not UTF-8 text",
            hint="a record file is a CSV table with the header id,lower,upper,size",
        ) from None
    return parse_records_csv(text, name=str(path))


def parse_records_csv(text: str, *, name: str = "<records>") -> list[Record]:
    """The records in CSV ``text``, reported as ``name`` in errors; see read_records_csv."""
    source = Source(name, text)
    rows = [
        (lineno, line)
        for lineno, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not rows:
        raise InputError(
            f"record file '{name}' has no header",
            Span(source, 1, 1, 1, 1),
            hint="the first line must be: id,lower,upper,size",
        )
    header_line, header_text = rows[0]
    header = [h.strip().lower() for h in _split(header_text)]
    column = _column_indices(header, source, header_line, header_text)

    records: list[Record] = []
    first_seen: dict[str, int] = {}
    for lineno, line in rows[1:]:
        fields = _split(line)
        if len(fields) != len(header):
            raise InputError(
                f"expected {len(header)} fields ({','.join(header)}), found {len(fields)}",
                Span(source, lineno, 1, lineno, len(line) + 1),
                hint="every row needs one value per header column",
            )
        values = {}
        for col in COLUMNS[1:]:
            values[col] = _integer(fields, column[col], col, source, lineno, line)
        rid = fields[column["id"]].strip()
        if not rid:
            raise InputError(
                "empty id",
                _field_span(source, lineno, line, fields, column["id"]),
                hint="give every record a unique name",
            )
        if rid in first_seen:
            raise InputError(
                f"duplicate id '{rid}' (first on line {first_seen[rid]})",
                _field_span(source, lineno, line, fields, column["id"]),
                hint="ids name buffers and must be unique",
            )
        if values["upper"] < values["lower"]:
            raise InputError(
                f"lifetime ends before it starts: upper {values['upper']} < lower "
                f"{values['lower']}",
                _field_span(source, lineno, line, fields, column["upper"]),
                hint="lifetimes are half-open [lower, upper), so upper >= lower",
            )
        first_seen[rid] = lineno
        records.append(Record(rid, values["lower"], values["upper"], values["size"]))
    return records


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


# --- helpers ----------------------------------------------------------------------------------


def _split(line: str) -> list[str]:
    return next(csv.reader([line]))


def _column_indices(header: list[str], source: Source, lineno: int, line: str) -> dict[str, int]:
    allowed = set(COLUMNS) | set(OPTIONAL_COLUMNS)
    for i, name in enumerate(header):
        if name not in allowed:
            raise InputError(
                f"unknown column '{name}' in the header",
                _field_span(source, lineno, line, _split(line), i),
                hint="the header is id,lower,upper,size (a solution file may add offset)",
            )
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"header lacks column{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
            Span(source, lineno, 1, lineno, len(line) + 1),
            hint="the header is id,lower,upper,size",
        )
    if len(set(header)) != len(header):
        raise InputError(
            "a column is named twice in the header",
            Span(source, lineno, 1, lineno, len(line) + 1),
            hint="the header is id,lower,upper,size",
        )
    return {name: header.index(name) for name in COLUMNS}


def _integer(
    fields: list[str], index: int, column: str, source: Source, lineno: int, line: str
) -> int:
    text = fields[index].strip()
    try:
        value = int(text)
    except ValueError:
        raise InputError(
            f"{column} must be an integer, not '{text}'",
            _field_span(source, lineno, line, fields, index),
            hint="lower, upper and size are whole numbers (task positions and bytes)",
        ) from None
    if value < 0:
        raise InputError(
            f"{column} must be >= 0, not {value}",
            _field_span(source, lineno, line, fields, index),
            hint="task positions and sizes are never negative",
        )
    return value


def _field_span(source: Source, lineno: int, line: str, fields: list[str], index: int) -> Span:
    """The span of field ``index`` on the line (fields found by position, quotes aside)."""
    col = 1
    for f in fields[:index]:
        col += len(f) + 1
    width = max(1, len(fields[index])) if index < len(fields) else 1
    col = min(col, len(line) + 1)
    return Span(source, lineno, col, lineno, col + width)
