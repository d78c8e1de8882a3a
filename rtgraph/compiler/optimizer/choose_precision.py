"""Precision: recompute the program in lower-precision dtypes where the error allows it.

``--precision f32 | f16 | bf16`` recomputes every floating-point op in that dtype (ATC's
``force_fp16``); ``int8`` multiplies every matmul / conv2d in int8 into int32 with calibrated
activation scales and per-channel weight scales, the other ops keeping their dtypes; ``keep``
(the default) changes nothing. :mod:`.precision_rewrite` does the rewriting.

``auto`` chooses per op (a *layer*) — as ATC's ``allow_mix_precision`` with AMP's op lists, and
TensorRT's int8 builder with calibration. It measures, on the calibration batches
(:mod:`.calibration`), the program recomputed in f32 — the reference every figure is against —
and for each layer and each cheaper form of it (f16; int8 for a matmul or conv2d not on two
params):

* its **gain**: the cost model's time for the layer's tasks in f32 minus in that form (the
  quantize of its activations counted, its dequantize too unless the Cube's output path applies
  it: ``[units.cube] epilogues`` lists ``dequant``);
* its **error**: the noise it adds alone, ``‖y − y₃₂‖² / ‖y₃₂‖²`` of the layer's output computed
  in that form from the f32 values of its operands.

Moves are taken greedily by gain per unit of error; the longest prefix of that order whose whole
program keeps every output within ``--error-budget`` of the f32 program's is found by bisection
(each probe one run of the interpreter per batch); then the moves past the first that broke
the budget are tried one by one, largest gain first (:data:`EXTRA_PROBES` of them), each kept
if the budget still holds. A layer's precision is the cheapest form
among its moves taken. Sensitive ops (:data:`SENSITIVE`: softmax, normalisations, long
reductions) never go below f16 — they have no int8 form here. If even the f32 program cannot
meet the budget (outputs declared f16 round it off, say), the program keeps its own dtypes
and a :class:`~rtgraph.errors.PrecisionWarning` says which output failed and by how much.

The decision, with every layer's figures, is :func:`decide`'s (``rtgraph explain
--precision`` prints it); it is computed once per program and options.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from rtgraph.compiler.optimizer.calibration import (
    Batch,
    activation_scale,
    batches,
    observed_runs,
)
from rtgraph.compiler.optimizer.precision_rewrite import (
    FLOATS,
    VIEWS,
    Choice,
    conversion,
    converted,
    int8_operands,
    is_float,
)
from rtgraph.compiler.optimizer.precision_vocabulary import Budget, parse_budget
from rtgraph.compiler.optimizer.predict import op_work_of
from rtgraph.compiler.optimizer.rewrite import memoized, movable, movable_ops
from rtgraph.compiler.options import CompileOptions
from rtgraph.device.spec import DeviceSpec
from rtgraph.dtypes import TensorType
from rtgraph.errors import PrecisionWarning
from rtgraph.ir.accuracy import Accuracy, accuracy
from rtgraph.ir.graph import OpNode, Program, Tensor
from rtgraph.ir.interpreter import evaluate
from rtgraph.ops import fusion_of, lookup
from rtgraph.ops.registry import ELEMENT_MOVES
from rtgraph.timing.unit_replay import alone_us

#: Ops kept at f16 or above whatever the budget allows (AMP's float32 list, less what f16
#: hardware computes with f32 inside: softmax and the norms accumulate in f32 here already).
SENSITIVE = frozenset(
    {
        "softmax",
        "layernorm",
        "rmsnorm",
        "groupnorm",
        "batchnorm",
        "lrn",
        "reduce_sum",
        "reduce_mean",
        "exp",
        "log",
        "pow",
    }
)


@dataclass(frozen=True)
class Layer:
    """One op's figures: its chosen ``precision``, the ``error`` (noise ratio) it adds alone
    in that precision, and the cost model's ``gain_us`` against f32. ``forms`` holds the
    figures of every form measured: precision → (error, gain)."""

    node: int
    name: str
    op: str
    precision: str
    error: float
    gain_us: float
    forms: Mapping[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """What the pass chose and why: the :class:`Choice`, each layer's figures, the program's
    outputs against the f32 program (per output, worst batch; None until measured — ``auto``
    measures them deciding, :func:`measured` does for the other modes), the budget (``auto``)
    and a warning when it fell back."""

    mode: str
    choice: Choice
    layers: tuple[Layer, ...]
    outputs: Mapping[str, Accuracy] | None
    budget: Budget | None = None
    probes: int = 0
    warning: str | None = None


def choose_precision(program: Program, options: CompileOptions) -> Program:
    """``program`` recomputed in the precision ``options.precision`` asks for, each op the
    program pins (``@precision(…)``) in its own."""
    mode = options.precision
    if not movable_ops(program) or (mode == "keep" and not any_pinned(program)):
        return program  # every compile passes here: no walk over the nodes
    fixed = pinned_precisions(program)
    if mode in ("keep", *FLOATS) and "int8" not in fixed.values():
        base = uniform(program, mode).precisions if mode != "keep" else {}
        return converted(program, Choice({**base, **fixed}))
    found = decide(program, options)
    if found.warning is not None:
        warnings.warn(found.warning, PrecisionWarning, stacklevel=2)
    return converted(program, found.choice)


def any_pinned(program: Program) -> bool:
    """Whether the program pins any op's precision (``@precision(…)``)."""
    return any(t.precision is not None for t in program.tensors.values())


