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
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from rtgraph import emulator, frontend
from rtgraph.compiler import CompileOptions, bucket_order, compile_program
from rtgraph.compiler.bucket_order import inside, ordered_at
from rtgraph.compiler.optimizer.levels import DEFAULT_LEVEL
from rtgraph.compiler.optimizer.pipeline import TILING_PASSES, chosen_passes
from rtgraph.compiler.optimizer.pipeline import as_checked as _as_checked
from rtgraph.compiler.padding import PadPlan, gear_padding, pad_plan, with_extents
from rtgraph.compiler.real_dims import META as REAL_DIMS
from rtgraph.compiler.scheduling.policies import StreamPolicy
from rtgraph.device import check_compatibility, load_device, load_named_device
from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import InputError, RtgError, RtgErrors, UsageError
from rtgraph.frontend.gears import gear_combinations
from rtgraph.frontend.onnx_import import load_onnx
from rtgraph.ir.data import check_names, generate
from rtgraph.ir.graph import Program
from rtgraph.ir.reference import Reference
from rtgraph.ir.reference import reference as _reference
from rtgraph.stream_program.gears import GearedProgram
from rtgraph.stream_program.program import StreamProgram

#: The device a program that names none runs on.
DEFAULT_DEVICE = "ascend-910b"


def device(spec: str | DeviceSpec | None = None) -> DeviceSpec:
    """A device spec by name or path (default ``ascend-910b``), checked against the runtime."""
    if isinstance(spec, DeviceSpec):
        return spec
    found = load_device(spec or DEFAULT_DEVICE)
    check_compatibility(found)
    return found


def device_for(given: str | DeviceSpec | None, named: str | None) -> DeviceSpec:
    """The device the caller ``given`` (a name, a path or a spec), else the one a program or a
    stream program ``named`` — a name only, never a file the program could point at."""
    if given is not None or named is None:
        return device(given)
    found = load_named_device(named)
    check_compatibility(found)
    return found


def load(
    path: str | os.PathLike,
    params: Mapping[str, int] | None = None,
    *,
    device: str | DeviceSpec | None = None,
    **kwparams: int,
) -> Program:
    """Parse and check a ``.rtg`` file; ``params`` (or keywords) override its parameters.

    Tensors must fit in the memory of ``device`` (a name, a path or a spec), else of the
    device the program names, else of the default device; the file is parsed and checked once.

    An ``.onnx`` file is imported first (docs/onnx.md; ``params`` bind the model's named
    dimensions): the result is an :class:`~rtgraph.frontend.onnx_import.OnnxProgram`, whose
    ``weights`` are the model's param values (``rtgraph.run(compiled, params=p.weights)``).
    """
    merged = {**(params or {}), **kwparams}
    capacity_for = _capacity_for(device)
    if os.fspath(path).lower().endswith(".onnx"):
        named = device_for(device, None).name  # the device line of the imported program
        return load_onnx(path, merged, device=named, capacity_for=capacity_for)
    return frontend.load(os.fspath(path), merged or None, capacity_for=capacity_for)


def parse(
    text: str,
    filename: str = "<string>",
    params: Mapping[str, int] | None = None,
    *,
    device: str | DeviceSpec | None = None,
    **kwparams: int,
) -> Program:
    """Parse and check program text (the device as for :func:`load`)."""
    merged = {**(params or {}), **kwparams}
    return frontend.parse(text, filename, merged or None, capacity_for=_capacity_for(device))


def _capacity_for(given: str | DeviceSpec | None) -> frontend.CapacityFor:
    """The memory of the device a program runs on, given the one it names (see device_for)."""
    return lambda named: device_for(given, named).memory.capacity


def compile(
    program: Program,
    *,
    device: str | DeviceSpec | None = None,
    streams: str | StreamPolicy = "auto",
    memory: str = "stream-ordered",
    alloc: str = "static",
    batch_size: int | None = None,
    opt_level: int = DEFAULT_LEVEL,
    check: bool = False,
    options: CompileOptions | None = None,
) -> StreamProgram:
    """Compile a checked program into a stream program for ``device``.

    The keywords are the fields of :class:`~rtgraph.compiler.options.CompileOptions` (each
    option's values: ``docs/options.md``): ``streams`` a policy name or object, ``memory`` the
    static plan, ``alloc`` ``static`` (the plan) or a run-time allocator, ``batch_size`` the
    host's submission batch the commands are ordered for (None: the device's; run on the same
    spec to get it at run time too), ``opt_level`` the optimizer's level (0: the program as
    written). Or pass one ``options`` object and no keywords.
    """
    keywords = CompileOptions(
        streams=streams,
        memory=memory,
        alloc=alloc,
        batch_size=batch_size,
        opt_level=opt_level,
        check=check,
    )
    if options is None:
        options = keywords
    elif keywords != CompileOptions():
        raise UsageError(
            "rtgraph.compile takes options= or option keywords, not both",
            hint="set every option on the CompileOptions object",
        )
    spec = device_for(device, program.device)
    return compile_program(program, spec, options)


