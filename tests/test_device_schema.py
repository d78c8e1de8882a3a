"""The device spec's published JSON Schema (issue 13): ``docs/device-spec.schema.json`` is what
rtgraph/device/schema_json.py builds from the loader's own tables, every shipped spec is an
instance of it, and it refuses a value exactly when the loader does — but for the limits
between two keys, which only the loader checks (the schema's description names them).

The loader's verdict is :func:`build_spec` on a shipped spec's merged data with one key changed,
as :func:`parse_device` would call it on that data written as TOML; the schema's is the hand
validator :func:`check_document` and, where ``jsonschema`` happens to be installed, the standard
``Draft202012Validator`` too.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from rtgraph.device import load
from rtgraph.device.document import Doc
from rtgraph.device.schema import (
    PEAK_KEYS,
    REQUIRED_UNITS,
    SCHEMA,
    UNIT_KINDS,
    Checker,
    Rule,
    build_spec,
)
from rtgraph.device.schema_json import CROSS_FIELD_RULES, SCHEMA_DOC, schema_text
from rtgraph.errors import DeviceSpecError, StreamProgramError
from rtgraph.stream_program.schema import KEYWORDS, check_document

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = load.shipped_names()

try:  # the standard validator, where it is installed (it is not a dependency of rtgraph)
    import jsonschema
except ImportError:
    jsonschema = None
STANDARD = None if jsonschema is None else jsonschema.Draft202012Validator(SCHEMA_DOC)

#: Values tried for every key: wrong types, out-of-range and impossible values, and a few that
#: fit some key (so that every key sees both verdicts). TOML writes each of them: ``nan`` and
#: ``inf`` are TOML floats, ``2.0`` is a float and not an integer, ``[]`` and ``{}`` are an empty
#: array and an empty inline table.
VALUES: list[Any] = [
    *(-1, 0, 1, 3, 48, 2**40, 2**62),
    *(-0.5, 0.0, 0.5, 1.0, 2.0, 1e300, math.nan, math.inf, -math.inf),
    *("x", "", "8.0", "8.0.RC1", "7.5.0.1.129", "8.0.", "8.0.RC", "cann", "CANN", "full", "stop"),
    *(True, False),
    *([], ["x"], ["8.0"], ["8.0", 8], [1]),
    *({}, {"f16": 1e9}, {"f16": 0}),
]
#: Values every table refuses in place of the table.
NOT_TABLES: list[Any] = ["x", 1, 1.5, True, [], [{}]]


def merged(name: str) -> dict[str, Any]:
    """A shipped spec's data as the loader validates it: merged through ``extends``."""
    data, _ = load._read(load._resolve(name, None), ())
    data.pop("extends", None)  # _read has already taken it: a complete spec needs none
    return data


def complete(name: str) -> dict[str, Any]:
    """``merged(name)`` with every unit kind present (the optional ones copied from cube)."""
    data = merged(name)
    for kind in UNIT_KINDS:
        data["units"].setdefault(kind, copy.deepcopy(data["units"]["cube"]))
    return data


def tables() -> Iterator[tuple[tuple[str, ...], Mapping[str, Rule]]]:
    """Every table of a spec (its path) and the rules of its keys, units and peak rates too."""
    for name, keys in SCHEMA.items():
        if keys is not UNIT_KINDS:
            yield (name,), keys
            continue
        for kind, rules in UNIT_KINDS.items():
            yield ("units", kind), rules
            if "peak_flops" in rules:
                yield ("units", kind, "peak_flops"), PEAK_KEYS


