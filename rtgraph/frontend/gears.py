"""Dynamic parameters with gears: ``program p(B: dyn {1, 2, 4, 8} = 1)`` or ``B: dyn 1..64``.

A parameter declared ``dyn`` with a set of *gears* is compiled once for each gear (each
combination of gears, when several parameters are dynamic) into one artifact, and the run
chooses the program of the gear it is given — Ascend ATC's ``--dynamic_batch_size`` /
``--dynamic_dims``: a set of shapes compiled once, one chosen at run time, no recompiling. Each
gear has its own tiling choices, streams and memory plan, so every gear runs exactly as a
static compile at that value would. A value that is not a gear is refused (pad to a gear
yourself, or add it to the set).

A *range* ``lo..hi`` promises every value from ``lo`` to ``hi``: it is compiled at a ladder of
gears (:func:`range_gears`: ``lo``, the powers of two between, ``hi``), and a run at a value
between two of them runs the gear above it on padded inputs — where the compile has found
that sound (:mod:`rtgraph.compiler.padding`).

This module checks a parameter's gears as the checker evaluates them: each a compile-time
integer ≥ 1, none twice, at most :data:`MAX_GEARS` programs in all, and the parameter's value
(given with ``-D`` or its default) one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rtgraph.errors import Span
from rtgraph.frontend import ast

#: The most programs one compile of a dynamic program may produce (the product of every
#: dynamic parameter's gear count): each is a whole compile, checked before any of them.
MAX_GEARS = 64

Report = Callable[..., None]  # the checker's error(message, span, hint=…)


def range_gears(lo: int, hi: int) -> tuple[int, ...]:
    """The gears a range ``lo..hi`` is compiled at: its ends and every power of two between,
    so that a run pads by less than half of the gear it runs on."""
    ladder = {lo, hi}
    power = 1
    while power < hi:
        if power > lo:
            ladder.add(power)
        power *= 2
    return tuple(sorted(ladder))


def check_range(
    p: ast.ProgramParam,
    ends: list[int | None],
    value: int | None,
    given: bool,
    error: Report,
) -> tuple[int, int] | None:
    """The ends of ``p``'s range ``lo..hi`` (sizes, ``lo`` ≤ ``hi``, the parameter's value
    between them); reports what is wrong and returns None."""
    assert p.gears is not None and p.gears.range
    name = p.name.name
    lo, hi = ends
    if lo is None or hi is None:
        return None
    if lo < 1 or hi < lo:
        error(
            f"range {lo}..{hi} of parameter '{name}' is not a range of sizes",
            p.gears.span,
            hint="a range lo..hi of sizes has 1 ≤ lo ≤ hi",
        )
        return None
    if value is not None and not lo <= value <= hi:
        where = "-D" if given else "its default"
        error(
            f"parameter '{name}' = {value} ({where}) is outside its range {lo}..{hi}",
            p.name.span if given or p.default is None else p.default.span,
            hint=f"choose a value from {lo} to {hi}",
        )
        return None
    return lo, hi


def gear_list(gears: tuple[int, ...]) -> str:
    return ", ".join(str(g) for g in gears)


def check_gears(
    p: ast.ProgramParam,
    values: list[int | None],
    value: int | None,
    given: bool,
    error: Report,
) -> tuple[int, ...] | None:
    """The gears of ``p``, sorted (``values`` as evaluated; None where that failed and was
    reported); reports what is wrong and returns None."""
    assert p.gears is not None
    name = p.name.name
    seen: dict[int, Span] = {}
    ok = True
    for expr, gear in zip(p.gears.values, values, strict=True):
        if gear is None:
            ok = False
        elif gear < 1:
            error(
                f"gear {gear} of parameter '{name}' is not a size",
                expr.span,
                hint="gears are sizes: integers ≥ 1",
            )
            ok = False
        elif gear in seen:
            error(
                f"gear {gear} of parameter '{name}' is listed twice",
                expr.span,
                hint=f"the first is at line {seen[gear].line}, column {seen[gear].col}",
            )
            ok = False
        else:
            seen[gear] = expr.span
    if not ok:
        return None
    gears = tuple(sorted(seen))
    if len(gears) > MAX_GEARS:
        error(
            f"parameter '{name}' has {len(gears)} gears; at most {MAX_GEARS}",
            p.gears.span,
            hint="each gear is a whole compile: list fewer",
        )
        return None
    if value is not None and value not in seen:
        where = "-D" if given else "its default"
        shown = gear_list(gears)
        error(
            f"parameter '{name}' = {value} ({where}) is not one of its gears {{{shown}}}",
            p.name.span if given or p.default is None else p.default.span,
            hint=f"choose a gear, or add {value} to the set",
        )
        return None
    return gears


def gear_combinations(gears: Mapping[str, tuple[int, ...]]) -> list[dict[str, int]]:
    """Every combination of the dynamic parameters' gears, in order (the first parameter's
    gears vary slowest)."""
    combos: list[dict[str, int]] = [{}]
    for name, values in gears.items():
        combos = [{**c, name: v} for c in combos for v in values]
    return combos


def check_total(gears: Mapping[str, tuple[int, ...]], span: Span, error: Report) -> None:
    """At most :data:`MAX_GEARS` programs in all."""
    total = 1
    for values in gears.values():
        total *= len(values)
    if total > MAX_GEARS:
        shown = " × ".join(f"{len(v)} ({n})" for n, v in gears.items())
        error(
            f"the dynamic parameters make {total} programs ({shown}); at most {MAX_GEARS}",
            span,
            hint="each gear combination is a whole compile: list fewer gears",
        )