def compile_gears(
    program: Program,
    *,
    device: str | DeviceSpec | None = None,
    options: CompileOptions | None = None,
) -> GearedProgram:
    """Compile a program with dynamic parameters (``B: dyn {1, 2, 4}`` or ``B: dyn 1..64``)
    once for every gear combination into one
    :class:`~rtgraph.stream_program.gears.GearedProgram`; a run picks a gear with
    :meth:`~rtgraph.stream_program.gears.GearedProgram.choose`. Each gear's program is the one
    :func:`compile` gives at those values (the other parameters as ``program`` was bound). A
    ranged parameter is checked first for padding — bound at its two ends, the program must
    compute the ends' elements alike (:func:`rtgraph.compiler.padding.pad_plan`), else a
    :class:`~rtgraph.errors.CheckError` located at the op that forbids it. Raises
    :class:`~rtgraph.errors.UsageError` for a program without gears."""
    if not program.gears:
        raise UsageError(
            f"program '{program.name}' has no dynamic parameters to compile gears of",
            hint="declare one as NAME: dyn {g1, g2, …}, or compile it with rtgraph.compile",
        )
    spec = device_for(device, program.device)
    options = options or CompileOptions()
    fixed, bind = _gear_binder(program, spec)
    bound = {tuple(v.items()): bind(v) for v in gear_combinations(program.gears)}

    def at(values: dict[str, int]) -> Program:
        return bound[tuple(values.items())]

    _check_ranges(program, at)
    compiled, untiled, reordered = [], [], []
    flat = _untiled_options(options)
    for values in map(dict, bound):
        # the ops a run padded to this gear tells the real extents, marked (rtgraph.ops.extents)
        marks, padded = gear_padding(program.ranges, values, at)
        marked = with_extents(at(values), marks, padded)
        changed: set[str] = set()
        own = compile_program(marked, spec, options, changed=changed)
        compiled.append((values, own))
        if not padded:
            continue
        # a run pads to it and the gear was tiled: its tiles may not suit the run's rows
        if flat is not None and changed & set(TILING_PASSES):
            other = compile_program(marked, spec, flat)
            if [t.name for t in other.tasks] != [t.name for t in own.tasks]:
                untiled.append((values, other))
        # every run padded to it is smaller: its op order, chosen at its own size, may not suit
        middle = inside(values, program.gears, program.ranges)
        if middle is not None:
            again = bucket_order.reordered(marked, bind(middle), middle, spec, options)
            if again is not None:
                reordered.append((values, again))
    return GearedProgram(
        program.name,
        dict(program.gears),
        tuple(compiled),
        dict(program.ranges),
        fixed,
        tuple(untiled),
        tuple(reordered),
    )


def _untiled_options(options: CompileOptions) -> CompileOptions | None:
    """``options`` without the passes that cut work into tiles and host copies into parts
    (None when they do not run): a gear's second program, for padded runs whose real shapes
    its tiles do not suit."""
    chosen = chosen_passes(options)
    if "tile_and_pipeline" not in chosen:
        return None
    return replace(options, passes=tuple(p for p in chosen if p not in TILING_PASSES))


def check_ranges(program: Program, *, device: str | DeviceSpec | None = None) -> None:
    """Whether every ranged parameter of ``program`` may be padded (``rtgraph check`` asks
    what :func:`compile_gears` checks first): the program bound at the ranges' two ends
    (the other dynamic parameters at their first gear) must compute the lower end's elements
    as the upper end's would (:func:`rtgraph.compiler.padding.pad_plan`), else a
    :class:`~rtgraph.errors.CheckError` located at the op that forbids it."""
    if program.ranges:
        _check_ranges(program, _gear_binder(program, device_for(device, program.device))[1])


def _check_ranges(program: Program, bind: Callable[[dict[str, int]], Program]) -> None:
    """:func:`check_ranges` with ``bind`` giving the program bound at a gear combination."""
    if any(lo < hi for lo, hi in program.ranges.values()):
        first = {n: g[0] for n, g in program.gears.items()}
        ends = {**first, **{n: program.ranges[n][1] for n in program.ranges}}
        pad_plan(bind(first), bind(ends), first, ends)


