"""One TOML file of a device spec: its text, where each key is written, and located errors.

Every message about a spec names the file and the dotted key (``units.cube.cores``) and, when
the key is written in that file, points at its line: :func:`located_error` builds such an
error. :func:`parse_toml` reads a document, turning a TOML syntax error into a located one.
The spec loader (:mod:`.load`), the schema (:mod:`.schema`) and the compatibility matrix
(:mod:`.compat`) all speak about documents this way.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from rtgraph.errors import DeviceSpecError, RtgError, Source, Span
from rtgraph.files import open_for_reading, read_at_most

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: The package whose data files are the shipped specs and the compatibility matrix.
PACKAGE = "rtgraph.device.specs"
#: The one file of :data:`PACKAGE` that is not a device spec.
COMPAT_FILE = "compat.toml"


@dataclass(frozen=True)
class Doc:
    """One TOML file: how errors name it, its text (for locating keys) and where it lives."""

    label: str
    text: str
    ref: str  # identity for cycle detection: "shipped:<name>" or an absolute path
    folder: Path | None  # where relative ``extends`` paths start; None for package data

    @property
    def source(self) -> Source:
        return Source(self.label, self.text)


#: Dotted key -> the document whose value won the ``extends`` merge.
Origins = dict[str, Doc]


def packaged_doc(filename: str) -> Doc:
    """The document of a file shipped in :data:`PACKAGE` (a spec or the compatibility matrix)."""
    text = resources.files(PACKAGE).joinpath(filename).read_text(encoding="utf-8")
    name = filename.removesuffix(".toml")
    return Doc(f"rtgraph/device/specs/{filename}", text, f"shipped:{name}", None)


_KEY_LINE = re.compile(r"\s*([A-Za-z0-9_\-\.\"' ]+?)\s*=")
_HEADER_LINE = re.compile(r"\s*\[\[?\s*([A-Za-z0-9_\-\.\"' ]+?)\s*\]\]?\s*(#.*)?$")
_TOML_POSITION = re.compile(r"at line (\d+), column (\d+)")


@cache
def _key_index(text: str) -> dict[str, tuple[int, int, int]]:
    """Where each dotted key (and table header) of a TOML text is written: (line, col, end)."""
    index: dict[str, tuple[int, int, int]] = {}
    table = ""
    for lineno, line in enumerate(text.splitlines(), start=1):
        header = _HEADER_LINE.match(line)
        if header:
            table = _dotted(header.group(1))
            index.setdefault(table, (lineno, line.index("[") + 1, len(line.rstrip()) + 1))
            continue
        key = _KEY_LINE.match(line)
        if key and not line.lstrip().startswith("#"):
            full = ".".join(p for p in (table, _dotted(key.group(1))) if p)
            end = len(line.split("#", 1)[0].rstrip()) + 1
            index.setdefault(full, (lineno, key.start(1) + 1, end))
            # Keys of an inline table on this line: ``peak_flops = { f16 = 1e9, ... }``.
            brace = line.find("{")
            for inner in re.finditer(
                r"([A-Za-z0-9_\-]+)\s*=", line[brace + 1 :] if brace >= 0 else ""
            ):
                col = brace + 1 + inner.start(1) + 1
                index.setdefault(
                    f"{full}.{inner.group(1)}", (lineno, col, col + len(inner.group(1)))
                )
    return index


def _dotted(key: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in key.split("."))


def _span(doc: Doc, dotted: str) -> Span | None:
    """The span of ``dotted`` (or of its nearest written parent) in ``doc``, if written there."""
    index = _key_index(doc.text)
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        found = index.get(".".join(parts[:n]))
        if found:
            line, col, end = found
            return Span(doc.source, line, col, line, max(end, col + 1))
    return None


def located_error(doc: Doc, dotted: str, problem: str, hint: str | None = None) -> DeviceSpecError:
    """An error about key ``dotted`` of ``doc``: located when the key is written there."""
    span = _span(doc, dotted) if dotted else None
    where = "" if span is not None else f"{doc.label}: "
    key = f"{dotted}: " if dotted else ""
    return DeviceSpecError(f"{where}{key}{problem}", span, hint)


#: A line only a device spec starts with: one of its tables, or ``extends``.
_SPEC_LINE = re.compile(
    r"^[ \t]*(\[[ \t]*(device|units|memory|host|scheduler|profiling)[ \t]*[\].]|extends[ \t]*=)",
    re.MULTILINE,
)


def looks_like_spec(text: str) -> bool:
    """Whether ``text`` has a line only a device spec has. Errors quote lines of such files
    only: a file that is not a spec (a ``.toml`` of secrets named by mistake) is never echoed."""
    return _SPEC_LINE.search(text) is not None


def parse_toml(doc: Doc, *, spec: bool = False) -> dict[str, Any]:
    """The data of ``doc``; invalid TOML is a :class:`DeviceSpecError` at the parser's position.

    With ``spec`` (a device spec read from a file), the line is quoted only when the file looks
    like a device spec, and a TOML file that is none is refused before any value is looked at.
    """
    spec_like = not spec or doc.folder is None or looks_like_spec(doc.text)
    try:
        data = tomllib.loads(doc.text)
    except tomllib.TOMLDecodeError as exc:
        where = _TOML_POSITION.search(str(exc))
        if where is None or not spec_like:
            at = f":{where.group(1)}:{where.group(2)}" if where else ""
            raise DeviceSpecError(
                f"{doc.label}{at}: invalid TOML"
                + ("" if spec_like else " (not shown: the file is not a device spec)")
                + ("" if where is None or not spec_like else f": {exc}")
            ) from None
        line, col = int(where.group(1)), int(where.group(2))
        span = Span(doc.source, line, col, line, col + 1)
        raise DeviceSpecError(f"invalid TOML: {exc}", span) from None
    if spec and not ("device" in data or "extends" in data):
        raise DeviceSpecError(
            f"{doc.label}: not a device spec: it has no [device] table and no extends",
            hint='a spec starts with extends = "NAME" or the tables of docs/devices.md',
        )
    return data


def read_capped_toml(
    path: Path,
    what: str,
    limit: int,
    refuse: Callable[..., RtgError],
    missing_hint: str,
) -> Doc:
    """``path``'s document — ``what`` (``device spec``, ``cluster spec``) for the messages —
    read only if it is a regular file of at most ``limit`` bytes of UTF-8 (opened without
    blocking, so a FIFO cannot hang the read); ``refuse(message, hint=None)`` makes the error
    raised otherwise."""
    try:
        fd, info = open_for_reading(path)
    except FileNotFoundError:
        raise refuse(f"no {what} file '{path}'", missing_hint) from None
    except OSError as exc:
        raise refuse(f"cannot read {what} '{path}': {exc.strerror}") from None
    try:
        if not stat.S_ISREG(info.st_mode):
            raise refuse(f"'{path}' is not a regular file")
        if info.st_size > limit:
            raise refuse(f"{what} '{path}' is {info.st_size:,} bytes; the limit is {limit:,}")
        data = read_at_most(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise refuse(f"{what} '{path}' is over {limit:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise refuse(f"{what} '{path}' is not UTF-8 text") from None
    return Doc(str(path), text, str(path.resolve()), path.resolve().parent)
