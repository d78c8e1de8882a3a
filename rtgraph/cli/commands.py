"""The ``rtgraph`` subcommands, one function each (``COMMANDS`` maps their names)."""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from rtgraph import api, serving
from rtgraph.cli.arguments import (
    BENCH_MODELS,
    compile_options,
    compiled_program,
    device_spec,
    is_compiled,
    load_program,
    npz_values,
    parse_defines,
    read_compiled,
)
from rtgraph.cli.cluster_run import bench_scaling
from rtgraph.cli.completion import SCRIPTS
from rtgraph.cli.gears import each_gear, gear_heading, geared_text, still_dynamic
from rtgraph.cli.parser import build_parser
from rtgraph.cli.run import cmd_report, cmd_run
from rtgraph.compiler.bucket_order import inside
from rtgraph.compiler.memplan import greedy_by_size, plan, read_records_csv
from rtgraph.compiler.optimizer.pipeline import TILING_PASSES, chosen_passes, optimized_ir
from rtgraph.compiler.padding import describe_extents, gear_padding, sizes
from rtgraph.device import describe, list_devices
from rtgraph.errors import RtgError, UsageError
from rtgraph.files import write_atomic
from rtgraph.frontend.onnx_import import import_onnx
from rtgraph.ir.data import check_seed
from rtgraph.ir.interpreter import evaluate
from rtgraph.ir.printing import format_program
from rtgraph.ops import op_table
from rtgraph.reports.advisor import advise, format_advice
from rtgraph.reports.explain import explain
from rtgraph.reports.profiler import check_profile_options, profile, write_csvs
from rtgraph.reports.rtg_source import emit_rtg
from rtgraph.serving import report as serving_report
from rtgraph.stream_program.listing import format_listing, to_dot
from rtgraph.stream_program.races import check_races, describe_race, fix_hint


def cmd_check(args: argparse.Namespace) -> int:
    if is_compiled(args):
        return _report_races(args, *read_compiled(args))
    program = load_program(args)
    api.check_ranges(program, device=args.device)  # a range padding would corrupt
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
    options = compile_options(args)
    program = load_program(args)
    if args.after is not None and args.emit != "ir":
        raise UsageError(
            "--after needs --emit ir", hint="rtgraph compile FILE --emit ir --after PASS"
        )
    if args.emit == "ir":
        bound = options.for_device(device_spec(args, program, options))
        text = format_program(optimized_ir(program, bound, args.after)) + "\n"
        _write(args, text)
        return 0
    dynamic = still_dynamic(args, program)
    if dynamic is not None:
        _write(args, geared_text(args, dynamic, device_spec(args, program, options), options))
        return 0
    compiled = api.compile(program, device=device_spec(args, program, options), options=options)
    if args.emit == "listing":
        text = format_listing(compiled)
    elif args.emit == "dot":
        text = to_dot(compiled)
    elif args.emit == "rtg":
        bound = options.for_device(device_spec(args, program, options))
        text = emit_rtg(optimized_ir(program, bound), compiled)
    else:
        text = compiled.to_json(indent=1)
    _write(args, text)
    return 0


def _write(args: argparse.Namespace, text: str) -> None:
    if args.output:
        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)


