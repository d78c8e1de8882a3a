"""The one device-spec loader: TOML files in, validated :class:`DeviceSpec` out.

A device is data. rtgraph ships a few specs as package data (``rtgraph/device/specs/*.toml``) and
reads a user's spec from a path; a spec may ``extends`` another (a shipped name or a path
relative to the extending file) and override single keys, tables merging deeply. Whatever the
source, the merged document is checked strictly against one schema (:data:`SCHEMA`): unknown
keys, missing keys, wrong types and impossible values raise :class:`DeviceSpecError` naming
the file, the dotted key and what was expected — pointing at the line when it can be found.

The runtime's firmware compatibility matrix is data too (``rtgraph/device/specs/compat.toml``);
:func:`check_compatibility` reads it. Every key is documented in ``docs/devices.md``.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from rtgraph.device.spec import (
    DeviceSpec,
    HostSpec,
    MemorySpec,
    ProfilingSpec,
    SchedulerSpec,
    UnitSpec,
)
from rtgraph.dtypes import DTYPES
from rtgraph.errors import DeviceSpecError, Source, Span, did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: The runtime version rtgraph emulates (CANN-style numbering), checked against the matrix.
RUNTIME_VERSION = "8.0.0"

PACKAGE = "rtgraph.device.specs"
COMPAT_FILE = "compat.toml"

# --- documents: one parsed TOML file, and where its keys are written -----------------------


@dataclass(frozen=True)
class _Doc:
    """One TOML file: how errors name it, its text (for locating keys) and where it lives."""

    label: str
    text: str
    ref: str  # identity for cycle detection: "shipped:<name>" or an absolute path
    folder: Path | None  # where relative ``extends`` paths start; None for package data

    @property
    def source(self) -> Source:
        return Source(self.label, self.text)


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


def _span(doc: _Doc, dotted: str) -> Span | None:
    """The span of ``dotted`` (or of its nearest written parent) in ``doc``, if written there."""
    index = _key_index(doc.text)
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        found = index.get(".".join(parts[:n]))
        if found:
            line, col, end = found
            return Span(doc.source, line, col, line, max(end, col + 1))
    return None


def _fail(doc: _Doc, dotted: str, problem: str, hint: str | None = None) -> DeviceSpecError:
    """An error about key ``dotted`` of ``doc``: located when the key is written there."""
    span = _span(doc, dotted) if dotted else None
    where = "" if span is not None else f"{doc.label}: "
    key = f"{dotted}: " if dotted else ""
    return DeviceSpecError(f"{where}{key}{problem}", span, hint)


# --- reading files and resolving ``extends`` -----------------------------------------------


def shipped_names() -> list[str]:
    """The names of the device specs shipped with rtgraph, sorted."""
    return list(_shipped())


@cache
def _shipped() -> tuple[str, ...]:
    entries = resources.files(PACKAGE).iterdir()
    names = (e.name[: -len(".toml")] for e in entries if e.name.endswith(".toml"))
    return tuple(sorted(n for n in names if n != COMPAT_FILE[: -len(".toml")]))


def _shipped_doc(name: str) -> _Doc:
    text = resources.files(PACKAGE).joinpath(f"{name}.toml").read_text(encoding="utf-8")
    return _Doc(f"rtgraph/device/specs/{name}.toml", text, f"shipped:{name}", None)


def _file_doc(path: Path, referrer: _Doc | None) -> _Doc:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        message = f"no device spec file '{path}'"
        hint = f"shipped devices: {', '.join(shipped_names())}; or pass a path to a .toml file"
        if referrer is not None:
            raise _fail(referrer, "extends", message, hint) from None
        raise DeviceSpecError(message, hint=hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DeviceSpecError(f"cannot read device spec '{path}': {exc}") from None
    return _Doc(str(path), text, str(path.resolve()), path.resolve().parent)


def _looks_like_path(ref: str) -> bool:
    return ref.endswith(".toml") or "/" in ref or os.sep in ref or Path(ref).exists()


def _unknown_device(ref: str) -> DeviceSpecError:
    names = shipped_names()
    hint = did_you_mean(ref, names) or "pass a path to a .toml file for your own device"
    return DeviceSpecError(f"unknown device '{ref}' (shipped: {', '.join(names)})", hint=hint)


def _resolve(ref: str, referrer: _Doc | None) -> _Doc:
    """The document ``ref`` names: a shipped device, or a path (relative to the referrer)."""
    if ref in _shipped():
        return _shipped_doc(ref)
    if referrer is not None and referrer.folder is None:
        raise _fail(referrer, "extends", f"unknown shipped device '{ref}'")
    if not _looks_like_path(ref):
        error = _unknown_device(ref)
        if referrer is not None:
            raise _fail(referrer, "extends", error.message, error.hint)
        raise error
    path = Path(ref)
    if referrer is not None and referrer.folder is not None and not path.is_absolute():
        path = referrer.folder / path
    return _file_doc(path, referrer)


def _parse(doc: _Doc) -> dict[str, Any]:
    try:
        return tomllib.loads(doc.text)
    except tomllib.TOMLDecodeError as exc:
        where = _TOML_POSITION.search(str(exc))
        if where is None:
            raise DeviceSpecError(f"{doc.label}: invalid TOML: {exc}") from None
        line, col = int(where.group(1)), int(where.group(2))
        span = Span(doc.source, line, col, line, col + 1)
        raise DeviceSpecError(f"invalid TOML: {exc}", span) from None


Origins = dict[str, _Doc]  # dotted key -> the document whose value won the merge


def _read(doc: _Doc, chain: tuple[_Doc, ...]) -> tuple[dict[str, Any], Origins]:
    """The merged data of ``doc`` and everything it extends, and where each key came from."""
    data = _parse(doc)
    origins: Origins = {}
    _note_origins(data, doc, "", origins)
    base_ref = data.pop("extends", None)
    if base_ref is None:
        return data, origins
    if not isinstance(base_ref, str):
        raise _fail(doc, "extends", f"expected a device name or path, got {_show(base_ref)}")
    base = _resolve(base_ref, doc)
    seen = [d.ref for d in (*chain, doc)]
    if base.ref in seen:
        labels = [d.label for d in (*chain, doc)]
        start = seen.index(base.ref)
        loop = [*labels[start:], labels[start]]
        raise _fail(doc, "extends", f"cycle {' → '.join(loop)}")
    base_data, base_origins = _read(base, (*chain, doc))
    return _merge(base_data, data), {**base_origins, **origins}


def _note_origins(data: Mapping[str, Any], doc: _Doc, prefix: str, origins: Origins) -> None:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        origins[dotted] = doc
        if isinstance(value, dict):
            _note_origins(value, doc, f"{dotted}.", origins)


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` laid on top: tables merge key by key, anything else is replaced."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# --- the schema ----------------------------------------------------------------------------


class _Bad(Exception):
    """A value that does not fit its rule (the rule's ``expected`` says what would)."""


@dataclass(frozen=True)
class Rule:
    """What one key must hold: a description for messages and a check that converts."""

    expected: str
    convert: Callable[[Any], Any]
    required: bool = True


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Bad
    return float(value)


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad
    return value


def _where(check: Callable[[Any], Any], ok: Callable[[Any], bool]) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        converted = check(value)
        if not ok(converted):
            raise _Bad
        return converted

    return convert


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad
    return value


def _table(value: Any) -> dict:
    if not isinstance(value, dict):
        raise _Bad
    return value


def _version(value: Any) -> str:
    try:
        parse_version(_text(value))
    except ValueError:
        raise _Bad from None
    return value


def _list_of(item: Callable[[Any], Any], nonempty: bool = False) -> Callable[[Any], tuple]:
    def convert(value: Any) -> tuple:
        if not isinstance(value, list) or (nonempty and not value):
            raise _Bad
        return tuple(item(v) for v in value)

    return convert


def _choice(*choices: Any) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, bool) != isinstance(choices[0], bool) or value not in choices:
            raise _Bad
        return value

    return convert


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


