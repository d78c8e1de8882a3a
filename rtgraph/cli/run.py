"""``rtgraph run`` and ``rtgraph report``: one run on the emulated device, its check against
the reference interpreter, and the pictures, traces and advice asked for. A geared program's
run chooses its gear (padding a ranged parameter's value to the gear above:
:mod:`rtgraph.compiler.padding`) and is checked against its source bound at the values run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rtgraph import api
from rtgraph.cli.arguments import (
    NO_REFERENCE,
    check_options,
    compiled_program,
    is_compiled,
    npz_values,
    read_run,
    refuse_overwriting_inputs,
)
from rtgraph.cli.cluster_run import cmd_run_cluster
from rtgraph.cli.gears import run_shapes
from rtgraph.cli.pages import is_sweep_folder, write_run_page, write_sweep_page
from rtgraph.compiler.optimizer.pipeline import as_checked
from rtgraph.compiler.padding import PadPlan
from rtgraph.errors import UsageError
from rtgraph.frontend.onnx_import import OnnxProgram
from rtgraph.ir.data import check_seed
from rtgraph.ir.interpreter import check_supplied
from rtgraph.ir.reference import check_mode
from rtgraph.reports.advisor import advise, format_advice
from rtgraph.reports.folding import folds_moved
from rtgraph.reports.memory_snapshot import write_run_snapshot
from rtgraph.reports.precision import precision_json, run_lines, run_precision
from rtgraph.reports.trace import write_trace
from rtgraph.stream_program.listing import compile_report

#: The run report's note on a program whose batchnorms the optimizer folded: a header, and
#: the line after the outputs.
FOLDED = (
    "batchnorm folded into the conv/matmul before it (-O1 and up), so checked above against the "
    "folded program; the program as written differs by",
    "(`rtgraph explain` holds each fold to the error bound the pass derives; -O0 keeps the "
    "batchnorms)",
)


def padding_json(plan: PadPlan) -> dict:
    """A padded run's plan in ``run --json``: the values, the gear, the flops."""
    return {
        "values": plan.values,
        "gear": plan.gear,
        "flops": plan.flops,
        "padded_flops": plan.padded_flops,
        "wasted": plan.wasted,
        "timed_at_real_shapes": plan.timed,
        "programs_weighed_us": plan.weighed,
        "reordered_for": plan.ordered_at,  # the sizes the "reordered" program's order suits
    }


