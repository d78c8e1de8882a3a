"""The emulated driver's device address space: first fit over the device's capacity.

Every allocator gets its memory from here — the direct allocator one range per request
(``aclrtMalloc``), the pools one range per segment. The driver knows nothing of rounding rules:
it places exactly the bytes it is asked for at the lowest address with the requested alignment,
so its free space can fragment too. Free ranges are kept as two sorted NumPy arrays (starts,
ends) so a first-fit search is one vectorised pass.
"""

from __future__ import annotations

import numpy as np

#: Where device addresses start: non-zero (so 0 is never a valid address) and 2 MiB aligned.
DEFAULT_BASE_ADDRESS = 1 << 32


class DeviceDriver:
    """A device's address space ``[base, base + capacity)`` with first-fit placement."""

    def __init__(self, capacity: int, base: int = DEFAULT_BASE_ADDRESS) -> None:
        self.capacity = capacity
        self.base = base
        self._starts = np.array([base], dtype=np.int64)
        self._ends = np.array([base + capacity], dtype=np.int64)
        self._reserved: dict[int, int] = {}  # address -> size
        self.used = 0

    @property
    def free_bytes(self) -> int:
        return self.capacity - self.used

    def largest_gap(self) -> int:
        """The largest free range (ignoring alignment)."""
        return int((self._ends - self._starts).max()) if self._starts.size else 0

    def _place(self, size: int, align: int) -> tuple[int, int] | None:
        """(index of the free range, aligned address) of the first fit, or None."""
        if self._starts.size == 0:
            return None
        aligned = -(-self._starts // align) * align
        fits = aligned + size <= self._ends
        index = int(np.argmax(fits))
        if not fits[index]:
            return None
        return index, int(aligned[index])

    def can_reserve(self, size: int, align: int) -> bool:
        return self._place(size, align) is not None

    def reserve(self, size: int, align: int) -> int | None:
        """Place ``size`` bytes at the lowest ``align``-aligned address that fits, or None."""
        found = self._place(size, align)
        if found is None:
            return None
        index, address = found
        start, end = int(self._starts[index]), int(self._ends[index])
        starts, ends = [], []
        if address > start:
            starts.append(start)
            ends.append(address)
        if address + size < end:
            starts.append(address + size)
            ends.append(end)
        self._starts = np.concatenate(
            (self._starts[:index], np.array(starts, np.int64), self._starts[index + 1 :])
        )
        self._ends = np.concatenate(
            (self._ends[:index], np.array(ends, np.int64), self._ends[index + 1 :])
        )
        self._reserved[address] = size
        self.used += size
        return address

    def release(self, address: int) -> int:
        """Give back the range reserved at ``address``; returns its size."""
        size = self._reserved.pop(address)
        end = address + size
        index = int(np.searchsorted(self._starts, address))
        joins_prev = index > 0 and int(self._ends[index - 1]) == address
        joins_next = index < self._starts.size and int(self._starts[index]) == end
        if joins_prev and joins_next:
            self._ends[index - 1] = self._ends[index]
            self._starts = np.delete(self._starts, index)
            self._ends = np.delete(self._ends, index)
        elif joins_prev:
            self._ends[index - 1] = end
        elif joins_next:
            self._starts[index] = address
        else:
            self._starts = np.insert(self._starts, index, address)
            self._ends = np.insert(self._ends, index, end)
        self.used -= size
        return size

    def free_ranges(self) -> list[tuple[int, int]]:
        """The free ranges as (start, end) pairs, in address order."""
        return list(zip(self._starts.tolist(), self._ends.tolist(), strict=True))

    def copy(self) -> DeviceDriver:
        other = DeviceDriver.__new__(DeviceDriver)
        other.capacity, other.base, other.used = self.capacity, self.base, self.used
        other._starts, other._ends = self._starts.copy(), self._ends.copy()
        other._reserved = dict(self._reserved)
        return other
