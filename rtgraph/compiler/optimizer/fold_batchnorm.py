"""BatchNorm folding: ``batchnorm(conv2d(x, W))`` becomes ``conv2d(x, W') + b'`` (and
``batchnorm(x @ W)`` becomes ``x @ W' + b'``), as inference compilers do for imported CNNs.

Inference BatchNorm is a per-channel affine map ``y = (d - mean)·s + beta`` of the product
``d = W·x``, with ``s = gamma / sqrt(var + eps)``. Scaling each output channel's weights by
``s`` and adding the bias ``b' = beta - mean·s`` computes the same function. A batchnorm folds
when ``W`` and its four statistics are ``param``\\ s, the product is read by it alone, and its
channel axis (1) is the product's output channel: always for conv2d, and for a matmul when it
is ``[N, K] @ [K, C]``. ``W'`` and ``b'`` are run-time data, not compile-time constants, so the
pass emits the small Vector ops that compute them from the params: ``s`` in f32 (``cast``,
``add`` eps, ``rsqrt``, ``mul``), ``W·s`` in f32 rounded once to W's dtype, ``beta - mean·s``
likewise, and a ``reshape`` so a ``[C]`` vector meets the channel axis. A real runtime would
hoist them to load time. Folds sharing a weight and statistics (micro-batches of one layer)
emit equal ops, which common-subexpression elimination then merges.

Why it pays: the batchnorm is a Vector pass over the activations (each element read and
written) that cannot fuse with its neighbours; the fold leaves a bias add, which fusion joins
to what follows (the ReLU, a residual add) and a Cube epilogue could absorb, so one Vector pass
over the activations per BN disappears. The weight preparation costs per weight and per
channel, not per activation; rtgraph runs it on every run (a runtime would hoist it to load
time), so at batch 1 it may cost more time than the fold saves.

Preserves: the function, not the bits. ``W'`` is rounded to W's dtype (once; the f32 steps
before it add a few f32 roundings), so is ``b'``, and the product is rounded before the bias is
added (unless a Cube epilogue adds it first, which only removes a rounding).
:func:`fold_error_bound` bounds the difference from the unfolded program per output element
(its docstring derives it); :func:`fold_numerics` measures it for ``rtgraph explain``.
The product keeps its name (its value is now ``W'·x``, which nothing else reads) and the
batchnorm's result keeps its name (now the add's), so pinned tensors are untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rtgraph.compiler.optimizer.rewrite import movable, movable_ops, pinned, rebuilt, uses
from rtgraph.compiler.options import CompileOptions
from rtgraph.dtypes import TensorType
from rtgraph.errors import CapacityError, Span
from rtgraph.ir.graph import Node, OpNode, Program, Tensor
from rtgraph.ir.interpreter import evaluate, host_values
from rtgraph.ops import lookup, run_kernel

#: The products a batchnorm folds into.
PRODUCTS = ("conv2d", "matmul")
#: The batchnorm's statistics, in operand order after x.
STATS = ("gamma", "beta", "mean", "var")


@dataclass(frozen=True)
class FoldSite:
    """A product (``conv2d`` or ``matmul``) and the batchnorm that folds into it."""

    product: OpNode
    bn: OpNode

    @property
    def weight(self) -> str:
        return self.product.inputs[1]


def fold_sites(program: Program) -> list[FoldSite]:
    """Every batchnorm of ``program`` that folds into the product it reads, in program order."""
    if "batchnorm" not in movable_ops(program):
        return []
    keep = pinned(program)
    count = uses(program)
    producer = {n.output: n for n in program.nodes if isinstance(n, OpNode)}
    tensors = program.tensors
    sites = []
    for node in program.nodes:
        if not (isinstance(node, OpNode) and node.op == "batchnorm" and movable(node)):
            continue
        product = producer.get(node.inputs[0])
        if product is None or product.op not in PRODUCTS or not movable(product):
            continue
        if count.get(product.output) != 1 or product.output in keep:
            continue  # the unscaled product is read elsewhere: it must stay
        weight = tensors[product.inputs[1]]
        if any(tensors[n].kind != "param" for n in (weight.name, *node.inputs[1:])):
            continue  # W' and b' would be per-run data, not per-weight
        if product.op == "matmul" and (weight.type.rank, tensors[node.output].type.rank) != (2, 2):
            continue  # batchnorm's axis 1 is W's columns only for [N, K] @ [K, C]
        sites.append(FoldSite(product, node))
    return sites


def fold_batchnorm(program: Program, options: CompileOptions) -> Program:
    """``program`` with every foldable batchnorm folded into its conv2d or matmul."""
    sites = fold_sites(program)
    if not sites:
        return program
    at_product = {s.product.output: s for s in sites}
    folded = {s.bn.output for s in sites}
    emit = _Emitter(dict(program.tensors))
    bias_of: dict[str, str] = {}
    nodes: list[Node] = []
    for node in program.nodes:
        if isinstance(node, OpNode) and node.output in at_product:
            site = at_product[node.output]
            weight, bias_of[site.bn.output] = emit.prep(site)
            nodes += emit.take()
            nodes.append(replace(node, inputs=(node.inputs[0], weight)))
        elif isinstance(node, OpNode) and node.output in folded:
            bias = bias_of[node.output]
            nodes.append(OpNode("add", (node.inputs[0], bias), node.output, {}, span=node.span))
        else:
            nodes.append(node)
    return rebuilt(replace(program, tensors=emit.tensors), nodes)


class _Emitter:
    """Builds each fold's weight-preparation ops, naming their values after the weight ``w``:
    ``w/bn_scale`` (s), ``w/bn_weight`` (W'), ``w/bn_bias`` (b'), … (numbered when a weight
    folds twice)."""

    def __init__(self, tensors: dict[str, Tensor]) -> None:
        self.tensors = tensors
        self.nodes: list[Node] = []
        self.consts: dict[float, str] = {}

    def take(self) -> list[Node]:
        """The ops emitted since the last call."""
        nodes, self.nodes = self.nodes, []
        return nodes

    def prep(self, site: FoldSite) -> tuple[str, str]:
        """Emit the ops computing ``site``'s ``W'`` and ``b'``; their names."""
        w, span = site.weight, site.bn.span
        dtype = self.tensors[w].type.dtype
        channels = self.tensors[site.bn.output].type.shape[1]
        conv = site.product.op == "conv2d"

        def op(name: str, inputs: list[str], what: str, **attrs: Any) -> str:
            return self.op(name, inputs, f"{w}/bn_{what}", span, **attrs)

        g, b, m, v = (
            self.wide(n, f"{w}/bn_{what}32", span)
            for n, what in zip(site.bn.inputs[1:], STATS, strict=True)
        )
        eps = self.const(float(site.bn.attrs["eps"]))
        rsqrt = op("rsqrt", [op("add", [v, eps], "var_eps")], "rsqrt")
        s = op("mul", [g, rsqrt], "scale")
        per_filter = op("reshape", [s], "scale_o", shape=(channels, 1, 1, 1)) if conv else s
        scaled = op("mul", [self.wide(w, f"{w}/bn_w32", span), per_filter], "w_scaled")
        weight = self.narrow(scaled, dtype, f"{w}/bn_weight", span)
        shifted = op("sub", [b, op("mul", [m, s], "mean_scaled")], "bias32")
        bias = self.narrow(shifted, dtype, f"{w}/bn_bias", span)
        if conv:  # [C] meets the result's axis 1 as [C, 1, 1]
            bias = op("reshape", [bias], "bias_c", shape=(channels, 1, 1))
        return weight, bias

    def op(self, name: str, inputs: list[str], out: str, span: Span | None, **attrs: Any) -> str:
        """Emit ``out = name(*inputs, **attrs)`` under a fresh name; the name."""
        out = self.fresh(out)
        op = lookup(name)
        assert op is not None
        full = {k: spec.default for k, spec in op.attrs.items() if not spec.required} | attrs
        result = op.infer([self.tensors[n].type for n in inputs], full)
        self.tensors[out] = Tensor(out, result, "value", span=span)
        self.nodes.append(OpNode(name, tuple(inputs), out, full, span=span))
        return out

    def wide(self, name: str, out: str, span: Span | None) -> str:
        """``name`` as f32: a cast of f16 or bf16 (exact); f32 as it is."""
        if self.tensors[name].type.dtype == "f32":
            return name
        return self.op("cast", [name], out, span, dtype="f32")

    def narrow(self, name: str, dtype: str, out: str, span: Span | None) -> str:
        """The f32 ``name`` rounded once to ``dtype`` (nothing to do for f32)."""
        if dtype == "f32":
            return name
        return self.op("cast", [name], out, span, dtype=dtype)

    def const(self, value: float) -> str:
        """An f32 scalar constant, one per value (so folds sharing statistics emit equal ops)."""
        if value not in self.consts:
            name = self.fresh("%c0")
            self.tensors[name] = Tensor(name, TensorType((), "f32"), "const", value=value)
            self.consts[value] = name
        return self.consts[value]

    def fresh(self, name: str) -> str:
        """``name``, or with a number after it when the program already holds it."""
        if name not in self.tensors:
            return name
        stem, k = name.rstrip("0123456789"), 1
        while f"{stem}{k}" in self.tensors:
            k += 1
        return f"{stem}{k}"