def uniform(program: Program, precision: str) -> Choice:
    """Every layer of ``program`` in ``precision``."""
    return Choice({k: precision for k, _ in layers(program)})


def pinned_precisions(program: Program) -> dict[int, str]:
    """The layers whose precision the program pins (``@precision(…)`` on the binding)."""
    found = {}
    for k, node in layers(program):
        pinned = program.tensors[node.output].precision
        if pinned is not None:
            found[k] = pinned
    return found


def layers(program: Program) -> list[tuple[int, OpNode]]:
    """The ops a precision is chosen for: movable ops with a floating-point result that do
    arithmetic (views and copies follow their operand)."""
    return [
        (k, node)
        for k, node in enumerate(program.nodes)
        if isinstance(node, OpNode)
        and movable(node)
        and node.op not in ("kernel", *ELEMENT_MOVES)
        and is_float(program.tensors[node.output])
    ]


def decide(program: Program, options: CompileOptions) -> Decision:
    """The pass's decision for ``program`` under ``options`` (computed once per program and
    options; calibration runs the reference interpreter). Only the decision is kept: the
    calibration values it was made from are dropped with the analysis."""
    return memoized(program, _key(options), lambda p: _Analysis(p, options).decision)


def measured(program: Program, options: CompileOptions) -> Decision:
    """:func:`decide`'s decision with its outputs measured against the f32 program (which
    repeats the calibration runs when the decision did not measure them: explain only)."""
    found = decide(program, options)
    if found.outputs is None:
        found = replace(found, outputs=_Analysis(program, options).accuracy_of(found.choice))
    return found


def _key(options: CompileOptions) -> str:
    return repr(
        (
            "precision",
            options.precision,
            options.error_budget,
            options.calibration,
            options.calibration_batches,
            options.calibration_method,
            options.target.name,
            id(options.calibration_params),
        )
    )


