"""Hypothesis strategies: random well-typed IR programs (DAGs of ops) for property tests.

Programs are built directly as IR so the back end and the emulator are tested independently of
the front end; every op application goes through the registry's own shape rule, so a program
is well typed by construction. The mix covers elementwise ops with broadcasting, matmuls
(Cube), reductions, layout ops that are views and ones that need a copy, and DMA copies.
"""

from __future__ import annotations

from hypothesis import strategies as st

from rtgraph.ir import OpNode, Program, Tensor, TensorType
from rtgraph.ops import OpError, lookup

DIMS = (2, 3, 4, 8)
#: The kinds of op a random program draws from (repeats weight the draw).
KINDS = ("unary", "binary", "binary", "matmul", "matmul", "reduce", "layout", "copy")
#: More of what the optimizer works on: elementwise chains, repeated ops (CSE), scaling by one
#: (folding), normalisations (fusion's row kernels) and double layouts (layout folding).
OPTIMIZER_KINDS = (*KINDS, "unary", "binary", "dup", "scale", "norm", "layout")


def _apply(draw, op: str, args: list[str], attrs: dict, tensors: dict) -> TensorType | None:
    opdef = lookup(op)
    if opdef is None:
        return None
    full = {k: spec.default for k, spec in opdef.attrs.items() if not spec.required}
    full.update(attrs)
    try:
        return opdef.infer([tensors[a].type for a in args], full)
    except OpError:
        return None


@st.composite
def programs(
    draw, max_ops: int = 12, dtype: str = "f32", kinds: tuple[str, ...] = KINDS
) -> Program:
    """A random program: 1–3 inputs, 0–2 params, up to ``max_ops`` ops, 1–3 outputs."""
    tensors: dict[str, Tensor] = {}
    nodes: list[OpNode] = []
    m, k = draw(st.sampled_from(DIMS)), draw(st.sampled_from(DIMS))
    for i in range(draw(st.integers(1, 3))):
        shape = draw(st.sampled_from([(m, k), (k, m), (m, m), (k,), (m, k)]))
        tensors[f"x{i}"] = Tensor(f"x{i}", TensorType(shape, dtype), "input")
    for i in range(draw(st.integers(0, 2))):
        shape = draw(st.sampled_from([(k, m), (m, k), (k, k), (m,)]))
        tensors[f"w{i}"] = Tensor(f"w{i}", TensorType(shape, dtype), "param")
    names = list(tensors)
    count = draw(st.integers(1, max_ops))
    for j in range(count):
        kind = draw(st.sampled_from(kinds))
        a = draw(st.sampled_from(names))
        rank = tensors[a].type.rank
        if kind == "unary":
            op, args, attrs = draw(st.sampled_from(["relu", "neg", "exp", "tanh"])), [a], {}
        elif kind == "binary":
            b = draw(st.sampled_from(names))
            op, args, attrs = draw(st.sampled_from(["add", "mul", "sub", "maximum"])), [a, b], {}
        elif kind == "matmul":
            b = draw(st.sampled_from(names))
            op, args, attrs = "matmul", [a, b], {}
        elif kind == "reduce":
            op = draw(st.sampled_from(["reduce_sum", "reduce_max", "softmax"]))
            axis = draw(st.integers(-rank, rank - 1)) if rank else 0
            attrs = {"axis": axis} if op == "softmax" else {"axis": axis, "keepdims": True}
            args = [a]
        elif kind == "layout":
            op = draw(st.sampled_from(["transpose", "reshape"]))
            args = [a]
            shape = tensors[a].type.shape
            if op == "transpose":
                attrs = {"perm": tuple(reversed(range(rank)))}
            else:
                size = tensors[a].type.size
                attrs = {"shape": (size,) if rank > 1 else (1, size)}
        elif kind == "dup" and nodes:
            again = draw(st.sampled_from(nodes))
            op, args, attrs = again.op, list(again.inputs), dict(again.attrs)
        elif kind == "scale":
            op, args, attrs = "scale", [a], {"s": draw(st.sampled_from([1.0, 0.5]))}
        elif kind == "norm":
            op, args, attrs = "layernorm", [a], {"axis": -1}
        else:
            op, args, attrs = "copy", [a], {}
        out = _apply(draw, op, args, attrs, tensors)
        if out is None or out.size == 0:
            continue
        name = f"t{j}"
        opdef = lookup(op)
        full = {k: spec.default for k, spec in opdef.attrs.items() if not spec.required}
        full.update(attrs)
        tensors[name] = Tensor(name, out, "value")
        nodes.append(OpNode(op, tuple(args), name, full))
        names.append(name)
    produced = [n.output for n in nodes]
    if not produced:
        a = names[0]
        tensors["t_final"] = Tensor("t_final", tensors[a].type, "value")
        nodes.append(OpNode("relu", (a,), "t_final", {}))
        produced = ["t_final"]
    outputs = draw(st.lists(st.sampled_from(produced), min_size=1, max_size=3, unique=True))
    if produced[-1] not in outputs:
        outputs.append(produced[-1])
    return Program("random", {}, None, tensors, nodes, outputs)
