"""Conflicting accesses to device memory, found on byte ranges.

:class:`AccessTracker` keeps, for every byte of device memory, the last task that wrote it and
the tasks that read it since — as a sorted list of disjoint segments, split only where accesses
begin and end (the last-writer/readers scheme of race detectors such as PyTorch's stream
sanitizer and FastTrack). Feeding it each task's accesses in an order consistent with the
program yields, for every new access, exactly the earlier accesses it must be ordered after:

* a read after a write — **RAW** with the segment's last writer;
* a write after reads — **WAR** with every reader since the last write;
* a write after a write with no read between — **WAW** with the last writer.

Every conflicting pair of the whole run is ordered by these edges or by a chain of them, so
they are the constraints a scheduler must keep and a barrier pass must enforce. The cost per
access is a binary search plus the segments it spans: no pass over all pairs of tasks.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Conflict:
    src: int
    dst: int
    kind: str  # RAW, WAR or WAW
    lo: int
    hi: int


class AccessTracker:
    """Last writer and readers-since per byte segment of device memory."""

    def __init__(self) -> None:
        self._starts: list[int] = [0]
        self._writer: list[int | None] = [None]
        self._readers: list[list[int]] = [[]]

    def _split(self, at: int) -> int:
        """Make ``at`` a segment boundary; return the index of the segment starting there."""
        i = bisect_right(self._starts, at) - 1
        if self._starts[i] == at:
            return i
        self._starts.insert(i + 1, at)
        self._writer.insert(i + 1, self._writer[i])
        self._readers.insert(i + 1, list(self._readers[i]))
        return i + 1

    def access(
        self, task: int, reads: Iterable[tuple[int, int]], writes: Iterable[tuple[int, int]]
    ) -> list[Conflict]:
        """Record ``task``'s accesses; return the earlier accesses they conflict with.

        Conflicts with the same earlier task and kind are merged into one, spanning the union
        of the overlapping bytes.
        """
        found: dict[tuple[int, str], list[int]] = {}

        def note(src: int, kind: str, lo: int, hi: int) -> None:
            if src == task:
                return
            key = (src, kind)
            if key in found:
                r = found[key]
                r[0], r[1] = min(r[0], lo), max(r[1], hi)
            else:
                found[key] = [lo, hi]

        for lo, hi in reads:
            if hi <= lo:
                continue
            i, j = self._split(lo), self._split(hi)
            for k in range(i, j):
                a, b = self._starts[k], self._starts[k + 1]
                w = self._writer[k]
                if w is not None:
                    note(w, "RAW", a, b)
                readers = self._readers[k]
                if not readers or readers[-1] != task:  # (a task's own reads are consecutive)
                    readers.append(task)
        for lo, hi in writes:
            if hi <= lo:
                continue
            i, j = self._split(lo), self._split(hi)
            for k in range(i, j):
                a, b = self._starts[k], self._starts[k + 1]
                readers = self._readers[k]
                read_it = bool(readers) and readers[-1] == task
                if len(readers) > read_it:
                    for r in readers:
                        note(r, "WAR", a, b)
                elif self._writer[k] is not None and not read_it:
                    # (a task that also read the segment is already ordered by its RAW)
                    note(self._writer[k], "WAW", a, b)
            # One segment for the whole written range: it now has one writer and no readers.
            del self._starts[i + 1 : j]
            del self._writer[i + 1 : j]
            del self._readers[i + 1 : j]
            self._writer[i] = task
            self._readers[i] = []
        return [Conflict(src, task, kind, lo, hi) for (src, kind), (lo, hi) in found.items()]

    def __len__(self) -> int:
        return len(self._starts)
