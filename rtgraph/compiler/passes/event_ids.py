"""Event ids: a finite device resource, given out by liveness in submission order.

The compiler's events are written with one *logical* id per record (its waits name the same
id). An id is live from its record until the host has submitted its last wait; after that a
later record may take it, since a wait uses the latest record submitted before it. Colouring
the logical ids in submission order, smallest free id first, uses as few ids as the order
allows. Ids below ``first_id`` belong to the program's own ``event`` declarations and are kept.

:func:`colour_ids` does the colouring on plain integers — the compiler's records and waits
only, in submission order — so the passes that colour (barrier insertion, submission order)
make each command object once; :func:`colour_events` is the same on a list of commands.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from rtgraph.stream_program.program import Command, Record, Wait


def colour_ids(
    events: Sequence[int], is_record: Sequence[bool], first_id: int
) -> tuple[list[int], int, int]:
    """Device ids for the compiler's records and waits, given in submission order as their
    logical ``events`` (each record its own id, its waits the same) and whether each is a
    record. Returns the device id of each, the number of ids used (from 0, user ids
    included) and the peak number of compiler ids live at once.

    Only the order of the entries matters, so they are numbered by their place in this list:
    an id recorded at entry ``k`` is free again for a record after its last wait.
    """
    last_use: dict[int, int] = {}
    for k, ev in enumerate(events):
        last_use[ev] = k
    heappush, heappop = heapq.heappush, heapq.heappop
    free: list[int] = []
    live: list[tuple[int, int]] = []  # (place of the last wait, device id)
    ids: dict[int, int] = {}
    next_id = first_id
    peak = 0
    out = [0] * len(events)
    for k, ev in enumerate(events):
        if is_record[k]:
            while live and live[0][0] < k:
                heappush(free, heappop(live)[1])
            if free:
                device_id = heappop(free)
            else:
                device_id, next_id = next_id, next_id + 1
            ids[ev] = device_id
            heappush(live, (last_use[ev], device_id))
            if len(live) > peak:
                peak = len(live)
            out[k] = device_id
        else:
            out[k] = ids[ev]
    return out, next_id, peak


def colour_events(commands: Sequence[Command], first_id: int) -> tuple[list[Command], int, int]:
    """``commands`` with logical compiler event ids mapped to reusable device ids.

    Returns the commands, the number of event ids used (user ids included) and the peak number
    of compiler ids live at once.
    """
    places = [
        pos
        for pos, c in enumerate(commands)
        if (type(c) is Record or type(c) is Wait) and c.event >= first_id
    ]
    events = [commands[pos].event for pos in places]  # type: ignore[union-attr]
    is_record = [type(commands[pos]) is Record for pos in places]
    device_ids, num_events, peak = colour_ids(events, is_record, first_id)
    out = list(commands)
    for pos, record, device_id in zip(places, is_record, device_ids, strict=True):
        c = out[pos]
        kind = Record if record else Wait
        out[pos] = kind(c.stream, device_id, c.span)  # type: ignore[union-attr]
    return out, num_events, peak
