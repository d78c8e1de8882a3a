"""``rtgraph run FILE --cluster NAME``: compile for a cluster (placement, ``--data-parallel``,
``--pipeline`` or ``--tensor-parallel``), run every rank in one timeline, report per device and
per link, and check the outputs against the single-device reference; and ``rtgraph bench
--scaling``, the table of 1 to 8 devices under each parallelism."""

from __future__ import annotations

import argparse
import json

from rtgraph import cluster_api
from rtgraph.cli.arguments import compile_options, load_program
from rtgraph.errors import UsageError
from rtgraph.files import write_atomic
from rtgraph.ir.data import check_seed
from rtgraph.reports.cluster_summary import bubble_fraction, device_figures, summary_lines
from rtgraph.reports.cluster_trace import write_cluster_trace

#: ``run`` flags a cluster run does not take (yet), with why.
UNSUPPORTED = {
    "inputs": "--inputs (the cluster run generates the whole program's data from --seed)",
    "params": "--params (the cluster run generates the whole program's data from --seed)",
    "memory_map": "--memory-map",
    "memory_snapshot": "--memory-snapshot",
    "memory_plot": "--memory-plot",
    "html": "--html",
    "advise": "--advise",
}


def cmd_run_cluster(args: argparse.Namespace) -> int:
    """Run on ``args.cluster``; prints the cluster summary (or ``--json``)."""
    for name, flag in UNSUPPORTED.items():
        if getattr(args, name, None):
            raise UsageError(f"{flag} is not available with --cluster yet")
    check_seed(args.seed)
    if sum(n > 1 for n in (args.data_parallel, args.pipeline, args.tensor_parallel)) > 1:
        raise UsageError("use one of --data-parallel, --pipeline and --tensor-parallel")
    if args.micro_batches > 1 and args.pipeline == 1:
        raise UsageError("--micro-batches needs --pipeline P (P > 1)")
    options = compile_options(args)
    program = load_program(args)
    compiled = cluster_api.compile_cluster(
        program,
        cluster=args.cluster,
        data_parallel=args.data_parallel,
        pipeline=args.pipeline,
        micro_batches=args.micro_batches,
        schedule=args.schedule,
        tensor_parallel=args.tensor_parallel,
        batch=args.batch,
        options=options,
    )
    run = cluster_api.run_cluster(compiled, seed=args.seed, numerics=not args.timing_only)
    if args.trace:
        write_cluster_trace(args.trace, run.result)
    if args.timeline:
        # matplotlib: loaded only when a picture is asked for
        from rtgraph.reports.cluster_timeline import write_cluster_timeline

        write_cluster_timeline(args.timeline, run.result)
    if args.json:
        figures = device_figures(run.result)
        data = {
            "program": compiled.name,
            "cluster": compiled.cluster.name,
            "devices": compiled.devices,
            "parallelism": compiled.parallelism,
            "makespan_us": run.makespan_us,
            "bubble_fraction": bubble_fraction(run.result, figures),
            "per_device": [
                {
                    "rank": f.rank,
                    "busy_us": f.busy_us,
                    "utilization": f.utilization,
                    "tasks": f.tasks,
                    "transfers": f.transfers,
                    "memory_peak_bytes": f.memory_peak_bytes,
                }
                for f in figures
            ],
            "check": run.check,
            "stages": compiled.meta.get("stages"),
            "tensor": compiled.meta.get("tensor"),
        }
        print(json.dumps(data, indent=1))
    else:
        print("\n".join(summary_lines(run)))
    return 0


def bench_scaling(args: argparse.Namespace, params: dict[str, dict[str, int]]) -> int:
    """``rtgraph bench --scaling``: 1 to 8 devices under each parallelism (docs/parallel.md)."""
    # matplotlib (rtgraph.bench draws figures): loaded only when a benchmark is asked for
    from rtgraph.bench.scaling import DEFAULT_CLUSTER, DEFAULT_MODELS, scaling

    table = scaling(
        args.files or DEFAULT_MODELS,
        cluster=args.cluster or DEFAULT_CLUSTER,
        micro_batches=args.micro_batches,
        params=params,
    )
    text = json.dumps(table.to_json(), indent=1) if args.json else table.markdown()
    if args.output:
        write_atomic(args.output, text + "\n")
        print(f"wrote {args.output}")
    else:
        print(text)
    return 0
