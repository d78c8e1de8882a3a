"""The library surface: each stage of the pipeline as one call, for scripts and pytest.

    import rtgraph
    program = rtgraph.load("models/attention.rtg", S=256)
    compiled = rtgraph.compile(program, device="toy", streams="by-unit")
    result = rtgraph.run(compiled, device="toy")
    assert result.makespan_us > 0

Each function takes the previous stage's product (or a path / text where that is the natural
start) and raises :class:`rtgraph.RtgError` subclasses for bad input.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from rtgraph.compiler.scheduling.policies import StreamPolicy
from rtgraph.device.spec import DeviceSpec
from rtgraph.ir.graph import Program
from rtgraph.stream_program.program import StreamProgram


def device(spec: str | DeviceSpec | None = None) -> DeviceSpec:
    """A device spec by name or path (default ``ascend-910b``), checked against the runtime."""
    from rtgraph.device import check_compatibility, load_device

    if isinstance(spec, DeviceSpec):
        return spec
    found = load_device(spec or "ascend-910b")
    check_compatibility(found)
    return found


def _capacity(device_ref: str | DeviceSpec | None) -> int:
    return device(device_ref).memory.capacity


def load(
    path: str | os.PathLike,
    params: Mapping[str, int] | None = None,
    *,
    device: str | DeviceSpec | None = None,
    **kwparams: int,
) -> Program:
    """Parse and check a ``.rtg`` file; ``params`` (or keywords) override its parameters."""
    from rtgraph.frontend import load as _load

    merged = {**(params or {}), **kwparams}
    text_device = device
    program = _load(os.fspath(path), merged or None, device_capacity=None)
    ref = text_device if text_device is not None else program.device
    return _load(os.fspath(path), merged or None, device_capacity=_capacity(ref))


def parse(
    text: str,
    filename: str = "<string>",
    params: Mapping[str, int] | None = None,
    *,
    device: str | DeviceSpec | None = None,
    **kwparams: int,
) -> Program:
    """Parse and check program text."""
    from rtgraph.frontend import parse as _parse

    merged = {**(params or {}), **kwparams}
    program = _parse(text, filename, merged or None)
    ref = device if device is not None else program.device
    return _parse(text, filename, merged or None, device_capacity=_capacity(ref))


def compile(
    program: Program,
    *,
    device: str | DeviceSpec | None = None,
    streams: str | StreamPolicy = "auto",
    memory: str = "stream-ordered",
    alloc: str = "static",
    check: bool = False,
) -> StreamProgram:
    """Compile a checked program into a stream program for ``device``.

    ``alloc`` is ``static`` (the memory plan ``memory``) or a run-time allocator: ``direct``,
    ``pool``, ``pytorch``, ``buddy`` or ``mixed`` (params direct, activations pooled).
    """
    from rtgraph.compiler.pipeline import compile_program

    spec = globals()["device"](device if device is not None else program.device)
    return compile_program(program, spec, streams=streams, memory=memory, alloc=alloc, check=check)


def run(
    program: StreamProgram,
    *,
    device: str | DeviceSpec | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    params: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    numerics: bool = True,
    **options: Any,
):
    """Run a stream program on the emulated device; returns the emulator's result."""
    from rtgraph.emulator import run as _run

    spec = globals()["device"](device if device is not None else program.device)
    return _run(
        program, spec, inputs=inputs, params=params, seed=seed, numerics=numerics, **options
    )


def compare(
    outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]
) -> dict[str, dict[str, float]]:
    """Per output: max absolute and relative error against the reference, and bit equality."""
    report = {}
    for name, ref in reference.items():
        got = outputs.get(name)
        if got is None:
            report[name] = {"max_abs": float("inf"), "max_rel": float("inf"), "equal": False}
            continue
        a = np.asarray(got, dtype=np.float64)
        b = np.asarray(ref, dtype=np.float64)
        diff = np.abs(a - b)
        finite = np.isfinite(diff)
        max_abs = float(diff[finite].max()) if finite.any() else 0.0
        scale = np.maximum(np.abs(b), 1e-30)
        max_rel = float((diff / scale)[finite].max()) if finite.any() else 0.0
        equal = bool(np.array_equal(np.asarray(got), np.asarray(ref), equal_nan=True))
        report[name] = {"max_abs": max_abs, "max_rel": max_rel, "equal": equal}
    return report
