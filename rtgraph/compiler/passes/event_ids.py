"""Event ids: a finite device resource, given out by liveness in submission order.

The compiler's events are written with one *logical* id per record (its waits name the same
id). An id is live from its record until the host has submitted its last wait; after that a
later record may take it, since a wait uses the latest record submitted before it. Colouring
the logical ids in submission order, smallest free id first, uses as few ids as the order
allows. Ids below ``first_id`` belong to the program's own ``event`` declarations and are kept.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from rtgraph.stream_program.program import Command, Record, Wait


def colour_events(commands: Sequence[Command], first_id: int) -> tuple[list[Command], int, int]:
    """``commands`` with logical compiler event ids mapped to reusable device ids.

    Returns the commands, the number of event ids used (user ids included) and the peak number
    of compiler ids live at once.
    """
    last_use: dict[int, int] = {}
    for pos, c in enumerate(commands):
        if (type(c) is Record or type(c) is Wait) and c.event >= first_id:
            last_use[c.event] = pos
    free: list[int] = []
    next_id = first_id
    live: list[tuple[int, int]] = []  # (position of the last wait, device id)
    ids: dict[int, int] = {}
    peak = 0
    out: list[Command] = []
    for pos, c in enumerate(commands):
        while live and live[0][0] < pos:
            heapq.heappush(free, heapq.heappop(live)[1])
        if type(c) is Record and c.event >= first_id:
            if free:
                ev = heapq.heappop(free)
            else:
                ev, next_id = next_id, next_id + 1
            ids[c.event] = ev
            heapq.heappush(live, (last_use[c.event], ev))
            peak = max(peak, len(live))
            c = Record(c.stream, ev, c.span)  # (``replace``, without its generic path)
        elif type(c) is Wait and c.event >= first_id:
            c = Wait(c.stream, ids[c.event], c.span)
        out.append(c)
    return out, next_id, peak
