"""The bench's precision table: one model compiled in each precision, its speed and its error.

For each form asked (``f32``, ``f16``, ``bf16``, ``int8``, ``auto``, ``keep``) the model is
compiled with ``--precision FORM`` and run timing-only for the makespan (by-unit streams); its
outputs are those of the reference interpreter on the optimized program on seed 0 — which the
emulator reproduces bit for bit (tests/test_precision.py) — against the program computed in f32
on the same data. int8 and auto calibrate on their seeded batches (1 … N, not seed 0).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from rtgraph import api
from rtgraph.compiler.optimizer.choose_precision import uniform
from rtgraph.compiler.optimizer.pipeline import optimized_ir
from rtgraph.compiler.optimizer.precision_rewrite import converted
from rtgraph.compiler.options import CompileOptions
from rtgraph.device.spec import DeviceSpec
from rtgraph.ir.accuracy import accuracy
from rtgraph.ir.graph import Program
from rtgraph.ir.interpreter import evaluate
from rtgraph.ops.registry import ELEMENT_MOVES, OPS
from rtgraph.timing.costmodel import arithmetic_dtype

#: The forms the precision table compares, in its column order.
PRECISION_FORMS = ("f32", "f16", "int8", "auto")


@dataclass(frozen=True)
class PrecisionRow:
    """One model in one precision: makespan, speed-up over f32, the worst output's error
    against the f32 program, and the compile's CPU time (calibration included)."""

    model: str
    precision: str
    makespan_us: float
    speedup: float
    cosine: float
    sqnr_db: float
    max_rel: float
    compile_s: float
    mix: str  # how many ops compute in each dtype (:func:`mix`)


def precision_rows(
    name: str, program: Program, spec: DeviceSpec, forms: Sequence[str] = PRECISION_FORMS
) -> list[PrecisionRow]:
    """``program`` in f32 (the baseline of the speed-ups, always run first) and in each of
    ``forms``."""
    reference = evaluate(converted(program, uniform(program, "f32"), interface=False))
    order = ["f32", *(f for f in forms if f != "f32")]
    rows: list[PrecisionRow] = []
    base = math.nan
    for form in order:
        options = CompileOptions(precision=form, streams="by-unit")
        start = time.process_time()
        compiled = api.compile(program, device=spec, options=options)
        seconds = time.process_time() - start
        makespan = api.run(compiled, device=spec, numerics=False).makespan_us
        base = makespan if form == "f32" else base
        bound = options.for_device(spec)
        after = optimized_ir(program, bound, after="choose_precision")
        got = evaluate(after)
        figures = [accuracy(got[o], reference[o]) for o in program.outputs]
        rows.append(
            PrecisionRow(
                model=name,
                precision=form,
                makespan_us=makespan,
                speedup=base / makespan,
                cosine=min(f.cosine for f in figures),
                sqnr_db=min(f.sqnr_db for f in figures),
                max_rel=max(f.max_rel for f in figures),
                compile_s=seconds,
                mix=mix(after),
            )
        )
    return rows


#: Ops that convert or move values: left out of a program's :func:`mix`.
CONVERSIONS = frozenset({"cast", "quantize", "dequantize", *ELEMENT_MOVES})


def mix(program: Program) -> str:
    """How many ops compute in each dtype (a Cube op in its operands' dtype, any other in its
    result's), conversions and views left out: ``"i8 12, f16 30"``."""
    counts: dict[str, int] = {}
    for node in program.op_nodes():
        if node.op in CONVERSIONS or node.op == "kernel":
            continue
        unit = OPS[node.op].unit_for(node.attrs)
        types = [program.tensors[n].type.dtype for n in node.inputs]
        dtype = arithmetic_dtype(unit, types, program.tensors[node.output].type.dtype)
        counts[dtype] = counts.get(dtype, 0) + 1
    return ", ".join(f"{d} {n}" for d, n in sorted(counts.items(), key=lambda kv: -kv[1]))
