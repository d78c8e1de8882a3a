"""The ``rtgraph`` command line.

Exit status: 0 success, 1 a user error in the input (reported as ``file:line:col: error: …``),
2 a usage error. Files are written whole or not at all (:func:`rtgraph.files.write_atomic`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rtgraph import __version__, api
from rtgraph.compiler.memplan import greedy_by_size, plan, read_records_csv
from rtgraph.compiler.options import OPTIONS, CompileOptions, OptionError
from rtgraph.device import describe, list_devices
from rtgraph.errors import RtgError, UsageError
from rtgraph.files import write_atomic
from rtgraph.ir.interpreter import evaluate, load_npz
from rtgraph.ops import op_table
from rtgraph.reports.advisor import advise, format_advice
from rtgraph.reports.profiler import profile, write_csvs
from rtgraph.reports.trace import write_trace
from rtgraph.stream_program.listing import compile_report, format_listing, to_dot
from rtgraph.stream_program.program import StreamProgram
from rtgraph.stream_program.races import check_races, describe_race, fix_hint

#: The CLI flag of each compile option it sets, and the values each takes (shown as
#: ``{a,b,…}`` in the usage; validated, with a hint, by :class:`CompileOptions`).
FLAGS: dict[str, str] = {o.name: o.flag for o in OPTIONS if o.flag}
CHOICES: dict[str, tuple[str, ...]] = {o.flag: tuple(o.values) for o in OPTIONS if o.values}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own usage errors → exit 2
        self.print_usage(sys.stderr)
        print(f"rtgraph: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _params(pairs: Sequence[str] | None) -> dict[str, int]:
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


def _add_program_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a .rtg program")
    p.add_argument(
        "-D",
        dest="define",
        action="append",
        metavar="NAME=VALUE",
        help="set a program parameter (repeatable)",
    )
    p.add_argument("--device", help="device spec name or TOML path (overrides the program's)")


def _add_compile_args(p: argparse.ArgumentParser) -> None:
    """The compile options' flags, their values and help generated from :data:`OPTIONS`."""
    for option in OPTIONS:
        if option.flag is None:
            continue
        values = "; ".join(f"{value} = {what}" for value, what in option.values.items())
        default = option.default_means or option.default
        p.add_argument(
            option.flag,
            dest=option.name,
            default=option.default,
            type=str if option.values else int,
            metavar="{" + ",".join(option.values) + "}" if option.values else "N",
            help=f"{option.summary} (default: {default})" + (f" — {values}" if values else ""),
        )


def _options(args: argparse.Namespace, **overrides: object) -> CompileOptions:
    """The one :class:`CompileOptions` the command's flags ask for (a bad value: exit 2)."""
    chosen = {name: getattr(args, name) for name in FLAGS if hasattr(args, name)}
    try:
        return CompileOptions(**{**chosen, **overrides})  # type: ignore[arg-type]
    except OptionError as e:
        raise UsageError(f"{FLAGS[e.option]} {e.value}: {e.problem}", hint=e.hint) from None


def _spec(args: argparse.Namespace, program, options: CompileOptions):
    """The device spec the command runs on: --device (else the program's), with the options'
    overrides (the host's batch size) applied."""
    return options.for_device(api.device_for(args.device, program.device)).target


def _load(args: argparse.Namespace):
    return api.load(args.file, _params(args.define), device=args.device)


# --- commands -------------------------------------------------------------------------------


def _read_stream_program(path: str):
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RtgError(f"cannot read {path}: {e}") from None
    return StreamProgram.from_json(text)


def cmd_check(args: argparse.Namespace) -> int:
    if args.file.endswith(".json"):
        compiled = _read_stream_program(args.file)
        return _report_races(args, compiled, api.device_for(args.device, compiled.device))
    program = _load(args)
    if args.races or program.streams:
        spec = api.device_for(args.device, program.device)
        # No memory reuse here: reuse adds compiler-ordered false dependencies that would
        # mask a missing record/wait in the program's own synchronisation.
        compiled = api.compile(program, device=spec, memory="none")
        return _report_races(args, compiled, spec)
    print(f"{args.file}: ok")
    return 0