def cmd_explain(args: argparse.Namespace) -> int:
    options = compile_options(args)
    program = load_program(args)
    gears = each_gear(args, program)  # the program itself when it has none
    by_values = {tuple(values.items()): bound for values, bound in gears}
    ranges = {n: r for n, r in program.ranges.items() if any(n in v for v, _ in gears)}
    for values, bound in gears:
        heading = gear_heading(values, program.gears, program.ranges)
        print(f"## gear {heading}\n" if heading else "", end="")
        marks, padded = gear_padding(ranges, values, lambda v: by_values[tuple(v.items())])
        if marks:
            print(f"told at run time: {describe_extents(bound, marks)}\n")
        changed: set[str] = set()
        text = explain(bound, options.for_device(device_spec(args, bound, options)), changed)
        if padded and changed & set(TILING_PASSES):  # what rtgraph.compile_gears does then
            print(
                "also compiled without tiling: a padded run takes whichever program its real "
                "shapes time faster\n"
            )
        middle = inside(values, program.gears, ranges) if padded else None
        if middle is not None and "order_for_overlap" in chosen_passes(options):
            at = sizes({n: v for n, v in middle.items() if v != values[n]})
            print(
                f"also compiled in the op order chosen for {at}, where that order differs: a "
                "padded run takes whichever program its real shapes time faster\n"
            )
        print(text)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    check_seed(args.seed)
    program = load_program(args)
    inputs, params = npz_values(args, "input", program), npz_values(args, "param", program)
    outputs = evaluate(
        program, inputs=inputs, params=params, seed=args.seed, fill_missing=args.fill_missing
    )
    for name, value in outputs.items():
        print(
            f"{name}: {program.tensors[name].type}  mean {float(value.mean()):.6g}  "
            f"absmax {float(abs(value).max()) if value.size else 0:.6g}"
        )
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    """``rtgraph completion bash|zsh``: the shell script, generated from the parser."""
    print(SCRIPTS[args.shell](build_parser()), end="")
    return 0


def cmd_advise(args: argparse.Namespace) -> int:
    _, compiled, spec = compiled_program(args)
    result = api.run(compiled, device=spec, numerics=False)
    print(format_advice(advise(result, compiled, spec)))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    check_profile_options(mode=args.mode, iterations=args.iterations, schedule=args.schedule)
    _, compiled, spec = compiled_program(args)
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

    compared = [compile_options(args, streams=p) for p in (args.compare or "").split(",") if p]
    if compared and is_compiled(args):
        raise UsageError(f"--compare recompiles the program; {args.file} is compiled already")
    if compared:
        program = load_program(args)
        spec = device_spec(args, program, compile_options(args))
        compiled = {str(o.streams): api.compile(program, device=spec, options=o) for o in compared}
        figure = plot_dag_compare(compiled)
    else:
        figure = plot_dag(compiled_program(args)[1])
    save_figure(figure, args.dag)
    print(f"wrote {args.dag}")
    return 0


def _bench_defines(pairs: Sequence[str] | None) -> dict[str, dict[str, int]]:
    """``-D NAME=VALUE`` (every model declaring NAME: key ``*``) and ``-D MODEL.NAME=VALUE``."""
    out: dict[str, dict[str, int]] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        model, dot, name = key.rpartition(".")
        parsed = parse_defines([f"{name}={value}" if sep else pair])
        out.setdefault(model if dot else "*", {}).update(parsed)
    return out


