"""Allocator snapshots in PyTorch's ``torch.cuda.memory._snapshot()`` layout, as JSON or pickle.

The layout (what PyTorch's memory visualiser, ``torch.cuda._memory_viz`` and
pytorch.org/memory_viz, reads)::

    {"segments": [{"device", "address", "total_size", "allocated_size", "active_size",
                   "requested_size", "stream", "segment_type": "small" | "large",
                   "segment_pool_id", "is_expandable", "frames",
                   "blocks": [{"address", "size", "requested_size",
                               "state": "active_allocated" | "active_pending_free" | "inactive",
                               "frames"}]}],
     "device_traces": [[{"action", "addr" (or "device_free" for "oom"), "size", "stream",
                         "time_us", "frames"}]],
     "allocator_settings": {...}}

``frames`` are lists of ``{"filename", "line", "name"}``, innermost first: a trace entry's are
the stack its action happened in (:meth:`~rtgraph.alloc.base.Allocator.set_context`), a live
or pending block's those of the ``alloc`` entry that made it, a segment's those of its
``segment_alloc`` — so the visualiser's flame graphs group memory by the ``.rtg`` line and op
(or the runtime API caller) that allocated it. Free blocks, and blocks whose ``alloc`` fell
off a full trace, have none. The visualiser loads pickle files; :func:`write_snapshot` writes
one when the path ends in ``.pickle``/``.pkl``, JSON otherwise.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rtgraph.alloc.records import BlockInfo, Frame, SegmentInfo, TraceEntry
from rtgraph.files import write_atomic

_SEGMENT_TYPE = {"small_pool": "small", "large_pool": "large"}


class Inspectable(Protocol):
    """What a snapshot reads from an allocator (every :class:`~rtgraph.alloc.base.Allocator`)."""

    def blocks(self) -> Sequence[BlockInfo]: ...

    def segments(self) -> Sequence[SegmentInfo]: ...

    def trace(self) -> Sequence[TraceEntry]: ...

    def settings(self) -> Mapping[str, Any]: ...


def _frames(frames: Sequence[Frame]) -> list[dict[str, Any]]:
    return [{"filename": f.filename, "line": f.line, "name": f.name} for f in frames]


def build_snapshot(allocator: Inspectable) -> dict:
    """The allocator's segments, blocks and trace in PyTorch's snapshot layout."""
    entries = list(allocator.trace())
    made_by: dict[int, Sequence[Frame]] = {}  # block address -> frames of its latest alloc
    segment_by: dict[int, Sequence[Frame]] = {}
    for entry in entries:
        if entry.action == "alloc":
            made_by[entry.addr] = entry.frames
        elif entry.action == "segment_alloc":
            segment_by[entry.addr] = entry.frames
    by_segment: dict[int, list[BlockInfo]] = {}
    for block in allocator.blocks():
        by_segment.setdefault(block.segment, []).append(block)
    segments = []
    for seg in allocator.segments():
        blocks = by_segment.get(seg.address, [])
        live = [b for b in blocks if b.state == "active_allocated"]
        active = [b for b in blocks if b.state != "inactive"]
        segments.append(
            {
                "device": 0,
                "address": seg.address,
                "total_size": seg.size,
                "allocated_size": sum(b.size for b in live),
                "active_size": sum(b.size for b in active),
                "requested_size": sum(b.requested for b in active),
                "stream": seg.stream,
                "segment_type": _SEGMENT_TYPE[seg.pool],
                "segment_pool_id": [0, 0],
                "is_expandable": False,
                "frames": _frames(segment_by.get(seg.address, ())),
                "blocks": [
                    {
                        "address": b.address,
                        "size": b.size,
                        "requested_size": b.requested,
                        "state": b.state,
                        "frames": _frames(
                            made_by.get(b.address, ()) if b.state != "inactive" else ()
                        ),
                    }
                    for b in blocks
                ],
            }
        )
    trace = []
    for entry in entries:
        where = "device_free" if entry.action == "oom" else "addr"
        trace.append(
            {
                "action": entry.action,
                where: entry.addr,
                "size": entry.size,
                "stream": entry.stream,
                "time_us": entry.time_us,
                "frames": _frames(entry.frames),
            }
        )
    settings = {**allocator.settings(), "expandable_segments": False}
    return {"segments": segments, "device_traces": [trace], "allocator_settings": settings}


def to_json(snapshot: dict, indent: int | None = None) -> str:
    """The snapshot as JSON text (keys in a fixed order, so equal states give equal text)."""
    return json.dumps(snapshot, indent=indent, sort_keys=True)


def write_snapshot(snapshot: dict, path: str | Path) -> Path:
    """Write ``snapshot`` to ``path``: pickle for ``.pickle``/``.pkl`` (memory_viz), else JSON."""
    path = Path(path)
    if path.suffix in (".pickle", ".pkl"):
        return write_atomic(path, pickle.dumps(snapshot))
    return write_atomic(path, to_json(snapshot, indent=1) + "\n")


def load_snapshot(path: str | Path) -> dict:
    """Read a snapshot written as JSON by :func:`write_snapshot`."""
    return json.loads(Path(path).read_text(encoding="utf-8"))
