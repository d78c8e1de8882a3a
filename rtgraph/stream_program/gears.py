"""A program compiled once for every gear of its dynamic parameters, and the run's choice.

``program p(B: dyn {1, 2, 4, 8} = 1)`` compiles (:func:`rtgraph.api.compile_gears`) into one
:class:`GearedProgram`: a complete stream program per gear combination — its own tiling
choices, streams, events and memory plan, exactly what a static compile at those values
gives — and the run picks one by the values it is given (:meth:`GearedProgram.select`), as
Ascend's ATC builds one model for ``--dynamic_batch_size`` and the runtime chooses the gear
per execution. Nothing is compiled at run time; a value that is not a gear is refused —
unless the parameter was declared with a range (``B: dyn 1..64``): a value in the range then
runs the gear above it, padded (:meth:`GearedProgram.choose`, :mod:`rtgraph.compiler.padding`).

The JSON form (``rtgraph compile`` of such a program) is one object::

    {"schema": "rtgraph.geared-program", "version": 1, "name": …,
     "gears": {"B": [1, 2, 4, 8]}, "ranges": {"B": [1, 8]}, "params": {"D": 256},
     "programs": [{"values": {"B": 1}, "program": {…a stream program…}}, …],
     "untiled": [{"values": {"B": 8}, "program": {…}}, …],
     "reordered": [{"values": {"B": 8}, "program": {…}}, …]}

each ``program`` checked field by field as a stream program file is; ``ranges`` (the ends of
each ranged parameter) and ``params`` (the other parameters' values, to bind the source again
at a padded run's real values) may be absent, as in files written before ranges, and
``untiled`` (a gear's program compiled without tiling, for padded runs) and ``reordered`` (a
gear's program in the op order chosen inside its bucket, for padded runs) too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rtgraph.errors import InputError, StreamProgramError
from rtgraph.stream_program.program import StreamProgram, from_dict, to_dict

SCHEMA = "rtgraph.geared-program"
VERSION = 1


@dataclass(frozen=True)
class GearedProgram:
    """One stream program per gear combination of a program's dynamic parameters."""

    name: str
    gears: dict[str, tuple[int, ...]]
    programs: tuple[tuple[dict[str, int], StreamProgram], ...]
    #: the ends of each parameter declared with a range (its gears are the range's ladder)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: the values of the program's other parameters, as compiled
    params: dict[str, int] = field(default_factory=dict)
    #: a gear that runs padded, compiled again without tiling where that gives another
    #: program: a padded run takes whichever of the two its real shapes time faster
    #: (:func:`rtgraph.api.choose_gear`)
    untiled: tuple[tuple[dict[str, int], StreamProgram], ...] = ()
    #: a gear that runs padded, compiled again in the op order its optimizer chooses at a
    #: size inside the gear's bucket (``meta["ordered_at"]``) where that order differs: the
    #: order suits the runs padded to the gear, which are all smaller than it
    reordered: tuple[tuple[dict[str, int], StreamProgram], ...] = ()

    @property
    def device(self) -> str:
        return self.programs[0][1].device

    def untiled_for(self, gear: Mapping[str, int]) -> StreamProgram | None:
        """The gear's program compiled without tiling, if it was kept."""
        return next((p for v, p in self.untiled if v == dict(gear)), None)

    def reordered_for(self, gear: Mapping[str, int]) -> StreamProgram | None:
        """The gear's program in the order chosen inside its bucket, if it was kept."""
        return next((p for v, p in self.reordered if v == dict(gear)), None)

    def select(self, values: Mapping[str, int]) -> StreamProgram:
        """The program compiled for ``values`` (every dynamic parameter given; values for a
        gear the set lacks are refused, naming the gears)."""
        gear, program = self.choose(values)
        if gear != dict(values):
            name = next(n for n in values if values[n] != gear[n])
            raise InputError(
                f"-D {name}={values[name]}: not a gear of '{self.name}' (its range "
                f"{self.ranges[name][0]}..{self.ranges[name][1]} runs it padded to {gear[name]})",
                hint=f"run it with rtgraph run (which pads it), or choose the gear {gear[name]}",
            )
        return program

    def choose(self, values: Mapping[str, int]) -> tuple[dict[str, int], StreamProgram]:
        """The gear ``values`` run on and its program: the gear itself, or — for a value of a
        ranged parameter between two gears — the gear above it (the run is then padded); any
        other value is refused, naming the gears or the range."""
        unknown = sorted(set(values) - set(self.gears))
        if unknown:
            raise InputError(
                f"-D {unknown[0]}: '{self.name}' has no dynamic parameter '{unknown[0]}'",
                hint=f"its dynamic parameters are: {', '.join(self.gears)}; the others were "
                "fixed when it was compiled",
            )
        missing = [n for n in self.gears if n not in values]
        if missing:
            name = missing[0]
            choices = ", ".join(str(g) for g in self.gears[name])
            hint = f"-D {name}=… with one of its gears: {choices}"
            if name in self.ranges:
                lo, hi = self.ranges[name]
                hint = f"-D {name}=… with a value from {lo} to {hi} (its range)"
            raise InputError(
                f"'{self.name}' was compiled for several values of {name}: choose one", hint=hint
            )
        gear = {}
        for name, value in values.items():
            if name in self.ranges:
                lo, hi = self.ranges[name]
                if not lo <= value <= hi:
                    raise InputError(
                        f"-D {name}={value}: outside the range {lo}..{hi} of '{self.name}'",
                        hint=f"choose a value from {lo} to {hi}, or recompile with a wider range",
                    )
                gear[name] = min(g for g in self.gears[name] if g >= value)
            elif value not in self.gears[name]:
                choices = ", ".join(str(g) for g in self.gears[name])
                raise InputError(
                    f"-D {name}={value}: not a gear of '{self.name}' (gears: {choices})",
                    hint="pad to the next gear, add the value to the set, or declare a range "
                    f"({name}: dyn lo..hi) to have runs between gears padded",
                )
            else:
                gear[name] = value
        return gear, next(p for v, p in self.programs if v == gear)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "version": VERSION,
            "name": self.name,
            "gears": {n: list(g) for n, g in self.gears.items()},
            "ranges": {n: list(r) for n, r in self.ranges.items()},
            "params": dict(self.params),
            "programs": [{"values": v, "program": to_dict(p)} for v, p in self.programs],
            "untiled": [{"values": v, "program": to_dict(p)} for v, p in self.untiled],
            "reordered": [{"values": v, "program": to_dict(p)} for v, p in self.reordered],
        }


