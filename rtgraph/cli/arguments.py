"""What the command line's arguments name: the program or compiled ``.json`` FILE, the compile
options, the device, and the files read and written (an output never overwrites an input)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rtgraph import api
from rtgraph.cli.parser import FLAGS
from rtgraph.compiler.options import OPTIONS, CompileOptions, OptionError, shown
from rtgraph.compiler.padding import PadPlan
from rtgraph.emulator.admission import check_against_device
from rtgraph.emulator.numerics import declared_names
from rtgraph.errors import RtgError, UsageError
from rtgraph.ir.graph import Program
from rtgraph.ir.interpreter import load_npz_for
from rtgraph.ir.npz import load_npz
from rtgraph.stream_program.gears import GearedProgram
from rtgraph.stream_program.loading import in_file
from rtgraph.stream_program.loading import read_compiled as read_compiled_file
from rtgraph.stream_program.program import StreamProgram

#: What ``run`` says instead of the reference check when FILE is a compiled ``.json``.
NO_REFERENCE = "a compiled stream program carries no program to evaluate (run the .rtg for it)"

#: The arguments that name files a command reads, and those that name files it writes.
INPUT_ARGS = ("file", "files", "inputs", "params", "device", "records")

OUTPUT_ARGS = ("output", "timeline", "trace", "memory_map", "memory_plot", "dag", "figure", "html")

#: The folder ``rtgraph bench`` reads when given no files.
BENCH_MODELS = "models"

#: What ``profile -o FOLDER`` writes inside its folder.
PROFILE_FILES = ("op_summary.csv", "op_statistic.csv")


def parse_defines(pairs: Sequence[str] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"-D {pair}: expected NAME=VALUE", hint="for example: -D S=1024")
        try:
            out[name] = int(value, 0)
        except ValueError:
            raise UsageError(f"-D {pair}: {value!r} is not an integer") from None
    return out


def compile_options(args: argparse.Namespace, **overrides: object) -> CompileOptions:
    """The one :class:`CompileOptions` the command's flags ask for (a bad value: exit 2)."""
    chosen = {name: getattr(args, name) for name in FLAGS if hasattr(args, name)}
    try:
        return CompileOptions(**{**chosen, **overrides})  # type: ignore[arg-type]
    except OptionError as e:
        value = ",".join(map(str, e.value)) if isinstance(e.value, tuple) else e.value
        raise UsageError(f"{FLAGS[e.option]} {shown(value)}: {e.problem}", hint=e.hint) from None


def check_options(args: argparse.Namespace, compiled: StreamProgram) -> CompileOptions:
    """The options a run's check against the reference follows (:func:`rtgraph.as_checked`):
    the command's, for a program it compiles; for a compiled .json, to which no option
    applies, what its compile recorded (``meta.batchnorms_folded``)."""
    if is_compiled(args):
        return CompileOptions(passes=FOLD * bool(compiled.meta.get("batchnorms_folded")))
    return compile_options(args)


#: The passes a compiled program's check repeats when its compile folded its batchnorms.
FOLD = ("fold_batchnorm",)


def device_spec(args: argparse.Namespace, program, options: CompileOptions):
    """The device spec the command runs on: --device (else the program's), with the options'
    overrides (the host's batch size) applied."""
    return options.for_device(api.device_for(args.device, program.device)).target


def load_program(args: argparse.Namespace):
    if is_compiled(args):
        raise UsageError(
            f"{args.command} needs a .rtg program; {args.file} is a compiled stream program",
            hint="check, run, profile, advise and viz accept a compiled .json",
        )
    return api.load(args.file, parse_defines(args.define), device=args.device)


def is_compiled(args: argparse.Namespace) -> bool:
    """Whether the command's FILE is a compiled stream program (JSON) rather than a program."""
    return args.file.endswith(".json")


def read_compiled(args: argparse.Namespace) -> tuple[StreamProgram, object]:
    """A compiled ``.json``, checked, and the device (``--device``, else the one it names) it
    fits; compile options cannot apply to what is compiled (a usage error), nor -D, except to
    choose a geared program's gear (its dynamic parameters: :mod:`rtgraph.stream_program.gears`).
    """
    compiled, spec, _, _ = read_run(args, pad=False)
    return compiled, spec


