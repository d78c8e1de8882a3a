"""Fused kernels written in source: ``y = fused { t = x * 0.125; return softmax(t, axis = -1) }``.

The optimizer fuses ops into the internal ``fused`` op (:mod:`rtgraph.ops.fused`); a program
cannot call that op by name, but it can write the same kernel as a block: bindings, then a
final ``return``, as a function body is written. The block's statements are checked as
ordinary code (each op by its own rule), then the ops they made become the steps of one
``fused`` node instead of tasks of their own. The node's inputs are the tensors the body
reads from outside it (numbers written in the body become scalar constants, which are inputs
too), in the order the body first reads them. The body must be one the optimizer could have
made — ops whose ``fusion`` allows it (a Vector kernel), or ``matmul``/``conv2d`` followed by
its epilogue (a Cube kernel) — and :func:`rtgraph.ops.fused.step_types` says which. This is
what lets ``rtgraph compile --emit rtg`` print an optimized program as source.
"""

from __future__ import annotations

import re
from typing import Any

from rtgraph.errors import CheckError
from rtgraph.frontend import ast
from rtgraph.frontend.calls import Bind
from rtgraph.frontend.copies import CopyChecker
from rtgraph.frontend.values import POISON, Scope, Value, describe
from rtgraph.ir.graph import OpNode, Tensor
from rtgraph.ops import OpError, lookup
from rtgraph.ops.fused import CHANNEL_AXIS, body_attrs, step_types

#: How :func:`rtgraph.ops.fused.step_types` names the step it refused.
_STEP = re.compile(r"fused: body step (\d+): ")
#: What a fused block may hold, said where the optimizer's rule refuses one.
_FUSIBLE = (
    "a fused block is one kernel: Vector ops that fuse (elementwise, softmax, …), or a matmul "
    "or conv2d and the epilogue after it"
)


class FusionChecker(CopyChecker):
    """``fused { ... }`` blocks."""

    def fused_block(self, expr: ast.Fused, bind: Bind | None) -> Value:
        """Check a fused block and emit its one ``fused`` node (bound to ``bind``)."""
        body = expr.body
        if not body or not isinstance(body[-1], ast.Return):
            return self.error(
                "a fused block ends with `return expr`",
                expr.span,
                hint="write fused { t = ...; return op(t) }",
            )
        for stmt in body[:-1]:
            if not isinstance(stmt, ast.Binding):
                return self.error("a fused block holds only bindings and a final return", stmt.span)
            if stmt.precision is not None:
                return self.error(
                    "a fused block computes in one precision; its bindings take no @precision",
                    stmt.precision.span,
                    hint="annotate the binding of the whole block: "
                    "h = fused { ... } @precision(f32)",
                )
        mark = len(self.ir.nodes)
        outer = self.scope
        self.scope = Scope(outer, f"{outer.prefix}{self.ir.temp_name()}/")
        try:
            self.run_block(body[:-1])
            result = self.eval(body[-1].value)
        finally:
            self.scope = outer
        made = self.ir.nodes[mark:]
        del self.ir.nodes[mark:]
        if result is POISON:
            return POISON
        if not isinstance(result, Tensor) or not made or made[-1].output != result.name:
            return self.error(
                f"a fused block returns the result of its last op, not {describe(result)}",
                body[-1].span,
            )
        return self.fused_node(expr, made, bind)

    def fused_node(self, expr: ast.Fused, made: list, bind: Bind | None) -> Value:
        """The ``fused`` node of the ops ``made`` by a block's body (checked as one kernel)."""
        for node in made:
            if not isinstance(node, OpNode) or node.op == "kernel" or node.after:
                span = getattr(node, "span", None) or expr.span
                return self.error("a fused block holds only ops on tensors", span)
            if "block_dim" in node.attrs and "block_dim" not in lookup(node.op).attrs:
                return self.error("a fused block's ops take no block_dim", node.span)
        produced = {node.output: k for k, node in enumerate(made)}
        inputs: list[str] = []
        for node in made:
            for name in node.inputs:
                if name not in produced and name not in inputs:
                    inputs.append(name)
        steps = tuple(_step(node, inputs, produced, self.ir.tensors) for node in made)
        unit = "cube" if made[0].op in CHANNEL_AXIS else "vector"
        types = [self.ir.tensors[n].type for n in inputs]
        try:
            out_type = step_types(types, steps, unit)[-1]
        except OpError as e:
            step = _STEP.match(e.message)  # the op of the step the rule refused, if it says
            k = int(step[1]) if step else len(made)
            where = made[k].span if k < len(made) and made[k].span is not None else expr.span
            return self.error(e.message, where, e.hint or _FUSIBLE, CheckError)
        for node in made:
            self.ir.tensors.pop(node.output, None)
        name, label = bind if bind is not None else (self.ir.temp_name(), "fused")
        out = self.ir.tensor(name, out_type, "value", expr.span, label)
        attrs: dict[str, Any] = {"body": steps, "unit": unit}
        self.ir.emit(OpNode("fused", tuple(inputs), out.name, attrs, expr.span, self.stream))
        return out


def _step(node: OpNode, inputs: list[str], produced: dict[str, int], tensors: dict) -> tuple:
    """One body step: the op, its arguments as value indices, its attributes and its type."""
    args = tuple(
        len(inputs) + produced[n] if n in produced else inputs.index(n) for n in node.inputs
    )
    out = tensors[node.output].type
    return (node.op, args, body_attrs(node.attrs), out.dtype, tuple(out.shape))
