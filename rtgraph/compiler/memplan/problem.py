"""A planning problem as arrays: aligned sizes, time sections, conflict lists, the lower bound.

Every algorithm in this package works on a :class:`Problem` rather than on records: sizes
rounded up to the alignment, lifetimes mapped to *sections* (the maximal time spans over which
the set of live records does not change), and each record's conflicting records as a CSR
adjacency list. Records that use no memory (size 0 or an empty lifetime) are kept but marked
inactive: they conflict with nothing and sit at offset 0.

Building a problem is ``O(n log n + P)`` for ``n`` records and ``P`` conflicting pairs, all in
NumPy: conflicts come from one sort by start time and a ``searchsorted`` per record, never
from a test of every pair.

Every input is bounded before any array is made: at most :data:`MAX_RECORDS` records, times at
most :data:`MAX_TIME`, an alignment and the aligned sizes' total at most
:data:`MAX_POOL_BYTES` (2**62, checked in Python integers, which are exact), and at most
:data:`MAX_PAIRS` conflict pairs kept. Because no plan's offset, top, live total or height
exceeds the total of the aligned sizes, and a sum of two such values is below 2**63, the int64
arithmetic of every planner in this package cannot overflow: the bound is checked up front
instead of checking each operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from rtgraph.compiler.memplan.records import MAX_POOL_BYTES, MAX_RECORDS, MAX_TIME, Record
from rtgraph.errors import InputError

#: Conflicting pairs above which a problem counts as dense: its pair lists are not built (they
#: grow with the square of the records; building them peaks near 180 MB at this limit) and the
#: planners fall back to methods that need none (a linear scan to place, a sweep to check).
MAX_PAIRS = 4_000_000


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

    Conflict lists of more than ``max_pairs`` pairs (``None``: :data:`MAX_PAIRS`, also the
    most allowed) are not built, and the problem says so in :attr:`Problem.dense`: when most
    lifetimes overlap the pairs grow with the square of the records, and only a planner that
    needs no pair list can afford them.

    Raises :class:`~rtgraph.errors.InputError` for more than :data:`MAX_RECORDS` records, an
    alignment that is not a positive integer of at most 2**62, a repeated id, a non-integer,
    negative or too large field, a lifetime that ends before it starts, or aligned sizes that
    add up to more than :data:`MAX_POOL_BYTES`.
    """
    alignment = _check_alignment(alignment)
    records = tuple(records)
    if len(records) > MAX_RECORDS:
        raise InputError(
            f"{len(records):,} records, more than the {MAX_RECORDS:,} a plan may have",
            hint="split the records into smaller problems",
        )
    _check_records(records, alignment)
    max_pairs = MAX_PAIRS if max_pairs is None else min(max_pairs, MAX_PAIRS)
    n = len(records)
    lower = np.fromiter((r.lower for r in records), dtype=np.int64, count=n)
    upper = np.fromiter((r.upper for r in records), dtype=np.int64, count=n)
    raw = np.fromiter((r.size for r in records), dtype=np.int64, count=n)
    size = -(-raw // alignment) * alignment  # <= the checked total <= 2**62: no overflow
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
    n: int, act: np.ndarray, lower: np.ndarray, upper: np.ndarray, max_pairs: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """CSR conflict lists of the active records, by one sort on start time; None when there
    would be more than ``max_pairs`` pairs (counted before any list is made).

    With active records sorted by ``lower``, record ``i`` (at sorted position ``p``) conflicts
    with exactly those at positions ``p+1 .. e-1`` where ``e`` is the first start ``>=
    upper[i]``: each pair is found once, from its earlier-starting member. Both directions of
    every pair are then sorted as one int64 key ``source * n + target`` (below ``n**2``, far
    from overflow for :data:`MAX_RECORDS` records), which keeps the peak memory to a few arrays
    of the pairs.
    """
    order = act[np.argsort(lower[act], kind="stable")]
    starts = lower[order]
    ends = np.searchsorted(starts, upper[order], side="left")
    first = np.arange(1, len(order) + 1)
    counts = np.maximum(ends - first, 0)
    total = int(counts.sum())
    if total > max_pairs:
        return None
    if total == 0:
        return _no_conflicts(n)
    owner = np.repeat(np.arange(len(order)), counts)
    partner = np.arange(total) - np.repeat(np.cumsum(counts) - counts - first, counts)
    a, b = order[owner], order[partner]
    del owner, partner
    keys = np.concatenate([a * n + b, b * n + a])
    keys.sort()
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=n) + np.bincount(b, minlength=n), out=ptr[1:])
    keys %= n  # in place: the targets, each list sorted by record index
    return ptr, keys


def _check_alignment(alignment: object) -> int:
    if isinstance(alignment, bool) or not isinstance(alignment, Integral) or alignment < 1:
        raise InputError(
            f"alignment must be a positive integer, not {_shown(alignment)}",
            hint="use 1 for byte granularity or the device's allocation alignment (e.g. 512)",
        )
    if alignment > MAX_POOL_BYTES:
        raise InputError(
            f"alignment must be at most {MAX_POOL_BYTES} (2**62), not {_shown(alignment)}",
            hint="use 1 for byte granularity or the device's allocation alignment (e.g. 512)",
        )
    return int(alignment)


def _check_records(records: tuple[Record, ...], alignment: int) -> None:
    """Each record's fields in range, ids unique, and the aligned sizes' total at most
    :data:`MAX_POOL_BYTES` — all in Python integers, before any NumPy array is made."""
    seen: set[str] = set()
    total = 0
    for r in records:
        if not isinstance(r, Record):
            raise InputError(
                f"expected a Record, got {type(r).__name__}",
                hint="build records with rtgraph.compiler.memplan.Record(id, lower, upper, size)",
            )
        for name, bound in (("lower", MAX_TIME), ("upper", MAX_TIME), ("size", MAX_POOL_BYTES)):
            value = getattr(r, name)
            if type(value) is int and 0 <= value <= bound:
                continue  # the common case, without the slower abstract-class check
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
                raise InputError(
                    f"record '{r.id}': {name} must be a non-negative integer, not {_shown(value)}",
                    hint="lifetimes are task positions and sizes are bytes",
                )
            if value > bound:
                raise InputError(
                    f"record '{r.id}': {name} must be at most {bound} (2**62), not {_shown(value)}",
                    hint="a plan keeps times and bytes exact in 64-bit integers up to 2**62",
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
        total += -(-int(r.size) // alignment) * alignment
        if total > MAX_POOL_BYTES:
            raise InputError(
                f"record '{r.id}' brings the sizes (aligned to {alignment}) to {total} bytes, "
                f"more than the {MAX_POOL_BYTES} (2**62) a plan can hold",
                hint="no plan is higher than the sum of its sizes; keep it at most 2**62",
            )


def _shown(value: object) -> str:
    """``value`` as an error shows it: a huge integer by its size, not its many digits."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length():,} bits"
    return repr(value)
