"""Raw buffers at fixed addresses: they must lie inside device memory and must not overlap."""

from __future__ import annotations

from dataclasses import dataclass

from rtgraph.errors import CapacityError, CheckError, RtgError, Span
from rtgraph.frontend.emit import ADDRESS_LIMIT, format_bytes


@dataclass(frozen=True)
class PlacedBuffer:
    """A ``buffer NAME : bytes[size] at address``; ``order`` is its place in the source."""

    name: str
    address: int
    size: int
    span: Span | None
    order: int

    @property
    def end(self) -> int:
        return self.address + self.size

    def region(self) -> str:
        return f"[{self.address:#x}, {self.end:#x})"


def check_placement(buffers: list[PlacedBuffer], capacity: int | None) -> list[RtgError]:
    """Errors for buffers beyond device memory and for each buffer overlapping an earlier one.

    One sweep in address order: a buffer overlaps some buffer that starts at or before it
    exactly when it starts below the furthest end seen so far.
    """
    errors: list[RtgError] = []
    limit = capacity if capacity is not None else ADDRESS_LIMIT
    for b in buffers:
        if b.end > limit:
            memory = (
                f"the device's memory ({format_bytes(capacity)})"
                if capacity is not None
                else "the addressable range (2**48 bytes)"
            )
            errors.append(
                CapacityError(
                    f"buffer '{b.name}' {b.region()} lies outside {memory}",
                    b.span,
                    hint=f"addresses must end by {limit:#x}",
                )
            )
    furthest: PlacedBuffer | None = None
    for b in sorted(buffers, key=lambda b: (b.address, b.order)):
        if furthest is not None and b.address < furthest.end:
            later, earlier = (b, furthest) if b.order > furthest.order else (furthest, b)
            errors.append(
                CheckError(
                    f"buffer '{later.name}' {later.region()} overlaps buffer '{earlier.name}' "
                    f"{earlier.region()}",
                    later.span,
                    hint="raw buffers at fixed addresses must be disjoint",
                )
            )
        if furthest is None or b.end > furthest.end:
            furthest = b
    return errors