class _Analysis:
    """Calibration runs of the f32 program and each layer's figures, then the decision."""

    def __init__(self, program: Program, options: CompileOptions) -> None:
        self.program = program
        self.options = options
        self.spec: DeviceSpec = options.target
        self.runs: list[Batch] = batches(program, options)
        self.layers = layers(program)
        self.fixed = pinned_precisions(program)
        self.producers = {n.output: n for n in program.op_nodes()}
        self.reference, names = conversion(program, uniform(program, "f32"), interface=False)
        self.f32 = {name: t for (name, dtype), t in names.items() if dtype == "f32"}
        operands = {n for _, node in self.layers for n in node.inputs}
        watched = [self.f32.get(n, n) for n in operands | {node.output for _, node in self.layers}]
        first = observed_runs(self.reference, self.runs[:1], watched)
        rest = observed_runs(self.reference, self.runs[1:], [self.f32.get(n, n) for n in operands])
        self.values = first[0]
        self.outputs = [{o: run[o] for o in program.outputs} for run in first + rest]
        self.scales = {
            name: activation_scale(
                [run[self.f32.get(name, name)] for run in first + rest],
                options.calibration_method,
            )
            for _, node in self.layers
            for name in int8_operands(program, node) or ()
        }
        self.probes = 0

    # --- figures ----------------------------------------------------------------------
    def forms(self, node: OpNode) -> dict[str, tuple[float, float]]:
        """(error, gain) of each cheaper form of layer ``node``."""
        found = {}
        candidates = ["f16"] if _has_rate(self.spec, "f16") else []
        if int8_operands(self.program, node) is not None and node.op not in SENSITIVE:
            candidates.append("int8")
        base = self._single(node)
        base_cost = self._cost(converted(base, Choice({0: "f32"}), interface=False))
        for form in candidates:
            got = converted(base, Choice({0: form}, self.scales, "f32"), interface=False)
            found[form] = (self._noise(base, got, node), base_cost - self._cost(got))
        return found

    def _single(self, node: OpNode) -> Program:
        """A program of ``node`` alone, in f32, its operands declared as inputs (params as
        params, so that an int8 form quantizes them per channel as the whole program would)."""
        tensors: dict[str, Tensor] = {}
        for name in node.inputs:
            t = self.program.tensors[name]
            typed = TensorType(t.type.shape, "f32") if is_float(t) else t.type
            kind = "param" if t.kind == "param" and t.derive is None else "input"
            tensors[name] = Tensor(name, typed, kind, t.span)
        out = self.program.tensors[node.output]
        tensors[node.output] = Tensor(node.output, TensorType(out.type.shape, "f32"), "value")
        attrs = dict(node.attrs)
        if attrs.get("dtype") in FLOATS:
            attrs["dtype"] = "f32"
        body = OpNode(node.op, node.inputs, node.output, attrs, node.span)
        return Program(
            f"{self.program.name}.{node.output}", {}, None, tensors, [body], [node.output]
        )

    def _operand_values(self, single: Program) -> tuple[dict, dict]:
        inputs, params = {}, {}
        for t in single.tensors.values():
            if t.kind in ("input", "param"):
                value = np.asarray(self.values[self.f32.get(t.name, t.name)])
                (params if t.kind == "param" else inputs)[t.name] = value
        return inputs, params

    def _noise(self, base: Program, got: Program, node: OpNode) -> float:
        """The noise ratio of ``got`` (``base`` in another form) against the f32 value."""
        inputs, params = self._operand_values(base)
        y = evaluate(got, inputs, 0, params, fill_missing=True)[node.output]
        ref = np.asarray(self.values[node.output], dtype=np.float64)
        signal = float(np.dot(ref.ravel(), ref.ravel()))
        diff = np.asarray(y, dtype=np.float64) - ref
        noise = float(np.dot(diff.ravel(), diff.ravel()))
        if not math.isfinite(noise):
            return math.inf
        return noise / signal if signal else (0.0 if noise == 0 else math.inf)

    def _cost(self, single: Program) -> float:
        """The cost model's time for ``single``'s tasks, casts left out (a layer's operands
        arrive in its dtype when its neighbours share it), and so are a dequantize the Cube's
        output path applies and a quantize that joins the task computing its operand
        (:meth:`_quantize_rides`)."""
        fused = "dequant" in self.spec.unit("cube").epilogues
        total = 0.0
        for node in single.op_nodes():
            if node.op == "cast" or (node.op == "dequantize" and fused):
                continue
            if node.op == "quantize" and self._quantize_rides(node.inputs[0]):
                continue
            types = [single.tensors[n].type for n in node.inputs]
            work = op_work_of(node, types, single.tensors[node.output].type, self.spec)
            total += alone_us(work, self.spec)
        return total

    def _quantize_rides(self, name: str) -> bool:
        """Whether the quantize of value ``name`` joins the task that computes it: a Vector
        kernel it fuses into, or a Cube's output path that lists ``quant`` (through views:
        the rewrite quantizes before them)."""
        producer = self.producers.get(name)
        while producer is not None and producer.op in VIEWS:
            producer = self.producers.get(producer.inputs[0])
        if producer is None:
            return False  # an input or a param: its quantize is a task of its own
        op = lookup(producer.op)
        if op is None:
            return False
        if op.unit_for(producer.attrs) == "cube":
            return "quant" in self.spec.unit("cube").epilogues
        types = [self.program.tensors[n].type for n in producer.inputs]
        return fusion_of(op, types, producer.attrs) is not None

    def accuracy_of(self, choice: Choice, runs: Sequence[int] | None = None) -> dict[str, Accuracy]:
        """Every output of ``program`` under ``choice`` against the f32 program, worst batch."""
        self.probes += 1
        program = converted(self.program, choice)
        worst: dict[str, Accuracy] = {}
        for b in runs if runs is not None else range(len(self.runs)):
            run = self.runs[b]
            got = evaluate(program, dict(run.inputs), 0, run.params, fill_missing=True)
            for name, ref in self.outputs[b].items():
                figures = accuracy(got[name], ref)
                held = worst.get(name)
                if held is None or not figures.cosine >= held.cosine:
                    worst[name] = figures
        return worst

    # --- the decision -----------------------------------------------------------------
    @cached_property
    def decision(self) -> Decision:
        figures = {k: self.forms(node) for k, node in self.layers}
        mode = self.options.precision
        if mode in ("keep", *FLOATS):
            base = uniform(self.program, mode).precisions if mode != "keep" else {}
            return self._decided(Choice({**base, **self.fixed}, self.scales), figures, None, None)
        if mode == "int8":
            int8 = {k: "int8" for k, _ in self.layers if "int8" in figures[k]}
            return self._decided(Choice({**int8, **self.fixed}, self.scales), figures, None, None)
        budget = parse_budget(self.options.error_budget)
        return self._auto(figures, budget)

    def _auto(self, figures: dict[int, dict[str, tuple[float, float]]], budget: Budget) -> Decision:
        moves = sorted(
            (m for k, forms in figures.items() if k not in self.fixed for m in _moves(k, forms)),
            key=lambda m: -(m[3] / m[2] if m[2] > 0 else math.inf),
        )
        out = "f16" if _has_rate(self.spec, "f16") else None

        def choice_of(taken: Sequence[tuple[int, str, float, float]]) -> Choice:
            chosen: dict[int, str] = {k: "f32" for k, _ in self.layers}
            for k, form, _, _ in taken:
                if chosen[k] != "int8":
                    chosen[k] = form
            return Choice({**chosen, **self.fixed}, self.scales, out)

        seen: dict[int, dict[str, Accuracy]] = {}

        def holds(taken: Sequence[tuple[int, str, float, float]]) -> bool:
            found = seen[len(taken)] = self.accuracy_of(choice_of(taken))
            return budget.holds({o: _metric(a, budget.metric) for o, a in found.items()})

        top = len(moves)
        if top and holds(moves):  # every move fits the budget: the common case, one probe
            return self._decided(choice_of(moves), figures, budget, None, seen[top])
        if not holds([]):
            name, worst = _worst(seen[0], budget.metric)
            warning = (
                f"error budget {budget} cannot be met even in f32: output '{name}' "
                f"({self.program.tensors[name].type.dtype}) reaches {budget.metric} "
                f"{worst:.6g}; keeping the program's own dtypes"
            )
            return self._decided(Choice(self.fixed, self.scales), figures, budget, warning)
        lo, hi = 0, top - 1  # moves[:lo] hold, all of them do not: the longest prefix that holds
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if holds(moves[:mid]):
                lo = mid
            else:
                hi = mid - 1
        taken, outputs = list(moves[:lo]), seen[lo]
        # moves[lo] broke the budget; of the rest, try those that gain most, each on its own.
        for move in sorted(moves[lo + 1 :], key=lambda m: -m[3])[:EXTRA_PROBES]:
            if holds([*taken, move]):
                taken.append(move)
                outputs = seen[len(taken)]
        return self._decided(choice_of(taken), figures, budget, None, outputs)

    def _decided(
        self,
        choice: Choice,
        figures: Mapping[int, Mapping[str, tuple[float, float]]],
        budget: Budget | None,
        warning: str | None,
        outputs: Mapping[str, Accuracy] | None = None,
    ) -> Decision:
        rows = []
        for k, node in self.layers:
            precision = choice.precisions.get(k) or self.program.tensors[node.output].type.dtype
            error, gain = figures[k].get(precision, (0.0, 0.0))
            name = self.program.tensors[node.output].label
            rows.append(Layer(k, name, node.op, precision, error, gain, dict(figures[k])))
        return Decision(
            self.options.precision, choice, tuple(rows), outputs, budget, self.probes, warning
        )


