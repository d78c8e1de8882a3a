"""Tensor parallelism: a program's weight matrices cut over N devices, Megatron-LM style, with
the one collective that needs — ``allreduce`` of partial sums.

Every value is in one of three states on the N ranks: **R** — each rank holds all of it;
**S(a)** — rank r holds block r of axis a; **P** — each rank holds a partial value of the whole
shape, and the value is their sum. Params start unplaced; the walk over the program in order
decides them where an op asks (Shoeybi et al. 2019, §3):

* ``a @ W`` with ``a`` in R and ``W`` a 2-D param: **column-parallel** — ``W`` cut by columns,
  the result S(last);
* ``a @ W`` with ``a`` in S(last) (cut along the contraction): **row-parallel** — ``W`` cut by
  rows, the result P;
* a batched ``a @ b`` with both cut along the same batch axis keeps it (attention's heads);
* elementwise ops keep S(a) where each operand is cut the same way or broadcasts along a: a
  param operand (a bias) is cut to match, a replicated value is sliced on each rank (no
  transfer); ``reshape`` keeps a cut that stays the leading dimension of its group (``[S, H·E]
  → [S, H, E]`` cuts H), ``transpose`` moves it, a row op (``softmax``, ``layernorm``) keeps it
  when it normalises another axis;
* anything else needs R: a P operand is summed first (``allreduce``), as Megatron sums after
  each row-parallel matmul. So is an output. A collective the program writes sums over
  data-parallel replicas — of which tensor parallelism alone has one: it is the identity here.

A value cut (S) that some op needs whole would need an ``allgather``; rather than that, the
walk gives up the param whose cut started it and begins again with that param whole — so any
program compiles, at worst with every param replicated (each rank computing all of it). Cuts
need every cut dimension to divide by N; a param that would be cut unevenly stays whole.

Numerics: a column-parallel product computes each output element with its whole dot product
(as on one device); a row-parallel one sums N partial dot products in the allreduce's order —
within the derived bound of the reference, not bit-exact.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rtgraph.compiler.parallel.expand_collectives import expand_collectives
from rtgraph.compiler.parallel.layouts import HostLayout
from rtgraph.compiler.parallel.transfers import Tags
from rtgraph.dtypes import TensorType
from rtgraph.errors import CheckError
from rtgraph.ir.graph import Node, OpNode, Program, Tensor
from rtgraph.ops import fusion_of, lookup
from rtgraph.ops.comm import COLLECTIVES

R = ("R",)


@dataclass(frozen=True)
class TensorPlan:
    """Which params tensor parallelism cut (name → axis), and which it kept whole."""

    cut: dict[str, int]
    whole: tuple[str, ...]
    allreduces: int


class _GiveUp(Exception):
    """The walk met a cut it cannot carry; ``param`` is the param whose cut started it."""

    def __init__(self, param: str | None) -> None:
        self.param = param


def tensor_parallel(
    program: Program, n: int, tags: Tags | None = None
) -> tuple[list[Program], dict[str, HostLayout], TensorPlan]:
    """The N rank programs of ``program`` under tensor parallelism, the params' layouts (a cut
    param: ``rows`` along its axis), and the plan (module docstring)."""
    if any(not isinstance(x, OpNode) or x.stream or x.device for x in program.nodes):
        raise CheckError(
            "tensor parallelism runs the whole program on every rank: no device[…] blocks, "
            "explicit streams or host control",
            next((x.span for x in program.nodes if not isinstance(x, OpNode) or x.stream), None),
            hint="drop them, or compile without --tensor-parallel",
        )
    kept: set[str] = set()
    while True:
        try:
            walk = _Walk(program, n, kept)
            walk.run()
            break
        except _GiveUp as g:
            if g.param is None or g.param in kept:  # nothing left to give up: all whole
                kept = {t.name for t in program.params_()}
            else:
                kept.add(g.param)
    ranks = [walk.rank_program(r) for r in range(n)]
    ranks = expand_collectives(ranks, tags or Tags())
    params = {}
    for t in program.params_():
        axis = walk.param_cut.get(t.name)
        if axis is None:
            params[t.name] = HostLayout.of(t.name, "whole", range(n))
        else:
            params[t.name] = HostLayout("rows", n, tuple((r, t.name, r) for r in range(n)), axis)
    plan = TensorPlan(dict(walk.param_cut), tuple(sorted(kept)), walk.allreduces)
    return ranks, params, plan


class _Walk:
    """One pass over the program deciding states; builds the rank programs' nodes."""

    def __init__(self, program: Program, n: int, kept: set[str]) -> None:
        self.p, self.n, self.kept = program, n, kept
        self.state: dict[str, tuple] = {}
        self.origin: dict[str, str | None] = {}  # a cut value → the param whose cut began it
        self.param_cut: dict[str, int] = {}
        self.types: dict[str, TensorType] = {}
        self.nodes: list[Node | tuple] = []  # a tuple: (slice marker) made per rank
        self.allreduces = 0
        self.read_whole: set[str] = set()

    # --- states --------------------------------------------------------------------------
    def of(self, name: str) -> tuple:
        t = self.p.tensors[name]
        if t.kind == "param":
            axis = self.param_cut.get(name)
            return R if axis is None else ("S", axis)
        return self.state.get(name, R)

    def shape(self, name: str) -> tuple[int, ...]:
        t = self.types.get(name) or self.p.tensors[name].type
        return t.shape

    def set(self, name: str, state: tuple, origin: str | None) -> None:
        self.state[name] = state
        self.origin[name] = origin
        t = self.p.tensors[name].type
        if state[0] == "S":
            shape = list(t.shape)
            shape[state[1]] //= self.n
            self.types[name] = TensorType(tuple(shape), t.dtype)

    def cut_param(self, name: str, axis: int) -> bool:
        """Cut param ``name`` along ``axis`` if it may be (not kept, divisible, consistent)."""
        t = self.p.tensors[name]
        if name in self.kept or t.type.shape[axis] % self.n:
            return False
        if name in self.param_cut:
            return self.param_cut[name] == axis
        if name in self.read_whole:  # an earlier op read all of it
            return False
        self.param_cut[name] = axis
        shape = list(t.type.shape)
        shape[axis] //= self.n
        self.types[name] = TensorType(tuple(shape), t.type.dtype)
        return True

    def whole(self, name: str) -> str:
        """``name`` in R: a P value summed (an allreduce added), an S value given up on."""
        st = self.of(name)
        if st == R:
            return name
        if st[0] == "P":
            out = f"{name}%sum"
            self.allreduces += 1
            self.nodes.append(OpNode("allreduce", (name,), out, {"algorithm": "auto"}))
            self.state[out], self.origin[out] = R, None
            self.types[out] = self.p.tensors[name].type
            self.extra[out] = replace(self.p.tensors[name], name=out)
            return out
        raise _GiveUp(self.origin.get(name))

    # --- the walk ------------------------------------------------------------------------
    def run(self) -> None:
        self.extra: dict[str, Tensor] = {}
        for node in self.p.nodes:
            assert isinstance(node, OpNode)
            self.op(node)
            for i in node.inputs:
                if self.p.tensors[i].kind == "param" and i not in self.param_cut:
                    self.read_whole.add(i)
        for name in self.p.outputs:
            st = self.of(name)
            if st[0] == "S":
                raise _GiveUp(self.origin.get(name))
            if st[0] == "P":
                self.sum_output(name)

    def sum_output(self, name: str) -> None:
        """Output ``name`` is a partial sum: its producer writes ``name%part``, and ``name`` is
        the sum (an allreduce of it, or a copy of the one an op already made)."""
        part = f"{name}%part"
        to = {name: part}
        self.nodes = [
            x
            if isinstance(x, tuple)
            else replace(
                x, inputs=tuple(to.get(i, i) for i in x.inputs), output=to.get(x.output, x.output)
            )
            for x in self.nodes
        ]
        self.extra[part] = replace(self.p.tensors[name], name=part)
        self.state[part] = ("P",)
        summed = f"{name}%sum"
        if summed in self.extra:
            self.nodes.append(OpNode("copy", (summed,), name, {}))
        else:
            self.allreduces += 1
            self.nodes.append(OpNode("allreduce", (part,), name, {"algorithm": "auto"}))
        self.state[name] = R

    def op(self, node: OpNode) -> None:
        opdef = lookup(node.op)
        assert opdef is not None, node.op
        out = node.output
        rank = len(self.p.tensors[out].type.shape)
        if node.op == "matmul":
            return self.matmul(node)
        if node.op in COLLECTIVES:  # the program's own: over data-parallel replicas, one here
            self.nodes.append(OpNode("copy", (self.whole(node.inputs[0]),), out, {}, node.span))
            return self.set(out, R, None)
        if node.op == "transpose":
            st = self.of(node.inputs[0])
            if st[0] == "S":
                perm = list(node.attrs["perm"])
                self.nodes.append(node)
                return self.set(out, ("S", perm.index(st[1])), self.origin.get(node.inputs[0]))
        if node.op == "reshape":
            st = self.of(node.inputs[0])
            if st[0] == "S":
                axis = _reshaped_axis(
                    self.p.tensors[node.inputs[0]].type.shape,
                    self.p.tensors[out].type.shape,
                    st[1],
                    self.n,
                )
                if axis is not None:
                    shape = list(self.p.tensors[out].type.shape)
                    shape[axis] //= self.n
                    self.nodes.append(replace(node, attrs={**node.attrs, "shape": shape}))
                    return self.set(out, ("S", axis), self.origin.get(node.inputs[0]))
        fusion = fusion_of(opdef, [self.p.tensors[i].type for i in node.inputs], dict(node.attrs))
        if fusion == "row" and "axis" in node.attrs:
            st = self.of(node.inputs[0])
            if st[0] == "S" and st[1] != int(node.attrs["axis"]) % rank:
                others = [self.whole(i) for i in node.inputs[1:]]  # gamma, beta: whole rows
                self.nodes.append(replace(node, inputs=(node.inputs[0], *others)))
                return self.set(out, st, self.origin.get(node.inputs[0]))
        if fusion == "elementwise":
            cut = [i for i in node.inputs if self.of(i)[0] == "S"]
            if cut and not any(self.of(i)[0] == "P" for i in node.inputs):
                first = cut[0]
                axis = self.of(first)[1] + rank - len(self.p.tensors[first].type.shape)
                inputs = [self.align(i, axis, rank) for i in node.inputs]
                self.nodes.append(replace(node, inputs=tuple(inputs)))
                return self.set(out, ("S", axis), self.origin.get(first))
        inputs = tuple(self.whole(i) for i in node.inputs)
        self.nodes.append(replace(node, inputs=inputs))
        self.set(out, R, None)

    def align(self, name: str, axis: int, rank: int) -> str:
        """Operand ``name`` of an elementwise op whose result is cut along ``axis``: as it is
        (cut alike, or broadcast along the axis), a param cut to match, or a slice of it."""
        shape = self.p.tensors[name].type.shape
        own = axis - (rank - len(shape))
        st = self.of(name)
        if own < 0 or shape[own] == 1:
            if st[0] == "S":
                raise _GiveUp(self.origin.get(name))
            return self.whole(name)
        if st == ("S", own):
            return name
        if st[0] == "S":
            raise _GiveUp(self.origin.get(name))
        if self.p.tensors[name].kind == "param" and self.cut_param(name, own):
            return name
        base = self.whole(name)
        out = f"{base}%part"
        if out not in self.extra:
            t = self.p.tensors[base]
            part = list(t.type.shape)
            part[own] //= self.n
            self.extra[out] = replace(
                t, name=out, kind="value", type=TensorType(tuple(part), t.type.dtype)
            )
            self.nodes.append(("slice", base, out, own, shape[own] // self.n))
            self.state[out], self.origin[out] = ("S", own), None
            self.types[out] = self.extra[out].type
        return out

    def matmul(self, node: OpNode) -> None:
        a, b = node.inputs
        out = node.output
        sa, sb = self.of(a), self.of(b)
        ta, tb = self.p.tensors[a], self.p.tensors[b]
        rank = len(self.p.tensors[out].type.shape)
        if tb.kind == "param" and len(tb.type.shape) == 2:
            if sa == R and self.cut_param(b, 1):
                self.nodes.append(node)
                return self.set(out, ("S", rank - 1), b)
            if sa == ("S", len(ta.type.shape) - 1) and self.cut_param(b, 0):
                self.nodes.append(node)
                self.state[out], self.origin[out] = ("P",), self.origin.get(a)
                return
        if sa[0] == "S" and sa == sb and sa[1] < min(len(ta.type.shape), len(tb.type.shape)) - 2:
            self.nodes.append(node)  # a batched product cut along the same batch axis
            return self.set(out, sa, self.origin.get(a))
        if sa[0] == "S" and sa[1] == len(ta.type.shape) - 2 and sb == R:
            self.nodes.append(node)  # rows of a times b
            return self.set(out, ("S", rank - 2), self.origin.get(a))
        self.nodes.append(replace(node, inputs=(self.whole(a), self.whole(b))))
        self.set(out, R, None)

    # --- the rank programs ---------------------------------------------------------------
    def rank_program(self, r: int) -> Program:
        nodes: list[Node] = []
        for x in self.nodes:
            if isinstance(x, tuple):
                _, base, out, axis, size = x
                attrs = {"axis": axis, "start": r * size, "stop": (r + 1) * size}
                nodes.append(OpNode("slice", (base,), out, attrs))
            else:
                nodes.append(x)
        tensors = {}
        for name, t in {**self.p.tensors, **self.extra}.items():
            typed = self.types.get(name)
            tensors[name] = t if typed is None or typed == t.type else replace(t, type=typed)
        used = {i for x in nodes if isinstance(x, OpNode) for i in (*x.inputs, x.output)}
        used.update(self.p.outputs)
        tensors = {k: v for k, v in tensors.items() if k in used}
        return replace(self.p, name=f"{self.p.name}.d{r}", nodes=nodes, tensors=tensors)


def _reshaped_axis(
    before: tuple[int, ...], after: tuple[int, ...], axis: int, n: int
) -> int | None:
    """Where a cut along ``before[axis]`` lands in ``after``: the axis with the same elements
    before it (equal prefix products) whose size N divides — each rank's block is then the
    same run of elements on both sides. None where no axis starts there (the cut axis is
    merged into a larger one behind another, or split so its blocks are not leading)."""
    prefix = 1
    for d in before[:axis]:
        prefix *= d
    acc = 1
    for k, d in enumerate(after):
        if acc == prefix and d > 1:
            return k if d % n == 0 else None
        acc *= d
        if acc > prefix:
            return None
    return None
