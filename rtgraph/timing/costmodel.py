"""How long a task takes on a device: the roofline cost model.

Pure functions of a :class:`~rtgraph.device.DeviceSpec` and a task's work (flops, bytes moved).
The compiler's list scheduler calls :func:`estimate_us` to rank placements; the emulator calls
the parts (:func:`compute_us`, :func:`memory_us`, :func:`dma_us`) to re-time memory-bound work
when several tasks share HBM bandwidth. One formula, two users, so an estimate and a simulated
duration agree whenever nothing else runs.

A compute task (cube, vector, aicpu) costs its unit's launch overhead plus the larger of its
compute time and its memory time (a roofline: whichever the task is bound by hides the other).
A copy task (dma) costs the launch overhead plus link latency plus bytes over the link (host
copies) or over one SDMA engine (device-to-device). The formulas and a worked example on the
``toy`` device are in ``docs/devices.md``.

Every duration is computed as ``amount * 1e6 / rate`` — one multiplication that is exact for
amounts below 2**53 / 1e6 and one correctly rounded division — so that on the ``toy`` device
(rates of 1e9 per second) a duration equals the decimal a person writes down by hand.

Errors: a unit or dtype the spec does not describe is the spec's fault and raises
:class:`~rtgraph.errors.DeviceSpecError`; negative work or fewer than one core is a caller bug
and raises ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from rtgraph.device.spec import DeviceSpec, UnitSpec
from rtgraph.errors import DeviceSpecError, did_you_mean

CopyKind = Literal["h2d", "d2h", "d2d"]
COPY_KINDS: tuple[str, ...] = ("h2d", "d2h", "d2d")
COMPUTE_UNITS: tuple[str, ...] = ("cube", "vector", "aicpu")

#: When the cost model picks a task's core count, each core gets at least this much work,
#: measured in microseconds of that core's own peak rate (or of its share of HBM bandwidth).
#: Below it, splitting further would cost more in per-core setup than it saves.
MIN_CORE_WORK_US = 1.0


def unit_of(unit: str, spec: DeviceSpec) -> UnitSpec:
    """The spec's description of ``unit``, or a DeviceSpecError naming the units it has."""
    found = spec.units.get(unit)
    if found is None:
        have = sorted(spec.units)
        raise DeviceSpecError(
            f"device '{spec.name}' has no '{unit}' unit (it has {', '.join(have)})",
            hint=did_you_mean(unit, have) or "add a [units.<kind>] table to the device spec",
        )
    return found


def _peak(found: UnitSpec, dtype: str, spec: DeviceSpec) -> float:
    peak = found.peak_flops.get(dtype)
    if peak is None:
        have = sorted(found.peak_flops)
        raise DeviceSpecError(
            f"device '{spec.name}' cannot compute {dtype} on its {found.kind} unit"
            f" (units.{found.kind}.peak_flops has {', '.join(have) or 'no dtypes'})",
            hint=f"cast to a dtype the device supports, or add"
            f" units.{found.kind}.peak_flops.{dtype} to the device spec",
        )
    return peak


def _check_amount(name: str, value: float) -> None:
    if value < 0:
        raise ValueError(f"{name} must be non-negative, got {value}")


def _check_cores(cores: int, found: UnitSpec) -> None:
    if cores < 1:
        raise ValueError(f"a task on '{found.kind}' needs at least one core, got {cores}")


def block_dim_for(
    unit: str, flops: int, bytes_moved: int, spec: DeviceSpec, requested: int | None
) -> int:
    """How many cores of ``unit`` a task occupies (its block dim).

    In order of precedence: the program's request, clamped to ``[1, cores]`` (a request above
    ``cores`` is an error the compiler reports — this returns the clamp and lets it decide);
    the unit's ``default_block_dim`` when non-zero; one engine for a copy; otherwise as many
    cores as keep each busy for at least :data:`MIN_CORE_WORK_US` — by flops at the unit's
    fastest dtype, or by bytes at a per-core share (``bandwidth / cores``) of HBM, whichever
    asks for more — and at least one, at most all.
    """
    found = unit_of(unit, spec)
    _check_amount("flops", flops)
    _check_amount("bytes_moved", bytes_moved)
    if requested is not None:
        return min(max(requested, 1), found.cores)
    if found.default_block_dim > 0:
        return min(found.default_block_dim, found.cores)
    if unit == "dma" or not found.peak_flops:
        return 1
    flops_per_core = max(found.peak_flops.values()) * MIN_CORE_WORK_US / 1e6
    bytes_per_core = spec.memory.bandwidth / found.cores * MIN_CORE_WORK_US / 1e6
    wanted = max(math.ceil(flops / flops_per_core), math.ceil(bytes_moved / bytes_per_core))
    return min(max(wanted, 1), found.cores)