def cmd_bench(args: argparse.Namespace) -> int:
    # matplotlib (rtgraph.bench draws its figure): loaded only when a benchmark is asked for
    from rtgraph import bench as headline

    def listed(value: str | None, default: Sequence[str]) -> list[str]:
        return [v for v in value.split(",") if v] if value else list(default)

    if getattr(args, "scaling", False):
        return bench_scaling(args, _bench_defines(args.define))
    paths = args.files or [BENCH_MODELS]
    report = headline.bench(
        paths,
        device=args.device or "ascend-910b",
        progress=not args.quiet,
        policies=listed(args.streams, headline.POLICIES),
        memories=listed(args.memory, headline.MEMORY_PLANS),
        allocs=listed(args.alloc, headline.ALLOC_MODES),
        precisions=listed(args.precisions, ()),
        params=_bench_defines(args.define),
        jobs=args.jobs,
    )
    text = json.dumps(report.to_json(), indent=1) if args.json else report.markdown()
    if args.figure:
        # matplotlib: loaded only when a picture is asked for
        from rtgraph.bench.figure import report_figure
        from rtgraph.reports.style import save_figure

        save_figure(report_figure(report), args.figure)
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
    placement = plan(
        records,
        alignment=args.alignment,
        method=args.method,
        time_limit=args.time_limit,
        capacity=args.capacity,
    )
    fits = None if args.capacity is None else placement.height <= args.capacity
    if args.json:
        print(
            json.dumps(
                {
                    "height": placement.height,
                    "capacity": args.capacity,
                    "fits": fits,
                    "lower_bound": placement.lower_bound,
                    "proven": placement.proven,
                    "gap": placement.gap,
                    "time_to_best": round(placement.time_to_best, 3),
                    "method": placement.method,
                    "offsets": placement.offsets,
                }
            )
        )
        return 0 if fits is not False else 1
    baseline = greedy_by_size(records, alignment=args.alignment)
    total = sum(r.size for r in records)
    found = f"found after {placement.time_to_best:.2f} s" if placement.time_to_best else ""
    print(f"{args.records}: {len(records)} buffers")
    print(f"  height          {placement.height:>14,}  ({placement.method}) {found}".rstrip())
    why = "proven optimal" if placement.proven else f"gap {placement.gap:.2%}, not proven"
    print(f"  lower bound     {placement.lower_bound:>14,}  ({why})")
    if fits is not None:
        verdict = "fits" if fits else f"does not fit: {placement.height - args.capacity:,} over"
        print(f"  capacity        {args.capacity:>14,}  ({verdict})")
    method = "" if baseline.method == "greedy_by_size" else f"  ({baseline.method})"
    print(f"  greedy-by-size  {baseline.height:>14,}{method}")
    print(f"  no reuse        {total:>14,}  (saving {1 - placement.height / max(total, 1):.1%})")
    return 0 if fits is not False else 1


def cmd_import(args: argparse.Namespace) -> int:
    """``rtgraph import``: the model as ``.rtg`` text and its weights as an ``.npz``."""
    dims = {}
    for item in args.dim:
        name, _, size = item.partition("=")
        if not name or not size.isdigit():
            raise UsageError(f"--dim {item}: expected NAME=SIZE", hint="e.g. --dim batch=8")
        dims[name] = int(size)
    imported = import_onnx(args.file, device=args.device, dims=dims)
    rtg = Path(args.output or f"{Path(args.file).stem}.rtg")
    weights = Path(args.params_out or rtg.with_name(f"{rtg.stem}.params.npz"))
    buffer = io.BytesIO()
    np.savez(buffer, **imported.params)
    write_atomic(weights, buffer.getvalue())
    write_atomic(rtg, imported.text)
    size = sum(a.nbytes for a in imported.params.values())
    print(
        f"wrote {rtg} ({imported.text.count(chr(10))} lines) and {weights} "
        f"({len(imported.params)} params, {size:,} bytes)"
    )
    print(f"run it: rtgraph run {rtg} --params {weights}")
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


