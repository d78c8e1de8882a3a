"""The emulated device: runs a stream program and reports what happened.

``run(program, device, ...) -> RunResult``. Stages, in the order data flows: the host thread
and callback lane (:mod:`.host`), stream queues and the hardware dispatcher (:mod:`.hardware`),
device memory and kernels (:mod:`.numerics`), the dynamic race detector (:mod:`.races`) and the
results (:mod:`.results`); :mod:`.simulate` wires them together. ``run_cluster(programs,
cluster, ...) -> ClusterResult`` (:mod:`.cluster`) runs one program per rank of a cluster in one
timeline, the ranks joined by the links of :mod:`.links`. The event loop
(:mod:`rtgraph.timing.engine`) and task durations (:mod:`rtgraph.timing.task_costs`) live in
:mod:`rtgraph.timing`, below both this package and the compiler, which times schedules with
them too. Semantics: docs/emulator.md.
"""

from rtgraph.emulator.cluster import ClusterResult, run_cluster
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
    "ClusterResult",
    "EventRecordTime",
    "EventWaitTime",
    "HostActivity",
    "HostStats",
    "ObservedRace",
    "RunResult",
    "StreamStats",
    "TaskRecord",
    "run",
    "run_cluster",
]