def edited(base: dict[str, Any], path: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A copy of ``base`` to change, and its table at ``path`` (copied, as are its parents)."""
    data = table = dict(base)
    for key in path:
        table[key] = table = dict(table[key])
    return data, table


def published(path: tuple[str, ...], key: str) -> dict[str, Any]:
    """The schema's fragment for ``key`` of the table at ``path`` (its enum is tried too)."""
    fragment = SCHEMA_DOC
    for name in (*path, key):
        fragment = fragment["properties"][name]
    return fragment


def loader_error(data: dict[str, Any]) -> DeviceSpecError | None:
    try:
        build_spec(data, Checker(Doc("test.toml", "", "test", None), {}))
    except DeviceSpecError as error:
        return error
    return None


def schema_error(data: dict[str, Any]) -> StreamProgramError | None:
    try:
        check_document(data, SCHEMA_DOC)
    except StreamProgramError as error:
        return error
    return None


def standard_verdict(data: dict[str, Any]) -> bool | None:
    """Whether ``jsonschema`` admits ``data`` (None when it is not installed)."""
    return None if STANDARD is None else STANDARD.is_valid(data)


def breaks_a_cross_field_rule(data: dict[str, Any]) -> bool:
    """Whether ``data``, which the schema admits, breaks one of :data:`CROSS_FIELD_RULES`."""
    scheduler = data["scheduler"]
    return scheduler["reorder_window"] > scheduler["queue_depth"] or any(
        unit.get("default_block_dim", 0) > unit["cores"] for unit in data["units"].values()
    )


def json_faithful(value: Any) -> bool:
    """Whether JSON Schema reads ``value`` as the loader does: not nan or inf (JSON has none),
    not a float with an integral value (2.0 is an integer to JSON Schema, not to TOML)."""
    if isinstance(value, list):
        return all(json_faithful(v) for v in value)
    if isinstance(value, dict):
        return all(json_faithful(v) for v in value.values())
    return not isinstance(value, float) or (math.isfinite(value) and not value.is_integer())


# --- the published file ----------------------------------------------------------------------


def _keywords(schema: object) -> set[str]:
    """Every keyword used anywhere in ``schema`` (names under ``properties`` are not)."""
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            found.add(key)
            subs = value.values() if key == "properties" else [value]
            for sub in subs:
                found |= _keywords(sub)
    elif isinstance(schema, list):
        for item in schema:
            found |= _keywords(item)
    return found


def test_the_published_schema_is_the_one_the_loader_tables_build():
    text = (ROOT / "docs" / "device-spec.schema.json").read_text(encoding="utf-8")
    assert text == schema_text(), (
        "docs/device-spec.schema.json is stale: regenerate it with\n"
        'python -c "from rtgraph.device.schema_json import schema_text; '
        "open('docs/device-spec.schema.json', 'w').write(schema_text())\""
    )
    schema = json.loads(text)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith("/docs/device-spec.schema.json")
    assert _keywords(schema) <= KEYWORDS  # the hand validator interprets every keyword used
    assert set(schema["properties"]) == {"extends", *SCHEMA}
    assert schema["required"] == list(SCHEMA)
    assert schema["properties"]["units"]["required"] == list(REQUIRED_UNITS)
    assert "complete spec" in schema["description"]
    for rule in CROSS_FIELD_RULES:
        assert rule in schema["description"]
    if jsonschema is not None:
        jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_spec_is_an_instance(name: str):
    data = json.loads(json.dumps(merged(name), allow_nan=False))  # plain JSON data
    assert loader_error(data) is None
    check_document(data, SCHEMA_DOC)
    assert standard_verdict(data) in (True, None)
    assert standard_verdict({"extends": name, **data}) in (True, None)
    check_document({"extends": name, **data}, SCHEMA_DOC)


# --- the schema refuses what the loader refuses ------------------------------------------------


def compare(
    data: dict[str, Any], what: str, faithful: bool = True
) -> tuple[list[str], DeviceSpecError | None, StreamProgramError | None]:
    """What is wrong about ``data`` (changed as ``what`` says) — the schema and the loader
    disagree, or the standard validator and the hand one do (for JSON-faithful values) — and
    the loader's and the schema's errors."""
    loader, schema = loader_error(data), schema_error(data)
    crossed = schema is None and breaks_a_cross_field_rule(data)
    problems = []
    if (loader is not None) != (schema is not None or crossed):
        said = [e.message if e else "admitted" for e in (loader, schema)]
        problems.append(f"{what}: the loader: {said[0]}; the schema: {said[1]}")
    standard = standard_verdict(data) if faithful else None
    if standard is not None and standard != (schema is None):
        problems.append(f"{what}: jsonschema admits {standard}, the hand validator does not agree")
    return problems, loader, schema


@pytest.mark.parametrize("name", SHIPPED)
def test_the_schema_refuses_a_value_exactly_when_the_loader_does(name: str):
    base = complete(name)
    problems: list[str] = []
    seen: dict[str, set[bool]] = {}
    crossed = 0
    for path, rules in tables():
        for key in rules:
            dotted = ".".join((*path, key))
            for value in [*VALUES, *published(path, key).get("enum", [])]:
                data, table = edited(base, path)
                table[key] = value
                what = f"{dotted} = {value!r}"
                found, loader, schema = compare(data, what, json_faithful(value))
                problems += found
                seen.setdefault(dotted, set()).add(schema is None)
                if schema is not None and loader is not None:  # both name the key
                    assert schema.message.startswith(dotted), what
                    assert dotted in loader.message, what
                crossed += schema is None and loader is not None
    assert problems == []
    assert {k: v for k, v in seen.items() if v != {True, False}} == {}, "a key saw one verdict"
    assert crossed > 0, "no change broke a cross-field rule: the exception is untested"


@pytest.mark.parametrize("name", SHIPPED)
def test_a_table_that_is_no_table_is_refused_by_both(name: str):
    base = complete(name)
    paths = [(table,) for table in SCHEMA] + [path for path, _ in tables() if len(path) > 1]
    for path in paths:
        for value in NOT_TABLES:
            data, table = edited(base, path[:-1])
            table[path[-1]] = value
            assert loader_error(data) is not None and schema_error(data) is not None, path
            assert standard_verdict(data) in (False, None), path


@pytest.mark.parametrize("name", SHIPPED)
def test_an_unknown_key_is_refused_by_both(name: str):
    base = complete(name)
    for path in [(), ("units",), *(path for path, _ in tables())]:
        for key in ("bogus", "corse", "Name"):
            data, table = edited(base, path)
            table[key] = 1
            assert loader_error(data) is not None, (path, key)
            assert schema_error(data) is not None, (path, key)
            assert standard_verdict(data) in (False, None), (path, key)


@pytest.mark.parametrize("name", SHIPPED)
def test_a_missing_key_is_refused_by_both_when_required(name: str):
    base = complete(name)
    problems: list[str] = []
    for table in SCHEMA:
        data = copy.deepcopy(base)
        del data[table]
        problems += compare(data, f"no [{table}]")[0]
        assert schema_error(data) is not None, table
    for kind in UNIT_KINDS:
        data = copy.deepcopy(base)
        del data["units"][kind]
        problems += compare(data, f"no [units.{kind}]")[0]
        assert (schema_error(data) is None) == (kind not in REQUIRED_UNITS), kind
    for path, rules in tables():
        for key, rule in rules.items():
            data, table = edited(base, path)
            table.pop(key, None)
            problems += compare(data, f"no {'.'.join((*path, key))}")[0]
            assert (schema_error(data) is None) == (not rule.required), (path, key)
    assert problems == []
    data = copy.deepcopy(base)
    data["units"]["cube"]["peak_flops"] = {}
    assert loader_error(data) is not None and schema_error(data) is not None


def test_an_integer_past_float_range_is_refused_not_a_crash():
    from rtgraph.device.load import parse_device
    from rtgraph.errors import DeviceSpecError

    text = (ROOT / "rtgraph" / "device" / "specs" / "toy.toml").read_text()
    lines = text.splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("bandwidth ="))
    lines[k] = "bandwidth = " + "9" * 400
    with pytest.raises(DeviceSpecError) as e:
        parse_device("\n".join(lines))
    assert "expected a positive number, got 99999999999999999999… (400 digits)" in str(e.value)