POSITIVE_INT = Rule("a positive integer", _where(_integer, lambda n: n > 0))
NONNEG_INT = Rule("a non-negative integer", _where(_integer, lambda n: n >= 0))
POWER_OF_TWO = Rule("a power of two (bytes)", _where(_integer, _power_of_two))
POSITIVE = Rule("a positive number", _where(_number, lambda x: x > 0))
NONNEG = Rule("a non-negative number", _where(_number, lambda x: x >= 0))
FRACTION = Rule("a fraction between 0 and 1", _where(_number, lambda x: 0 <= x <= 1))
TEXT = Rule("a string", _text)
NAME = Rule("a non-empty string", _where(_text, bool))
VERSION = Rule("a version like '8.0.0' or '7.5.0.1.129'", _version)


def _optional(rule: Rule) -> Rule:
    return Rule(rule.expected, rule.convert, required=False)


# Each table's keys and what they hold. Optional keys default to the dataclass defaults.
DEVICE_KEYS: dict[str, Rule] = {
    "name": NAME,
    "description": TEXT,
    "firmware": VERSION,
    "compatible_runtimes": Rule(
        "a non-empty list of runtime versions like '8.0'", _list_of(_version, nonempty=True)
    ),
    "sources": Rule("a list of strings", _list_of(_text), required=False),
}
COMPUTE_UNIT_KEYS: dict[str, Rule] = {
    "cores": POSITIVE_INT,
    "launch_us": NONNEG,
    "peak_flops": Rule("a table of flop/s per core by dtype", _table),
    "default_block_dim": _optional(NONNEG_INT),
}
DMA_UNIT_KEYS: dict[str, Rule] = {
    "cores": POSITIVE_INT,
    "launch_us": NONNEG,
    "bandwidth": POSITIVE,
    "default_block_dim": _optional(NONNEG_INT),
}
UNIT_KINDS: dict[str, dict[str, Rule]] = {
    "cube": COMPUTE_UNIT_KEYS,
    "vector": COMPUTE_UNIT_KEYS,
    "dma": DMA_UNIT_KEYS,
    "aicpu": COMPUTE_UNIT_KEYS,
}
REQUIRED_UNITS = ("cube", "vector", "dma")
PEAK_KEYS: dict[str, Rule] = {name: _optional(POSITIVE) for name in DTYPES}
MEMORY_KEYS: dict[str, Rule] = {
    "capacity": POSITIVE_INT,
    "bandwidth": POSITIVE,
    "alignment": POWER_OF_TWO,
    "granularity": POWER_OF_TWO,
    "direct_alloc_us": NONNEG,
    "pool_alloc_us": NONNEG,
    "direct_free_us": _optional(NONNEG),
    "large_page": _optional(POWER_OF_TWO),
    "large_page_threshold": _optional(NONNEG_INT),
}
HOST_KEYS: dict[str, Rule] = {
    "link_bandwidth": POSITIVE,
    "link_latency_us": NONNEG,
    "pageable_bandwidth": POSITIVE,
    "ioctl_us": NONNEG,
    "submit_us": NONNEG,
    "batch_size": POSITIVE_INT,
    "callback_us": _optional(NONNEG),
    "sync_us": _optional(NONNEG),
    "batch_flush": _optional(Rule("'switch' or 'full'", _choice("switch", "full"))),
}
SCHEDULER_KEYS: dict[str, Rule] = {
    "queue_depth": POSITIVE_INT,
    "reorder_window": NONNEG_INT,
    "event_mode": Rule("'cann' or 'cuda'", _choice("cann", "cuda")),
    "max_events": POSITIVE_INT,
    "priorities": _optional(POSITIVE_INT),
    "failure_mode": _optional(Rule("'continue' or 'stop'", _choice("continue", "stop"))),
    "blocking_callbacks": _optional(Rule("true or false", _choice(True, False))),
}
PROFILING_KEYS: dict[str, Rule] = {
    "task_trace_overhead": FRACTION,
    "op_trace_overhead": FRACTION,
}
#: The top-level tables of a device spec and the keys each may hold (``units`` is by kind).
SCHEMA: dict[str, Mapping[str, Any]] = {
    "device": DEVICE_KEYS,
    "units": UNIT_KINDS,
    "memory": MEMORY_KEYS,
    "host": HOST_KEYS,
    "scheduler": SCHEDULER_KEYS,
    "profiling": PROFILING_KEYS,
}


