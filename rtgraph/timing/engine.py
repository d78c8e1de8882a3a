"""The discrete-event loop every part of the emulated device runs on.

A heap of ``(time, priority, sequence, action, argument)``: the earliest time pops first; at
equal times the lower priority pops first; at equal priority the event scheduled first pops
first (the sequence counter). Nothing reads a wall clock and nothing iterates an unordered
set, so the same program gives the same timeline every run — the SimPy design in a few lines.

Actions are plain callables that take one argument. An action that must be cancelled later
(a completion re-timed when bandwidth shares change) carries a version number and ignores
itself when the version is stale; the heap never removes entries.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

#: Priorities of same-time events. State changes (completions, arrivals of submitted entries)
#: come first, then the hardware scheduler's dispatch pass sees all of them at once, then the
#: host thread resumes and sees the queues as the dispatcher left them.
STATE = 0
DISPATCH = 1
HOST = 2


class Engine:
    """A deterministic event heap with a clock in microseconds."""

    __slots__ = ("_heap", "_seq", "now", "steps")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Callable[[Any], None], Any]] = []
        self._seq = 0
        self.now = 0.0
        self.steps = 0

    def at(
        self, time: float, priority: int, action: Callable[[Any], None], arg: Any = None
    ) -> None:
        """Run ``action(arg)`` at ``time`` (never earlier than now)."""
        self._seq += 1
        heappush(self._heap, (time, priority, self._seq, action, arg))

    def run(self) -> None:
        """Pop and run events until none are left; exceptions propagate with the clock kept."""
        heap = self._heap
        steps = 0
        try:
            while heap:
                time, _, _, action, arg = heappop(heap)
                self.now = time
                steps += 1
                action(arg)
        finally:
            self.steps += steps

    @property
    def pending(self) -> int:
        """Events still in the heap (stale ones included)."""
        return len(self._heap)