def cmd_serve(args: argparse.Namespace) -> int:
    """``rtgraph serve``: requests through batching policies on the emulated device's step
    costs; a table or JSON per policy, pictures with --out, the capacity under an SLO."""
    for flag, value, least in (
        ("--seeds", args.seeds, 1),
        ("--denoise-steps", args.denoise_steps, 1),
    ):
        if value < least:
            raise UsageError(f"{flag} {value}: at least {least}")
    if args.capacity and not args.slo:
        raise UsageError("--capacity needs --slo", hint="e.g. --slo ttft_p90=2s,tbt_p99=200ms")
    kind, rate, cv, trace = serving.parse_arrivals(args.arrivals)
    if args.capacity and kind == "trace":
        raise UsageError("--capacity varies a generated rate", hint="use poisson:R or gamma:R,CV")
    whole = float("inf") if kind == "trace" else 60.0
    duration = serving.parse_duration(args.duration) if args.duration else whole
    policies = [serving.parse_policy(p) for p in args.batching or ["none"]]
    table = serving.StepTable.for_model(args.file, parse_defines(args.define), args.device)
    slo = serving.parse_slo(args.slo, table.kind == "decoder") if args.slo else None
    if args.profile:
        table.load(args.profile)
    lengths = serving.Lengths(args.prompt_len, args.output_len, args.prompts)
    scenario = serving_report.Scenario(kind, rate, cv, trace, duration, args.seed, lengths)
    prep = serving.parse_duration(args.host_prep, "--host-prep")
    workload = serving.Workload(
        args.denoise_steps, args.merge, args.kv_block, args.kv_blocks, prep, args.preempt
    )
    if args.capacity:
        doc = serving_report.run_capacity(scenario, policies, table, workload, slo, args.seeds)
        text = serving_report.format_capacity(doc)
    else:
        doc, outcomes = serving_report.run_policies(scenario, policies, table, workload, slo)
        text = serving_report.format_runs(doc)
        if args.out:
            # The pictures load matplotlib: only when asked for (see docs/architecture.md).
            from rtgraph.serving.pictures import write_pictures

            for path in write_pictures(
                args.out, doc, outcomes, scenario, policies, table, workload
            ):
                text += f"wrote {path}\n"
    if args.profile:
        table.save(args.profile)
    print(serving_report.to_json(doc) if args.json else text, end="")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """``rtgraph sweep``: every point of a sweep file, the tidy table and its sidecar."""
    # Dask (engine) and matplotlib (the pictures): loaded only when a sweep is asked for.
    from rtgraph.reports.sweep_plots import plot_columns
    from rtgraph.sweep import run_sweep
    from rtgraph.sweep.table import column

    out = Path(args.out or f"{Path(args.file).stem}.sweep")
    done = run_sweep(
        args.file,
        out,
        workers=args.workers,
        scheduler=args.scheduler,
        resume=args.resume,
        pareto=args.pareto,
        progress=not args.json and sys.stdout.isatty(),
    )
    rows, pictures = done.rows, []
    pairs = [p.split(",") for p in args.plot]
    if args.pareto:
        first, second = (c.lstrip("-") for c in args.pareto.split(",")[:2])
        pairs.insert(0, [first, second, "pareto"])
    for pair in pairs:
        if len(pair) < 2 or not all(pair[:2]):
            raise UsageError(f"--plot {','.join(pair)}: expected X,Y", hint="makespan,memory")
        x, y = column(rows, pair[0]), column(rows, pair[1])
        name = "pareto.png" if pair[2:] else f"{x}-vs-{y}.png"
        front = [bool(r["pareto"]) for r in rows] if pair[2:] else None
        pictures.append(plot_columns(rows, x, y, out / name, front=front))
    if args.json:
        print(json.dumps(done.meta, indent=1))
        return 0
    meta = done.meta
    refused = sum(1 for r in rows if r["error"])
    print(
        f"{meta['points']} points: {meta['computed']} computed, {meta['cached']} from the "
        f"cache ({meta['engine']}, {meta['workers']} worker(s), {meta['wall_s']:.1f} s)"
        + (f"; {refused} refused (see the error column)" if refused else "")
    )
    if meta.get("dashboard"):
        print(f"dashboard: {meta['dashboard']}")
    if args.pareto:
        print(f"Pareto front of {args.pareto}: {sum(r['pareto'] for r in rows)} points")
    for path in [*done.files, *pictures]:
        print(f"wrote {path}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "check": cmd_check,
    "compile": cmd_compile,
    "explain": cmd_explain,
    "eval": cmd_eval,
    "run": cmd_run,
    "report": cmd_report,
    "completion": cmd_completion,
    "plan-memory": cmd_plan_memory,
    "import": cmd_import,
    "devices": cmd_devices,
    "ops": cmd_ops,
    "advise": cmd_advise,
    "profile": cmd_profile,
    "viz": cmd_viz,
    "bench": cmd_bench,
    "serve": cmd_serve,
    "sweep": cmd_sweep,
}