# --- validation: merged data -> DeviceSpec -------------------------------------------------


@dataclass(frozen=True)
class _Checker:
    """Validates a merged document, blaming each key on the file it came from."""

    top: _Doc
    origins: Origins

    def doc_for(self, dotted: str) -> _Doc:
        parts = dotted.split(".")
        for n in range(len(parts), 0, -1):
            doc = self.origins.get(".".join(parts[:n]))
            if doc is not None:
                return doc
        return self.top

    def fail(self, dotted: str, problem: str, hint: str | None = None) -> DeviceSpecError:
        return _fail(self.doc_for(dotted), dotted, problem, hint)

    def table(self, data: Mapping[str, Any], dotted: str) -> Mapping[str, Any]:
        value = data.get(dotted.rsplit(".", 1)[-1])
        if value is None:
            raise self.missing(dotted, "a table")
        if not isinstance(value, dict):
            raise self.fail(dotted, f"expected a table, got {_show(value)}")
        return value

    def missing(self, dotted: str, what: str) -> DeviceSpecError:
        parent = dotted.rsplit(".", 1)[0] if "." in dotted else ""
        doc = self.doc_for(parent) if parent else self.top
        where = f"[{parent}]" if parent else "the top level"
        return _fail(doc, dotted, f"missing required key (expected {what})", f"add it to {where}")

    def keys(self, data: Mapping[str, Any], prefix: str, rules: Mapping[str, Rule]) -> dict:
        """The table ``data`` (at ``prefix``) checked against ``rules``: converted values."""
        self.no_unknown(data, prefix, rules)
        out: dict[str, Any] = {}
        for key, rule in rules.items():
            dotted = f"{prefix}.{key}"
            if key not in data:
                if rule.required:
                    raise self.missing(dotted, rule.expected)
                continue
            try:
                out[key] = rule.convert(data[key])
            except _Bad:
                raise self.fail(
                    dotted, f"expected {rule.expected}, got {_show(data[key])}"
                ) from None
        return out

    def no_unknown(self, data: Mapping[str, Any], prefix: str, known: Mapping[str, Any]) -> None:
        for key in data:
            if key not in known:
                dotted = f"{prefix}.{key}" if prefix else key
                allowed = ", ".join(known)
                hint = did_you_mean(key, known) or f"known keys here: {allowed}"
                raise self.fail(dotted, "unknown key", hint)