def _gear_binder(
    program: Program, spec: DeviceSpec
) -> tuple[dict[str, int], Callable[[dict[str, int]], Program]]:
    """The values of ``program``'s parameters that are not dynamic, and a function checking
    its source at one gear combination — ``program`` itself when it is bound there — whose
    errors say which gear (a value the program's text may not show, as a range's powers of
    two)."""
    assert program.source is not None  # a checked .rtg program keeps its text
    source = program.source
    fixed = {n: v for n, v in program.params.items() if n not in program.gears}

    def bind(values: dict[str, int]) -> Program:
        if program.params == {**fixed, **values}:
            return program
        try:
            return parse(source.text, source.name, {**fixed, **values}, device=spec)
        except RtgError as e:
            shown = ", ".join(f"{n}={v}" for n, v in values.items())
            for error in e.errors if isinstance(e, RtgErrors) else [e]:
                error.message = f"at the gear {shown}: {error.message}"
            if isinstance(e, RtgErrors):
                e.message = e.errors[0].message
            raise

    return fixed, bind


def bind_gear(
    geared: GearedProgram, values: Mapping[str, int], *, device: str | DeviceSpec | None = None
) -> Program:
    """The program ``geared`` was compiled from, checked again at ``values`` (its dynamic
    parameters'; a ranged one's may lie between gears) — what a run of it is checked against.
    At a gear, its inputs and outputs must have the shapes of that gear's program. Raises
    :class:`~rtgraph.errors.InputError` when ``geared`` holds no source, or one that does not
    match it."""
    first = geared.programs[0][1]
    if first.source is None:
        raise InputError(
            f"'{geared.name}' holds no source to check a run at {dict(values)} against",
            hint="recompile it from its .rtg file",
        )
    spec = device_for(device, first.device)
    bound = parse(first.source.text, first.source.name, {**geared.params, **values}, device=spec)
    compiled = next((p for v, p in geared.programs if v == dict(values)), None)
    if compiled is not None:
        roles = ("input", "output")
        shapes = {t.name: t.shape for t in compiled.host_tensors if t.role in roles}
        if shapes != {n: t.type.shape for n, t in bound.tensors.items() if n in shapes}:
            raise InputError(
                f"'{geared.name}' at {dict(values)} does not match its source bound at those "
                "values",
                hint="recompile it from its .rtg file",
            )
    return bound


def choose_gear(
    geared: GearedProgram, values: Mapping[str, int], *, device: str | DeviceSpec | None = None
) -> tuple[StreamProgram, PadPlan | None]:
    """The program a run of ``geared`` at ``values`` runs, and — when a ranged parameter's
    value lies between gears — the plan that pads it to the gear above
    (:mod:`rtgraph.compiler.padding`; pass it to :func:`run` as ``padding``). Only a padded
    run reads the source (bound at the run's values and the gear's)."""
    gear, compiled = geared.choose(values)
    if gear == dict(values):
        return compiled, None
    if compiled.source is None:
        raise InputError(
            f"'{geared.name}' holds no source to pad a run at {dict(values)} by",
            hint=f"recompile it from its .rtg file, or run the gear {gear}",
        )
    bound = bind_gear(geared, gear, device=device)
    plan = pad_plan(bind_gear(geared, values, device=device), bound, values, gear)
    # the gear's tiles and order were chosen for its own shapes: time each program at the run's
    untiled, again = geared.untiled_for(gear), geared.reordered_for(gear)
    own = "tiled" if untiled is not None else "own"
    candidates = {own: compiled}
    for label, other in (("untiled", untiled), ("reordered", again)):
        if other is None:
            continue
        if _hosts(other) != _hosts(compiled):
            raise InputError(
                f"'{geared.name}' at {gear}: its {label} program's inputs and outputs are not "
                "its program's",
                hint="recompile it from its .rtg file",
            )
        candidates[label] = other
    if len(candidates) == 1:
        return compiled, plan
    spec = device_for(device, compiled.device)
    timed = {
        label: emulator.run(plan.bind(p, spec), spec, numerics=False).makespan_us
        for label, p in candidates.items()
    }
    faster = min(timed, key=lambda k: (timed[k], k != own))  # a tie runs the gear's own
    at = ordered_at(again) if again is not None else None
    plan = replace(plan, weighed=timed, ordered_at=at or {})
    return candidates[faster], plan


def _hosts(program: StreamProgram) -> dict[str, tuple[str, tuple[int, ...], str]]:
    """Each host tensor's role, shape and dtype: what two programs of one gear share."""
    return {t.name: (t.role, t.shape, t.dtype) for t in program.host_tensors}


