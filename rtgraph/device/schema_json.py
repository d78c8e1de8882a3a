"""The device spec's JSON Schema, built from the tables of :mod:`.schema` (never a second copy).

:data:`SCHEMA_DOC` is published as ``docs/device-spec.schema.json`` (written by
:func:`schema_text`), for editors and tools that check a spec's TOML read as JSON data. Each
key's fragment is its :class:`~rtgraph.device.schema.Rule`'s; which keys a table holds, and
which of them are required, come from :data:`~rtgraph.device.schema.SCHEMA` and its ``*_KEYS``
tables, so the schema cannot drift from the loader (the tests hold the two to the same
verdicts). It describes a *complete* spec, as the loader checks it after merging everything
it ``extends``; the limits between two keys (:data:`CROSS_FIELD_RULES`) only the loader checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rtgraph.device.schema import PEAK_KEYS, REQUIRED_UNITS, SCHEMA, UNIT_KINDS, Rule

#: The limits between two keys that JSON Schema cannot state; the loader checks them.
CROSS_FIELD_RULES = (
    "scheduler.reorder_window ≤ scheduler.queue_depth",
    "units.<kind>.default_block_dim ≤ units.<kind>.cores",
)

#: Keys whose value is a table with keys of its own (``_build_unit`` checks ``peak_flops``).
_NESTED: dict[str, Mapping[str, Rule]] = {"peak_flops": PEAK_KEYS}


def _table(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        **({"required": required} if required else {}),
        "properties": properties,
        "additionalProperties": False,
    }


def _keys(rules: Mapping[str, Rule]) -> dict[str, Any]:
    """The schema of a table whose keys ``rules`` describes."""
    required = [key for key, rule in rules.items() if rule.required]
    return _table(required, {key: _key(key, rule) for key, rule in rules.items()})


def _key(key: str, rule: Rule) -> dict[str, Any]:
    nested = _NESTED.get(key)
    return dict(rule.schema) if nested is None else {**_keys(nested), **rule.schema}


def _spec() -> dict[str, Any]:
    units = _table(list(REQUIRED_UNITS), {kind: _keys(keys) for kind, keys in UNIT_KINDS.items()})
    tables = {name: units if keys is UNIT_KINDS else _keys(keys) for name, keys in SCHEMA.items()}
    extends = {
        "type": "string",
        "description": "the spec this one extends: a shipped name, a name on "
        "RTGRAPH_DEVICE_PATH or a .toml file beside this one (merged in before this schema "
        "applies)",
    }
    return _table(list(SCHEMA), {"extends": extends, **tables})


#: The published JSON Schema of a complete device spec (``docs/device-spec.schema.json``).
SCHEMA_DOC: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://github.com/rtgraph/rtgraph/docs/device-spec.schema.json",
    "title": "rtgraph device spec",
    "description": "An emulated NPU (docs/devices.md), as TOML read into JSON data; generated "
    "by rtgraph/device/schema_json.py from the tables of rtgraph/device/schema.py. It describes "
    "a complete spec: what the loader checks after merging everything the spec extends, so a "
    "file that extends another and sets only a few keys is not an instance by itself. Only the "
    f"loader checks what JSON Schema cannot state: {'; '.join(CROSS_FIELD_RULES)}. It also "
    "refuses a float such as 2.0 where an integer is expected (JSON Schema counts 2.0 as an "
    "integer) and nan or inf (which JSON cannot hold).",
    **_spec(),
}


def schema_text() -> str:
    """The schema as published in ``docs/device-spec.schema.json``."""
    return json.dumps(SCHEMA_DOC, indent=2, ensure_ascii=False) + "\n"
