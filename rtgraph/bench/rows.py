"""The bench's figures as rows: one dataclass per table, with the columns derived from them.

``run`` fills these rows by compiling and running the models; ``claims`` judges them, ``tables``
prints them and ``figure`` draws them. They hold numbers only (emulated clock and byte counts),
so every other bench module can be read and tested without running anything.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

#: The stream policy every speed-up and lift is measured against.
BASELINE = "single"


@dataclass(frozen=True)
class PolicyRow:
    """One model compiled under one stream policy and memory plan, and run."""

    model: str
    policy: str
    memory: str
    tasks: int
    makespan_us: float
    utilization: dict[str, float]
    speedup: float  # the same model's single-stream makespan ÷ this makespan (same memory plan)
    events: int  # distinct events used
    waits: int  # event waits inserted
    host_busy_us: float
    host_submit_us: float = 0.0  # host time in submission ioctls …
    host_overlap_us: float = 0.0  # … of which the device was running a task meanwhile

    @property
    def compute_utilization(self) -> float:
        """Cube plus Vector utilization (0..2): how much of both compute units is kept busy."""
        return self.utilization.get("cube", 0.0) + self.utilization.get("vector", 0.0)

    @property
    def host_overlap(self) -> float:
        """Share of the host's submission time during which the device was computing."""
        return self.host_overlap_us / self.host_submit_us if self.host_submit_us else 0.0


@dataclass(frozen=True)
class MemoryRow:
    """A model's activation pool without reuse and with the greedy plan."""

    model: str
    resident_bytes: int  # params, consts and fixed buffers (the same under every plan)
    none_bytes: int  # pool without reuse: every tensor its own region
    greedy_bytes: int  # pool of the greedy plan
    lower_bound: int  # the most bytes live at once (no plan can do better)
    stream_ordered_bytes: int = 0  # pool of the stream-ordered plan under by-unit streams
    proven: bool = False  # the greedy plan's pool proven the smallest (the planner's proof)

    @property
    def saving(self) -> float:
        return 1.0 - self.greedy_bytes / self.none_bytes if self.none_bytes else 0.0

    @property
    def over_bound(self) -> float:
        """Planned pool ÷ max-live lower bound (1.0: optimal)."""
        return self.greedy_bytes / self.lower_bound if self.lower_bound else 1.0


#: ``AllocRow.source`` of the static plan: every figure is the emulator's.
EMULATED = "emulated"
#: ``AllocRow.source`` of a run-time allocator: the calls are counted by replaying the allocator,
#: but what each call costs is the device spec's ``direct_alloc_us`` / ``pool_alloc_us``.
SPEC_COSTED = "emulated; µs a call: spec input"


@dataclass(frozen=True)
class AllocRow:
    """A model run with one allocation mode under ``by-unit`` streams.

    Calls are split as a serving loop sees them: ``load`` calls allocate the resident tensors
    (params, consts) once; ``step`` calls allocate and free the activations every step.
    """

    model: str
    mode: str  # "static" or a run-time allocator
    load_calls: int
    load_us: float  # host time allocating resident tensors
    step_allocs: int  # activation allocations …
    step_frees: int  # … and frees
    step_us: float  # host time in them
    makespan_us: float
    peak_bytes: int
    source: str = EMULATED  # where the figures come from: EMULATED or SPEC_COSTED
    alloc_latencies: tuple[float, ...] = ()  # every allocation call's host time, µs

    @property
    def median_alloc_us(self) -> float:
        """The typical cost of one allocation call (the median: pool misses are the outliers)."""
        return statistics.median(self.alloc_latencies) if self.alloc_latencies else 0.0

    @property
    def step_calls(self) -> int:
        return self.step_allocs + self.step_frees

    @property
    def us_per_step_call(self) -> float:
        return self.step_us / self.step_calls if self.step_calls else 0.0

    @property
    def step_makespan_us(self) -> float:
        """The makespan without the load-time allocations, which the host makes first."""
        return self.makespan_us - self.load_us


@dataclass(frozen=True)
class HeadlineRow:
    """One claim of the runtime's documentation set against the emulated figure, and the verdict.

    ``verdict`` is ``agrees`` (the figure lies in the ``agrees_if`` band), ``differs: lower`` or
    ``differs: higher`` (naming the figures outside it), or ``spec input`` when the figure is
    an input of the device spec that the emulator charges as given, so there is nothing to check.
    """

    claim: str
    claimed: str
    agrees_if: str
    measured: str
    verdict: str


@dataclass(frozen=True)
class OptRow:
    """One model at one optimization level: tasks, HBM traffic, and its runs on one stream
    and on a stream per unit."""

    model: str
    level: int
    tasks: int
    hbm_bytes: int  # bytes the tasks read and write in device memory
    single_us: float
    by_unit_us: float
    single_compute: float  # Cube + Vector utilization on one stream (0..2)
    by_unit_compute: float  # … on a stream per unit
    cube_by_unit: float

    @property
    def lift(self) -> float:
        """Cube + Vector utilization with a stream per unit ÷ on one stream."""
        return self.by_unit_compute / self.single_compute if self.single_compute else float("nan")