# --- the numeric effect --------------------------------------------------------------------

#: Unit roundoff of each dtype (half an ulp of 1) and half its smallest subnormal (the absolute
#: error of a rounding that lands below the normal range).
UNIT_ROUNDOFF = {"f16": 2.0**-11, "bf16": 2.0**-8, "f32": 2.0**-24}
HALF_SUBNORMAL = {"f16": 2.0**-25, "bf16": 2.0**-134, "f32": 2.0**-150}


def _gamma(k: int) -> float:
    """γₖ = k·u / (1 − k·u) in f32 (every kernel computes and accumulates in f32)."""
    u = UNIT_ROUNDOFF["f32"]
    return k * u / (1 - k * u)


def fold_error_bound(
    x: np.ndarray,
    weight: np.ndarray,
    stats: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    *,
    op: str,
    attrs: dict[str, Any],
    eps: float,
    dtype: str,
) -> np.ndarray:
    """A bound on |folded − unfolded| for each element of one fold's result (float64).

    ``x`` and ``weight`` are the product's operands, ``stats`` the batchnorm's gamma, beta,
    mean and var, all as the programs hold them. Write ``d = Σₖ Wₖxₖ`` (n terms: K for matmul,
    C/groups·KH·KW for conv2d), ``A = Σ|Wₖ||xₖ|``, ``X = Σ|xₖ|``, ``s = γ/√(var + eps)`` and
    ``z = s(d − mean) + β``, exactly. ``u`` is the dtype's unit roundoff, ``γₖ`` the f32 one's
    (products accumulate in f32), ``η`` half the dtype's smallest subnormal.

    * Unfolded: the product rounds to ``d̂`` with ``|d̂ − d| ≤ e_d = γₙA(1 + u) + u|d| + η``;
      batchnorm's six f32 steps (sub, add eps, sqrt, div, mul, add — the sqrt halves one)
      add ``γ₆(|s|(|d| + e_d + |mean|) + |β|)``; its result is rounded once more (``u``, ``η``).
    * Folded: ``ŝ`` carries four f32 roundings, ``W' = rd(rd32(W·ŝ))`` one more and the dtype's:
      ``W'ₖ = Wₖs(1 + ωₖ) ± η`` with ``|ωₖ| ≤ ω = γ₅ + u(1 + γ₅)``. So ``Σ W'ₖxₖ`` is within
      ``|s|Aω + ηX`` of ``s·d``, its f32 sum within ``γₙ`` of that (``|s|A(1 + ω) + ηX``), and
      rounding it adds ``u|s·d|``; ``b' = β − mean·ŝ`` carries ``γ₆(|mean·s| + |β|)`` and its own
      rounding; the add rounds in f32 and in the dtype.

    The bound is the sum of both sides' distance from ``z``, with the second-order terms kept.
    To first order: ``|s|A(2γₙ + ω) + u(2|s·d| + |b'| + 2|z|) + γ₆(2|β| + |s|(|d| + 2|mean|))``.
    """
    u, eta = UNIT_ROUNDOFF[dtype], HALF_SUBNORMAL[dtype]
    kernel = lookup(op).kernel
    assert kernel is not None
    x64, w64 = np.asarray(x, np.float64), np.asarray(weight, np.float64)
    d = kernel([x64, w64], attrs)
    a = kernel([np.abs(x64), np.abs(w64)], attrs)
    xs = kernel([np.abs(x64), np.ones_like(w64)], attrs)
    n = w64.shape[0] if op == "matmul" else int(np.prod(w64.shape[1:]))
    rank = d.ndim
    g, beta, mean, var = (
        np.asarray(p, np.float64).reshape([-1 if i == 1 else 1 for i in range(rank)]) for p in stats
    )
    s = g / np.sqrt(var + float(np.float32(eps)))
    z, shift, gn, g6 = s * (d - mean) + beta, beta - mean * s, _gamma(n), _gamma(6)
    e_d = gn * a * (1 + u) + u * np.abs(d) + eta
    e1 = np.abs(s) * e_d + g6 * (np.abs(s) * (np.abs(d) + e_d + np.abs(mean)) + np.abs(beta))
    unfolded = e1 + u * (np.abs(z) + e1) + eta
    omega = _gamma(5) + u * (1 + _gamma(5))
    e_c = np.abs(s) * a * (omega + gn * (1 + omega)) + eta * xs * (1 + gn)
    e_conv = e_c + u * (np.abs(s * d) + e_c) + eta
    e_b = g6 * (np.abs(mean * s) + np.abs(beta))
    e2 = e_conv + e_b + u * (np.abs(shift) + e_b) + eta
    f32_u = UNIT_ROUNDOFF["f32"]
    folded = e2 + (u + f32_u + u * f32_u) * (np.abs(z) + e2) + eta
    return unfolded + folded