def _report_races(args: argparse.Namespace, compiled, spec) -> int:
    """Print every race of a stream program (exit 1), or that there are none (exit 0)."""
    report = check_races(
        compiled,
        reorder=spec.scheduler.reorder_window > 0,
        event_mode=spec.scheduler.event_mode,
    )
    errors = [
        RtgError(
            describe_race(compiled, r),
            compiled.tasks[r.second].span,
            hint=fix_hint(compiled, r),
        )
        for r in report.races
    ]
    errors += [
        RtgError(f"wait on event {w.event}, which is never recorded", w.span)
        for w in report.bad_waits
    ]
    if errors:
        for e in errors:
            print(e.render(), file=sys.stderr)
        print(f"{args.file}: {len(errors)} race(s)", file=sys.stderr)
        return 1
    print(f"{args.file}: ok ({len(compiled.tasks)} tasks, no races)")
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    options = _options(args)
    program = _load(args)
    compiled = api.compile(program, device=_spec(args, program, options), options=options)
    if args.emit == "listing":
        text = format_listing(compiled)
    elif args.emit == "dot":
        text = to_dot(compiled)
    else:
        text = compiled.to_json(indent=1)
    if args.output:
        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    program = _load(args)
    inputs = load_npz(args.inputs) if args.inputs else None
    params = load_npz(args.params) if args.params else None
    outputs = evaluate(program, inputs=inputs, params=params, seed=args.seed)
    for name, value in outputs.items():
        print(
            f"{name}: {program.tensors[name].type}  mean {float(value.mean()):.6g}  "
            f"absmax {float(abs(value).max()) if value.size else 0:.6g}"
        )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    options = _options(args)
    program = _load(args)
    spec = _spec(args, program, options)
    compiled = api.compile(program, device=spec, options=options)
    inputs = load_npz(args.inputs) if args.inputs else None
    params = load_npz(args.params) if args.params else None
    result = api.run(
        compiled,
        device=spec,
        inputs=inputs,
        params=params,
        seed=args.seed,
        numerics=not args.timing_only,
    )
    report = {}
    if not args.timing_only:
        reference = evaluate(program, inputs=inputs, params=params, seed=args.seed)
        report = api.compare(result.outputs, reference)
    _write_reports(args, result, compiled, spec)
    if args.json:
        data = result.to_json()
        data["reference"] = {k: v["max_abs"] for k, v in report.items()}
        data["reference_equal"] = {k: v["equal"] for k, v in report.items()}
        data["policy"] = compiled.meta.get("policy")
        print(json.dumps(data, indent=1))
    else:
        print(result.summary())
        print()
        for line in compile_report(compiled):
            print(f"compiler: {line}")
        if report:
            print("\ncheck against the reference interpreter:")
            for name, r in report.items():
                verdict = "bit-equal" if r["equal"] else "DIFFERS"
                print(
                    f"  {name:<16} max abs {r['max_abs']:.3g}  max rel {r['max_rel']:.3g}  "
                    f"{verdict}"
                )
    return 0


def _window(text: str | None) -> tuple[float, float] | None:
    if not text:
        return None
    start, sep, end = text.partition(":")
    try:
        lo = float(start) if start else 0.0
        hi = float(end) if end else float("inf")
    except ValueError:
        raise UsageError(f"--window {text}: expected START:END in µs, e.g. 100:250") from None
    if not sep or hi <= lo:
        raise UsageError(f"--window {text}: expected START:END with START < END")
    return lo, hi


def _write_reports(args: argparse.Namespace, result, compiled, spec) -> None:
    """The pictures and traces a run was asked for (each file written whole or not at all)."""
    if getattr(args, "trace", None):
        write_trace(args.trace, result, compiled, spec)
    if any(getattr(args, name, None) for name in ("timeline", "memory_map", "memory_plot")):
        _write_pictures(args, result, compiled, spec)
    if getattr(args, "advise", False):
        print(format_advice(advise(result, compiled, spec)))


def _write_pictures(args: argparse.Namespace, result, compiled, spec) -> None:
    """The timeline and memory pictures a run was asked for."""
    # matplotlib: loaded only when a picture is asked for
    from rtgraph.reports import allocviz, memoryviz
    from rtgraph.reports.style import save_figure
    from rtgraph.reports.timeline import plot_timeline

    if args.timeline:
        figure = plot_timeline(result, compiled, window=_window(args.window), device=spec)
        save_figure(figure, args.timeline)
    at_runtime = compiled.memory.policy.startswith("runtime:")
    if args.memory_map:
        plot_map = allocviz.plot_allocation_map if at_runtime else memoryviz.plot_memory_map
        save_figure(plot_map(compiled, result), args.memory_map)
    if args.memory_plot:
        plot_use = allocviz.plot_allocator_memory if at_runtime else memoryviz.plot_memory
        save_figure(plot_use(compiled, result), args.memory_plot)


