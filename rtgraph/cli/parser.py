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
        choices = "{" + ",".join(option.values) + "}"
        p.add_argument(
            option.flag,
            dest=option.name,
            default=option.default,
            type=_READERS[option.kind],
            metavar=choices if option.values else _METAVARS[option.kind],
            help=help_text,
        )


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


#: The placeholder a flag's help shows for its value, by kind (a vocabulary shows its names).
_METAVARS = {"int": "N", "name": "NAME", "names": "NAMES", "text": "TEXT"}


#: How a flag's text becomes the option's value, by :attr:`Option.kind` (argparse refuses
#: an integer flag's non-integer text, exit status 2).
_READERS = {"name": str, "int": int, "names": _names, "text": str}


DESCRIPTION = """\
Compile .rtg operator programs for an emulated Ascend-style NPU and run them: the task DAG
on the Cube, Vector and DMA units, streams and events, device memory, the timeline."""

EXAMPLES = """\
examples:
  rtgraph run models/attention.rtg                      run, check against the reference
  rtgraph run models/attention.rtg --streams list --timeline t.png
  rtgraph report models/attention.rtg -D S=512          one HTML page: timeline, memory, advice
  rtgraph compile models/mlp.rtg --emit listing         the stream program, readable
  rtgraph explain models/transformer_naive.rtg -O2      what the optimizer did
  rtgraph bench models/ -D S=256 -o bench.md            policies x memory plans x allocators
  rtgraph import model.onnx && rtgraph run model.rtg    an ONNX model
  rtgraph completion bash > ~/.local/share/bash-completion/completions/rtgraph

Exit status: 0 done, 1 an error in the input (file:line:col, the line, a caret, a hint),
2 a usage error. `rtgraph COMMAND --help` lists a command's flags."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="rtgraph",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    add_run_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object for scripts")
    p.add_argument("--html", metavar="OUT.html", help="the run as a self-contained HTML page")
    p.add_argument("--advise", action="store_true", help="append the advisor's findings")
    p.add_argument(
        "--shapes",
        action="append",
        metavar="NAME=V1,V2,…|LO..HI",
        help="one run per value of a parameter (a geared program's gears, chosen without "
        "compiling; a range's values padded to the gear above), a table row each; LO..HI runs "
        "every value between; repeat for another parameter (every combination)",
    )
    p.add_argument(
        "--cluster",
        metavar="NAME|FILE.toml",
        help="run on a cluster (toy, toy-2x4, ascend-910b-x8 or a file): by the program's "
        "device[i] blocks, or data parallel (--data-parallel)",
    )
    p.add_argument(
        "--data-parallel",
        type=int,
        default=1,
        metavar="N",
        help="N replicas, each on 1/N of the batch (the parameter --batch names); needs --cluster",
    )
    p.add_argument(
        "--tensor-parallel",
        type=int,
        default=1,
        metavar="N",
        help="cut the weight matrices over N devices, Megatron-style (column- then "
        "row-parallel matmuls, an allreduce after each pair); needs --cluster",
    )
    p.add_argument(
        "--pipeline",
        type=int,
        default=1,
        metavar="P",
        help="P pipeline stages, one device each: the program's device[i] blocks, else "
        "balanced by the cost model; needs --cluster",
    )
    p.add_argument(
        "--micro-batches",
        type=int,
        default=1,
        metavar="M",
        help="cut the batch (--batch) into M micro-batches that flow through the pipeline",
    )
    p.add_argument(
        "--schedule",
        choices=("gpipe", "1f1b"),
        default="1f1b",
        help="the pipeline's schedule (default 1f1b)",
    )
    p.add_argument(
        "--batch",
        default="B",
        metavar="PARAM",
        help="the program parameter --data-parallel and --micro-batches divide (default B)",
    )

    p = sub.add_parser(
        "report",
        help="run and write a self-contained HTML page: summary, timeline, memory, advice, check",
    )
    add_run_args(p)
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT.html",
        help="where to write it (default: FILE's name + .html)",
    )

    p = sub.add_parser("advise", help="run and say what to try, with the evidence")
    add_program_args(p, json_too=True)
    add_compile_args(p)

    p = sub.add_parser("profile", help="msprof-style op summary and statistics CSVs")
    add_program_args(p, json_too=True)
    add_compile_args(p)
    p.add_argument(
        "--mode",
        default="task_trace",
        choices=("task_trace", "op_trace"),
        help="task_trace: task times with msprof's task-trace overhead (910B 7 %%); op_trace: "
        "also AI Core pipe columns, at the op-trace overhead (910B 20 %%); default task_trace",
    )
    p.add_argument("--iterations", type=int, default=1, help="runs to profile (default 1)")
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
    p.add_argument("--json", action="store_true", help="the plan and its figures as JSON")
    p.add_argument(
        "--alignment", type=int, default=1, help="round every offset up to this (default 1)"
    )
    p.add_argument(
        "--method",
        default="best",
        choices=("heuristic", "exact", "best", "fast"),
        help="heuristic: the one-pass portfolio (alias fast); exact: search to a proof or the "
        "time limit; best (default): the same search under a fixed work budget, deterministic",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        metavar="S",
        help="seconds the search may take (default: 10 for exact, none for best)",
    )
    p.add_argument(
        "--capacity",
        type=int,
        metavar="BYTES",
        help="the pool the plan must fit: the search looks for a plan within it first (as "
        "MiniMalloc does); exit status 1 when the plan found does not fit",
    )

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
    p.add_argument(
        "--precisions",
        metavar="P1,P2",
        help="add the precision table for these forms, e.g. f32,f16,int8,auto (f32 always runs: "
        "the baseline)",
    )
    p.add_argument("--json", action="store_true", help="the figures as JSON instead of tables")
    p.add_argument("--figure", metavar="OUT", help="also save the picture (.png, .svg or .pdf)")
    p.add_argument("-o", "--output", metavar="OUT.md", help="write the tables here")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        metavar="N",
        help="processes benchmarking models side by side (default: one per CPU; the figures "
        "are the same for every N)",
    )
    p.add_argument(
        "-D",
        dest="define",
        action="append",
        metavar="[MODEL.]NAME=VALUE",
        help="set a program parameter in every model that declares it, or in MODEL only "
        "(repeatable)",
    )
    p.add_argument(
        "--scaling",
        action="store_true",
        help="the scaling table instead: 1, 2, 4, 8 devices of --cluster under data, pipeline "
        "and tensor parallelism (default models: layer_stack, mlp_train)",
    )
    p.add_argument("--cluster", help="the cluster of --scaling (default: ascend-910b-x8)")
    p.add_argument(
        "--micro-batches",
        type=int,
        default=8,
        metavar="M",
        help="micro-batches of every --scaling pipeline point (at least the devices; default 8)",
    )

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

    p = sub.add_parser(
        "serve", help="serve requests: batching policies, latency percentiles, capacity"
    )
    add_program_args(p)
    p.add_argument(
        "--arrivals",
        required=True,
        help="poisson:RATE, gamma:RATE,CV (RATE requests/s) or trace:FILE.csv",
    )
    p.add_argument("--duration", help="arrivals over this long (default 60s; a trace: all of it)")
    p.add_argument("--seed", type=int, default=0, help="the arrivals' seed (default 0)")
    p.add_argument(
        "--batching",
        action="append",
        metavar="POLICY",
        help="none, static:B, dynamic:max=B,wait=T or continuous[:max=B][,budget=T] (chunked "
        "prefill under a per-iteration token budget); repeat to compare "
        "(default: none)",
    )
    p.add_argument(
        "--merge", action="store_true", help="serve identical waiting requests once (merging)"
    )
    p.add_argument(
        "--denoise-steps", type=int, default=50, help="UNet steps per image request (50)"
    )
    p.add_argument("--prompt-len", default="128", help="N, A-B or exp:M tokens (128)")
    p.add_argument("--output-len", default="128", help="N, A-B or exp:M tokens (128)")
    p.add_argument(
        "--prompts",
        type=int,
        default=0,
        help="draw prompts from a catalogue of this many (Zipf); 0: every request distinct",
    )
    p.add_argument(
        "--host-prep",
        default="0s",
        help="host CPU time per request before it can be batched, overlapping the device (0s)",
    )
    p.add_argument("--kv-block", type=int, default=16, help="tokens per KV block (16)")
    p.add_argument("--kv-blocks", type=int, help="KV blocks in the pool (default: from memory)")
    p.add_argument(
        "--preempt",
        default="recompute",
        choices=("recompute", "swap"),
        help="when the KV cache is full: recompute the newest sequence, or swap it to the host",
    )
    p.add_argument("--slo", help="e.g. ttft_p90=2s,tbt_p99=200ms (terms: queue, ttft, tbt, e2e)")
    p.add_argument(
        "--capacity", action="store_true", help="the largest rate meeting --slo, per policy"
    )
    p.add_argument("--seeds", type=int, default=5, help="seeds per rate with --capacity (5)")
    p.add_argument("--json", action="store_true", help="one JSON object for scripts")
    p.add_argument("--profile", metavar="STEPS.json", help="step costs: reuse and save here")
    p.add_argument("--out", metavar="DIR", help="write summary.json and the pictures here")

    p = sub.add_parser(
        "sweep",
        help="compile and run every point of a sweep file (on Dask), one tidy table",
    )
    p.add_argument("file", help="the sweep file (.toml: [sweep], [axes], [[exclude]])")
    p.add_argument(
        "--out", metavar="DIR", help="output folder (default: the file's stem + '.sweep')"
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="local Dask cluster of N worker processes (default: one per CPU); 1 runs the "
        "points here, one after another (no Dask)",
    )
    where.add_argument(
        "--scheduler", metavar="ADDR", help="an existing Dask cluster, e.g. tcp://host:8786"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted sweep in --out: only the missing points are computed",
    )
    p.add_argument(
        "--pareto",
        metavar="A,B",
        help="mark the Pareto front of these columns (minimised; -A maximises), e.g. "
        "makespan,memory; also draws pareto.png",
    )
    p.add_argument(
        "--plot",
        action="append",
        default=[],
        metavar="X,Y",
        help="draw column Y against column X as X-vs-Y.png (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print the sidecar (sweep.json) instead")

    p = sub.add_parser("completion", help="a shell completion script, generated from these flags")
    p.add_argument("shell", choices=("bash", "zsh"), help="the shell to write it for")

    p = sub.add_parser("devices", help="list the shipped device specs")
    p.add_argument("-v", "--verbose", action="store_true", help="every figure of each spec")

    sub.add_parser("ops", help="the table of every op: unit, arguments, attributes, cost")
    return parser


def add_run_args(p: argparse.ArgumentParser) -> None:
    """What ``run`` and ``report`` share: the program, compile and data flags, the check and
    the pictures and traces a run can write."""
    add_program_args(p, json_too=True)
    add_compile_args(p)
    add_data_args(p)
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


def add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", help=".npz with input arrays (default: generated from --seed)")
    p.add_argument("--params", help=".npz with param arrays (default: generated from --seed)")
    p.add_argument("--seed", type=int, default=0, help="an integer from 0 to 2**63-1 (default 0)")
    p.add_argument(
        "--fill-missing",
        action="store_true",
        help="generate the inputs/params --inputs/--params lack from --seed (default: an error)",
    )
