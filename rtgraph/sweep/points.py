"""The points of a sweep: the whole grid, a random sample of it, or a Latin hypercube.

A point is one value per axis (and per program parameter). Its key is a hash of those values
alone, so the same point has the same key in every run, whatever else the file sweeps; the
order of the points is the grid's (axes in :data:`~rtgraph.sweep.spec.AXES` order, each
axis's values as written), and a sample keeps the order it was drawn in. Draws come from a
NumPy generator seeded by the file's ``seed``: the same file gives the same points.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass

import numpy as np

from rtgraph.sweep.spec import AXES, Sweep

#: Hex digits of a point's key: 48 bits, no collision among a few million points.
KEY_DIGITS = 12


@dataclass(frozen=True)
class Point:
    """One combination: ``values`` maps every axis name (and every parameter) to its value."""

    key: str
    values: dict[str, object]
    params: dict[str, int]


def point_key(values: dict[str, object], params: dict[str, int]) -> str:
    """A stable key: the sha256 of the point's values as sorted JSON, cut to KEY_DIGITS."""
    text = json.dumps({"axes": values, "params": params}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:KEY_DIGITS]


def points(sweep: Sweep) -> list[Point]:
    """The sweep's points in its mode, excluded ones left out, each once."""
    names = [*AXES, *sweep.params]
    columns = [*(sweep.axes[a] for a in AXES), *sweep.params.values()]
    if sweep.mode == "lhs":
        chosen = _latin_hypercube(columns, sweep.samples or 1, sweep.seed)
    else:
        chosen = [c for c in itertools.product(*columns) if not _excluded(sweep, names, c)]
        if sweep.mode == "random":
            rng = np.random.default_rng(sweep.seed)
            n = min(sweep.samples or 1, len(chosen))
            chosen = [chosen[i] for i in rng.choice(len(chosen), size=n, replace=False)]
    found: dict[str, Point] = {}
    for combo in chosen:
        if _excluded(sweep, names, combo):
            continue
        values = dict(zip(AXES, combo[: len(AXES)], strict=True))
        params = dict(zip(sweep.params, combo[len(AXES) :], strict=True))
        key = point_key(values, params)
        found.setdefault(key, Point(key, values, params))
    return list(found.values())


def _latin_hypercube(columns: list[tuple], n: int, seed: int) -> list[tuple]:
    """``n`` draws stratified on every axis: axis ``j``'s ``n`` strata of [0, 1) are each hit
    once, in a random order, and a stratum maps to the value whose share of [0, 1) holds it —
    so every value of an axis with at most ``n`` values is drawn. Repeats are dropped later."""
    rng = np.random.default_rng(seed)
    picks = []
    for values in columns:
        u = (rng.permutation(n) + rng.random(n)) / n
        picks.append([values[int(x * len(values))] for x in u])
    return list(zip(*picks, strict=True))


def _excluded(sweep: Sweep, names: list[str], combo: tuple) -> bool:
    point = dict(zip(names, combo, strict=True))
    return any(all(point.get(k) in allowed for k, allowed in r.items()) for r in sweep.exclude)