def cmd_advise(args: argparse.Namespace) -> int:
    options = _options(args)
    program = _load(args)
    spec = _spec(args, program, options)
    compiled = api.compile(program, device=spec, options=options)
    result = api.run(compiled, device=spec, numerics=False)
    print(format_advice(advise(result, compiled, spec)))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    options = _options(args)
    program = _load(args)
    spec = _spec(args, program, options)
    compiled = api.compile(program, device=spec, options=options)
    report = profile(
        compiled, spec, mode=args.mode, iterations=args.iterations, schedule=args.schedule
    )
    paths = write_csvs(report, args.output)
    print(report.summary())
    for path in paths:
        print(f"wrote {path}")
    return 0


def cmd_viz(args: argparse.Namespace) -> int:
    # matplotlib: loaded only when a picture is asked for
    from rtgraph.reports.dagviz import plot_dag, plot_dag_compare
    from rtgraph.reports.style import save_figure

    options = _options(args)
    compared = [_options(args, streams=p) for p in (args.compare or "").split(",") if p]
    program = _load(args)
    spec = _spec(args, program, options)
    if compared:
        compiled = {str(o.streams): api.compile(program, device=spec, options=o) for o in compared}
        figure = plot_dag_compare(compiled)
    else:
        figure = plot_dag(api.compile(program, device=spec, options=options))
    save_figure(figure, args.dag)
    print(f"wrote {args.dag}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    # matplotlib (rtgraph.bench draws its figure): loaded only when a benchmark is asked for
    from rtgraph import bench as headline

    def listed(value: str | None, default: Sequence[str]) -> list[str]:
        return [v for v in value.split(",") if v] if value else list(default)

    paths = args.files or [BENCH_MODELS]
    report = headline.bench(
        paths,
        device=args.device or "ascend-910b",
        progress=not args.quiet,
        policies=listed(args.streams, headline.POLICIES),
        memories=listed(args.memory, headline.MEMORY_PLANS),
        allocs=listed(args.alloc, headline.ALLOC_MODES),
    )
    text = json.dumps(report.to_json(), indent=1) if args.json else report.markdown()
    if args.figure:
        # matplotlib: loaded only when a picture is asked for
        from rtgraph.reports.style import save_figure

        save_figure(report.figure(), args.figure)
    if args.output:
        write_atomic(args.output, text + "\n")
        print(f"wrote {args.output}")
    else:
        print(text)
    if args.figure:  # on stderr when stdout carries the tables or the JSON
        print(f"wrote {args.figure}", file=sys.stdout if args.output else sys.stderr)
    return 0


def cmd_plan_memory(args: argparse.Namespace) -> int:
    records = read_records_csv(args.records)
    placement = plan(records, alignment=args.alignment, method=args.method)
    if args.json:
        print(
            json.dumps(
                {
                    "height": placement.height,
                    "lower_bound": placement.lower_bound,
                    "method": placement.method,
                    "offsets": placement.offsets,
                }
            )
        )
        return 0
    baseline = greedy_by_size(records, alignment=args.alignment)
    total = sum(r.size for r in records)
    print(f"{args.records}: {len(records)} buffers")
    print(f"  height          {placement.height:>14,}  ({placement.method})")
    print(f"  lower bound     {placement.lower_bound:>14,}  (max live)")
    print(f"  greedy-by-size  {baseline.height:>14,}")
    print(f"  no reuse        {total:>14,}  (saving {1 - placement.height / max(total, 1):.1%})")
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    print(
        describe(list_devices())
        if args.verbose is False
        else "\n\n".join(describe([d]) for d in list_devices())
    )
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    print(op_table(), end="")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "check": cmd_check,
    "compile": cmd_compile,
    "eval": cmd_eval,
    "run": cmd_run,
    "plan-memory": cmd_plan_memory,
    "devices": cmd_devices,
    "ops": cmd_ops,
    "advise": cmd_advise,
    "profile": cmd_profile,
    "viz": cmd_viz,
    "bench": cmd_bench,
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rtgraph", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"rtgraph {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("check", help="parse and check a program (and its races)")
    _add_program_args(p)
    p.add_argument(
        "--races",
        action="store_true",
        help="compile and check that every conflicting pair is ordered",
    )

    p = sub.add_parser("compile", help="compile to a stream program")
    _add_program_args(p)
    _add_compile_args(p)
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.add_argument("--emit", default="json", choices=("json", "listing", "dot"))

    p = sub.add_parser("eval", help="evaluate with the reference interpreter")
    _add_program_args(p)
    _add_data_args(p)

    p = sub.add_parser("run", help="compile and run on the emulated device")
    _add_program_args(p)
    _add_compile_args(p)
    _add_data_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object for scripts")
    p.add_argument("--timing-only", action="store_true", help="no numerics (large programs)")
    p.add_argument("--timeline", metavar="OUT", help="timeline picture (.png, .svg or .pdf)")
    p.add_argument("--window", metavar="START:END", help="zoom the timeline to this span (µs)")
    p.add_argument("--trace", metavar="OUT.json", help="Chrome Trace Event JSON (Perfetto)")
    p.add_argument("--memory-map", metavar="OUT", help="address × time picture of device memory")
    p.add_argument(
        "--memory-plot", metavar="OUT", help="memory over time (allocated vs reserved) picture"
    )
    p.add_argument("--advise", action="store_true", help="append the advisor's findings")

    p = sub.add_parser("advise", help="run and say what to try, with the evidence")
    _add_program_args(p)
    _add_compile_args(p)

    p = sub.add_parser("profile", help="msprof-style op summary and statistics CSVs")
    _add_program_args(p)
    _add_compile_args(p)
    p.add_argument("--mode", default="task_trace", choices=("task_trace", "op_trace"))
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument(
        "--schedule",
        metavar="WAIT,WARMUP,ACTIVE[,REPEAT]",
        help="torch.profiler-style step schedule (default: record every step)",
    )
    p.add_argument("-o", "--output", default="profile", help="folder for the CSV files")

    p = sub.add_parser("viz", help="pictures of the stream assignment")
    _add_program_args(p)
    _add_compile_args(p)
    p.add_argument("--dag", required=True, metavar="OUT", help="DAG picture (.png, .svg, .pdf)")
    p.add_argument("--compare", metavar="P1,P2", help="policies side by side, e.g. single,by-unit")

    p = sub.add_parser("plan-memory", help="plan offsets for id,lower,upper,size records")
    p.add_argument("records", help="a CSV file in MiniMalloc's id,lower,upper,size format")
    p.add_argument("--json", action="store_true")
    p.add_argument("--alignment", type=int, default=1)
    p.add_argument("--method", default="best", choices=("fast", "best"))

    p = sub.add_parser(
        "bench",
        help="the headline comparison: stream policies, memory plans and allocators per model",
    )
    p.add_argument("files", nargs="*", help=".rtg files or folders of them (default: ./models)")
    p.add_argument("--device", help="device spec name or TOML path (default: ascend-910b)")
    p.add_argument(
        "--streams", metavar="P1,P2", help="policies beside single (default: by-unit,list)"
    )
    p.add_argument(
        "--memory", metavar="M1,M2", help="memory plans (default: stream-ordered,greedy,none)"
    )
    p.add_argument("--alloc", metavar="A1,A2", help="allocators (default: direct,pool,mixed)")
    p.add_argument("--json", action="store_true", help="the figures as JSON instead of tables")
    p.add_argument("--figure", metavar="OUT", help="also save the picture (.png, .svg or .pdf)")
    p.add_argument("-o", "--output", metavar="OUT.md", help="write the tables here")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    p = sub.add_parser("devices", help="list the shipped device specs")
    p.add_argument("-v", "--verbose", action="store_true")

    sub.add_parser("ops", help="the table of every op: unit, arguments, attributes, cost")
    return parser


def _add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", help=".npz with input arrays (default: generated from --seed)")
    p.add_argument("--params", help=".npz with param arrays (default: generated from --seed)")
    p.add_argument("--seed", type=int, default=0)


#: The arguments that name files a command reads, and those that name files it writes.
INPUT_ARGS = ("file", "files", "inputs", "params", "device", "records")
OUTPUT_ARGS = ("output", "timeline", "trace", "memory_map", "memory_plot", "dag", "figure")
#: The folder ``rtgraph bench`` reads when given no files.
BENCH_MODELS = "models"
#: What ``profile -o FOLDER`` writes inside its folder.
PROFILE_FILES = ("op_summary.csv", "op_statistic.csv")


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        refuse_overwriting_inputs(args)
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(e.render(), file=sys.stderr)
        return 2
    except RtgError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except RecursionError:
        print("rtgraph: error: input nested too deeply", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