def _show(value: Any) -> str:
    """A TOML value as a message shows it: literals as written, containers by kind."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}" (a string)'
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, (int, float)):
        return repr(value)
    return f"{value!r} (a {type(value).__name__})"


def _build(data: Mapping[str, Any], check: _Checker) -> DeviceSpec:
    check.no_unknown(data, "", SCHEMA)
    device = check.keys(check.table(data, "device"), "device", DEVICE_KEYS)
    units_data = check.table(data, "units")
    check.no_unknown(units_data, "units", UNIT_KINDS)
    units: dict[str, UnitSpec] = {}
    for kind in UNIT_KINDS:
        if kind not in units_data and kind not in REQUIRED_UNITS:
            continue
        units[kind] = _build_unit(kind, check.table(units_data, f"units.{kind}"), check)
    scheduler = check.keys(check.table(data, "scheduler"), "scheduler", SCHEDULER_KEYS)
    if scheduler["reorder_window"] > scheduler["queue_depth"]:
        raise check.fail(
            "scheduler.reorder_window",
            f"expected an integer in [0, queue_depth = {scheduler['queue_depth']}],"
            f" got {scheduler['reorder_window']}",
        )
    return DeviceSpec(
        name=device["name"],
        description=device["description"],
        firmware=device["firmware"],
        compatible_runtimes=device["compatible_runtimes"],
        units=units,
        memory=MemorySpec(**check.keys(check.table(data, "memory"), "memory", MEMORY_KEYS)),
        host=HostSpec(**check.keys(check.table(data, "host"), "host", HOST_KEYS)),
        scheduler=SchedulerSpec(**scheduler),
        profiling=ProfilingSpec(
            **check.keys(check.table(data, "profiling"), "profiling", PROFILING_KEYS)
        ),
        source=check.top.label,
        sources=device.get("sources", ()),
    )


def _build_unit(kind: str, data: Mapping[str, Any], check: _Checker) -> UnitSpec:
    prefix = f"units.{kind}"
    fields = check.keys(data, prefix, UNIT_KINDS[kind])
    if "peak_flops" in fields:
        peaks = check.keys(fields["peak_flops"], f"{prefix}.peak_flops", PEAK_KEYS)
        if not peaks:
            raise check.fail(
                f"{prefix}.peak_flops",
                f"expected a rate for at least one dtype ({', '.join(DTYPES)}), got none",
            )
        fields["peak_flops"] = {name: peaks[name] for name in DTYPES if name in peaks}
    block_dim = fields.get("default_block_dim", 0)
    if block_dim > fields["cores"]:
        raise check.fail(
            f"{prefix}.default_block_dim",
            f"expected an integer in [0, cores = {fields['cores']}], got {block_dim}",
        )
    return UnitSpec(kind=kind, **fields)


# --- public API ----------------------------------------------------------------------------


def load_device(name_or_path: str | os.PathLike[str]) -> DeviceSpec:
    """The device spec called ``name_or_path``: a shipped name or the path of a TOML file.

    Raises :class:`DeviceSpecError` for an unknown name (with a did-you-mean), a missing or
    unreadable file, invalid TOML, an ``extends`` cycle, or any value the schema refuses.
    """
    ref = os.fspath(name_or_path)
    if ref in _shipped():
        return _load(_shipped_doc(ref))
    if not _looks_like_path(ref):
        raise _unknown_device(ref)
    return _load(_file_doc(Path(ref), None))


def parse_device(text: str, label: str = "<string>") -> DeviceSpec:
    """A device spec from TOML text (``extends`` paths are relative to the working directory)."""
    return _load(_Doc(label, text, f"text:{label}", Path.cwd()))


def _load(doc: _Doc) -> DeviceSpec:
    data, origins = _read(doc, ())
    return _build(data, _Checker(doc, origins))


def list_devices() -> list[DeviceSpec]:
    """Every shipped device spec, loaded and validated, in name order."""
    return [load_device(name) for name in shipped_names()]


# --- versions and the firmware compatibility matrix ----------------------------------------

_VERSION_PART = re.compile(r"(\d+)|RC(\d+)", re.IGNORECASE)


def parse_version(text: str) -> tuple[tuple[int, int], ...]:
    """A sortable key for a CANN-style version: ``8.0.RC3`` < ``8.0.0`` < ``8.0.1``.

    Parts are dot-separated numbers or ``RC<n>`` (a release candidate sorts before the
    release at the same position). A version that is a prefix of another sorts first.
    """
    key = []
    for part in text.split("."):
        m = _VERSION_PART.fullmatch(part)
        if m is None:
            raise ValueError(f"not a version like '8.0.0' or '8.0.RC3': {text!r}")
        key.append((1, int(m.group(1))) if m.group(1) is not None else (0, int(m.group(2))))
    return tuple(key)


def _matches(series: str, version: str) -> bool:
    """Whether ``version`` belongs to ``series`` (``8.0`` holds ``8.0.0`` and ``8.0.RC3``)."""
    want, have = parse_version(series), parse_version(version)
    return have[: len(want)] == want


@dataclass(frozen=True)
class CompatRow:
    """One runtime version and the firmware range it supports (``firmware_max`` may be None)."""

    runtime: str
    firmware_min: str
    firmware_max: str | None = None

    def supports(self, firmware: str) -> bool:
        fw = parse_version(firmware)
        if fw < parse_version(self.firmware_min):
            return False
        return self.firmware_max is None or fw <= parse_version(self.firmware_max)


COMPAT_KEYS: dict[str, Rule] = {
    "version": VERSION,
    "firmware_min": VERSION,
    "firmware_max": _optional(VERSION),
}


@cache
def compat_matrix() -> tuple[CompatRow, ...]:
    """The runtime → firmware compatibility matrix shipped with rtgraph, oldest runtime first."""
    doc = _Doc(
        f"rtgraph/device/specs/{COMPAT_FILE}",
        resources.files(PACKAGE).joinpath(COMPAT_FILE).read_text(encoding="utf-8"),
        f"shipped:{COMPAT_FILE}",
        None,
    )
    data = _parse(doc)
    check = _Checker(doc, {})
    check.no_unknown(data, "", {"runtime": None})
    rows = data.get("runtime")
    if not isinstance(rows, list) or not rows:
        raise check.fail("runtime", "expected a non-empty array of [[runtime]] tables")
    built = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise check.fail(f"runtime[{i}]", f"expected a table, got {_show(row)}")
        fields = check.keys(row, f"runtime[{i}]", COMPAT_KEYS)
        built.append(CompatRow(fields.pop("version"), **fields))
    return tuple(sorted(built, key=_runtime_key))


def _runtime_key(row: CompatRow) -> tuple:
    return parse_version(row.runtime)


def _row_for(runtime_version: str, rows: Sequence[CompatRow]) -> CompatRow | None:
    """The row that governs ``runtime_version``: the newest listed runtime not after it."""
    key = parse_version(runtime_version)
    governing = [r for r in rows if parse_version(r.runtime) <= key]
    return governing[-1] if governing else None


def check_compatibility(
    spec: DeviceSpec,
    runtime_version: str = RUNTIME_VERSION,
    *,
    matrix: Sequence[CompatRow] | None = None,
) -> None:
    """Raise :class:`DeviceSpecError` unless ``spec`` can run under ``runtime_version``.

    Two checks: the runtime's matrix (the shipped one unless ``matrix`` is given) must
    support the spec's firmware, and the spec must list a runtime series that
    ``runtime_version`` belongs to.
    """
    for what, version in (("runtime version", runtime_version), ("firmware", spec.firmware)):
        try:
            parse_version(version)
        except ValueError:
            raise DeviceSpecError(
                f"{what} '{version}' is not a version like '8.0.0' or '7.5.0.1.129'"
            ) from None
    rows = sorted(matrix if matrix is not None else compat_matrix(), key=_runtime_key)
    row = _row_for(runtime_version, rows)
    if row is None:
        raise DeviceSpecError(
            f"runtime {runtime_version} is older than every runtime in the compatibility matrix"
            f" (oldest: {rows[0].runtime})"
        )
    if not row.supports(spec.firmware):
        raise DeviceSpecError(
            f"device '{spec.name}' ({spec.source}): firmware {spec.firmware} is not supported by"
            f" runtime {runtime_version}; {_upgrade(spec.firmware, row, rows)}"
        )
    if not any(_matches(series, runtime_version) for series in spec.compatible_runtimes):
        raise DeviceSpecError(
            f"device '{spec.name}' ({spec.source}) lists compatible runtimes"
            f" {', '.join(spec.compatible_runtimes)}, which do not include {runtime_version}",
            hint="add the runtime series to device.compatible_runtimes once it is qualified",
        )


def _upgrade(firmware: str, row: CompatRow, rows: Sequence[CompatRow]) -> str:
    """What to change so that ``firmware`` and the runtime of ``row`` work together."""
    fw = parse_version(firmware)
    if fw < parse_version(row.firmware_min):
        change = f"upgrade the firmware to ≥ {row.firmware_min}"
        others = [r for r in rows if parse_version(r.runtime) < parse_version(row.runtime)]
        direction = "≤"
    else:
        change = f"downgrade the firmware to ≤ {row.firmware_max}"
        others = [r for r in rows if parse_version(r.runtime) > parse_version(row.runtime)]
        direction = "≥"
    fitting = [r.runtime for r in others if r.supports(firmware)]
    if not fitting:
        return f"{change} (no runtime in the matrix supports firmware {firmware})"
    pick = fitting[-1] if direction == "≤" else fitting[0]
    return f"{change} or use runtime {direction} {pick}"


# --- describing devices --------------------------------------------------------------------


def _si(value: float, unit: str) -> str:
    """``value`` with an SI prefix: 1.6e12 B/s -> '1.6 TB/s'."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.4g} GiB"