#: After the bisection, how many of the moves past the first that broke the budget auto tries
#: one by one, largest gain first (each is a run of the program on every calibration batch).
EXTRA_PROBES = 6

#: Cheaper forms in the order a layer steps down through them.
LADDER = ("f16", "int8")


def _moves(k: int, forms: Mapping[str, tuple[float, float]]) -> list[tuple[int, str, float, float]]:
    """Layer ``k``'s steps down :data:`LADDER` as (layer, form, added error, added gain), each
    against the step before it (f32 first); a step that gains nothing over the one before —
    int8 whose quantize costs more than the f16 Cube time it saves — is left out, and so is
    every step after it."""
    found, error, gain = [], 0.0, 0.0
    for form in LADDER:
        if form not in forms:
            continue
        e, g = forms[form]
        if g <= gain:
            break
        found.append((k, form, max(e - error, 0.0), g - gain))
        error, gain = e, g
    return found


def _metric(a: Accuracy, metric: str) -> float:
    return a.cosine if metric == "cosine" else a.max_rel


def _worst(found: Mapping[str, Accuracy], metric: str) -> tuple[str, float]:
    pick = min if metric == "cosine" else max
    name = pick(found, key=lambda o: _metric(found[o], metric))
    return name, _metric(found[name], metric)


def _has_rate(spec: DeviceSpec, dtype: str) -> bool:
    """Whether the device computes ``dtype`` on both the Cube and the Vector unit."""
    return all(dtype in spec.unit(u).peak_flops for u in ("cube", "vector"))