def run(
    program: StreamProgram,
    *,
    device: str | DeviceSpec | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    params: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    numerics: bool = True,
    fill_missing: bool = False,
    padding: PadPlan | None = None,
    **options: Any,
):
    """Run a stream program on the emulated device; returns the emulator's result.

    ``inputs`` / ``params`` given must hold every input / param of the program, unless
    ``fill_missing`` generates the missing ones from ``seed`` (0 to 2**63 - 1); not given, all
    of them are generated. With ``padding`` (from :func:`choose_gear`) the inputs are those of
    the real shapes — given, or generated as a program bound at the real values would generate
    them — zero-padded to the gear's; the outputs are cut back to the real shapes and the
    result's ``padding`` is the plan.
    """
    spec = device_for(device, program.device)
    if padding is not None and numerics:
        if inputs is not None:  # the real inputs, named as the emulator would name them
            declared = dict.fromkeys(padding.inputs)
            check_names("input", list(inputs), declared, program.name, fill_missing=fill_missing)
        inputs = _padded(program, padding, "input", inputs, padding.inputs, seed)
        if padding.params:  # the others are the gear's own: generated there, or given whole
            made = _padded(program, padding, "param", params, padding.params, seed)
            fill_missing = fill_missing or params is None  # the gear's own params, from the seed
            params = {**(params or {}), **made}
    elif padding is not None:
        inputs = None
    if padding is not None:
        # the kernels told where each axis's real part ends, each task timed at its real shapes
        program = padding.bind(program, spec)
        padding = replace(padding, timed=REAL_DIMS in program.meta)
    result = emulator.run(
        program,
        spec,
        inputs=inputs,
        params=params,
        seed=seed,
        numerics=numerics,
        fill_missing=fill_missing,
        **options,
    )
    if padding is not None:
        result.outputs = padding.cut(result.outputs)
        result.padding = padding
    return result


def _padded(
    program: StreamProgram,
    padding: PadPlan,
    role: str,
    given: Mapping[str, np.ndarray] | None,
    real: Mapping[str, tuple[int, ...]],
    seed: int,
) -> dict[str, np.ndarray]:
    """The ``role`` tensors of ``real`` shapes — given, or generated from the seed as a
    program bound at the real values would generate them — zero-padded to ``program``'s;
    given names the program lacks pass through, for the emulator to refuse."""
    hosts = {t.name: t for t in program.host_tensors if t.role == role}
    values = {n: v for n, v in (given or {}).items() if n in real or n not in hosts}
    for name, shape in real.items():
        if name not in values:
            h = hosts[name]
            values[name] = generate(
                name, shape, h.dtype, seed, param=role == "param", nonnegative=h.nonnegative
            )
    return padding.pad(values, {n: t.shape for n, t in hosts.items()})


#: The reference to check a run against (:func:`rtgraph.ir.reference.reference`).
reference = _reference


def as_checked(
    program: Program,
    *,
    device: str | DeviceSpec | None = None,
    options: CompileOptions | None = None,
) -> Program:
    """``program`` as a run of it compiled under ``options`` (None: the defaults) is checked
    against bit for bit: with its batchnorms folded into the conv or matmul before them (``-O1``
    and up) and its precisions chosen (``--precision``), as the optimizer leaves it — passes
    that change the arithmetic by design; ``program`` itself when none runs. Pass it to
    :func:`reference`: ``rtgraph.reference(rtgraph.as_checked(program))``."""
    spec = device_for(device, program.device)
    return _as_checked(program, (options or CompileOptions()).for_device(spec))


def compare(
    outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]
) -> dict[str, dict[str, float]]:
    """Per output: max absolute and relative error against the reference (over the values both
    hold finite or equal), bit equality, and how many values are inf or NaN (``nonfinite``) —
    over the elements a :class:`~rtgraph.ir.reference.Reference` holds (a sample, in ``sample``
    mode), every element of a plain mapping's arrays; ``checked`` counts them."""
    report = {}
    sampled = isinstance(reference, Reference) and reference.boxes is not None
    for name, ref in reference.items():
        got = outputs.get(name)
        if got is None:
            report[name] = {
                "max_abs": float("inf"),
                "max_rel": float("inf"),
                "equal": False,
                "nonfinite": 0,
                "checked": 0,
            }
            continue
        if sampled:
            got, ref = reference.elements(name, got), reference.elements(name, ref)
        a = np.asarray(got, dtype=np.float64)
        b = np.asarray(ref, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: counted, not warned
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            diff = np.where(same, 0.0, np.abs(a - b))
        finite = np.isfinite(diff)
        max_abs = float(diff[finite].max()) if finite.any() else 0.0
        scale = np.fmax(np.abs(b), 1e-30)  # NaN on both sides: equal, not a NaN error
        max_rel = float((diff[finite] / scale[finite]).max()) if finite.any() else 0.0
        if not finite.all():  # one side inf or NaN where the other is not
            max_abs = max_rel = float("inf")
        equal = bool(np.array_equal(np.asarray(got), np.asarray(ref), equal_nan=True))
        nonfinite = int(a.size - np.count_nonzero(np.isfinite(a)))
        report[name] = {
            "max_abs": max_abs,
            "max_rel": max_rel,
            "equal": equal,
            "nonfinite": nonfinite,
            "checked": int(a.size),
        }
    return report
