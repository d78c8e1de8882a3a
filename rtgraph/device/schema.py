"""What a valid device spec is, and the check that turns merged TOML data into a DeviceSpec.

:data:`SCHEMA` lists every table of a spec and the keys each may hold; a :class:`Rule` says
what one key must hold (for the message and as a JSON Schema fragment, from which
:mod:`.schema_json` builds ``docs/device-spec.schema.json``) and converts its value.
:func:`build_spec` checks a merged document strictly — unknown keys, missing keys, wrong
types and impossible values raise :class:`~rtgraph.errors.DeviceSpecError` — blaming each key
on the file it came from (through ``extends``). Every key is documented in ``docs/devices.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rtgraph.device.document import Doc, Origins, located_error
from rtgraph.device.spec import (
    DeviceSpec,
    HostSpec,
    MemorySpec,
    ProfilingSpec,
    SchedulerSpec,
    UnitSpec,
)
from rtgraph.device.versions import parse_version
from rtgraph.dtypes import DTYPES
from rtgraph.errors import DeviceSpecError, did_you_mean
from rtgraph.ops.fused import EPILOGUES

# --- rules: what one key may hold ----------------------------------------------------------


class _Bad(Exception):
    """A value that does not fit its rule (the rule's ``expected`` says what would)."""


@dataclass(frozen=True)
class Rule:
    """What one key must hold: a description for messages, a check that converts, and the
    same as a JSON Schema fragment (the tests hold the check and the fragment to agree)."""

    expected: str
    convert: Callable[[Any], Any]
    schema: Mapping[str, Any]
    required: bool = True


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad
    try:  # TOML integers have no bound; one past float range is not a number a spec can use
        number = float(value)
    except OverflowError:
        raise _Bad from None
    if not math.isfinite(number):
        raise _Bad
    return number


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


def choice(*choices: Any) -> Rule:
    """The rule for a key that holds one of ``choices`` (strings, or true and false)."""
    shown = [f"'{c}'" if isinstance(c, str) else str(c).lower() for c in choices]
    return Rule(" or ".join(shown), _choice(*choices), {"enum": list(choices)})


#: What :func:`~rtgraph.device.versions.parse_version` accepts, with ASCII digits.
_VERSION_PATTERN = r"^(?:[0-9]+|[Rr][Cc][0-9]+)(?:\.(?:[0-9]+|[Rr][Cc][0-9]+))*$"

POSITIVE_INT = Rule(
    "a positive integer", _where(_integer, lambda n: n > 0), {"type": "integer", "minimum": 1}
)
NONNEG_INT = Rule(
    "a non-negative integer", _where(_integer, lambda n: n >= 0), {"type": "integer", "minimum": 0}
)
POWER_OF_TWO = Rule(
    "a power of two (bytes)",
    _where(_integer, _power_of_two),
    {"type": "integer", "enum": [2**n for n in range(63)]},  # every one a TOML integer holds
)
POSITIVE = Rule(
    "a positive number", _where(_number, lambda x: x > 0), {"type": "number", "exclusiveMinimum": 0}
)
NONNEG = Rule(
    "a non-negative number", _where(_number, lambda x: x >= 0), {"type": "number", "minimum": 0}
)
FRACTION = Rule(
    "a fraction between 0 and 1",
    _where(_number, lambda x: 0 <= x <= 1),
    {"type": "number", "minimum": 0, "maximum": 1},
)
TEXT = Rule("a string", _text, {"type": "string"})
NAME = Rule("a non-empty string", _where(_text, bool), {"type": "string", "minLength": 1})
VERSION = Rule(
    "a version like '8.0.0' or '7.5.0.1.129'",
    _version,
    {"type": "string", "pattern": _VERSION_PATTERN},
)
EPILOGUE_LIST = Rule(
    f"a list of epilogues from {', '.join(map(repr, EPILOGUES))}",
    _list_of(_choice(*EPILOGUES)),
    {"type": "array", "items": {"enum": list(EPILOGUES)}},
)


def optional(rule: Rule) -> Rule:
    """``rule`` for a key that may be left out (the dataclass default applies)."""
    return Rule(rule.expected, rule.convert, rule.schema, required=False)


# --- the keys of each table ----------------------------------------------------------------

# Each table's keys and what they hold. Optional keys default to the dataclass defaults.
DEVICE_KEYS: dict[str, Rule] = {
    "name": NAME,
    "description": TEXT,
    "firmware": VERSION,
    "compatible_runtimes": Rule(
        "a non-empty list of runtime versions like '8.0'",
        _list_of(_version, nonempty=True),
        {"type": "array", "items": VERSION.schema, "minItems": 1},
    ),
    "sources": optional(
        Rule("a list of strings", _list_of(_text), {"type": "array", "items": TEXT.schema})
    ),
}
COMPUTE_UNIT_KEYS: dict[str, Rule] = {
    "cores": POSITIVE_INT,
    "launch_us": NONNEG,
    # its keys are PEAK_KEYS (checked by _build_unit), at least one
    "peak_flops": Rule(
        "a table of flop/s per core by dtype", _table, {"type": "object", "minProperties": 1}
    ),
    "default_block_dim": optional(NONNEG_INT),
    "epilogues": optional(EPILOGUE_LIST),
}
DMA_UNIT_KEYS: dict[str, Rule] = {
    "cores": POSITIVE_INT,
    "launch_us": NONNEG,
    "bandwidth": POSITIVE,
    "default_block_dim": optional(NONNEG_INT),
}
UNIT_KINDS: dict[str, dict[str, Rule]] = {
    "cube": COMPUTE_UNIT_KEYS,
    "vector": COMPUTE_UNIT_KEYS,
    "dma": DMA_UNIT_KEYS,
    "aicpu": COMPUTE_UNIT_KEYS,
}
REQUIRED_UNITS = ("cube", "vector", "dma")
PEAK_KEYS: dict[str, Rule] = {name: optional(POSITIVE) for name in DTYPES}
MEMORY_KEYS: dict[str, Rule] = {
    "capacity": POSITIVE_INT,
    "bandwidth": POSITIVE,
    "alignment": POWER_OF_TWO,
    "granularity": POWER_OF_TWO,
    "direct_alloc_us": NONNEG,
    "pool_alloc_us": NONNEG,
    "direct_free_us": optional(NONNEG),
    "large_page": optional(POWER_OF_TWO),
    "large_page_threshold": optional(NONNEG_INT),
}
HOST_KEYS: dict[str, Rule] = {
    "link_bandwidth": POSITIVE,
    "link_latency_us": NONNEG,
    "pageable_bandwidth": POSITIVE,
    "ioctl_us": NONNEG,
    "submit_us": NONNEG,
    "batch_size": POSITIVE_INT,
    "callback_us": optional(NONNEG),
    "sync_us": optional(NONNEG),
    "batch_flush": optional(choice("switch", "full")),
    "graph_launch_us": optional(NONNEG),
}
SCHEDULER_KEYS: dict[str, Rule] = {
    "queue_depth": POSITIVE_INT,
    "reorder_window": NONNEG_INT,
    "event_mode": choice("cann", "cuda"),
    "max_events": POSITIVE_INT,
    "priorities": optional(POSITIVE_INT),
    "failure_mode": optional(choice("continue", "stop")),
    "blocking_callbacks": optional(choice(True, False)),
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
class Checker:
    """Validates a merged document, blaming each key on the file it came from."""

    top: Doc
    origins: Origins

    def doc_for(self, dotted: str) -> Doc:
        parts = dotted.split(".")
        for n in range(len(parts), 0, -1):
            doc = self.origins.get(".".join(parts[:n]))
            if doc is not None:
                return doc
        return self.top

    def fail(self, dotted: str, problem: str, hint: str | None = None) -> DeviceSpecError:
        return located_error(self.doc_for(dotted), dotted, problem, hint)

    def table(self, data: Mapping[str, Any], dotted: str) -> Mapping[str, Any]:
        value = data.get(dotted.rsplit(".", 1)[-1])
        if value is None:
            raise self.missing(dotted, "a table")
        if not isinstance(value, dict):
            raise self.fail(dotted, f"expected a table, got {show_value(value)}")
        return value

    def missing(self, dotted: str, what: str) -> DeviceSpecError:
        parent = dotted.rsplit(".", 1)[0] if "." in dotted else ""
        doc = self.doc_for(parent) if parent else self.top
        where = f"[{parent}]" if parent else "the top level"
        return located_error(
            doc, dotted, f"missing required key (expected {what})", f"add it to {where}"
        )

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
                    dotted, f"expected {rule.expected}, got {show_value(data[key])}"
                ) from None
        return out

    def no_unknown(self, data: Mapping[str, Any], prefix: str, known: Mapping[str, Any]) -> None:
        for key in data:
            if key not in known:
                dotted = f"{prefix}.{key}" if prefix else key
                allowed = ", ".join(known)
                hint = did_you_mean(key, known) or f"known keys here: {allowed}"
                raise self.fail(dotted, "unknown key", hint)


def show_value(value: Any) -> str:
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
        text = repr(value)
        return text if len(text) <= 40 else f"{text[:20]}… ({len(text)} digits)"
    return f"{value!r} (a {type(value).__name__})"


def build_spec(data: Mapping[str, Any], check: Checker) -> DeviceSpec:
    """The :class:`DeviceSpec` that ``data`` (a merged document) describes, checked strictly."""
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


def _build_unit(kind: str, data: Mapping[str, Any], check: Checker) -> UnitSpec:
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
