"""Op attributes: compile-time values checked against their :class:`~rtgraph.ops.AttrSpec` kind.

Bare identifiers are symbols where a kind expects one (``dtype = f16``, ``kind = max``,
``unit = cube``, ``keepdims = true``); everything else is a compile-time value. ``names``
attributes (``reads = [A]``) refer to program names and are resolved by the checker.
"""

from __future__ import annotations

from typing import Any

from rtgraph.dtypes import DTYPES
from rtgraph.errors import did_you_mean
from rtgraph.frontend.consteval import as_int
from rtgraph.frontend.values import Tensor, describe, is_number
from rtgraph.ir.graph import UNITS

#: Kinds whose values are written as bare identifiers.
SYMBOLIC_KINDS = ("dtype", "enum", "unit", "bool")


class Symbol(str):
    """An identifier written where a symbolic attribute value was expected."""


class AttrError(Exception):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def _said(value: Any) -> str:
    if isinstance(value, Symbol):
        return f"'{value}'"
    if isinstance(value, str):
        return f'the string "{value}"'
    return describe(value)


def _int(value: Any, what: str = "an integer") -> int:
    n = as_int(value)
    if n is None:
        raise AttrError(f"must be {what}, got {_said(value)}")
    return n


def _ints(value: Any) -> tuple[int, ...]:
    if isinstance(value, tuple):
        return tuple(_int(v, "a list of integers") for v in value)
    return (_int(value, "a list of integers"),)


def convert(kind: str, value: Any, choices: tuple[str, ...] = ()) -> Any:
    """``value`` in the form the op's rule expects for an attribute of ``kind``."""
    if isinstance(value, Tensor):
        raise AttrError(
            f"must be a compile-time value, got {_said(value)}",
            hint="attributes are fixed when the program is compiled; tensors are arguments",
        )
    if kind == "int":
        return _int(value)
    if kind == "float":
        if not is_number(value):
            raise AttrError(f"must be a number, got {_said(value)}")
        return float(value)
    if kind == "bool":
        if isinstance(value, Symbol) and value in ("true", "false"):
            return value == "true"
        raise AttrError(f"must be true or false, got {_said(value)}")
    if kind == "ints":
        return _ints(value)
    if kind == "axes":
        return _ints(value) if isinstance(value, tuple) else _int(value, "an axis or a list")
    if kind == "dtype":
        if isinstance(value, str) and value in DTYPES:
            return str(value)
        if isinstance(value, str):
            raise AttrError(f"names an unknown dtype '{value}'", hint=did_you_mean(value, DTYPES))
        raise AttrError(f"must be a dtype ({', '.join(DTYPES)}), got {_said(value)}")
    if kind in ("enum", "unit"):
        allowed = choices if kind == "enum" else UNITS
        if isinstance(value, str) and value in allowed:
            return str(value)
        hint = did_you_mean(value, allowed) if isinstance(value, str) else None
        raise AttrError(f"must be one of {', '.join(allowed)}, got {_said(value)}", hint=hint)
    raise AttrError(f"has a kind ({kind}) the front end does not know")
