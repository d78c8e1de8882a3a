"""Binding a program's parameters: ``-D`` values, defaults, and a dynamic parameter's gears.

A program's parameters are compile-time integers bound in order (a default may use the ones
before it); a dynamic parameter (``B: dyn {1, 2, 4}``, :mod:`rtgraph.frontend.gears`) is bound
to the gear given, its default, or its smallest gear, and its gears are recorded on the checker
for the compile to produce one program per gear.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from rtgraph.errors import Span, did_you_mean
from rtgraph.frontend import ast, consteval
from rtgraph.frontend.gears import check_gears, check_range, range_gears
from rtgraph.frontend.parser import INT_LIMIT
from rtgraph.frontend.values import POISON, Bound, Scope


class Binder(Protocol):
    """What binding needs of the checker (:class:`rtgraph.frontend.checker.Checker`)."""

    program_scope: Scope
    gears: dict[str, tuple[int, ...]]
    ranges: dict[str, tuple[int, int]]

    def error(self, message: str, span: Span, hint: str | None = None) -> None: ...
    def rebound(self, ident: ast.Ident) -> None: ...
    def compile_time_int(self, expr: ast.Expr, what: str) -> int | None: ...


def bind_params(ck: Binder, program: ast.ProgramDef, given: Mapping[str, int]) -> dict[str, int]:
    """Compile-time parameters: the given values, else the defaults (in order)."""
    declared = [p.name.name for p in program.params]
    for name in given:
        if name not in declared:
            hint = did_you_mean(name, declared) or (
                f"its parameters are: {', '.join(declared)}" if declared else "it has none"
            )
            ck.error(
                f"parameter '{name}' is not declared by program '{program.name.name}'",
                program.name.span,
                hint=hint,
            )
    values: dict[str, int] = {}
    for p in program.params:
        name = p.name.name
        if ck.program_scope.lookup(name) is not None:
            ck.rebound(p.name)
            continue
        value: int | None = None
        if name in given:
            value = consteval.as_int(given[name])
            if value is None or abs(value) > INT_LIMIT:
                ck.error(
                    f"parameter '{name}' must be an integer, got {given[name]!r}",
                    p.name.span,
                )
                value = None
        elif p.default is not None:
            value = ck.compile_time_int(p.default, f"the default of parameter '{name}'")
        elif p.gears is not None:
            value = None  # the smallest gear, once the gears are known
        else:
            ck.error(
                f"parameter '{name}' has no default and no value was given",
                p.name.span,
                hint=f"give it a default ({name} = ...) or a value (-D {name}=...)",
            )
        if p.gears is not None:
            value = _bind_gears(ck, p, value, name in given)
        bound = POISON if value is None else value
        ck.program_scope.names[name] = Bound(bound, "const", p.name.span)
        if value is not None:
            values[name] = value
    return values


def _bind_gears(ck: Binder, p: ast.ProgramParam, value: int | None, given: bool) -> int | None:
    """Record a dynamic parameter's gears (:mod:`rtgraph.frontend.gears` checks them);
    its value is the one given or its default — a gear — else the smallest gear."""
    assert p.gears is not None
    what = "an end of the range" if p.gears.range else "a gear"
    values = [
        ck.compile_time_int(g, f"{what} of parameter '{p.name.name}'") for g in p.gears.values
    ]
    if p.gears.range:
        ends = check_range(p, values, value, given, ck.error)
        if ends is None:
            return None
        ck.gears[p.name.name] = range_gears(*ends)  # at most 64: the ends are below 2**63
        ck.ranges[p.name.name] = ends
        return ends[0] if value is None and not given else value
    gears = check_gears(p, values, value, given, ck.error)
    if gears is None:
        return None
    ck.gears[p.name.name] = gears
    return gears[0] if value is None and not given else value
