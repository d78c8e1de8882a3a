"""The table of every op, made from the registry: what ``rtgraph ops`` prints and what
docs/language.md shows (``tools/make_op_table.py`` writes it there; a test keeps it current).

Everything in it is read from each :class:`~rtgraph.ops.registry.OpDef`: the unit, how many
tensor arguments, the attributes with their kinds and defaults, the first sentence of the cost
rule's docstring, and the op's ``doc``. Nothing is written twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from rtgraph.ops.registry import AttrSpec, OpDef, language_ops

_UNITS = {
    "cube": "Cube",
    "vector": "Vector",
    "dma": "DMA",
    "link": "link (a cluster's transfers)",
    "layout": "view, else a Vector copy",
    "synthetic": "its `unit` attribute",
}


def op_table() -> str:
    """Every registered op as Markdown: one table of the ops, one of their attributes."""
    ops = list(language_ops().values())
    overview = _markdown(
        ("op", "unit", "tensors", "attributes", "cost", "what it computes"),
        (
            (
                f"`{op.name}`",
                _UNITS[op.unit],
                _tensors(op),
                ", ".join(_attr_summary(op, n, spec) for n, spec in op.attrs.items()) or "—",
                cost_summary(op),
                op.doc,
            )
            for op in ops
        ),
    )
    attributes = _markdown(
        ("op", "attribute", "kind", "default", "meaning"),
        (
            (
                f"`{op.name}`",
                f"`{name}`",
                spec.kind + (f" ({', '.join(spec.choices)})" if spec.choices else ""),
                "required" if spec.required else _value(spec.default),
                spec.doc,
            )
            for op in ops
            for name, spec in op.attrs.items()
        ),
    )
    return f"{overview}\n\n{attributes}\n"


def cost_summary(op: OpDef) -> str:
    """The first sentence of ``op``'s cost rule's docstring: what the cost model counts."""
    doc = inspect.getdoc(op.cost) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").replace("``", "`").strip()


def _tensors(op: OpDef) -> str:
    if op.max_args is None:
        return f"{op.min_args} or more"
    if op.max_args == op.min_args:
        return str(op.min_args)
    return f"{op.min_args} to {op.max_args}"


def _attr_summary(op: OpDef, name: str, spec: AttrSpec) -> str:
    notes = []
    if spec.required:
        notes.append("required")
    elif spec.default is None:
        notes.append("optional")
    if name in op.positional_attrs:
        notes.append("positional")
    default = "" if spec.required or spec.default is None else f" = {_value(spec.default)}"
    return f"`{name}`{default}" + (f" ({', '.join(notes)})" if notes else "")


def _value(value: Any) -> str:
    """A default as a program would write it (``true``, ``1e-05``, ``[]``); None is unset."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return str(value)


def _markdown(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> str:
    lines = [_row(header), "|" + "---|" * len(header)]
    lines += [_row(row) for row in rows]
    return "\n".join(lines)


def _row(cells: tuple[str, ...]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
