"""A planning problem as arrays: aligned sizes, time sections, conflict lists, the lower bound.

Every algorithm in this package works on a :class:`Problem` rather than on records: sizes
rounded up to the alignment, lifetimes mapped to *sections* (the maximal time spans over which
the set of live records does not change), and each record's conflicting records as a CSR
adjacency list. Records that use no memory (size 0 or an empty lifetime) are kept but marked
inactive: they conflict with nothing and sit at offset 0.

Building a problem is ``O(n log n + P)`` for ``n`` records and ``P`` conflicting pairs, all in
NumPy: conflicts come from one sort by start time and a ``searchsorted`` per record, never
from a test of every pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from rtgraph.compiler.memplan.records import Record
from rtgraph.errors import InputError


@dataclass(frozen=True, eq=False)
class Problem:
    """Records normalised for planning (see the module docstring).

    Arrays are indexed by record position ``0..n-1``. ``section_lo``/``section_hi`` give each
    active record's half-open range of section indices; ``section_total`` the sum of aligned
    live sizes per section; ``conflict_ptr``/``conflict_idx`` the CSR conflict lists (each
    list sorted by record index) — empty when ``dense``: too many pairs were asked for.
    """

    records: tuple[Record, ...]
    alignment: int
    size: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    active: np.ndarray
    section_lo: np.ndarray
    section_hi: np.ndarray
    section_total: np.ndarray
    conflict_ptr: np.ndarray
    conflict_idx: np.ndarray
    dense: bool = False

    @property
    def n(self) -> int:
        return len(self.records)

    @property
    def n_sections(self) -> int:
        return len(self.section_total)

    @property
    def lower_bound(self) -> int:
        """Max-live: the largest sum of aligned sizes live at one time. No plan is lower."""
        return int(self.section_total.max()) if self.n_sections else 0

    @property
    def granule(self) -> int:
        """The gcd of the active aligned sizes: every canonical height is a multiple of it."""
        sizes = self.size[self.active]
        return int(np.gcd.reduce(sizes)) if len(sizes) else self.alignment

    def conflicts(self, i: int) -> np.ndarray:
        """Indices of the records that conflict with record ``i``."""
        return self.conflict_idx[self.conflict_ptr[i] : self.conflict_ptr[i + 1]]

    @property
    def n_conflicts(self) -> int:
        """The number of conflicting (unordered) pairs."""
        return len(self.conflict_idx) // 2


def build_problem(
    records: Sequence[Record], alignment: int = 1, *, max_pairs: int | None = None
) -> Problem:
    """Validate ``records`` and derive the arrays every planner uses.

    With ``max_pairs``, conflict lists longer than that many pairs are not built (the problem
    says so in :attr:`Problem.dense`): when most lifetimes overlap, the pairs grow with the
    square of the records, and only a planner that needs no pair list can afford them.

    Raises :class:`~rtgraph.errors.InputError` for a non-positive alignment, a repeated id,
    a non-integer or negative field, or a lifetime that ends before it starts.
    """
    alignment = _check_alignment(alignment)
    records = tuple(records)
    _check_records(records)
    n = len(records)
    lower = np.fromiter((r.lower for r in records), dtype=np.int64, count=n)
    upper = np.fromiter((r.upper for r in records), dtype=np.int64, count=n)
    raw = np.fromiter((r.size for r in records), dtype=np.int64, count=n)
    size = -(-raw // alignment) * alignment
    active = (size > 0) & (upper > lower)

    act = np.flatnonzero(active)
    times = np.unique(np.concatenate([lower[act], upper[act]]))
    section_lo = np.zeros(n, dtype=np.int64)
    section_hi = np.zeros(n, dtype=np.int64)
    section_lo[act] = np.searchsorted(times, lower[act])
    section_hi[act] = np.searchsorted(times, upper[act])
    n_sections = max(len(times) - 1, 0)
    delta = np.zeros(n_sections + 1, dtype=np.int64)
    np.add.at(delta, section_lo[act], size[act])
    np.add.at(delta, section_hi[act], -size[act])
    section_total = np.cumsum(delta)[:n_sections]

    lists = _conflict_lists(n, act, lower, upper, max_pairs)
    dense = lists is None
    conflict_ptr, conflict_idx = lists if lists is not None else _no_conflicts(n)
    return Problem(
        records=records,
        alignment=alignment,
        size=size,
        lower=lower,
        upper=upper,
        active=active,
        section_lo=section_lo,
        section_hi=section_hi,
        section_total=section_total,
        conflict_ptr=conflict_ptr,
        conflict_idx=conflict_idx,
        dense=dense,
    )


def _no_conflicts(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)


def _conflict_lists(
    n: int, act: np.ndarray, lower: np.ndarray, upper: np.ndarray, max_pairs: int | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """CSR conflict lists of the active records, by one sort on start time.

    With active records sorted by ``lower``, record ``i`` (at sorted position ``p``) conflicts
    with exactly those at positions ``p+1 .. e-1`` where ``e`` is the first start ``>=
    upper[i]``: each pair is found once, from its earlier-starting member.
    """
    order = act[np.argsort(lower[act], kind="stable")]
    starts = lower[order]
    ends = np.searchsorted(starts, upper[order], side="left")
    first = np.arange(1, len(order) + 1)
    counts = np.maximum(ends - first, 0)
    total = int(counts.sum())
    if max_pairs is not None and total > max_pairs:
        return None
    if total == 0:
        return _no_conflicts(n)
    owner = np.repeat(np.arange(len(order)), counts)
    run_start = np.cumsum(counts) - counts
    partner = first[owner] + (np.arange(total) - run_start[owner])
    a, b = order[owner], order[partner]
    src = np.concatenate([a, b])
    dst = np.concatenate([b, a])
    by = np.lexsort((dst, src))
    src, dst = src[by], dst[by]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    return ptr, dst


def _check_alignment(alignment: object) -> int:
    if isinstance(alignment, bool) or not isinstance(alignment, Integral) or alignment < 1:
        raise InputError(
            f"alignment must be a positive integer, not {alignment!r}",
            hint="use 1 for byte granularity or the device's allocation alignment (e.g. 512)",
        )
    return int(alignment)


def _check_records(records: tuple[Record, ...]) -> None:
    seen: set[str] = set()
    for r in records:
        if not isinstance(r, Record):
            raise InputError(
                f"expected a Record, got {type(r).__name__}",
                hint="build records with rtgraph.compiler.memplan.Record(id, lower, upper, size)",
            )
        for name in ("lower", "upper", "size"):
            value = getattr(r, name)
            if type(value) is int and value >= 0:
                continue  # the common case, without the slower abstract-class check
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
                raise InputError(
                    f"record '{r.id}': {name} must be a non-negative integer, not {value!r}",
                    hint="lifetimes are task positions and sizes are bytes",
                )
        if r.upper < r.lower:
            raise InputError(
                f"record '{r.id}': lifetime ends before it starts ([{r.lower}, {r.upper}))",
                hint="lifetimes are half-open [lower, upper), so upper >= lower",
            )
        if r.id in seen:
            raise InputError(
                f"duplicate record id '{r.id}'", hint="ids name buffers and must be unique"
            )
        seen.add(r.id)
