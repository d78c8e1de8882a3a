"""``rtgraph compile`` of a program with dynamic parameters: every gear in one artifact.

A program declaring ``B: dyn {1, 2, 4}`` compiles (JSON or listing) into a geared program —
one stream program per gear (:mod:`rtgraph.stream_program.gears`); ``rtgraph run OUT.json
-D B=2`` runs the gear it names without compiling. A parameter fixed with ``-D`` is compiled at
that value only; when every dynamic parameter is fixed the compile is a plain one.
``rtgraph run FILE --shapes B=1,4,16`` runs several values and prints one row per run;
``rtgraph explain`` explains each gear.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json

from rtgraph import api
from rtgraph.cli.arguments import check_options, compile_options, is_compiled, parse_defines
from rtgraph.compiler.bucket_order import ordered_at
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.padding import sizes
from rtgraph.device.spec import DeviceSpec
from rtgraph.errors import RtgError, UsageError
from rtgraph.frontend.gears import gear_combinations
from rtgraph.ir.graph import Program
from rtgraph.stream_program.gears import GearedProgram
from rtgraph.stream_program.listing import format_listing
from rtgraph.stream_program.loading import in_file, read_compiled


def still_dynamic(args: argparse.Namespace, program: Program) -> Program | None:
    """``program`` with the gears of the dynamic parameters ``-D`` did not fix, or None when
    none is left (or the output is not one a geared program has)."""
    gears = _unfixed(args, program)
    if not gears or args.emit not in ("json", "listing"):
        return None
    ranges = {n: ends for n, ends in program.ranges.items() if n in gears}
    return dataclasses.replace(program, gears=gears, ranges=ranges)


def _unfixed(args: argparse.Namespace, program: Program) -> dict[str, tuple[int, ...]]:
    """The gears of the dynamic parameters ``-D`` did not fix."""
    fixed = parse_defines(args.define)
    return {n: g for n, g in program.gears.items() if n not in fixed}


def each_gear(args: argparse.Namespace, program: Program) -> list[tuple[dict[str, int], Program]]:
    """``program`` bound at each combination of the gears ``-D`` did not fix (``rtgraph
    explain`` shows each gear's choices), or just ``program`` (no values) when none is left."""
    gears = _unfixed(args, program)
    if not gears:
        return [({}, program)]
    fixed = parse_defines(args.define)
    return [
        (values, api.load(args.file, {**fixed, **values}, device=args.device))
        for values in gear_combinations(gears)
    ]


def gear_heading(
    values: dict[str, int],
    gears: dict[str, tuple[int, ...]],
    ranges: dict[str, tuple[int, int]],
) -> str:
    """``B=8`` — and for a ranged parameter the values the gear serves, the ones below it
    padded: ``B=8 (runs B = 5..8; 5..7 padded)``."""
    parts = []
    for name, value in values.items():
        part = f"{name}={value}"
        if name in ranges:
            below = [g for g in gears[name] if g < value]
            first = below[-1] + 1 if below else value
            if first < value:
                padded = f"{first}" if first == value - 1 else f"{first}..{value - 1}"
                part += f" (runs {name} = {first}..{value}; {padded} padded)"
        parts.append(part)
    return ", ".join(parts)


def geared_text(
    args: argparse.Namespace, program: Program, spec: DeviceSpec, options: CompileOptions
) -> str:
    """The geared program as JSON, or each gear's listing under a heading."""
    geared = api.compile_gears(program, device=spec, options=options)
    if args.emit == "json":
        return json.dumps(geared.to_dict(), indent=1)
    parts = []
    for values, compiled in geared.programs:
        shown = gear_heading(values, geared.gears, geared.ranges)
        parts.append(f"## gear {shown}\n\n{format_listing(compiled)}")
        # a padded run takes whichever of the gear's programs its real shapes time faster
        faster = "(a padded run takes whichever program its real shapes time faster)"
        untiled = geared.untiled_for(values)
        if untiled is not None:
            heading = f"## gear {shown}, compiled again without tiling {faster}"
            parts.append(f"{heading}\n\n{format_listing(untiled)}")
        again = geared.reordered_for(values)
        if again is not None:
            at = sizes(ordered_at(again) or {})
            heading = f"## gear {shown}, compiled again in the order chosen for {at} {faster}"
            parts.append(f"{heading}\n\n{format_listing(again)}")
    return "\n".join(parts)


#: The most runs one ``--shapes`` may ask for (every combination of the values given).
MAX_SHAPE_RUNS = 256


def parse_shapes(given: list[str]) -> dict[str, list[int]]:
    """``--shapes B=1,4,16`` or ``--shapes B=1..16`` (every value between; repeatable): each
    parameter's values, in order — at most :data:`MAX_SHAPE_RUNS` runs in all, counted before
    any value is listed."""
    shapes: dict[str, list[int]] = {}
    runs = 1
    for item in given:
        name, _, values = item.partition("=")
        ends = _integers(values.split("..")) if ".." in values else None
        numbers = _integers(values.split(",")) if ends is None else []
        count = ends[1] - ends[0] + 1 if ends is not None and len(ends) == 2 else len(numbers)
        if not name.isidentifier() or count < 1 or name in shapes:
            raise UsageError(
                f"--shapes {item}: expected NAME=V1,V2,… or NAME=LO..HI (integers, LO ≤ HI), "
                "each name once",
                hint="e.g. --shapes B=1,4,16 or B=1..16 (repeat the flag for another parameter)",
            )
        runs *= count
        if runs > MAX_SHAPE_RUNS:
            raise UsageError(
                f"--shapes {item}: {runs:,} runs; at most {MAX_SHAPE_RUNS}",
                hint="give fewer values",
            )
        shapes[name] = numbers if ends is None else list(range(ends[0], ends[1] + 1))
    return shapes


def _integers(parts: list[str]) -> list[int]:
    """``parts`` as integers (``_`` allowed between digits), or [] if any is not one."""
    try:
        return [int(v.replace("_", "")) for v in parts]
    except ValueError:
        return []


def run_shapes(args: argparse.Namespace) -> int:
    """``rtgraph run FILE --shapes B=1,4,16``: one run per value (every combination of the
    parameters given), one table row each — a geared program's gears, chosen without
    compiling, or a .rtg program compiled at each value."""
    if args.check not in (None, "full"):
        raise UsageError(
            "--shapes checks every output element (--check full) or, with --timing-only, nothing"
        )
    shapes = parse_shapes(args.shapes)
    fixed = parse_defines(args.define)
    names = list(shapes)
    geared = _geared(args.file) if is_compiled(args) else None
    rows = []
    for values in itertools.product(*shapes.values()):
        chosen = {**fixed, **dict(zip(names, values, strict=True))}
        rows.append([*values, *_run_one(args, geared, chosen)])
    header = [*names, "tasks", "makespan µs", "memory peak B", "padded to", "max rel error"]
    table = [header, *[[_cell(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for row in table:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _geared(path: str) -> GearedProgram:
    found = read_compiled(path)
    if not isinstance(found, GearedProgram):
        raise UsageError(
            f"--shapes: {path} is compiled for one shape",
            hint="compile a program with dynamic parameters (B: dyn {…}), or run the .rtg",
        )
    return found


def _run_one(
    args: argparse.Namespace, geared: GearedProgram | None, values: dict[str, int]
) -> list[object]:
    """Tasks, makespan, memory peak, the gear a padded run ran on (None: not padded) and the
    error against the reference (None: not checked) of one run at ``values``: ``geared``'s gear
    (the one above, padded, for a ranged value between gears), else the .rtg compiled at them."""
    numerics = not args.timing_only
    if geared is not None:
        try:
            compiled, plan = api.choose_gear(geared, values, device=args.device)
            program = None
            if numerics and compiled.source is not None:
                program = api.bind_gear(geared, values, device=args.device)
        except RtgError as e:
            raise in_file(args.file, e) from None
        result = api.run(
            compiled, device=args.device, numerics=numerics, seed=args.seed, padding=plan
        )
        padded = None
        if plan is not None:
            padded = ", ".join(f"{plan.gear[n]}" for n in plan.values) + f" ({plan.wasted:.0%})"
            if plan.weighed and compiled is geared.untiled_for(plan.gear):
                padded += ", untiled"  # the gear's program without tiling ran: the faster
            elif plan.weighed and compiled is geared.reordered_for(plan.gear):
                padded += ", reordered"  # the gear's program in its bucket's order ran
        error = None
        if program is not None:
            checked = api.as_checked(
                program, device=args.device, options=check_options(args, compiled)
            )
            error = _error(result, checked, args.seed)
        return [len(compiled.tasks), result.makespan_us, result.memory_peak_bytes, padded, error]
    options = compile_options(args)
    program = api.load(args.file, values, device=args.device)
    spec = options.for_device(api.device_for(args.device, program.device)).target
    compiled = api.compile(program, device=spec, options=options)
    result = api.run(compiled, device=spec, numerics=numerics, seed=args.seed)
    error = None
    if numerics:
        error = _error(result, api.as_checked(program, device=spec, options=options), args.seed)
    return [len(compiled.tasks), result.makespan_us, result.memory_peak_bytes, None, error]


def _error(result, program: Program, seed: int) -> float:
    """The largest relative error of ``result``'s outputs against the reference of ``program``
    (as the run is checked: :func:`rtgraph.as_checked`)."""
    report = api.compare(result.outputs, api.reference(program, seed=seed))
    return max((r["max_rel"] for r in report.values()), default=0.0)


def _cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.3f}" if value >= 1 or value == 0 else f"{value:.2e}"
    return f"{value:,}" if isinstance(value, int) else str(value)