def cmd_run(args: argparse.Namespace) -> int:
    if getattr(args, "cluster", None):
        return cmd_run_cluster(args)
    for flag in ("data_parallel", "pipeline", "micro_batches", "tensor_parallel"):
        if getattr(args, flag, 1) != 1:
            raise UsageError(f"--{flag.replace('_', '-')} needs --cluster NAME")
    check_seed(args.seed)
    if getattr(args, "shapes", None):  # `rtgraph report` runs through here without it
        return run_shapes(args)
    plan = None
    if is_compiled(args):  # a geared program: the program to check against, and its padding
        compiled, spec, program, plan = read_run(args)
    else:
        program, compiled, spec = compiled_program(args)
    if args.memory_snapshot and not (compiled.meta.get("alloc") or {}).get("kind"):
        raise UsageError(  # refused before the run, not after it
            "--memory-snapshot needs a run-time allocator: this program has a static memory plan",
            hint="add --alloc pytorch (or pool, mixed, direct, buddy)",
        )
    inputs = npz_values(args, "input", program, compiled)
    params = npz_values(args, "param", program, compiled)
    if params is None and isinstance(program, OnnxProgram):  # the model's own weights
        params = program.weights
    if program is not None:  # located errors for what the npz files miss, before the run
        check_supplied(program, inputs, params, fill_missing=args.fill_missing)
    supplied = {"inputs": inputs, "params": params, "seed": args.seed}
    mode = "none"
    if program is not None and not args.timing_only:
        mode = check_mode(program, args.check)
    result = api.run(
        compiled,
        device=spec,
        numerics=not args.timing_only,
        fill_missing=args.fill_missing,
        padding=plan,
        **supplied,
    )
    report, precision, moved = {}, None, None
    if mode != "none":
        options = check_options(args, compiled)
        targeted = options.for_device(spec)
        checked = as_checked(program, targeted)  # batchnorms folded, precisions chosen
        check = {"check": mode, "fill_missing": args.fill_missing, **supplied}
        reference = api.reference(checked, **check)
        report = api.compare(result.outputs, reference)
        moved = folds_moved(program, targeted, result.outputs, lambda p: api.reference(p, **check))
        if options.precision != "keep":
            found = (program, options, spec, result.outputs, result.makespan_us, supplied)
            precision = run_precision(*found)
    _write_reports(args, result, compiled, spec)
    html = getattr(args, "html", None)
    if html:
        write_run_page(
            args, html, (program, compiled, spec), result, report if mode != "none" else None
        )
    if getattr(args, "command", None) == "report":
        makespan = f"makespan {result.makespan_us:,.3f} µs"
        print(f"wrote {html}: {result.program} on {result.device}, {makespan}")
        return 0
    if args.json:
        data = result.to_json()
        data["reference"] = {k: v["max_abs"] for k, v in report.items()}
        data["reference_equal"] = {k: v["equal"] for k, v in report.items()}
        data["reference_checked"] = mode != "none"
        data["check"] = mode
        data["reference_elements"] = {k: v["checked"] for k, v in report.items()}
        data["policy"] = compiled.meta.get("policy")
        if result.padding is not None:
            data["padding"] = padding_json(result.padding)
        if precision is not None:
            data["precision"] = precision_json(precision)
        if moved is not None:
            data["batchnorm_folded"] = {
                k: {"max_abs": a, "max_rel_top": r} for k, (a, r) in moved.items()
            }
        print(json.dumps(data, indent=1))
    else:
        print(result.summary())
        print()
        for line in compile_report(compiled):
            print(f"compiler: {line}")
        if result.padding is not None:
            print(f"\n{result.padding.describe()}")
        if program is None:
            print(f"\nno check against the reference interpreter: {NO_REFERENCE}")
        elif mode == "none" and not args.timing_only:
            print("\nno check against the reference interpreter (--check none)")
        if report:
            print(f"\ncheck against the reference interpreter{_check_scope(mode, report, result)}:")
            for name, r in report.items():
                verdict = "bit-equal" if r["equal"] else "DIFFERS"
                size = r["checked"]
                odd = f"  ({r['nonfinite']} of {size} values inf/NaN)" if r["nonfinite"] else ""
                print(
                    f"  {name:<16} max abs {r['max_abs']:.3g}  max rel {r['max_rel']:.3g}  "
                    f"{verdict}{odd}"
                )
        if moved is not None:
            print(f"\n{FOLDED[0]}")
            for name, (diff, share) in moved.items():
                print(f"  {name:<16} max abs {diff:.3g}  ({share:.3g} of its largest magnitude)")
            print(FOLDED[1])
        if precision is not None:
            print("\n" + "\n".join(run_lines(precision)))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """``rtgraph report``: ``run`` with its HTML page as the product; for a folder ``rtgraph
    sweep`` wrote, the sweep's page (:mod:`rtgraph.cli.pages`)."""
    if is_sweep_folder(args.file):
        print(f"wrote {write_sweep_page(args.file, args.output)}")
        return 0
    args.html = args.output or Path(args.file).with_suffix(".html").name
    args.json, args.advise, args.memory_snapshot = False, False, None
    refuse_overwriting_inputs(args)
    return cmd_run(args)


def _check_scope(mode: str, report: dict, result) -> str:
    """What a check covered, after "check against the reference interpreter"."""
    if mode != "sample":
        return ""
    checked = sum(r["checked"] for r in report.values())
    size = sum(result.outputs[name].size for name in report if name in result.outputs)
    return f" (sample: {checked:,} of {size:,} elements; --check full for every one)"


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
    if getattr(args, "memory_snapshot", None):
        write_run_snapshot(result, args.memory_snapshot, device=spec)
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
