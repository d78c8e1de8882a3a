"""The ``rtgraph`` command line's arguments: every subcommand, its flags and their help (the
compile options' flags generated from :data:`rtgraph.compiler.options.OPTIONS`)."""

from __future__ import annotations

import argparse
import sys

from rtgraph import __version__
from rtgraph.compiler.options import OPTIONS
from rtgraph.ir.reference import CHECK_MODES, FULL_CHECK_FLOPS, SAMPLE_SIZE

#: The CLI flag of each compile option it sets, and the values each takes (shown as
#: ``{a,b,…}`` in the usage; validated, with a hint, by :class:`CompileOptions`).
FLAGS: dict[str, str] = {o.name: o.flag for o in OPTIONS if o.flag}

CHOICES: dict[str, tuple[str, ...]] = {o.flag: tuple(o.values) for o in OPTIONS if o.values}


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own usage errors → exit 2
        self.print_usage(sys.stderr)
        print(f"rtgraph: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def add_program_args(p: argparse.ArgumentParser, json_too: bool = False) -> None:
    p.add_argument("file", help="a .rtg program" + (" or a compiled .json" if json_too else ""))
    p.add_argument(
        "-D",
        dest="define",
        action="append",
        metavar="NAME=VALUE",
        help="set a program parameter (repeatable)",
    )
    p.add_argument("--device", help="device spec name or TOML path (overrides the program's)")


def add_compile_args(p: argparse.ArgumentParser) -> None:
    """The compile options' flags, their values and help generated from :data:`OPTIONS`."""
    for option in OPTIONS:
        if option.flag is None:
            continue
        values = "; ".join(f"{value} = {what}" for value, what in option.values.items())
        default = option.default_means or option.default
        help_text = f"{option.summary} (default: {default})" + (f" — {values}" if values else "")
        if option.kind == "switch":
            p.add_argument(option.flag, dest=option.name, action="store_true", help=help_text)
            continue
        p.add_argument(
            option.flag,
            dest=option.name,
            default=option.default,
            type=_READERS[option.kind],
            metavar="{" + ",".join(option.values) + "}" if option.values else "N",
            help=help_text,
        )


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


#: How a flag's text becomes the option's value, by :attr:`Option.kind` (argparse refuses
#: an integer flag's non-integer text, exit status 2).
_READERS = {"name": str, "int": int, "names": _names}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="rtgraph", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"rtgraph {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("check", help="parse and check a program (and its races)")
    add_program_args(p, json_too=True)
    p.add_argument(
        "--races",
        action="store_true",
        help="compile and check that every conflicting pair is ordered",
    )

    p = sub.add_parser("compile", help="compile to a stream program")
    add_program_args(p)
    add_compile_args(p)
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.add_argument(
        "--emit",
        default="json",
        choices=("json", "listing", "dot", "ir", "rtg"),
        help="json: the stream program; listing: it, readable; dot: its DAG; ir: the program "
        "after the optimizer (or after --after PASS); rtg: the compiled program as .rtg source "
        "with explicit streams and events (recompile it with --streams explicit)",
    )
    p.add_argument("--after", metavar="PASS", help="with --emit ir: the IR after this pass")

    p = sub.add_parser("explain", help="what each optimizer pass does to a program")
    add_program_args(p)
    add_compile_args(p)

    p = sub.add_parser("eval", help="evaluate with the reference interpreter")
    add_program_args(p)
    add_data_args(p)

    p = sub.add_parser("run", help="compile and run on the emulated device")
    add_program_args(p, json_too=True)
    add_compile_args(p)
    add_data_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object for scripts")
    p.add_argument("--timing-only", action="store_true", help="no numerics (large programs)")
    p.add_argument(
        "--check",
        choices=CHECK_MODES,
        help="check the outputs against the reference interpreter: every element (full), "
        f"up to {SAMPLE_SIZE} per output (sample) or not at all (none); default full up to "
        f"{FULL_CHECK_FLOPS / 1e9:g} GFLOP of arithmetic, sample above",
    )
    p.add_argument("--timeline", metavar="OUT", help="timeline picture (.png, .svg or .pdf)")
    p.add_argument("--window", metavar="START:END", help="zoom the timeline to this span (µs)")
    p.add_argument("--trace", metavar="OUT.json", help="Chrome Trace Event JSON (Perfetto)")
    p.add_argument("--memory-map", metavar="OUT", help="address × time picture of device memory")
    p.add_argument(
        "--memory-snapshot",
        metavar="OUT",
        help="PyTorch memory snapshot of the run-time allocator (--alloc); .pickle for "
        "torch.cuda._memory_viz, else JSON",
    )
    p.add_argument(
        "--memory-plot", metavar="OUT", help="memory over time (allocated vs reserved) picture"
    )
    p.add_argument("--advise", action="store_true", help="append the advisor's findings")

    p = sub.add_parser("advise", help="run and say what to try, with the evidence")
    add_program_args(p, json_too=True)
    add_compile_args(p)

    p = sub.add_parser("profile", help="msprof-style op summary and statistics CSVs")
    add_program_args(p, json_too=True)
    add_compile_args(p)
    p.add_argument("--mode", default="task_trace", choices=("task_trace", "op_trace"))
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument(
        "--schedule",
        metavar="WAIT,WARMUP,ACTIVE[,REPEAT]",
        help="torch.profiler-style step schedule (default: record every step)",
    )
    p.add_argument("-o", "--output", default="profile", help="folder for the CSV files")

    p = sub.add_parser("viz", help="pictures of the stream assignment")
    add_program_args(p, json_too=True)
    add_compile_args(p)
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

    p = sub.add_parser("import", help="an ONNX model as a .rtg program and its params (.npz)")
    p.add_argument("file", help="the .onnx model")
    p.add_argument("-o", "--output", metavar="OUT.rtg", help="default: the model's name + .rtg")
    p.add_argument(
        "--params-out", metavar="OUT.npz", help="the weights (default: OUT's stem + .params.npz)"
    )
    p.add_argument(
        "--dim", action="append", default=[], metavar="NAME=SIZE", help="bind a dynamic dimension"
    )
    p.add_argument("--device", default="ascend-910b", help="the device the program names")

    p = sub.add_parser("devices", help="list the shipped device specs")
    p.add_argument("-v", "--verbose", action="store_true")

    sub.add_parser("ops", help="the table of every op: unit, arguments, attributes, cost")
    return parser


def add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", help=".npz with input arrays (default: generated from --seed)")
    p.add_argument("--params", help=".npz with param arrays (default: generated from --seed)")
    p.add_argument("--seed", type=int, default=0, help="an integer from 0 to 2**63-1 (default 0)")
    p.add_argument(
        "--fill-missing",
        action="store_true",
        help="generate the inputs/params --inputs/--params lack from --seed (default: an error)",
    )
