"""What a name can stand for while a program is checked, and the scopes that hold names.

A name is bound to a tensor (the IR's own :class:`~rtgraph.ir.Tensor`), a compile-time number
(``int``/``float``) or list (``tuple``), a param array, a stream, an event or a function.
:data:`POISON` stands for the value of anything that already failed: using it is silent, so
one mistake gives one error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rtgraph.errors import Span
from rtgraph.frontend import ast
from rtgraph.ir.graph import Tensor


@dataclass(frozen=True)
class ParamArray:
    name: str
    elements: tuple[Tensor, ...]


@dataclass(frozen=True)
class StreamRef:
    name: str


@dataclass(frozen=True)
class EventRef:
    name: str


@dataclass(frozen=True)
class EventArray:
    """``event e[N]``: N events, named ``e[0]`` … ``e[N-1]`` in the IR."""

    name: str
    count: int


@dataclass(frozen=True)
class FnRef:
    fn: ast.FnDef


class _Poison:
    """The value of an expression that already produced an error."""

    _instance: _Poison | None = None

    def __new__(cls) -> _Poison:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "POISON"


POISON = _Poison()

Value = Any  # Tensor | int | float | tuple | str | ParamArray | StreamRef | EventRef | FnRef

BindingKind = Literal[
    "binding", "input", "param", "const", "buffer", "stream", "event", "fn", "loop", "arg"
]


def is_number(value: Value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def describe(value: Value) -> str:
    """A value in words, for messages (``tensor 'x' (f16[4, 4])``, ``the number 2``)."""
    if isinstance(value, Tensor):
        if value.kind == "token":
            return f"the kernel token '{value.label}'"
        if value.kind == "buffer":
            return f"the buffer '{value.label}'"
        if value.kind == "const":
            return f"the constant {value.label}"
        if value.kind in ("input", "param"):
            return f"the {value.kind} '{value.label}' ({value.type})"
        return f"tensor '{value.label}' ({value.type})"
    if is_number(value):
        return f"the number {format_number(value)}"
    if isinstance(value, tuple):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, ParamArray):
        return f"the param array '{value.name}'"
    if isinstance(value, StreamRef):
        return f"the stream '{value.name}'"
    if isinstance(value, EventRef):
        return f"the event '{value.name}'"
    if isinstance(value, EventArray):
        return f"the event array '{value.name}'"
    if isinstance(value, FnRef):
        return f"the function '{value.fn.name.name}'"
    return "an invalid value"


def format_number(value: int | float) -> str:
    """A number for messages and listings (floats to 6 significant digits)."""
    if isinstance(value, float):
        return f"{value:.1f}" if value.is_integer() and abs(value) < 1e16 else f"{value:.6g}"
    return str(value)


@dataclass
class Bound:
    """One name in a scope: its value, how it was bound and where."""

    value: Value
    kind: BindingKind
    span: Span | None


@dataclass
class Scope:
    """Names visible in a block.

    ``prefix`` qualifies the IR names of tensors bound here (``ffn.1/``, ``l=2/``);
    ``loop`` marks one iteration of an unrolled ``for`` body, where rebinding a name of an
    enclosing scope updates that name (the loop-carried value); ``carried`` holds the names
    rebound so far in this iteration (each at most once).
    """

    parent: Scope | None
    prefix: str = ""
    loop: bool = False
    names: dict[str, Bound] = field(default_factory=dict)
    carried: set[str] = field(default_factory=set)

    def lookup(self, name: str) -> Bound | None:
        scope: Scope | None = self
        while scope is not None:
            bound = scope.names.get(name)
            if bound is not None:
                return bound
            scope = scope.parent
        return None

    def owner(self, name: str) -> tuple[Scope | None, bool]:
        """The scope binding ``name`` and whether a loop iteration lies between it and here."""
        scope: Scope | None = self
        crossed_loop = False
        while scope is not None:
            if name in scope.names:
                return scope, crossed_loop
            crossed_loop = crossed_loop or scope.loop
            scope = scope.parent
        return None, False

    def visible(self) -> list[str]:
        names: list[str] = []
        scope: Scope | None = self
        while scope is not None:
            names.extend(scope.names)
            scope = scope.parent
        return names
