"""One point of a sweep: compile, run, and the figures recorded for it.

:class:`PointTask` carries everything a worker needs — the program's text (not its path: a
remote worker need not see the client's files), the parameters, the options and the device
spec itself — and :func:`evaluate_point` turns it into a JSON-ready dict. The figures are the
bench's (:func:`rtgraph.bench.run.policy_row` collects makespan, utilization per unit, events
and host figures; this module adds memory peak, HBM bytes, compile seconds and, when numerics
are on, the error against the reference). A point the compiler or the emulator refuses records
the rendered error instead of figures, so one bad point does not stop the sweep.

``compile_s`` is the one wall-clock figure (this machine's seconds, not the emulated clock):
two runs of a sweep agree on every other column.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rtgraph import api
from rtgraph.bench.run import policy_row
from rtgraph.compiler.options import CompileOptions
from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import RtgError
from rtgraph.ir.accuracy import accuracy
from rtgraph.sweep.cache import content_key
from rtgraph.sweep.points import Point
from rtgraph.sweep.spec import OPTION_AXES, Sweep

#: Figures that are this machine's wall clock, not the emulator's: they differ run to run.
WALL_CLOCK = ("compile_s",)


@dataclass(frozen=True)
class PointTask:
    """A point, ready to evaluate anywhere; ``cache_key`` addresses its result."""

    key: str
    cache_key: str
    filename: str
    text: str
    params: dict[str, int]
    device: DeviceSpec | None
    options: CompileOptions
    numerics: bool
    seed: int


def task_for(sweep: Sweep, point: Point) -> PointTask:
    """The task of ``point`` (its model read once by the sweep file's check)."""
    model = sweep.models[point.values["model"]]
    spec = sweep.devices[point.values["device"]] or model.own_device
    options = CompileOptions(**{a: point.values[a] for a in OPTION_AXES})
    run = {"numerics": sweep.numerics, "seed": sweep.seed}
    return PointTask(
        key=point.key,
        cache_key=content_key(model.text, point.params, options, spec, run),
        filename=model.filename,
        text=model.text,
        params=point.params,
        device=spec,
        options=options,
        numerics=sweep.numerics,
        seed=sweep.seed,
    )


def evaluate_point(task: PointTask) -> dict[str, object]:
    """Compile and run one point; its figures, or ``{"error": …}`` when it is refused."""
    try:
        return _figures(task)
    except RtgError as e:
        return {"error": e.render()}


def _figures(task: PointTask) -> dict[str, object]:
    program = api.parse(task.text, task.filename, task.params, device=task.device)
    spec = api.device_for(task.device, program.device)
    started = time.perf_counter()
    compiled = api.compile(program, device=spec, options=task.options)
    compile_s = time.perf_counter() - started
    result = api.run(compiled, device=spec, numerics=task.numerics, seed=task.seed)
    policy = task.options.stream_policy().name
    row = policy_row(
        program.name, policy, task.options.memory, compiled, result, result.makespan_us
    )
    figures: dict[str, object] = {
        "program": program.name,
        "device": spec.name,
        "params": dict(program.params),
        "makespan_us": row.makespan_us,
        "utilization": row.utilization,
        "memory_peak_bytes": int(result.memory_peak_bytes),
        "events": row.events,
        "waits": row.waits,
        "tasks": row.tasks,
        "hbm_bytes": sum(t.bytes_read + t.bytes_written for t in compiled.tasks),
        "host_busy_us": row.host_busy_us,
        "compile_s": compile_s,
    }
    if task.numerics:  # the precision report's measure: robust where an output crosses zero
        reference = api.reference(program, seed=task.seed)
        errors = [
            accuracy(reference.elements(n, result.outputs[n]), reference.elements(n, ref)).max_rel
            for n, ref in reference.items()
        ]
        figures["max_rel_error"] = max(errors, default=0.0)
    return figures