def arithmetic_dtype(unit: str, operands: Sequence[str], result: str) -> str:
    """The dtype whose peak rate a task computes at: a Cube multiplies its operands' type (an
    ``i8 × i8`` product runs at the i8 rate and accumulates into i32, an f16 one into f32), a
    Vector unit computes in its result's type (a cast to f16 at the f16 rate)."""
    return operands[0] if unit == "cube" and operands else result


def compute_us(unit: str, dtype: str, flops: float, cores: int, spec: DeviceSpec) -> float:
    """Time to do ``flops`` of ``dtype`` arithmetic on ``cores`` cores of ``unit`` at peak."""
    found = unit_of(unit, spec)
    _check_amount("flops", flops)
    _check_cores(cores, found)
    return flops * 1e6 / (_peak(found, dtype, spec) * cores)


def memory_us(bytes_moved: float, bandwidth_share: float, spec: DeviceSpec) -> float:
    """Time to move ``bytes_moved`` to or from HBM at ``bandwidth_share`` of its bandwidth.

    HBM bandwidth is shared by every running task; a task alone gets share 1, two
    memory-bound tasks at once get 1/2 each (the emulator decides the share).
    """
    _check_amount("bytes_moved", bytes_moved)
    if not 0.0 < bandwidth_share <= 1.0:
        raise ValueError(f"bandwidth_share must be in (0, 1], got {bandwidth_share}")
    return bytes_moved * 1e6 / (spec.memory.bandwidth * bandwidth_share)


def dma_us(nbytes: float, kind: CopyKind, spec: DeviceSpec, pinned: bool = True) -> float:
    """Transfer time of one copy, without the DMA unit's launch overhead.

    ``h2d``/``d2h`` cross the host link: its latency plus bytes at the link bandwidth (pinned
    host memory) or the pageable bandwidth (pageable host memory, staged by the driver).
    ``d2d`` stays on the device: bytes at one SDMA engine's bandwidth (``pinned`` is ignored).
    """
    _check_amount("bytes", nbytes)
    if kind == "d2d":
        return nbytes * 1e6 / unit_of("dma", spec).bandwidth
    if kind not in COPY_KINDS:
        raise ValueError(f"copy kind must be one of {', '.join(COPY_KINDS)}, got {kind!r}")
    host = spec.host
    rate = host.link_bandwidth if pinned else host.pageable_bandwidth
    return host.link_latency_us + nbytes * 1e6 / rate


def estimate_us(
    unit: str,
    dtype: str,
    flops: float,
    bytes_moved: float,
    cores: int,
    spec: DeviceSpec,
    bandwidth_share: float = 1.0,
    *,
    kind: CopyKind = "d2d",
    pinned: bool = True,
) -> float:
    """A task's duration from dispatch to completion: launch overhead plus its roofline.

    Compute units: ``launch_us + max(compute_us, memory_us)``. The dma unit: ``launch_us +
    dma_us(bytes_moved, kind, pinned)``; ``dtype``, ``flops``, ``cores`` and the share are
    then unused (a copy takes one engine, and its rate is the link's or the engine's). The
    ``link`` unit of a cluster's device: ``launch_us`` plus the bytes at the unit's
    ``bandwidth`` (its fastest link alone: an estimate for schedulers — the emulator times a
    transfer on the links it crosses, with their latency and contention).
    """
    found = unit_of(unit, spec)
    if unit == "dma":
        return found.launch_us + dma_us(bytes_moved, kind, spec, pinned)
    if not found.peak_flops:
        moved = bytes_moved * 1e6 / found.bandwidth if found.bandwidth > 0 else 0.0
        return found.launch_us + moved
    compute = compute_us(unit, dtype, flops, cores, spec)
    memory = memory_us(bytes_moved, bandwidth_share, spec)
    return found.launch_us + max(compute, memory)