@dataclass(frozen=True)
class FoldNumerics:
    """The folded program against the unfolded one on the same seeded data.

    ``max_abs`` and ``max_rel`` are over the program's outputs (relative to each output's
    largest magnitude); ``worst_share`` is the largest ratio of a fold's own error (its result
    computed from the unfolded program's operands) to :func:`fold_error_bound` — at most 1 —
    and ``worst_fold`` names that fold's result; ``local_abs`` and ``local_bound`` are the
    largest such error and the largest bound over every fold.
    """

    max_abs: float
    max_rel: float
    local_abs: float
    local_bound: float
    worst_share: float
    worst_fold: str


def fold_numerics(before: Program, after: Program, seed: int = 0) -> FoldNumerics | None:
    """Measure what folding ``before``'s batchnorms into ``after`` did to the numbers, with the
    reference interpreter on both and the data generated from ``seed`` (a variance's as
    ``|x|``: :func:`rtgraph.ir.data.nonnegative_params`). None when nothing folded or the
    programs do not fit in host memory."""
    sites = fold_sites(before)
    if not sites or after is before:
        return None
    values = host_values(before, None, None, seed)
    params = {t.name: values[t.name] for t in before.params_()}
    inputs = {t.name: values[t.name] for t in before.inputs()}
    made = {n.output: n for n in after.nodes if isinstance(n, OpNode)}
    extra_before = [n for s in sites for n in (s.product.inputs[0], s.bn.output)]
    extra_after = [
        n for s in sites for n in (made[s.product.output].inputs[1], made[s.bn.output].inputs[1])
    ]
    try:
        ref = _evaluate(before, extra_before, inputs, params, seed)
        got = _evaluate(after, extra_after, inputs, params, seed)
    except CapacityError:
        return None
    max_abs = max_rel = 0.0
    for name in before.outputs:
        diff = float(np.max(np.abs(got[name].astype(np.float64) - ref[name]), initial=0.0))
        top = float(np.max(np.abs(ref[name]), initial=0.0))
        max_abs, max_rel = max(max_abs, diff), max(max_rel, diff / top if top else 0.0)
    local_abs = local_bound = worst = 0.0
    worst_fold = ""
    for site in sites:
        err, bound = _local(site, after, ref, got, made, params)
        local_abs, local_bound = max(local_abs, float(err.max())), max(local_bound, bound.max())
        share = float(np.max(err / bound))
        if share >= worst:
            worst, worst_fold = share, site.bn.output
    return FoldNumerics(max_abs, max_rel, local_abs, float(local_bound), worst, worst_fold)