def _us(value: float) -> str:
    return f"{value:g} µs"


def describe(spec: DeviceSpec | Sequence[DeviceSpec]) -> str:
    """One device in full (every figure and its sources), or several as a table of key figures.

    ``describe(load_device("toy"))`` is the detailed view; ``describe(list_devices())`` is
    :func:`devices_table`, what ``rtgraph devices`` prints.
    """
    if not isinstance(spec, DeviceSpec):
        return devices_table(spec)
    lines = [f"{spec.name} — {spec.description}".rstrip(" —")]
    lines.append(
        f"  firmware {spec.firmware}; compatible runtimes {', '.join(spec.compatible_runtimes)}"
        f"; from {spec.source}"
    )
    for kind, unit in spec.units.items():
        if unit.peak_flops:
            peaks = ", ".join(f"{d} {_si(v, 'FLOP/s')}" for d, v in unit.peak_flops.items())
            rate = f"per core: {peaks}"
        else:
            rate = f"{_si(unit.bandwidth, 'B/s')} per engine"
        block = f", default block dim {unit.default_block_dim}" if unit.default_block_dim else ""
        lines.append(f"  {kind:<9} {unit.cores} × {rate}; launch {_us(unit.launch_us)}{block}")
    m, h, s, p = spec.memory, spec.host, spec.scheduler, spec.profiling
    order = f"reorder window {s.reorder_window}" if s.reorder_window else "in order"
    callbacks = "blocking" if s.blocking_callbacks else "non-blocking"
    lines += [
        f"  memory    {_gib(m.capacity)} at {_si(m.bandwidth, 'B/s')}; alignment {m.alignment} B,"
        f" granularity {m.granularity} B; alloc direct {_us(m.direct_alloc_us)},"
        f" pool {_us(m.pool_alloc_us)}, free {_us(m.direct_free_us)}",
        f"  host      link {_si(h.link_bandwidth, 'B/s')} (pageable"
        f" {_si(h.pageable_bandwidth, 'B/s')}), latency {_us(h.link_latency_us)}; ioctl"
        f" {_us(h.ioctl_us)}, submit {_us(h.submit_us)}/task, batch {h.batch_size};"
        f" callback {_us(h.callback_us)}, sync {_us(h.sync_us)}",
        f"  scheduler queue depth {s.queue_depth}, {order}; events {s.event_mode}"
        f" (max {s.max_events}); {s.priorities} priorities; on failure {s.failure_mode};"
        f" callbacks {callbacks}",
        f"  profiling task_trace +{p.task_trace_overhead * 100:g} %,"
        f" op_trace +{p.op_trace_overhead * 100:g} % of each task's duration",
    ]
    lines += [f"  source: {text}" for text in spec.sources]
    return "\n".join(lines)