def is_geared(data: Any) -> bool:
    """Whether a JSON document is a geared program (else it should be a stream program)."""
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def geared_from_dict(data: dict[str, Any]) -> GearedProgram:
    """Build a geared program from its JSON data, every part checked (a bad field is a
    :class:`~rtgraph.errors.StreamProgramError` naming its JSON path)."""
    if data.get("version") != VERSION:
        raise StreamProgramError(
            f"geared program version {data.get('version')!r} is not supported",
            hint=f"this rtgraph reads version {VERSION}; recompile the program",
        )
    name, gears, entries = data.get("name"), data.get("gears"), data.get("programs")
    if not isinstance(name, str):
        raise StreamProgramError("name: must be a string")
    if (
        not isinstance(gears, dict)
        or not gears
        or not all(
            isinstance(v, list) and v and all(type(g) is int and g >= 1 for g in v)
            for v in gears.values()
        )
    ):
        raise StreamProgramError("gears: must map each dynamic parameter to sizes ≥ 1")
    table = {str(n): tuple(v) for n, v in gears.items()}
    if not isinstance(entries, list) or not entries:
        raise StreamProgramError("programs: must be a non-empty list")
    programs = _entries("programs", entries, table)
    expected = 1
    for values in table.values():
        expected *= len(values)
    if len(programs) != expected:
        raise StreamProgramError(
            f"programs: {len(programs)} for {expected} gear combinations",
            hint="every combination of the gears has its program",
        )
    others = {}
    for key in ("untiled", "reordered"):
        found = data.get(key, [])
        if not isinstance(found, list):
            raise StreamProgramError(f"{key}: must be a list of gears' programs")
        others[key] = _entries(key, found, table)
    return GearedProgram(
        name,
        table,
        programs,
        _ranges(data, table),
        _params(data, table),
        others["untiled"],
        others["reordered"],
    )


def _entries(
    key: str, entries: list, table: dict[str, tuple[int, ...]]
) -> tuple[tuple[dict[str, int], StreamProgram], ...]:
    """The ``{"values": …, "program": …}`` entries of list ``key``: each for a gear
    combination of ``table``, none twice, each program checked field by field."""
    programs, seen = [], set()
    for i, entry in enumerate(entries):
        values = entry.get("values") if isinstance(entry, dict) else None
        if (
            not isinstance(values, dict)
            or set(values) != set(table)
            or any(values[n] not in table[n] for n in table)
        ):
            raise StreamProgramError(
                f"{key}[{i}].values: must give a gear of each of {', '.join(table)}"
            )
        gear = tuple(values[n] for n in table)
        if gear in seen:
            raise StreamProgramError(f"{key}[{i}].values: {values} appears twice")
        seen.add(gear)
        try:
            program = from_dict(entry.get("program"))
        except StreamProgramError as e:
            raise StreamProgramError(f"{key}[{i}].program: {e.message}", e.span, e.hint) from None
        programs.append(({n: values[n] for n in table}, program))
    return tuple(programs)


def _ranges(data: dict[str, Any], gears: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, int]]:
    """The ``ranges`` of a geared program's JSON, each the ends of one of its dynamic
    parameters' gears."""
    ranges = data.get("ranges", {})
    if not isinstance(ranges, dict):
        raise StreamProgramError("ranges: must map dynamic parameters to [lo, hi]")
    out = {}
    for name, ends in ranges.items():
        if (
            name not in gears
            or not isinstance(ends, list)
            or len(ends) != 2
            or not all(type(e) is int and e >= 1 for e in ends)
            or ends[0] > ends[1]
            or (gears[name][0], gears[name][-1]) != tuple(ends)
        ):
            raise StreamProgramError(
                f"ranges.{name}: must be [lo, hi] of a dynamic parameter, its least and its "
                "greatest gear"
            )
        out[name] = (ends[0], ends[1])
    return out


def _params(data: dict[str, Any], gears: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """The ``params`` of a geared program's JSON: integers, none of them dynamic."""
    params = data.get("params", {})
    if (
        not isinstance(params, dict)
        or any(n in gears for n in params)
        or not all(type(v) is int for v in params.values())
    ):
        raise StreamProgramError("params: must map the program's other parameters to integers")
    return dict(params)
