"""The emulated device: runs a stream program and reports what happened.

``run(program, device, ...) -> RunResult``. Stages, in the order data flows: the event loop
(:mod:`.engine`), the host thread and callback lane (:mod:`.host`), stream queues and the
hardware dispatcher (:mod:`.hardware`), task durations (:mod:`.timing`), device memory and
kernels (:mod:`.numerics`), the dynamic race detector (:mod:`.races`) and the results
(:mod:`.results`). Semantics: docs/emulator.md.
"""

from rtgraph.emulator.races import ObservedRace
from rtgraph.emulator.results import (
    EventRecordTime,
    EventWaitTime,
    HostActivity,
    HostStats,
    RunResult,
    StreamStats,
    TaskRecord,
)
from rtgraph.emulator.simulate import run

__all__ = [
    "EventRecordTime",
    "EventWaitTime",
    "HostActivity",
    "HostStats",
    "ObservedRace",
    "RunResult",
    "StreamStats",
    "TaskRecord",
    "run",
]