TABLE_HEADER = (
    "device",
    "cube",
    "f16 TFLOPS",
    "vector",
    "HBM",
    "HBM TB/s",
    "link GB/s",
    "launch µs",
    "queue",
    "events",
    "firmware",
)


def _row(spec: DeviceSpec) -> tuple[str, ...]:
    cube, vector = spec.units["cube"], spec.units["vector"]
    launch = sorted({u.launch_us for u in spec.units.values()})
    return (
        spec.name,
        str(cube.cores),
        f"{cube.cores * cube.peak_flops.get('f16', 0.0) / 1e12:.4g}",
        str(vector.cores),
        _gib(spec.memory.capacity),
        f"{spec.memory.bandwidth / 1e12:.4g}",
        f"{spec.host.link_bandwidth / 1e9:.4g}",
        "–".join(f"{x:g}" for x in sorted({launch[0], launch[-1]})),
        str(spec.scheduler.queue_depth),
        f"{spec.scheduler.event_mode} ({spec.scheduler.max_events})",
        spec.firmware,
    )


def devices_table(specs: Sequence[DeviceSpec]) -> str:
    """The key figures of several devices as an aligned text table (for ``rtgraph devices``)."""
    rows = [TABLE_HEADER, *(_row(s) for s in specs)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(TABLE_HEADER))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(rows[0]), line(["-" * w for w in widths]), *map(line, rows[1:])])
