"""What the precision pass chose and what it cost in accuracy and bought in time.

Two reports:

* :func:`decision_lines` — for ``rtgraph explain --precision MODE``: every layer's chosen
  precision, the noise it adds alone (``‖y − y₃₂‖² / ‖y₃₂‖²`` of its output computed from exact
  f32 operands) and the cost model's gain against f32, with the figures of each form measured;
  then every output against the f32 program on the calibration batches.
* :func:`run_lines` — for ``rtgraph run --precision MODE``: the run's outputs against the f32
  program run on the same data (max abs, max rel, cosine, SQNR), and the emulated makespan
  against the same program compiled in f32 and in f16 (timing only).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

import numpy as np

from rtgraph.compiler.optimizer.choose_precision import Decision, measured, uniform
from rtgraph.compiler.optimizer.pipeline import chosen_passes, optimized_ir
from rtgraph.compiler.optimizer.precision_rewrite import converted
from rtgraph.compiler.options import CompileOptions
from rtgraph.compiler.pipeline import compile_program
from rtgraph.device.spec import DeviceSpec
from rtgraph.emulator import simulate
from rtgraph.ir.accuracy import Accuracy, accuracy
from rtgraph.ir.graph import Program
from rtgraph.ir.interpreter import evaluate


def accuracy_line(name: str, a: Accuracy) -> str:
    """One output's figures, as both reports print them."""
    return (
        f"{name:<16} cosine {a.cosine:.6f}  SQNR {a.sqnr_db:6.1f} dB  max abs {a.max_abs:.3g}  "
        f"max rel {a.max_rel:.3g}"
    )


def decision_lines(program: Program, options: CompileOptions) -> list[str]:
    """The precision pass's decision on ``program`` (as the pass sees it), for explain."""
    before = _before(program, options)
    d: Decision = measured(before, options)
    changed = [layer for layer in d.layers if layer.precision != _declared(before, layer.node)]
    counts = Counter(layer.precision for layer in changed)
    tally = ", ".join(f"{form} {n}" for form, n in sorted(counts.items())) or "none"
    budget = f", budget {d.budget}" if d.budget else ""
    probes = f"; {d.probes} runs of the program to check it" if d.budget else ""
    lines = [
        f"  precision {d.mode}{budget}: {len(changed)} of {len(d.layers)} layers changed "
        f"({tally}){probes}",
    ]
    if d.warning:
        lines.append(f"  warning: {d.warning}")
    lines.append(
        "  per layer: the form chosen, the noise it adds alone (‖Δy‖²/‖y‖² against f32) and "
        "the cost model's gain against f32; then every form measured"
    )
    lines.append(
        f"    {'line':>5}  {'layer':<28} {'op':<10} {'form':<5} {'noise':>9} {'gain µs':>9}"
    )
    for layer in d.layers:
        span = before.tensors[before.nodes[layer.node].output].span  # type: ignore[union-attr]
        line = str(span.line) if span else "-"
        forms = ", ".join(f"{f} {e:.1e}/{g:+.2f}" for f, (e, g) in layer.forms.items())
        lines.append(
            f"    {line:>5}  {_short(layer.name, 28):<28} {layer.op:<10} {layer.precision:<5} "
            f"{layer.error:>9.1e} {layer.gain_us:>9.2f}   ({forms or 'no cheaper form'})"
        )
    lines.append("  outputs against the f32 program (worst calibration batch):")
    lines += [f"    {accuracy_line(name, a)}" for name, a in (d.outputs or {}).items()]
    return lines


def _before(program: Program, options: CompileOptions) -> Program:
    """``program`` as the precision pass receives it: after the pass before it."""
    names = chosen_passes(options)
    k = names.index("choose_precision")
    return optimized_ir(program, options, after=names[k - 1]) if k else program


def _declared(program: Program, k: int) -> str:
    return program.tensors[program.nodes[k].output].type.dtype  # type: ignore[union-attr]


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass(frozen=True)
class RunPrecision:
    """A run's ``precision``, its outputs against the f32 program, and makespans of the
    compared forms."""

    precision: str
    outputs: Mapping[str, Accuracy]
    makespans: Mapping[str, float]  # precision → emulated makespan (µs)


def run_precision(
    program: Program,
    options: CompileOptions,
    spec: DeviceSpec,
    outputs: Mapping[str, np.ndarray],
    makespan_us: float,
    supplied: Mapping[str, object],
) -> RunPrecision:
    """The run's ``outputs`` against ``program`` recomputed in f32 on the same data
    (``supplied``: inputs, params, seed), and the makespan against f32 and f16 compiles."""
    f32 = converted(program, uniform(program, "f32"), interface=False)
    ref = evaluate(
        f32,
        supplied.get("inputs"),
        int(supplied.get("seed") or 0),
        supplied.get("params"),
        fill_missing=True,
    )
    figures = {
        name: accuracy(outputs[name], ref[name]) for name in program.outputs if name in outputs
    }
    makespans = {options.precision: makespan_us}
    for form in ("f32", "f16"):
        if form not in makespans:
            compiled = compile_program(program, spec, replace(options, precision=form))
            makespans[form] = simulate.run(compiled, spec, numerics=False).makespan_us
    return RunPrecision(options.precision, figures, makespans)


def run_lines(found: RunPrecision) -> list[str]:
    """:func:`run_precision`'s figures as the run report prints them."""
    precision = found.precision
    lines = [f"precision {precision}: outputs against the program computed in f32:"]
    lines += [f"  {accuracy_line(name, a)}" for name, a in found.outputs.items()]
    own = found.makespans[precision]
    others = ", ".join(
        f"{form} {us:,.1f} µs (this run {us / own:.2f}× as fast)"
        for form, us in found.makespans.items()
        if form != precision
    )
    lines.append(f"  emulated makespan {own:,.1f} µs; compiled in {others}")
    return lines


def precision_json(found: RunPrecision) -> dict:
    """:func:`run_precision`'s figures for ``run --json`` (an infinite SQNR — equal outputs —
    and other non-finite figures as null: JSON has no infinity)."""

    def number(x: float) -> float | None:
        return x if np.isfinite(x) else None

    return {
        "outputs": {
            name: {key: number(value) for key, value in asdict(a).items()}
            for name, a in found.outputs.items()
        },
        "makespan_us": dict(found.makespans),
    }
