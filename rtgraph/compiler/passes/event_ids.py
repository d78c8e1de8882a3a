"""Event ids: a finite device resource, given out by liveness in submission order.

The compiler's events are written with one *logical* id per record (its waits name the same
id). An id is live from its record until the host has submitted its last wait; after that a
later record may take it, since a wait uses the latest record submitted before it. Colouring
the logical ids in submission order, smallest free id first, uses as few ids as the order
allows. Ids below ``first_id`` belong to the program's own ``event`` declarations and are kept.

:func:`colour_ids` does the colouring on plain integers — the compiler's records and waits
only, in submission order — so the passes that colour (barrier insertion, submission order)
make each command object once.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence


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