def _evaluate(
    program: Program,
    extra: list[str],
    inputs: dict[str, np.ndarray],
    params: dict[str, np.ndarray],
    seed: int,
) -> dict[str, np.ndarray]:
    """``program``'s outputs and the values ``extra`` names, by the reference interpreter."""
    outputs = list(dict.fromkeys([*program.outputs, *extra]))
    return evaluate(replace(program, outputs=outputs), inputs, seed, params)


def _local(
    site: FoldSite,
    after: Program,
    ref: dict[str, np.ndarray],
    got: dict[str, np.ndarray],
    made: dict[str, OpNode],
    params: dict[str, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """One fold's error and its bound, element by element: the folded result computed from the
    unfolded program's operand ``x`` (with the folded program's ``W'``, ``b'`` and kernels)
    against the batchnorm's result, so that only this fold's roundings differ."""
    x = ref[site.product.inputs[0]]
    weight, bias = made[site.product.output].inputs[1], made[site.bn.output].inputs[1]
    product_type = after.tensors[site.product.output].type
    y_type = after.tensors[site.bn.output].type
    d = run_kernel(lookup(site.product.op), [x, got[weight]], site.product.attrs, product_type)
    y = run_kernel(lookup("add"), [d, got[bias]], {}, y_type)
    err = np.abs(y.astype(np.float64) - ref[site.bn.output].astype(np.float64))
    stats = tuple(params[n] for n in site.bn.inputs[1:])
    bound = fold_error_bound(
        x,
        params[site.weight],
        stats,
        op=site.product.op,
        attrs=dict(site.product.attrs),
        eps=float(site.bn.attrs["eps"]),
        dtype=y_type.dtype,
    )
    return err, bound
