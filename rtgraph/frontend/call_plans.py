"""What an op call's checks find without looking at any name: worked out once per call site.

A loop body or a function inlined many times checks the same written call again and again.
Its argument count, which attributes it gives and how (positionally, by keyword, ``after=``),
and the value of every attribute written as a literal (``us = 2.5``, ``unit = vector``,
``dtype = f16``) or left at its default are the same every time; only the names it uses are
looked up anew. :func:`plan_call` records those parts of a call whose first check found no
mistake in them; :meth:`~rtgraph.frontend.calls.CallChecker.call_op` then runs only the checks
that depend on names — exactly what the full checks would find, at a fraction of the cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rtgraph.errors import Span
from rtgraph.frontend import ast
from rtgraph.frontend.attrs import SYMBOLIC_KINDS, AttrError, Symbol, convert
from rtgraph.ops import OpDef

#: An attribute to evaluate at each call: (kind, choices, expression, span, is block_dim).
Dynamic = tuple[str, tuple[str, ...], ast.Expr, Span, bool]


@dataclass(slots=True)
class CallPlan:
    """The name-independent result of checking one op call (every part of it without error).

    ``items`` lists the attributes in the order the full check builds them: (name, value,
    None) for a value known now, (name, None, dynamic) for one evaluated at each call.
    """

    n_tensors: int
    items: tuple[tuple[str, Any, Dynamic | None], ...]
    attr_spans: dict[str, Span]
    given: dict[str, tuple[ast.Expr, Span]]
    after: ast.Keyword | None
    names: tuple[str, ...]  # ``names`` attributes given (a kernel's reads/writes), deduplicated
    #: Every attribute, when all of them are known now (None: some are evaluated each time).
    known: dict[str, Any] | None
    footprint: bool  # a kernel that names what it reads or writes: checked each time


def plan_call(
    op: OpDef,
    n_tensors: int,
    given: dict[str, tuple[ast.Expr, Span]],
    after: ast.Keyword | None,
) -> CallPlan | None:
    """The plan of a call whose argument count and attribute names checked without error
    (None if it leaves out a required attribute: that is checked at every call)."""
    items: list[tuple[str, Any, Dynamic | None]] = []
    spans: dict[str, Span] = {}
    for name, spec in op.attrs.items():
        if name in given:
            expr, span = given[name]
            spans[name] = span
            items.append(_item(name, spec.kind, spec.choices, expr, span, False))
        elif spec.required:
            return None
        else:
            items.append((name, spec.default, None))
    if "block_dim" in given and "block_dim" not in op.attrs:
        expr, span = given["block_dim"]
        spans["block_dim"] = span
        items.append(_item("block_dim", "int", (), expr, span, True))
    names = tuple(k for k, spec in op.attrs.items() if spec.kind == "names" and k in given)
    known = None if any(d is not None for _, _, d in items) else {k: v for k, v, _ in items}
    footprint = op.name == "kernel" and ("reads" in given or "writes" in given)
    return CallPlan(n_tensors, tuple(items), spans, given, after, names, known, footprint)


def _item(
    name: str, kind: str, choices: tuple[str, ...], expr: ast.Expr, span: Span, block_dim: bool
) -> tuple[str, Any, Dynamic | None]:
    """A literal attribute's converted value, or the recipe for evaluating it each time."""
    dynamic = (name, None, (kind, choices, expr, span, block_dim))
    if kind == "names":
        return dynamic
    if kind in SYMBOLIC_KINDS and isinstance(expr, ast.Name):
        value: Any = Symbol(expr.id)
    elif isinstance(expr, ast.Number | ast.String):
        value = expr.value
    else:
        return dynamic
    if value is None:  # a malformed literal: reported by the parser, poisons every call
        return dynamic
    try:
        value = convert(kind, value, choices)
    except AttrError:
        return dynamic  # reported where it is written, at every call, as the full check does
    if block_dim and value < 1:
        return dynamic
    return (name, value, None)
