"""Devices as text: one spec in full (:func:`describe`) or several as a table of key figures
(:func:`devices_table`, what ``rtgraph devices`` prints)."""

from __future__ import annotations

from collections.abc import Sequence

from rtgraph.device.spec import DeviceSpec


def _si(value: float, unit: str) -> str:
    """``value`` with an SI prefix: 1.6e12 B/s -> '1.6 TB/s'."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.4g} GiB"


def _us(value: float) -> str:
    return f"{value:g} µs"


def describe(spec: DeviceSpec | Sequence[DeviceSpec]) -> str:
    """One device in full (every figure and its sources), or several as a table of key figures.

    ``describe(load_device("toy"))`` is the detailed view; ``describe(list_devices())`` is
    :func:`devices_table`, what ``rtgraph devices`` prints.
    """
    if not isinstance(spec, DeviceSpec):
        return devices_table(spec)
    lines = [f"{spec.name} — {spec.description}".rstrip(" —")]
    lines.append(
        f"  firmware {spec.firmware}; compatible runtimes {', '.join(spec.compatible_runtimes)}"
        f"; from {spec.source}"
    )
    for kind, unit in spec.units.items():
        if unit.peak_flops:
            peaks = ", ".join(f"{d} {_si(v, 'FLOP/s')}" for d, v in unit.peak_flops.items())
            rate = f"per core: {peaks}"
        else:
            rate = f"{_si(unit.bandwidth, 'B/s')} per engine"
        block = f", default block dim {unit.default_block_dim}" if unit.default_block_dim else ""
        lines.append(f"  {kind:<9} {unit.cores} × {rate}; launch {_us(unit.launch_us)}{block}")
    m, h, s, p = spec.memory, spec.host, spec.scheduler, spec.profiling
    order = f"reorder window {s.reorder_window}" if s.reorder_window else "in order"
    callbacks = "blocking" if s.blocking_callbacks else "non-blocking"
    lines += [
        f"  memory    {_gib(m.capacity)} at {_si(m.bandwidth, 'B/s')}; alignment {m.alignment} B,"
        f" granularity {m.granularity} B; alloc direct {_us(m.direct_alloc_us)},"
        f" pool {_us(m.pool_alloc_us)}, free {_us(m.direct_free_us)}",
        f"  host      link {_si(h.link_bandwidth, 'B/s')} (pageable"
        f" {_si(h.pageable_bandwidth, 'B/s')}), latency {_us(h.link_latency_us)}; ioctl"
        f" {_us(h.ioctl_us)}, submit {_us(h.submit_us)}/task, batch {h.batch_size};"
        f" callback {_us(h.callback_us)}, sync {_us(h.sync_us)},"
        f" graph launch {_us(h.graph_launch_us)}",
        f"  scheduler queue depth {s.queue_depth}, {order}; events {s.event_mode}"
        f" (max {s.max_events}); {s.priorities} priorities; on failure {s.failure_mode};"
        f" callbacks {callbacks}",
        f"  profiling task_trace +{p.task_trace_overhead * 100:g} %,"
        f" op_trace +{p.op_trace_overhead * 100:g} % of each task's duration",
    ]
    lines += [f"  source: {text}" for text in spec.sources]
    return "\n".join(lines)


TABLE_HEADER = (
    "device",
    "cube",
    "f16 TFLOPS",
    "vector",
    "HBM",
    "HBM TB/s",
    "link GB/s",
    "launch µs",
    "queue",
    "events",
    "firmware",
)


def _row(spec: DeviceSpec) -> tuple[str, ...]:
    cube, vector = spec.units["cube"], spec.units["vector"]
    launch = sorted({u.launch_us for u in spec.units.values()})
    return (
        spec.name,
        str(cube.cores),
        f"{cube.cores * cube.peak_flops.get('f16', 0.0) / 1e12:.4g}",
        str(vector.cores),
        _gib(spec.memory.capacity),
        f"{spec.memory.bandwidth / 1e12:.4g}",
        f"{spec.host.link_bandwidth / 1e9:.4g}",
        "–".join(f"{x:g}" for x in sorted({launch[0], launch[-1]})),
        str(spec.scheduler.queue_depth),
        f"{spec.scheduler.event_mode} ({spec.scheduler.max_events})",
        spec.firmware,
    )


def devices_table(specs: Sequence[DeviceSpec]) -> str:
    """The key figures of several devices as an aligned text table (for ``rtgraph devices``)."""
    rows = [TABLE_HEADER, *(_row(s) for s in specs)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(TABLE_HEADER))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(rows[0]), line(["-" * w for w in widths]), *map(line, rows[1:])])
