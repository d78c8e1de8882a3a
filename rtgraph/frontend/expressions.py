"""Expressions: names, numbers, lists, operators and calls, folded or turned into ops.

An expression evaluates to a value (:mod:`~rtgraph.frontend.values`). Numbers fold at compile
time (:mod:`~rtgraph.frontend.consteval`); anything involving a tensor becomes
:class:`~rtgraph.ir.OpNode`\\ s (:mod:`~rtgraph.frontend.calls`). Infix operators are ops
(``+ - * / @`` → ``add sub mul div matmul``; unary ``-`` → ``neg``; ``min``/``max`` of tensors →
``minimum``/``maximum``). Errors are reported at the token they are about and the expression's
value becomes :data:`~rtgraph.frontend.values.POISON`.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

from rtgraph.dtypes import DTYPES
from rtgraph.errors import CheckError, Span, did_you_mean
from rtgraph.frontend import ast, consteval
from rtgraph.frontend.calls import Bind, CallChecker
from rtgraph.frontend.values import POISON, FnRef, ParamArray, Value, describe, is_number
from rtgraph.ir.graph import Tensor
from rtgraph.ops import language_op, language_ops

#: The host-copy builtins (:mod:`rtgraph.frontend.copies`): names, not ops.
HOST_COPIES = ("to_device", "to_host")

#: Deepest expression nesting checked (deeper input is refused, never a RecursionError).
MAX_DEPTH = 200

#: Names a did-you-mean hint compares a misspelt name with (the nearest scopes first): each
#: comparison costs, and a program may bind tens of thousands of names.
MAX_SUGGESTION_CANDIDATES = 500

INFIX_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "@": "matmul", "%": "mod"}


class ExpressionChecker(CallChecker):
    """Evaluation of expressions; :class:`~rtgraph.frontend.checker.Checker` adds statements."""

    def eval(self, expr: ast.Expr, bind: Bind | None = None) -> Value:
        """The value of ``expr``; the tensor it makes (if any) is named by ``bind``."""
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                return self.error(
                    "expression nested too deeply",
                    expr.span,
                    hint=f"at most {MAX_DEPTH} levels; bind parts of it to names",
                )
            return _EVALUATORS[type(expr)](self, expr, bind)
        finally:
            self.depth -= 1

    def compile_time_int(self, expr: ast.Expr, what: str) -> int | None:
        value = self.eval(expr)
        if value is POISON:
            return None
        n = consteval.as_int(value)
        if n is None:
            self.error(f"{what} must be a compile-time integer, got {describe(value)}", expr.span)
        return n

    # --- leaves ----------------------------------------------------------------------------
    def _name(self, expr: ast.Name, bind: Bind | None) -> Value:
        bound = self.scope.lookup(expr.id)
        if bound is not None:
            return bound.value
        return self.undefined(expr.id, expr.span)

    def undefined(self, name: str, span: Span) -> Any:
        hint = did_you_mean(name, islice(self.scope.visible(), MAX_SUGGESTION_CANDIDATES))
        if hint is None and language_op(name) is not None:
            hint = f"'{name}' is an op: call it, e.g. {name}(x)"
        elif hint is None and name in DTYPES:
            hint = (
                f"'{name}' is a dtype; dtypes are written in types (x : {name}[4]) and attributes"
            )
        return self.error(f"undefined name '{name}'", span, hint)

    def _number(self, expr: ast.Number, bind: Bind | None) -> Value:
        return POISON if expr.value is None else expr.value

    def _string(self, expr: ast.String, bind: Bind | None) -> Value:
        return expr.value

    def _list(self, expr: ast.ListExpr, bind: Bind | None) -> Value:
        return tuple(self.eval(item) for item in expr.items)

    def _index(self, expr: ast.Index, bind: Bind | None) -> Value:
        name = expr.target.name
        bound = self.scope.lookup(name)
        if bound is None:
            return self.undefined(name, expr.target.span)
        array = bound.value
        indices = [self.eval(i) for i in expr.indices]
        if array is POISON or any(v is POISON for v in indices):
            return POISON
        if not isinstance(array, ParamArray):
            hint = "use slice(x, start=, stop=, axis=) for part of a tensor"
            return self.error(
                f"only param arrays can be indexed, not {describe(array)}",
                expr.target.span,
                hint if isinstance(array, Tensor) else None,
            )
        if len(indices) != 1:
            return self.error(
                f"param array '{name}' takes one index, got {len(indices)}", expr.indices[1].span
            )
        i = consteval.as_int(indices[0])
        if i is None:
            return self.error(
                f"index of '{name}' must be a compile-time integer, got {describe(indices[0])}",
                expr.indices[0].span,
            )
        if not 0 <= i < len(array.elements):
            return self.error(
                f"index {i} is out of range for param array '{name}' of length "
                f"{len(array.elements)}",
                expr.indices[0].span,
                hint=f"valid indices are 0 to {len(array.elements) - 1}",
            )
        return array.elements[i]

    # --- operators -------------------------------------------------------------------------
    def _neg(self, expr: ast.Neg, bind: Bind | None) -> Value:
        value = self.eval(expr.operand)
        if value is POISON:
            return POISON
        if is_number(value):
            return self._fold(lambda: consteval.negate(value), expr.span)
        if isinstance(value, Tensor):
            op = language_op("neg")
            if op is not None:
                return self.apply(
                    op, [value], [expr.operand.span], {}, {}, (), expr.span, expr.span, bind
                )
        return self.error(f"'-' does not apply to {describe(value)}", expr.span)

    def _binop(self, expr: ast.BinOp, bind: Bind | None) -> Value:
        left = self.eval(expr.left)
        right = self.eval(expr.right)
        if left is POISON or right is POISON:
            return POISON
        if is_number(left) and is_number(right):
            return self._fold(lambda: consteval.binary(expr.op, left, right), expr.span)
        for value, side in ((left, expr.left), (right, expr.right)):
            if not (is_number(value) or isinstance(value, Tensor)):
                return self.error(
                    f"'{expr.op}' does not apply to {describe(value)}", side.span, cls=CheckError
                )
        op = language_op(INFIX_OPS[expr.op])
        if op is None:
            return self.error(
                f"'{expr.op}' applies to compile-time numbers only, not to tensors", expr.op_span
            )
        spans = [expr.left.span, expr.right.span]
        return self.apply(op, [left, right], spans, {}, {}, (), expr.span, expr.op_span, bind)

    def _fold(self, compute, span: Span) -> Value:
        try:
            return compute()
        except consteval.ConstError as e:
            return self.error(e.message, span, e.hint)

    # --- calls -----------------------------------------------------------------------------
    def _call(self, call: ast.Call, bind: Bind | None) -> Value:
        name = call.func.name
        bound = self.scope.lookup(name)
        if bound is None and name in HOST_COPIES:
            return self.host_copy(call, bind)
        if bound is not None:
            if isinstance(bound.value, FnRef):
                return self.call_fn(bound.value.fn, call, bind)
            if bound.value is not POISON:
                self.error(
                    f"'{name}' is not an op or a function but {describe(bound.value)}",
                    call.func.span,
                )
            return POISON
        op = language_op(name)
        if name in consteval.SCALAR_FUNCTIONS:
            values = [self.eval(a) for a in call.args]
            if any(v is POISON for v in values):
                return POISON
            if values and all(is_number(v) for v in values) and not call.kwargs:
                return self._fold(lambda: consteval.call(name, values), call.span)
            if name in ("min", "max"):
                op = language_op("minimum" if name == "min" else "maximum")
            if op is not None:
                return self.call_op(op, call, bind, values)
        if op is None:
            for arg in call.args:
                self.eval(arg)
            visible = islice(self.scope.visible(), MAX_SUGGESTION_CANDIDATES)
            candidates = [*language_ops(), *visible, "min", "max"]
            return self.error(
                f"unknown op '{name}'", call.func.span, did_you_mean(name, candidates)
            )
        return self.call_op(op, call, bind)

    def call_fn(self, fn: ast.FnDef, call: ast.Call, bind: Bind | None) -> Value:
        raise NotImplementedError  # statements are the Checker's

    def host_copy(self, call: ast.Call, bind: Bind | None) -> Value:
        raise NotImplementedError  # to_device / to_host are the CopyChecker's

    def fused_block(self, expr: ast.Fused, bind: Bind | None) -> Value:
        raise NotImplementedError  # fused { } blocks are the FusionChecker's


_EVALUATORS = {
    ast.Name: ExpressionChecker._name,
    ast.Number: ExpressionChecker._number,
    ast.String: ExpressionChecker._string,
    ast.ListExpr: ExpressionChecker._list,
    ast.Neg: ExpressionChecker._neg,
    ast.BinOp: ExpressionChecker._binop,
    ast.Call: ExpressionChecker._call,
    ast.Index: ExpressionChecker._index,
    ast.Fused: lambda self, expr, bind: self.fused_block(expr, bind),
}
