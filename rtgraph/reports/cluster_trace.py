"""A cluster run as one Chrome Trace Event file: every device's lanes, and the links between.

``cluster_trace(result)`` lays out, for rank r, the two processes a single-device trace has
(:mod:`.trace`) — ``rank r host`` (pid 2r) and ``rank r device`` (pid 2r + 1), their lanes as
today — and one process ``links`` (pid 2N) with a lane per link direction that carried a
transfer (``hccs0-1 d0→d1``), each transfer a slice from its first byte leaving (after the
send's launch) to its last arriving, named by its message. Transfers sharing a direction at once
overlap, so a direction's transfers are packed onto sub-lanes (``#1``, …) as :mod:`.trace`
packs a stream's; a transfer over several hops shows on each hop's direction.
"""

from __future__ import annotations

import json
import os
from typing import Any

from rtgraph.emulator.cluster import ClusterResult
from rtgraph.emulator.links import Transfer
from rtgraph.files import write_atomic
from rtgraph.reports.trace import DEVICE_PID, chrome_trace, pack_lanes

#: Sub-lanes of a link direction beyond the first get tids from here up.
LINK_OVERFLOW_TID = 10_000


def cluster_trace(result: ClusterResult) -> dict[str, Any]:
    """The Chrome Trace Event JSON object of a cluster run (layout: module docstring)."""
    n = len(result.devices)
    events: list[dict[str, Any]] = []
    meta: list[dict[str, Any]] = []
    flows = 0
    for rank, device in enumerate(result.devices):
        trace = chrome_trace(device, device.stream_program, device.device_spec)
        most = flows
        for e in trace["traceEvents"]:
            e = dict(e, pid=2 * rank + e["pid"])
            if "id" in e:
                e["id"] += flows
                most = max(most, e["id"])
            if e["ph"] == "M":
                if e["name"] == "process_name":
                    part = "device" if e["pid"] % 2 == DEVICE_PID else "host"
                    e["args"] = {"name": f"rank {rank} {part}"}
                elif e["name"] == "process_sort_index":
                    e["args"] = {"sort_index": e["pid"]}
                meta.append(e)
            else:
                events.append(e)
        flows = most
    links_pid = 2 * n
    meta.append(_meta("process_name", links_pid, 0, name="links"))
    meta.append(_meta("process_sort_index", links_pid, 0, sort_index=links_pid))
    lanes = _link_lanes(result.transfers)
    for sort, (direction, tid) in enumerate(lanes.names.items()):
        meta.append(_meta("thread_name", links_pid, tid, name=direction))
        meta.append(_meta("thread_sort_index", links_pid, tid, sort_index=sort))
    for (i, hop), tid in lanes.slices:
        t = result.transfers[i]
        args = {"tag": t.tag, "src": t.src, "dst": t.dst, "bytes": t.bytes, "hop": hop}
        args |= {"route": list(t.hops), "send_task": t.send_task, "recv_task": t.recv_task}
        events.append(
            {
                "name": f"tag {t.tag}: rank {t.src} → rank {t.dst}",
                "ph": "X",
                "ts": _us(t.start),
                "dur": _us(t.end) - _us(t.start),
                "pid": links_pid,
                "tid": tid,
                "cat": "transfer",
                "args": args,
            }
        )
    events.sort(key=lambda e: e["ts"])  # stable: each device's order kept on ties
    return {
        "traceEvents": meta + events,
        "displayTimeUnit": "ns",
        "otherData": {
            "cluster": result.cluster,
            "ranks": n,
            "makespan_us": result.makespan_us,
            "programs": [d.program for d in result.devices],
        },
    }


def write_cluster_trace(path: str | os.PathLike[str], result: ClusterResult) -> None:
    """Write the cluster run's trace to ``path`` (JSON, whole or not at all)."""
    write_atomic(path, json.dumps(cluster_trace(result), separators=(",", ":")))


class _Lanes:
    """Each link direction's lanes (name → tid, in first-use order) and, per (transfer, hop),
    the tid of the lane its slice goes on."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.slices: list[tuple[tuple[int, str], int]] = []


def _link_lanes(transfers: list[Transfer]) -> _Lanes:
    lanes = _Lanes()
    by_direction: dict[str, list[int]] = {}
    for i, t in enumerate(transfers):
        for hop in t.hops:
            by_direction.setdefault(hop, []).append(i)
    overflow = LINK_OVERFLOW_TID
    for k, (direction, mine) in enumerate(by_direction.items()):
        packed = pack_lanes(
            [round(transfers[i].start * 1000) for i in mine],
            [round(transfers[i].end * 1000) for i in mine],
        ).tolist()
        tids = [k]
        lanes.names[direction] = k
        for extra in range(1, max(packed) + 1):
            tids.append(overflow)
            lanes.names[f"{direction} #{extra}"] = overflow
            overflow += 1
        lanes.slices += [((i, direction), tids[lane]) for i, lane in zip(mine, packed, strict=True)]
    return lanes


def _meta(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _us(us: float) -> float:
    return round(us * 1000) / 1000.0
