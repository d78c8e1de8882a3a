"""The stream program's JSON Schema, and the validator that holds loaded JSON to it.

A compiled stream program is untrusted input: anything can write the JSON. :data:`SCHEMA_DOC`
is the published JSON Schema (draft 2020-12; ``docs/stream-program.schema.json`` is this dict,
written by :func:`schema_text`) — every key, its type and the range of every number, so that
NaN, infinite or negative durations, out-of-range ids and absurd sizes are refused before any
of them is used. :func:`check_document` enforces it by hand: a small interpreter of the
keywords the schema uses, which names the offending field by its JSON path
(``tasks[12].duration_us: must be finite and ≥ 0, got NaN``). What a schema cannot say (ids
that must name a declared stream, operands inside their region) is checked next, by
:mod:`.references`; what depends on the device the program runs on, by the emulator.

No ``jsonschema`` dependency: the hand validator gives the same verdicts on this schema (the
tests check the schema's keywords and, where ``jsonschema`` happens to be installed, compare),
and its messages name the field and say what would fit.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from rtgraph.dtypes import DTYPES
from rtgraph.errors import StreamProgramError, did_you_mean
from rtgraph.ir.weights import RULES

#: The most bytes a stream program's JSON may have; larger files are refused before they are
#: read or parsed (the bundled models compile to under 200 kB).
MAX_PROGRAM_JSON_BYTES = 8 * 1024 * 1024
#: The deepest nesting of lists and objects in a stream program's JSON (a compiled program
#: nests about 6 deep; attrs and meta are free-form, so they are held to this too).
MAX_JSON_DEPTH = 32
#: The most dimensions a shape (of an operand or a host tensor) may have.
MAX_RANK = 16
#: The most elements one tensor or operand view may have.
MAX_ELEMENTS = 2**40
#: The largest byte offset, size, stride, address or total a stream program may name (1 PiB);
#: the device's capacity bounds the plan further when the program runs.
MAX_BYTES = 2**50
#: The largest count of flops or bytes a task may claim (the int64 range).
MAX_COUNT = 2**63 - 1
#: The largest id, index, event count, core count, priority or source position.
MAX_ID = 2**31 - 1
#: The longest fixed duration or host latency, in microseconds (about 11.6 days).
MAX_DURATION_US = 1e12
#: The longest name (of a program, device, task, tensor, op, stream or callback).
MAX_NAME_CHARS = 4096
#: The widest finite JSON number (a free-form attr or meta number): the largest double.
MAX_FLOAT = 1.7976931348623157e308

SCHEMA_ID = "rtgraph.stream-program"
SCHEMA_VERSION = 1


def _int(low: int, high: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high}


def _number(low: float, high: float) -> dict[str, Any]:
    return {"type": "number", "minimum": low, "maximum": high}


def _object(required: list[str], properties: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": False,
        **more,
    }


def _list(items: Any, **more: Any) -> dict[str, Any]:
    return {"type": "array", "items": items, **more}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


_NAME = {"type": "string", "maxLength": MAX_NAME_CHARS}
_BYTES = _int(0, MAX_BYTES)
_COUNT = _int(0, MAX_COUNT)
_ID = _int(0, MAX_ID)
_US = _number(0, MAX_DURATION_US)
_BOOL = {"type": "boolean"}
_FLOAT = _number(-MAX_FLOAT, MAX_FLOAT)
_OPTIONAL_SPAN = {"anyOf": [_ref("span"), {"type": "null"}]}
_STREAM = {"stream": _ID}


def _command(cmd: str, required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return _object(["cmd", *required], {"cmd": {"const": cmd}, **properties})


_ALLOCATOR_FIELDS = {"allocator": _NAME, "allocated": _BYTES, "reserved": _BYTES}
_COMMANDS = ["launch", "record", "wait", "barrier", "callback", "sync", "alloc", "free"]
_DTYPE = _ref("dtype")
#: A param made at load time from a source param's data (:class:`rtgraph.ir.weights.Derive`).
_DERIVE = _object(
    ["source", "source_type", "rule", "axis", "factor"],
    {
        "source": _NAME,
        "source_type": _object(["shape", "dtype"], {"shape": _ref("shape"), "dtype": _DTYPE}),
        "rule": {"enum": list(RULES)},
        "axis": {"type": ["integer", "null"], "minimum": -MAX_RANK, "maximum": MAX_RANK - 1},
        "factor": _number(-MAX_FLOAT, MAX_FLOAT),
    },
)

#: The published JSON Schema of a stream program (``docs/stream-program.schema.json``).
SCHEMA_DOC: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://github.com/rtgraph/rtgraph/docs/stream-program.schema.json",
    "title": "rtgraph stream program, version 1",
    "description": "The compiled artifact rtgraph's emulator runs (docs/stream-program.md). "
    "Generated from rtgraph/stream_program/schema.py; loading also checks what a schema cannot "
    "say (ids name declared streams, events and tasks; operands lie inside their regions; "
    "every task launched once) and, before a run, the device (capacity, events, units, cores).",
    "type": "object",
    "required": [
        "schema",
        "version",
        "name",
        "device",
        "streams",
        "num_events",
        "tasks",
        "commands",
        "memory",
        "host_tensors",
    ],
    "additionalProperties": False,
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "version": {"const": SCHEMA_VERSION},
        "name": _NAME,
        "device": _NAME,
        "streams": _list(
            _object(["id", "name", "priority"], {"id": _ID, "name": _NAME, "priority": _ID})
        ),
        "num_events": _ID,
        "tasks": _list(_ref("task")),
        "commands": _list(_ref("command")),
        "memory": _object(
            ["policy", "total_bytes", "alignment", "regions"],
            {
                "policy": _NAME,
                "total_bytes": _BYTES,
                "alignment": _int(1, MAX_BYTES),
                "regions": _list(
                    _object(
                        ["tensor", "offset", "size", "kind", "first", "last"],
                        {
                            "tensor": _NAME,
                            "offset": _BYTES,
                            "size": _BYTES,
                            "kind": _NAME,
                            "first": _ID,
                            "last": _ID,
                        },
                    )
                ),
            },
        ),
        "host_tensors": _list(
            _object(
                ["name", "role", "shape", "dtype", "value", "pinned"],
                {
                    "name": _NAME,
                    "role": {"enum": ["input", "output", "param", "const"]},
                    "shape": _ref("shape"),
                    "dtype": _ref("dtype"),
                    "value": {**_FLOAT, "type": ["number", "null"]},
                    "pinned": _BOOL,
                    "derive": {"anyOf": [_ref("derive"), {"type": "null"}]},
                    "nonnegative": _BOOL,
                },
            )
        ),
        "source": {
            "type": ["object", "null"],
            "required": ["name", "text"],
            "additionalProperties": False,
            "properties": {"name": _NAME, "text": {"type": "string"}},
        },
        "meta": _ref("meta"),
    },
    "$defs": {
        "dtype": {"enum": list(DTYPES)},
        "derive": _DERIVE,
        "shape": _list(_int(0, MAX_ELEMENTS), maxItems=MAX_RANK),
        "span": _list(_ID, minItems=4, maxItems=4),
        "range": _list(_BYTES, minItems=2, maxItems=2),
        "operand": _object(
            ["tensor", "offset", "shape", "strides", "dtype"],
            {
                "tensor": _NAME,
                "offset": _BYTES,
                "shape": _ref("shape"),
                "strides": _list(_int(-MAX_BYTES, MAX_BYTES), maxItems=MAX_RANK),
                "dtype": _ref("dtype"),
            },
        ),
        "task": _object(
            [
                "id",
                "name",
                "op",
                "unit",
                "inputs",
                "output",
                "reads",
                "writes",
                "flops",
                "bytes_read",
                "bytes_written",
                "block_dim",
                "attrs",
                "duration_us",
                "host",
                "deps",
                "span",
            ],
            {
                "id": _ID,
                "name": _NAME,
                "op": _NAME,
                "unit": {"enum": ["cube", "vector", "dma", "link"]},
                "inputs": _list(_ref("operand")),
                "output": {"anyOf": [_ref("operand"), {"type": "null"}]},
                "reads": _list(_ref("range")),
                "writes": _list(_ref("range")),
                "flops": _COUNT,
                "bytes_read": _COUNT,
                "bytes_written": _COUNT,
                "block_dim": _int(1, MAX_ID),
                "attrs": {"type": "object", "additionalProperties": _ref("value")},
                "duration_us": {
                    "type": ["number", "null"],
                    "minimum": 0,
                    "maximum": MAX_DURATION_US,
                },
                "host": {"type": ["string", "null"], "maxLength": MAX_NAME_CHARS},
                "deps": _list(_ID),
                "span": _OPTIONAL_SPAN,
                "regions": _list(_NAME),
            },
        ),
        "command": {
            "type": "object",
            "required": ["cmd"],
            "properties": {"cmd": {"enum": _COMMANDS}},
            "oneOf": [
                _command("launch", ["stream", "task"], {**_STREAM, "task": _ID}),
                _command(
                    "record", ["stream", "event"], {**_STREAM, "event": _ID, "span": _OPTIONAL_SPAN}
                ),
                _command(
                    "wait", ["stream", "event"], {**_STREAM, "event": _ID, "span": _OPTIONAL_SPAN}
                ),
                _command("barrier", ["stream"], {**_STREAM, "span": _OPTIONAL_SPAN}),
                _command(
                    "callback",
                    ["stream", "name"],
                    {
                        **_STREAM,
                        "name": _NAME,
                        "blocking": _BOOL,
                        "span": _OPTIONAL_SPAN,
                    },
                ),
                _command(
                    "sync",
                    ["kind"],
                    {
                        "kind": {"enum": ["event", "stream", "device"]},
                        "target": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_ID},
                        "span": _OPTIONAL_SPAN,
                    },
                ),
                _command(
                    "alloc",
                    ["stream", "tensor", "address", "size", "latency_us"],
                    {
                        **_STREAM,
                        "tensor": _NAME,
                        "address": _BYTES,
                        "size": _BYTES,
                        "latency_us": _US,
                        **_ALLOCATOR_FIELDS,
                    },
                ),
                _command(
                    "free",
                    ["stream", "tensor", "latency_us"],
                    {**_STREAM, "tensor": _NAME, "latency_us": _US, **_ALLOCATOR_FIELDS},
                ),
            ],
        },
        "value": {
            "description": "a free-form JSON value with finite numbers (attrs, meta)",
            "type": ["string", "number", "boolean", "null", "array", "object"],
            "maxLength": MAX_NAME_CHARS,
            "minimum": -MAX_FLOAT,
            "maximum": MAX_FLOAT,
            "items": _ref("value"),
            "additionalProperties": _ref("value"),
        },
        "meta": {
            "description": "the compiler's report; the keys the reports read are typed",
            "type": "object",
            "properties": {
                "policy": {"type": ["string", "null"], "maxLength": MAX_NAME_CHARS},
                "batchnorms_folded": _BOOL,
                "barriers": {
                    "type": "object",
                    "required": [
                        "hazards",
                        "implied",
                        "waits",
                        "records",
                        "barriers",
                        "events_peak",
                    ],
                    "additionalProperties": _COUNT,
                },
                "memory": {
                    "type": "object",
                    "required": [
                        "policy",
                        "pool_bytes",
                        "pool_lower_bound",
                        "pool_none_bytes",
                        "resident_bytes",
                        "saving",
                    ],
                    "properties": {"policy": _NAME, "pool_proven": _BOOL, "saving": _FLOAT},
                    "additionalProperties": _COUNT,
                },
                "alloc": {
                    "type": "object",
                    "required": [
                        "kind",
                        "allocs",
                        "alloc_latency_us",
                        "peak_allocated_bytes",
                        "peak_reserved_bytes",
                    ],
                    "properties": {"kind": _NAME},
                    "additionalProperties": _number(-MAX_FLOAT, MAX_FLOAT),
                },
            },
            "additionalProperties": _ref("value"),
        },
    },
}

#: The JSON Schema keywords :func:`check_document` interprets (this schema and the device spec's
#: use no others).
KEYWORDS = frozenset(
    {
        "$schema",
        "$id",
        "$defs",
        "$ref",
        "title",
        "description",
        "type",
        "const",
        "enum",
        "required",
        "properties",
        "additionalProperties",
        "items",
        "minItems",
        "maxItems",
        "minimum",
        "exclusiveMinimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minProperties",
        "anyOf",
        "oneOf",
    }
)


def schema_text() -> str:
    """The schema as published in ``docs/stream-program.schema.json``."""
    return json.dumps(SCHEMA_DOC, indent=2, ensure_ascii=False) + "\n"


# --- the validator --------------------------------------------------------------------------


def refuse(path: str, problem: str, hint: str | None = None) -> StreamProgramError:
    """The error about the field at JSON ``path`` (the whole document when empty)."""
    return StreamProgramError(f"{path or 'the document'}: {problem}", hint=hint)


def shown(value: Any) -> str:
    """A short JSON rendering of ``value`` for a message (NaN and Infinity as JSON writes them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "…"


_TYPE_WORDS = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _same(value: Any, const: Any) -> bool:
    return _type_of(value) == _type_of(const) and value == const


def _fits(value: Any, kind: str) -> bool:
    actual = _type_of(value)
    if kind == "number":
        return actual in ("integer", "number")
    return actual == kind  # stricter than 2020-12, where 3.0 is an integer too: ids index lists


def check_depth(data: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse lists and objects nested deeper than ``limit`` (walked without recursion)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth >= limit:
                raise refuse(path, f"nested more than {limit} levels deep")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(item, dict | list):
                    stack.append((item, _join(path, key), depth + 1))


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def check_document(data: Any, schema: Mapping[str, Any] = SCHEMA_DOC) -> None:
    """Raise a :class:`StreamProgramError` naming the first field of ``data`` that ``schema``
    (by default :data:`SCHEMA_DOC`) does not admit; call :func:`check_depth` first."""
    _check(data, schema, "", schema)


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    while "$ref" in schema:
        schema = root["$defs"][schema["$ref"].removeprefix("#/$defs/")]
    return schema


def _check(value: Any, schema: Mapping[str, Any], path: str, root: Mapping[str, Any]) -> None:
    schema = _resolve(schema, root)
    if "anyOf" in schema:  # here: one schema or null
        options = [_resolve(s, root) for s in schema["anyOf"]]
        if value is None and any(s.get("type") == "null" for s in options):
            return
        _check(value, next(s for s in options if s.get("type") != "null"), path, root)
        return
    if "const" in schema and not _same(value, schema["const"]):
        raise refuse(path, f"must be {shown(schema['const'])}, got {shown(value)}")
    if "enum" in schema and not any(_same(value, c) for c in schema["enum"]):
        named = [f"'{c}'" if isinstance(c, str) else shown(c) for c in schema["enum"]]
        choices = ", ".join(named if len(named) <= 8 else [*named[:4], "…", named[-1]])
        words = [c for c in schema["enum"] if isinstance(c, str)]
        hint = did_you_mean(value, words) if isinstance(value, str) else None
        raise refuse(path, f"must be one of {choices}, got {shown(value)}", hint)
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_fits(value, k) for k in kinds):
            wanted = " or ".join(_TYPE_WORDS[k] for k in kinds)
            raise refuse(path, f"must be {wanted}, got {shown(value)}")
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        _check_number(value, schema, path)
    elif isinstance(value, str):
        if len(value) > schema.get("maxLength", len(value)):
            raise refuse(path, f"is longer than {schema['maxLength']:,} characters")
        if len(value) < schema.get("minLength", 0):
            raise refuse(
                path, f"must have at least {schema['minLength']} characters, got {len(value)}"
            )
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            raise refuse(path, f"must match {schema['pattern']}, got {shown(value)}")
    elif isinstance(value, list):
        _check_list(value, schema, path, root)
    elif isinstance(value, dict):
        _check_object(value, schema, path, root)


def _check_number(value: float, schema: Mapping[str, Any], path: str) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    above = schema.get("exclusiveMinimum")
    finite = math.isfinite(value)
    if low is not None and (not finite or value < low):
        raise refuse(path, f"must be finite and ≥ {_bound(low)}, got {shown(value)}")
    if above is not None and (not finite or value <= above):
        raise refuse(path, f"must be finite and > {_bound(above)}, got {shown(value)}")
    if high is not None and (not finite or value > high):
        raise refuse(path, f"must be finite and ≤ {_bound(high)}, got {shown(value)}")


def _bound(limit: float) -> str:
    if isinstance(limit, int) or (limit == int(limit) and abs(limit) < 1e16):
        return f"{int(limit):,}"
    return f"{limit:g}"


def _check_list(value: list, schema: Mapping[str, Any], path: str, root: Mapping[str, Any]) -> None:
    low, high = schema.get("minItems"), schema.get("maxItems")
    if low is not None and low == high and len(value) != low:
        raise refuse(path, f"must have {low} items, got {len(value)}")
    if low is not None and len(value) < low:
        raise refuse(path, f"must have at least {low} items, got {len(value)}")
    if high is not None and len(value) > high:
        raise refuse(path, f"must have at most {high} items, got {len(value)}")
    items = schema.get("items")
    if items is not None:
        for i, item in enumerate(value):
            _check(item, items, f"{path}[{i}]", root)


def _check_object(
    value: dict, schema: Mapping[str, Any], path: str, root: Mapping[str, Any]
) -> None:
    if "oneOf" in schema:  # branches told apart by the ``const`` of one key (``cmd``)
        _check_object(value, {k: v for k, v in schema.items() if k != "oneOf"}, path, root)
        schema = _branch(value, schema["oneOf"], root)
    properties = schema.get("properties", {})
    for key in schema.get("required", ()):
        if key not in value:
            raise refuse(path, f"missing key '{key}'")
    if len(value) < schema.get("minProperties", 0):
        raise refuse(path, f"must have at least {schema['minProperties']} keys, got {len(value)}")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        where = _join(path, key)
        if key in properties:
            _check(item, properties[key], where, root)
        elif extra is False:
            known = sorted(properties)
            raise refuse(
                path,
                f"unknown key '{key}'",
                did_you_mean(key, known) or f"the keys are: {', '.join(known)}",
            )
        elif extra is not True:
            _check(item, extra, where, root)


def _branch(value: dict, branches: list, root: Mapping[str, Any]) -> Mapping[str, Any]:
    for branch in branches:
        branch = _resolve(branch, root)
        for key, rule in branch["properties"].items():
            if "const" in rule and value.get(key) == rule["const"]:
                return branch
    raise AssertionError("unreachable: the discriminating enum was checked first")