def read_run(
    args: argparse.Namespace, *, pad: bool = True
) -> tuple[StreamProgram, object, Program | None, PadPlan | None]:
    """:func:`read_compiled`, and for a geared program also the program it was compiled from,
    checked at the values ``-D`` gives (what ``run`` checks the outputs against) and — with
    ``pad``, for a ranged parameter's value between gears — the plan that pads the run to the
    gear above (:func:`rtgraph.api.choose_gear`)."""
    found = read_compiled_file(args.file)
    checked, plan = None, None
    if isinstance(found, GearedProgram):
        values = parse_defines(args.define)
        try:
            if pad:
                geared = found
                found, plan = api.choose_gear(geared, values, device=args.device)
                checking = (
                    not getattr(args, "timing_only", False)
                    and getattr(args, "check", None) != "none"
                )
                if checking and found.source is not None:
                    checked = api.bind_gear(geared, values, device=args.device)
            else:
                found = found.select(values)
        except RtgError as e:
            raise in_file(args.file, e) from None
    elif args.define:
        raise UsageError(
            f"-D {args.define[0]}: a compiled stream program has no parameters to set",
            hint=f"set them when compiling: rtgraph compile PROGRAM.rtg -D … -o {args.file}",
        )
    given = [o.flag for o in OPTIONS if o.flag and getattr(args, o.name, o.default) != o.default]
    if given:
        raise UsageError(
            f"{given[0]} cannot apply to {args.file}: a stream program is compiled already",
            hint=f"recompile the .rtg program with {given[0]}, or leave it out",
        )
    compiled = found
    spec = api.device_for(args.device, compiled.device)
    try:
        check_against_device(compiled, spec)
    except RtgError as e:
        raise in_file(args.file, e) from None
    return compiled, spec, checked, plan


def compiled_program(args: argparse.Namespace):
    """The program (None for a compiled ``.json``), its stream program and the device spec."""
    if is_compiled(args):
        return (None, *read_compiled(args))
    options = compile_options(args)
    program = load_program(args)
    spec = device_spec(args, program, options)
    return program, api.compile(program, device=spec, options=options), spec


def refuse_overwriting_inputs(args: argparse.Namespace) -> None:
    """A usage error when an output path is (resolves to, or is a link to) a file the command
    reads: ``rtgraph compile x.rtg -o x.rtg`` must not destroy the program."""
    read: list[Path] = []
    for name in INPUT_ARGS:
        value = getattr(args, name, None)
        if name == "files" and value == []:
            value = [BENCH_MODELS]
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and Path(item).is_file():
                read.append(Path(item))
            elif isinstance(item, str) and Path(item).is_dir():  # bench reads a folder's models
                read.extend(sorted(Path(item).glob("*.rtg")))
    for name in OUTPUT_ARGS:
        target = getattr(args, name, None)
        if not isinstance(target, str):
            continue
        written = [Path(target)]
        if args.command == "profile":
            written = [Path(target) / f for f in PROFILE_FILES]
        for out in written:
            for source in read:
                if out.resolve() == source.resolve() or (out.exists() and out.samefile(source)):
                    flag = "-o" if name == "output" else f"--{name.replace('_', '-')}"
                    raise UsageError(
                        f"{flag} {target} would overwrite the input '{source}'",
                        hint="choose another output path",
                    )


def npz_values(
    args: argparse.Namespace,
    role: str,
    program: Program | None,
    compiled: StreamProgram | None = None,
) -> dict[str, np.ndarray] | None:
    """The arrays of ``--inputs`` (``role`` ``input``) or ``--params`` (``param``), read as
    untrusted data: only the names the program (or the compiled ``.json``) declares."""
    path = args.inputs if role == "input" else args.params
    if not path:
        return None
    if program is not None:
        return load_npz_for(program, path, role)
    assert compiled is not None
    # the sources of derived params too; a derived param's own name is read, then refused by
    # the run's check, which names its source (rtgraph.ir.data.check_params)
    names = [h.name for h in compiled.host_tensors if h.role == role]
    known = list(dict.fromkeys([*declared_names(compiled, role), *names]))
    return load_npz(path, known=known, role=role, owner=compiled.name)
